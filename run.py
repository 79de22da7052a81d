"""Train and measure one model per Hydra job, logging everything to MLflow.

    python run.py                                   # dqn on the embedded 6E data, one run
    python run.py -m                                # every registered model (the default sweep)
    python run.py -m model=dqn model.batch_size=64,230
    python run.py -m model=tft size=small,reference # both sizes (model.size=... works too)
    python run.py model=tft trainer=cpu tracking=server
    python run.py model=custom model.spec=my_pkg.my_model:SPEC   # a model of your own (docs/own-models.md)
    python run.py --cfg job                         # print the composed config
    python -m trainbench.config                     # every key with its type, default and doc
"""

import sys

import hydra
from omegaconf import DictConfig

from trainbench.compose import register_configs, size_alias, trainer_auto

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> str:
    from trainbench.cli import run_job

    return run_job(cfg)


if __name__ == "__main__":
    sys.argv[1:] = size_alias(sys.argv[1:])  # model.size=X selects the size group (conf/size/)
    # trainer=auto (the default): the GPU profile on a GPU, the CPU profile elsewhere, printed with the reason
    # (not for a rerun: rerun=<id> takes the trainer profile the original resolved, from its logged config)
    rerun = any(a.lstrip("+").startswith("rerun=") for a in sys.argv[1:])
    if not rerun and not {"--experimental-rerun", "--help", "-h", "--hydra-help", "--shell-completion",
                          "-sc"} & set(sys.argv):
        sys.argv[1:] = trainer_auto(sys.argv[1:], announce=True)
    from trainbench.cli import load_custom_model, run_app

    load_custom_model(sys.argv[1:])  # model=custom model.spec=pkg.module:SPEC (exit 2 if bad)
    run_app(main)

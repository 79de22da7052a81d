"""Train and measure one model per Hydra job, logging everything to MLflow.

    python run.py                                   # dqn on the embedded 6E data, one run
    python run.py -m                                # every registered model (the default sweep)
    python run.py -m model=dqn model.batch_size=64,230
    python run.py model=tft trainer=cpu tracking=server
    python run.py --cfg job                         # print the composed config
    python -m trainbench.config                     # every key with its type, default and doc
"""

import hydra
from omegaconf import DictConfig

from trainbench.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> str:
    from trainbench.cli import run_job

    return run_job(cfg)


if __name__ == "__main__":
    from trainbench.cli import hydra_app

    hydra_app(main)  # Hydra's own errors (unknown option, misspelled key) exit 2 like ours

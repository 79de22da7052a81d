"""Train and measure one model per Hydra job, logging everything to MLflow (the same as `trainbench run`).

    python run.py                                   # dqn on the embedded 6E data, one run
    python run.py -m                                # every registered model (the default sweep)
    python run.py -m model=dqn model.batch_size=64,230
    python run.py -m model=tft size=small,reference # both sizes (model.size=... works too)
    python run.py model=tft trainer=cpu tracking=server
    python run.py model=custom model.spec=my_pkg.my_model:SPEC   # a model of your own (docs/own-models.md)
    python run.py --cfg job                         # print the composed config
    python -m trainbench.config                     # every key with its type, default and doc

A thin wrapper: the command is :func:`trainbench.cli.run_command`, the configs are the package's own.
"""

from trainbench.cli import run_command

if __name__ == "__main__":
    run_command()

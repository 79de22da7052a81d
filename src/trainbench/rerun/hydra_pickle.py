"""Hydra's own rerun: ``<job>/.hydra/config.pickle`` written without secrets, and
``python run.py --experimental-rerun <pickle>`` run under a sweep id of its own."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from trainbench.core.vocab import Tag
from trainbench.rerun.names import TAG_RERUN_OF_HYDRA


def hydra_rerun(cfg: DictConfig, argv: list[str] | None = None) -> tuple[DictConfig, dict[str, str]]:
    """Hydra's own ``--experimental-rerun <job>/.hydra/config.pickle``: the pickled config reruns as is, but
    under a sweep id of its own (its Hydra folder would otherwise put it in the original's sweep) and
    tagged ``rerun_of_hydra=<pickle>``. Other invocations pass through unchanged."""
    import time

    argv = sys.argv if argv is None else argv
    if "--experimental-rerun" not in argv:
        return cfg, {}
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's rerun path skips it: without it ${hydra:runtime.cwd} (paths.root) cannot resolve
    i = argv.index("--experimental-rerun")
    pickle_path = argv[i + 1] if i + 1 < len(argv) else "?"
    given = cfg.get(Tag.SWEEP_ID)
    OmegaConf.update(cfg, Tag.SWEEP_ID, (f"{given}-" if given else "") + f"hydra-rerun-{time.strftime('%Y%m%d-%H%M%S')}",
                     force_add=True)
    return cfg, {TAG_RERUN_OF_HYDRA: str(Path(pickle_path).resolve())}


def save_job_config(config: DictConfig) -> None:
    """Write ``<job>/.hydra/config.pickle`` for ``python run.py --experimental-rerun`` (the
    ``save_job_config`` callback in conf/config.yaml calls it as each job starts).

    Hydra's own ``PickleJobInfoCallback`` pickles the config as typed, secrets included; this pickles a
    copy without secrets (:func:`trainbench.core.secrets.redact_config`), and no ``job_return.pickle``.
    """
    import copy
    import pickle

    from trainbench.core.secrets import redact_config

    hc = config.hydra
    if hc.output_subdir is None:
        return
    cfg = copy.deepcopy(config)
    redact_config(cfg)
    try:
        blob = pickle.dumps(cfg, protocol=4)
    except pickle.PicklingError:  # submitit imported the launcher's config class again: Hydra's node as plain values
        from omegaconf import open_dict

        from trainbench.config.shared import hydra_plain, hydra_typed

        with open_dict(cfg):
            cfg.hydra = hydra_typed(hydra_plain(cfg.hydra))
        blob = pickle.dumps(cfg, protocol=4)
    out = Path(hc.runtime.output_dir) / str(hc.output_subdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.pickle").write_bytes(blob)  # whole or not at all (a failed dump left an empty file)

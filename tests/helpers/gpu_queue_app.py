"""A trivial Hydra app for the local_gpus launcher's tests: each job records the GPUs it was given, when it
started and ended (wall clock), then sleeps; the job ``x=fail_x`` raises before recording, ``x=die_x`` kills its
own process (a job without a result); ``trainer.distributed.nproc`` is there to be read as run.py's is. Run as ``python tests/helpers/gpu_queue_app.py -m hydra/launcher=local_gpus
hydra.launcher.devices=[0,1] x=0,1,2 out=<folder>``."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig

from trainbench.core.vocab import GPU_DEVICES_ENV


@dataclass
class Distributed:
    nproc: int = 1


@dataclass
class Trainer:
    distributed: Distributed = field(default_factory=Distributed)


@dataclass
class AppConfig:
    x: int = 0
    out: str = "."
    sleep_s: float = 0.3
    fail_x: int = -1
    die_x: int = -1
    torch_check: bool = False  # record the CUDA devices torch sees and the first one's PCI bus id (a GPU machine)
    trainer: Trainer = field(default_factory=Trainer)


ConfigStore.instance().store(name="gpu_queue_app", node=AppConfig)


@hydra.main(version_base="1.3", config_name="gpu_queue_app")
def main(cfg: AppConfig) -> int:
    if cfg.x == cfg.fail_x:
        raise RuntimeError(f"job x={cfg.x} failed on purpose")
    if cfg.x == cfg.die_x:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.time()
    time.sleep(cfg.sleep_s)
    rec = {"x": cfg.x, "num": HydraConfig.get().job.num, "pid": os.getpid(), "start": start, "end": time.time(),
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "told_run": os.environ.get(GPU_DEVICES_ENV)}
    if cfg.torch_check:
        import torch

        rec["torch_devices"] = torch.cuda.device_count()
        props = torch.cuda.get_device_properties(0) if rec["torch_devices"] else None
        rec["pci_bus_id"] = getattr(props, "pci_bus_id", None)  # cudaDeviceProp.pciBusID: the PCI bus number
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out) / f"job-{cfg.x}.json").write_text(json.dumps(rec))
    return cfg.x


if __name__ == "__main__":
    main()

"""A batch size that cannot fit in host memory (issue 31): refused before anything of that size is allocated,
with one line and exit 2, its run closed (never left RUNNING) and no disk reserve left behind."""

from __future__ import annotations

import dataclasses
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.data import data_for
from helpers.models import build, model_config
from helpers.procs import child_env
from trainbench.core.errors import EXIT_BAD_INPUT, ConfigError
from trainbench.core.vocab import ParamKey
from trainbench.measure.fit import check_host_memory, host_memory_available
from trainbench.models.registry import REGISTRY

REPO = Path(__file__).resolve().parents[2]


def _dqn_build():
    spec, cfg, data = REGISTRY.get("dqn"), model_config("dqn"), data_for("bars")
    return (lambda b, accum: build(spec, dataclasses.replace(cfg, batch_size=b), data)), data


@pytest.mark.slow
def test_a_batch_the_host_cannot_hold_is_refused_by_the_prediction():
    builder, data = _dqn_build()
    with pytest.raises(ConfigError) as e:
        check_host_memory(1_000_000_000, 8192, builder, (data,), available=16 * 2**30)
    msg = str(e.value)
    assert "model.batch_size=1000000000" in msg and "16.0 GB available" in msg and "nothing was allocated" in msg
    check_host_memory(4096, 1024, builder, (data,), available=16 * 2**30)  # a batch that fits goes on
    assert host_memory_available() is None or host_memory_available() > 0


def _limit_memory() -> None:  # today's code allocates until the kernel stops it: keep that away from the machine
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))


@pytest.mark.slow
def test_run_py_refuses_a_billion_batch_on_a_cpu_and_closes_its_run(tmp_path):
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    p = subprocess.run([sys.executable, "run.py", "model=dqn", "debug=default", "model.batch_size=1000000000",
                        "trainer.device=cpu", f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/artifacts", f"paths.data_dir={tmp_path}/data",
                        f"hydra.run.dir={tmp_path}/out"], cwd=REPO, capture_output=True, text=True, timeout=400,
                       env=child_env(HYDRA_FULL_ERROR="0"),
                       preexec_fn=_limit_memory)
    out = p.stdout + p.stderr
    assert p.returncode == EXIT_BAD_INPUT, out[-3000:]
    assert "Traceback" not in out
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "memory predictor" in errors[0] and ParamKey.BATCH_SIZE in errors[0], out[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("trainbench").experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"]  # closed, not RUNNING
    assert not list((tmp_path / "store").glob(".trainbench-reserve-*"))


def test_watch_host_syncs_sees_reads_from_any_code_but_not_torchs_own_checks():
    import numpy as np
    import torch

    from trainbench.measure.host_sync import watch_host_syncs

    t = torch.ones(3, requires_grad=True)
    opt = torch.optim.Adam([t])
    with watch_host_syncs() as found:
        (t * 2).sum().backward()
        opt.step()  # Adam reads its CPU step counter: torch's own, and no device read on a GPU either
        torch.nn.functional.one_hot(torch.tensor([0, 2]), 3)  # its class-range check runs on a CPU only
    assert found == []
    s = t.detach().sum()
    with watch_host_syncs() as found:
        s.to("cpu")
        np.asarray(s)
        f"{s:.4f}"
        torch.where(s > 0)
        if s > 0:
            pass
    whats = [f.split(" ", 1)[1] for f in found]
    assert whats == ['Tensor.to("cpu")', "Tensor.__array__", "Tensor.numpy", "aten._local_scalar_dense",
                     "aten.nonzero", "aten._local_scalar_dense"], found
    assert all(f.startswith("test_faults.py:") for f in found)

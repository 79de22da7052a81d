"""hydra/launcher=local_gpus (sweep/local_gpus.py): a sweep's jobs in parallel, one per GPU, the rest queued in
order. The queue on its own; the device list's refusals; then real sweeps on CPU with a given list of devices
(a trivial Hydra app whose jobs record their GPUs and times, and one run.py sweep whose runs carry the
gpu_devices tag)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.procs import REPO, child_env
from helpers.runs import ready_client
from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from trainbench.core.vocab import GPU_DEVICES_ENV, Outcome, Tag
from trainbench.sweep import local_gpus
from trainbench.sweep.local_gpus import DeviceQueue, DeviceRefused, job_gpus, resolve_devices

pytest.importorskip("submitit", reason="the slurm extra (submitit) is not installed")

APP = REPO / "tests" / "helpers" / "gpu_queue_app.py"


# ---- the queue ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("devices", "needs"), [([0, 1], [1] * 5), ([3, 1, 2], [2, 1, 1, 3, 1, 2, 1])])
def test_the_queue_never_gives_a_gpu_to_two_jobs_and_starts_jobs_in_their_order(devices, needs, seed):
    rng = random.Random(seed)  # jobs end in an arbitrary order
    q = DeviceQueue(devices, needs)
    started, running = [], {}
    while not q.finished:
        while (nxt := q.start_next()) is not None:
            job, gpus = nxt
            assert len(gpus) == needs[job] and set(gpus) <= set(devices)
            held = [g for other in running.values() for g in other]
            assert not set(gpus) & set(held), f"job {job} was given a GPU that {held} holds"
            started.append(job)
            running[job] = gpus
        assert running, "nothing runs and nothing can start: the queue is stuck"
        done = rng.choice(sorted(running))
        assert q.release(done) == running.pop(done)
    assert started == list(range(len(needs)))  # every job, in its order: none overtook one that waited


def test_the_first_waiting_job_is_not_overtaken_by_a_smaller_one():
    q = DeviceQueue([0, 1], [1, 2, 1])
    assert q.start_next() == (0, (0,))
    assert q.start_next() is None  # job 1 needs both GPUs; job 2 (one GPU, and one is free) waits behind it
    q.release(0)
    assert q.start_next() == (1, (0, 1))
    assert q.start_next() is None
    q.release(1)
    assert q.start_next() == (2, (0,)) and q.drop_waiting() == []


# ---- the device list ---------------------------------------------------------------------------------


@pytest.fixture
def machine(monkeypatch):
    """This machine's GPUs as NVML would count them (none readable by default), no CUDA_VISIBLE_DEVICES."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def set_gpus(gpus):
        how = "NVML cannot be read (test)" if gpus is None else f"NVML counts {len(gpus)} GPU(s)"
        monkeypatch.setattr(local_gpus, "machine_gpus", lambda: (gpus, how))

    set_gpus(None)
    return set_gpus


def test_the_devices_default_to_the_machines_gpus_or_the_shells_list(machine, monkeypatch):
    machine([0, 1, 2, 3])
    assert resolve_devices(None) == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the shell already narrowed them
    assert resolve_devices(None) == [2, 3]
    assert resolve_devices([1, 0]) == [1, 0]  # a given list wins, in its order


@pytest.mark.parametrize(("gpus", "shell", "given", "says"), [
    (None, None, None, ["found no GPU", "NVML cannot be read", "hydra.launcher.devices=[0,1]", "hydra/launcher=local_jobs"]),
    ([], None, None, ["found no GPU", "NVML counts 0 GPU(s)", "hydra.launcher.devices=[0,1]"]),
    ([0, 1], "", None, ["found no GPU", "CUDA_VISIBLE_DEVICES=''", "hydra.launcher.devices=[0,1]"]),
    ([0, 1], "GPU-5d1c", None, ["UUID", "hydra.launcher.devices=[0,1]"]),
    (None, None, [0, 1, 1], ["hydra.launcher.devices=[0,1,1] names GPU 1 more than once", "devices=[0,1])"]),
    ([0, 1], "0,0", None, ["CUDA_VISIBLE_DEVICES='0,0' in this shell names GPU 0 more than once",
                           "(CUDA_VISIBLE_DEVICES=0)"]),
    ([0, 1], "1, 0,1", None, ["names GPU 1 more than once", "(CUDA_VISIBLE_DEVICES=1,0)"]),
    ([0, 1], None, [0, 7], ["names GPU 7, which this machine does not have (NVML counts 2 GPU(s): 0, 1)"]),
    (None, None, [], ["names no GPU"]),
    (None, None, [-1], ["0 or more"]),
])
def test_a_device_list_that_would_share_a_gpu_or_names_none_is_refused(machine, monkeypatch, gpus, shell, given,
                                                                     says):
    machine(gpus)
    if shell is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", shell)
    with pytest.raises(DeviceRefused) as e:
        resolve_devices(given)
    for words in says:
        assert words in str(e.value)


def test_a_job_gets_one_gpu_per_rank_when_it_asks_for_more_ranks_than_gpus_per_job():
    from omegaconf import OmegaConf

    ddp = OmegaConf.create({"trainer": {"distributed": {"nproc": 4}}})
    assert job_gpus(ddp, 1) == (4, "trainer.distributed.nproc=4")
    assert job_gpus(ddp, 8) == (8, "hydra.launcher.gpus_per_job=8")
    assert job_gpus(OmegaConf.create({"trainer": {}}), 1) == (1, "hydra.launcher.gpus_per_job=1")  # no such key
    with pytest.raises(DeviceRefused, match="nnodes=2: .* runs every job on this machine"):
        job_gpus(OmegaConf.create({"trainer": {"distributed": {"nproc": 2, "nnodes": 2}}}), 1)
    with pytest.raises(DeviceRefused, match=r"needs 3 GPUs \(hydra.launcher.gpus_per_job=3\) but hydra.launcher.devices has 2 \(0, 1\)"):
        local_gpus.check_request([0, 1], 3)
    with pytest.raises(DeviceRefused, match="at least one GPU"):
        local_gpus.check_request([0, 1], 0)


# ---- real sweeps ----------------------------------------------------------------------------------------


def _app(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = child_env(HYDRA_FULL_ERROR="0", **(env or {}))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([sys.executable, str(APP), "-m", "hydra/launcher=local_gpus", "hydra.launcher.poll_s=0.05",
                           f"hydra.sweep.dir={tmp_path}/sw", f"out={tmp_path}/out", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_five_jobs_on_two_gpus_run_two_at_a_time_in_order_each_on_its_own_gpu(tmp_path):
    p = _app(tmp_path, "hydra.launcher.devices=[0,1]", "x=0,1,2,3,4", "fail_x=1", "die_x=2")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    recs = [json.loads(f.read_text()) for f in sorted((tmp_path / "out").glob("job-*.json"))]
    assert sorted(r["x"] for r in recs) == [0, 3, 4]  # every job ran; the failed and the killed one too:
    from trainbench.sweep.jobs import read_ledger

    ledger = read_ledger(tmp_path / "sw")  # ... they could not record themselves: the launcher did
    assert {n: r["outcome"] for n, r in ledger.items()} == {1: Outcome.FAILED, 2: Outcome.FAILED}
    assert "failed on purpose" in ledger[1]["error"] and "without a result" in ledger[2]["error"]
    for r in recs:  # the job's process saw its GPU, and the run is told the same
        assert r["cuda_visible_devices"] == r["told_run"] in ("0", "1")
    for a in recs:  # a GPU is never held by two jobs at once
        for b in recs:
            if a is not b and a["told_run"] == b["told_run"]:
                assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)
    started = [int(line.split("#")[1].split()[0]) for line in out.splitlines() if " on GPU " in line
               and "CUDA_VISIBLE_DEVICES=" in line]
    assert started == list(range(5))  # the queue's order
    assert "#1 on GPU 1 failed" in out and "without a result" in out


@pytest.mark.gpu
def test_on_a_gpu_machine_each_job_sees_only_its_own_gpu(tmp_path):
    """Every GPU of the machine (the default list, from NVML), two jobs per GPU: in each job torch sees one
    device, the one its CUDA_VISIBLE_DEVICES names; two jobs of one GPU never overlap."""
    gpus, how = local_gpus.machine_gpus()
    if not gpus:
        pytest.skip(f"no GPU here ({how})")
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    try:  # the PCI bus number of each GPU as NVML (nvidia-smi) numbers them
        bus = {i: int(pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).bus) for i in gpus}
    finally:
        pynvml.nvmlShutdown()
    xs = ",".join(str(i) for i in range(2 * len(gpus)))
    p = _app(tmp_path, f"x={xs}", "torch_check=true", "sleep_s=1", env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    recs = [json.loads(f.read_text()) for f in (tmp_path / "out").glob("job-*.json")]
    assert len(recs) == 2 * len(gpus)
    for r in recs:
        gpu = int(r["cuda_visible_devices"])
        assert r["torch_devices"] == 1 and gpu in gpus and r["told_run"] == str(gpu)
        assert r["pci_bus_id"] in (None, bus[gpu])  # the very GPU it was given (None: torch does not say)
        for o in recs:
            if o is not r and o["cuda_visible_devices"] == r["cuda_visible_devices"]:
                assert r["end"] <= o["start"] or o["end"] <= r["start"]


@pytest.mark.parametrize(("args", "says"), [
    ([], "found no GPU to run the jobs on"),  # no list, and this machine's GPUs are not visible
    (["hydra.launcher.devices=[0,0]"], "names GPU 0 more than once"),
    (["hydra.launcher.devices=[0,1]", "trainer.distributed.nproc=1,3"],
     "trainer.distributed.nproc=3) needs 3 GPUs (trainer.distributed.nproc=3) but hydra.launcher.devices has 2 "
     "(0, 1)"),
])
def test_refused_sweeps_exit_2_with_one_line_before_any_job_starts(tmp_path, args, says):
    p = _app(tmp_path, "x=0", *args, env={"CUDA_VISIBLE_DEVICES": ""} if not args else None)
    out = p.stdout + p.stderr
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert p.returncode == EXIT_BAD_INPUT and len(errors) == 1 and says in errors[0], out[-3000:]
    assert "Traceback" not in out and not (tmp_path / "out").exists()


@pytest.mark.slow  # one real training job, stopped (about 20 s of CPU)
def test_a_run_py_sweep_tags_the_run_with_its_gpu_and_stops_queued_jobs_at_sigterm(tmp_path, shared_data_dir):
    """Two jobs queued on one GPU: the first trains (tagged with its GPU), SIGTERM ends its run as interrupted, the
    second is recorded as not run, and the summary lists both (exit 130), as with local_jobs."""

    store = [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
             f"paths.mlruns={tmp_path}/mlruns", f"paths.data_dir={shared_data_dir}", f"paths.reports={tmp_path}/r"]
    env = child_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop(GPU_DEVICES_ENV, None)
    # GPU 0 exists wherever NVML can count GPUs; on a CPU machine it is a name only, and the jobs train on CPU
    cmd = [sys.executable, "run.py", "-m", "hydra/launcher=local_gpus", "hydra.launcher.devices=[0]",
           "hydra.launcher.poll_s=0.1", "model=dqn", "trainer.seed=0,1", "size=tiny", "trainer=quick",
           "trainer.epochs=100000", "trainer.stop.rel_ci=0", "trainer.latency.enabled=false",
           f"hydra.sweep.dir={tmp_path}/sw", *store]
    client = None  # made once the sweep has created the store: a client made before would create it too

    def train_runs() -> list:
        nonlocal client
        client = client or ready_client(tmp_path / "mlflow.db")
        exp = client.get_experiment_by_name("trainbench") if client else None
        return [] if exp is None else client.search_runs([exp.experiment_id], "tags.kind = 'train'")

    log = tmp_path / "out.txt"
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 300
            while not train_runs():  # the first job's run is open: it trains
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
    out = log.read_text()
    assert rc == EXIT_INTERRUPTED, out[-3000:]
    (run,) = train_runs()
    assert run.data.tags[Tag.GPU_DEVICES] == "0" and run.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED
    assert f"run {run.info.run_id}  gpu 0" in out, out[-3000:]  # the summary says which GPU each run had
    assert "2 job(s), 1 run(s)" in out and "1 job(s) did not run (the sweep was stopped): #1" in out, out[-3000:]
    assert "#1 on GPU" not in out  # the queued job never started

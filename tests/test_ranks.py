"""A data-parallel job's ranks and their agent (docs/distributed.md): no rank outlives an agent killed outright,
no job folder is left behind, a rank that stops answering fails the job within the documented bound, and the
settings no machine could run (more ranks than cores, GPUs or memory; OMP_NUM_THREADS=0; a forged SLURM_JOB_ID)
are refused before any rank starts. In-process checks of the functions that decide, and two small process
trees (no training)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from helpers.procs import REPO, child_env
from trainbench.core.errors import ConfigError
from trainbench.core.vocab import Outcome
from trainbench.measure.distributed import limit_threads, omp_threads
from trainbench.ranks import nproc_problem, remove_orphaned_folders, rendezvous_port, watch_agent

GB = 2**30


def test_a_rank_whose_agent_is_gone_stops_itself_then_leaves_after_the_grace():
    parents = iter([100, 100, 1])  # the agent (pid 100), then re-parented to init
    sent, left = [], threading.Event()
    gone = watch_agent(100, interval=0.01, grace=0.05, parent=lambda: next(parents, 1),
                       kill=lambda pid, sig: sent.append((pid, sig)), leave=lambda code: left.set())
    assert gone.wait(5) and left.wait(5)
    assert sent == [(os.getpid(), signal.SIGTERM)]


def test_a_rank_keeps_running_while_its_agent_lives():
    sent: list = []
    gone = watch_agent(os.getppid(), interval=0.01, grace=0.01, kill=lambda pid, sig: sent.append(sig),
                       leave=lambda code: None)
    time.sleep(0.1)
    assert not gone.is_set() and sent == []


_AGENT = textwrap.dedent("""
    import subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True)  # as torchrun starts one
    print(rank.pid, flush=True)
    time.sleep(120)
""")
_RANK = textwrap.dedent("""
    import os, time
    from trainbench.ranks import watch_agent
    watch_agent(os.getppid(), interval=0.1, grace=30)
    print("watching", flush=True)
    time.sleep(120)
""")


def test_an_agent_killed_outright_leaves_no_rank_running():
    agent = subprocess.Popen([sys.executable, "-c", _AGENT, _RANK], cwd=REPO, env=child_env(),
                             stdout=subprocess.PIPE, text=True)
    rank = None
    try:
        rank = psutil.Process(int(agent.stdout.readline()))
        assert agent.stdout.readline().strip() == "watching"
        agent.kill()  # SIGKILL: the agent cannot stop its ranks itself
        agent.wait(10)
        rank.wait(15)  # psutil.TimeoutExpired where the rank outlived its agent
        assert not rank.is_running()
    finally:
        if agent.poll() is None:
            agent.kill()
        if rank is not None and rank.is_running():
            rank.kill()


def test_the_folders_of_agents_killed_outright_are_removed_and_no_other(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ns = os.readlink("/proc/self/ns/pid")
    for name, pid in (("trainbench-ranks-dead", f"{dead.pid}\n{ns}"),
                      ("trainbench-ranks-alive", f"{os.getppid()}\n{ns}"),
                      ("trainbench-ranks-unknown", None), ("other-dead", f"{dead.pid}\n{ns}"),
                      ("trainbench-ranks-container", f"{dead.pid}\npid:[1]")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "job.pkl").write_bytes(b"x")
        if pid is not None:
            (tmp_path / name / "agent.pid").write_text(pid)
    precious = tmp_path / "precious"  # a link named like a job folder to a folder of someone's: never followed
    precious.mkdir()
    (precious / "agent.pid").write_text(f"{dead.pid}\n{ns}")
    (tmp_path / "trainbench-ranks-link").symlink_to(precious)
    assert remove_orphaned_folders(tmp_path) == [tmp_path / "trainbench-ranks-dead"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-dead", "precious", "trainbench-ranks-alive",
                                                         "trainbench-ranks-container", "trainbench-ranks-link",
                                                         "trainbench-ranks-unknown"]
    assert (precious / "agent.pid").is_file()


@pytest.mark.parametrize(("nproc", "device", "cores", "gpus", "avail", "per_rank", "says"), [
    (64, "cpu", 2, None, 100 * GB, GB // 4, "more ranks than the 2 CPU cores"),
    (3, "cuda", 16, 2, 100 * GB, GB // 4, "more ranks than the 2 GPU(s)"),
    (8, "cpu", 16, None, 2 * GB, GB // 2, "more than the 2.0 GB of host memory available: lower "
                                          "trainer.distributed.nproc to at most 4"),
])
def test_more_ranks_than_the_machine_holds_are_refused_naming_the_limit(nproc, device, cores, gpus, avail,
                                                                        per_rank, says):
    problem = nproc_problem(nproc, device, cores, gpus, avail, per_rank)
    assert problem and f"trainer.distributed.nproc={nproc}" in problem and says in problem, problem


def test_ranks_the_machine_holds_are_accepted():
    assert nproc_problem(2, "cpu", 2, None, 4 * GB, GB // 2) is None
    assert nproc_problem(8, "cuda", 2, 8, None, GB) is None  # memory unknown: not checked


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", " 0 ", "\u00b2", "+3"])
def test_omp_num_threads_that_no_rank_could_use_is_refused(value, monkeypatch):
    with pytest.raises(ConfigError, match="OMP_NUM_THREADS=.* is not a positive number of threads"):
        omp_threads(value, 4)
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    with pytest.raises(ConfigError):
        limit_threads(2, cpu_count=lambda: 4)


def test_omp_num_threads_above_the_cores_or_unset_gives_each_rank_its_share(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        assert omp_threads("1000000", 4) is None and omp_threads("3", 4) == 3 and omp_threads("", 4) is None
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert limit_threads(2, cpu_count=lambda: 4) == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "1000000")
        assert limit_threads(2, cpu_count=lambda: 4) == 2  # the share, as unset
    finally:
        torch.set_num_threads(before)


def test_a_slurm_job_id_that_is_not_a_number_is_refused():
    assert rendezvous_port("123") == 20123 and rendezvous_port("40001") == 20001
    for bad in ("abc", "", None, "-5", "\u00b2", "1_000"):
        with pytest.raises(ConfigError, match="SLURM_JOB_ID=.* is not a SLURM job id"):
            rendezvous_port(bad)


_STALLED = textwrap.dedent("""
    import os, signal, sys, time
    import torch
    from trainbench.measure.distributed import DistContext
    ctx = DistContext.from_env("gloo", torch.device("cpu"), timeout_s=float(sys.argv[1]))
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # stopped mid-job: it never joins the next collective
    start = time.monotonic()
    try:
        ctx.exchange([1.0])
    except Exception as e:
        print(f"failed after {time.monotonic() - start:.1f} s: {type(e).__name__}", flush=True)
        os._exit(3)
    os._exit(0)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_stopped_rank_fails_its_peers_collective_within_the_timeout():
    env = child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2")
    ranks = [subprocess.Popen([sys.executable, "-c", _STALLED, "2"], cwd=REPO, env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    try:
        out, _ = ranks[0].communicate(timeout=90)  # gloo's own default, 600 s, would end this test
        assert ranks[0].returncode == 3 and "failed after" in out, out
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait(10)


def test_each_rank_joins_its_process_group_with_the_configured_timeout(monkeypatch):
    import trainbench.measure.distributed as distributed
    import trainbench.train as train
    from trainbench.compose import compose_run
    from trainbench.ranks import train_as_rank

    cfg = compose_run(["model=tft", "size=tiny", "trainer=quick", "trainer.distributed.nproc=2",
                       "model.batch_size=64", "trainer.distributed.timeout_s=7.5"])
    seen = {}

    class Joined:
        def close(self) -> None:
            seen["closed"] = True

    def from_env(backend, device, timeout_s=600.0):
        seen["timeout_s"] = timeout_s
        return Joined()

    monkeypatch.setattr(distributed.DistContext, "from_env", staticmethod(from_env))
    monkeypatch.setattr(train, "train_job", lambda *a, **k: Outcome.COMPLETED)
    monkeypatch.setattr(distributed, "limit_threads", lambda n: 1)
    assert train_as_rank(cfg, {}) == Outcome.COMPLETED
    assert seen == {"timeout_s": 7.5, "closed": True}


def test_hydras_config_reaches_the_ranks_under_a_launcher_that_reimports_its_plugins(monkeypatch):
    """Under hydra/launcher=submitit_local the launcher's config class is imported again in the job, and the
    typed Hydra config no longer pickles ("not the same object as ...LocalQueueConf"): the ranks get it as
    plain containers, set as Hydra's config again in each rank."""
    import pickle

    import hydra_plugins.hydra_submitit_launcher.config as submitit_config
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from trainbench import CONF_DIR
    from trainbench.compose import register_configs
    from trainbench.ranks import hydra_snapshot, restore_hydra

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("config", ["hydra/launcher=submitit_local", "model=tft"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.job.num = 3
        cfg.hydra.sweep.dir = "/tmp/sweep-x"
    before = HydraConfig.instance().cfg
    try:
        HydraConfig.instance().set_config(cfg)
        monkeypatch.setattr(submitit_config, "LocalQueueConf", type("LocalQueueConf", (), {}))  # imported again
        with pytest.raises(pickle.PicklingError):
            pickle.dumps(HydraConfig.instance().cfg)
        snapshot = pickle.loads(pickle.dumps(hydra_snapshot()))
        HydraConfig.instance().cfg = None
        restore_hydra(snapshot)
        got = HydraConfig.get()
        assert (got.job.num, got.sweep.dir) == (3, "/tmp/sweep-x")
        assert got.launcher._target_ == OmegaConf.select(cfg, "hydra.launcher._target_")
    finally:
        HydraConfig.instance().cfg = before


def test_a_ranks_refusal_is_the_jobs_error(tmp_path):
    """A rank that refuses the job's input (exit 2) while rank 0 was stopped by the agent: the job's error is
    that refusal, not rank 0's interruption."""
    import json

    from trainbench.ranks import _finish

    (tmp_path / "rank0.json").write_text(json.dumps({"outcome": Outcome.INTERRUPTED, "error": "signal 15"}))
    (tmp_path / "refused.json").write_text(json.dumps({"user_error": "ConfigError", "rank": 1,
                                                       "message": "model.target_kl does not combine"}))
    with pytest.raises(ConfigError, match="model.target_kl does not combine"):
        _finish(tmp_path, None, Outcome.FAILED, "rank 1 exit code 2")


def test_a_setting_a_rank_would_refuse_is_refused_before_any_rank_starts():
    from trainbench.compose import compose_run
    from trainbench.config.run import validate

    for extra, why in ((["model.target_kl=0.01"], "model.target_kl does not combine with trainer.distributed"),
                       (["model.num_envs=63"], "model.num_envs=63 are the job's environments")):
        cfg = compose_run(["model=ppo", "size=tiny", "trainer=quick", "trainer.distributed.nproc=2",
                           "model.batch_size=64", *extra])
        with pytest.raises(ConfigError, match=why):
            validate(cfg)


def test_a_hangup_or_quit_stops_a_rank_as_sigterm_does():
    from trainbench.ranks import stop_as_sigterm

    seen: list[int] = []
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
        stop_as_sigterm()
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGQUIT)
        time.sleep(0.05)
        assert seen == [signal.SIGTERM, signal.SIGTERM]
    finally:
        for s, h in saved.items():
            signal.signal(s, h)

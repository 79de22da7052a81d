"""A data-parallel job: its ranks started the torchrun way, one run written by rank 0, every rank ended
(docs/distributed.md).

``python run.py trainer.distributed.nproc=N model=tft`` (a single run or a job of a ``-m`` sweep): the job's
process becomes torchrun's agent for N local ranks (:func:`run_ranks`: ``torch.distributed.launcher.api.
elastic_launch``, the API behind ``python -m torch.distributed.run --standalone``: a c10d rendezvous on a
free local port, no restarts). Each rank is ``python -m trainbench.ranks <folder>`` (:func:`rank_main`): it
reads the job (the composed config and Hydra's runtime config, pickled by the agent), joins the process group
(NCCL on GPUs, gloo on a CPU; one thread per core share on a CPU) and runs :func:`trainbench.train.train_job`
as one rank: rank 0 opens, writes and ends the MLflow run, the others never create one.

Failures. torchrun's agent watches the ranks: when one exits non-zero or is killed, it stops the others
(SIGTERM, then SIGKILL after torch's 30 s; ``SHUTDOWN_S`` when the agent itself was stopped by a signal) and
raises; a rank that got SIGTERM ends its part as
``interrupted`` (train.py's handler), and rank 0's run keeps every epoch measured before (the harness catches
the dead peer's broken collective as ``failed``, or the SIGTERM as ``interrupted``, and records what it has).
Rank 0 writes its result to the folder; where rank 0 itself died before ending its run, the agent ends that
run as ``failed`` with the rank's exit, so that no run stays RUNNING. No rank outlives the agent: the agent
kills them all before it returns, and an agent killed outright (SIGKILL, the OOM killer) leaves none either:
each rank watches its agent (:func:`watch_agent`) and, once it is gone, stops itself as on the agent's SIGTERM
(rank 0 records its run ``interrupted``) and exits at the latest ``SHUTDOWN_S`` later; rank 0 then removes the
job's folder, and the next job removes any folder whose agent is gone. A rank that stops answering (stopped,
hung) fails its peers' next collective after ``trainer.distributed.timeout_s``. A model that does not declare
data parallelism (:data:`trainbench.core.trainable.DATA_PARALLEL`) runs on one rank, with a warning and the
tag ``dist_note``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trainbench.config.run import validate, world_size
from trainbench.core import errors
from trainbench.core.collector import skip_final_collections
from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, USER_ERRORS, ConfigError, JobFailed
from trainbench.core.vocab import STATUS, Outcome, Tag

log = logging.getLogger("trainbench")

#: Seconds torchrun's agent, stopped by a signal, waits after passing it on before it kills the ranks left (rank
#: 0 records its run then; after a failed rank torch waits its own 30 s); also a watching rank's grace.
SHUTDOWN_S = 20
#: The most a rank is assumed to hold at start (bytes): the agent's own resident memory is the estimate, but an
#: agent that already ran jobs (an in-process sweep) holds more than a fresh rank.
RANK_FLOOR_MAX = 2**30
#: Seconds between a rank's checks that its agent is still alive.
WATCH_S = 0.5
_PREFIX = "trainbench-ranks-"
_JOB, _RESULT, _RUN_ID, _AGENT, _REFUSED = "job.pkl", "rank0.json", "run_id", "agent.pid", "refused.json"


def run_ranks(cfg: DictConfig, extra_tags: dict[str, str] | None = None) -> str:
    """Run the job ``cfg`` as ``trainer.distributed.nproc`` ranks on this node; return its outcome, or raise as
    :func:`trainbench.train.train_job` does (USER_ERRORS for bad input, JobFailed for a recorded failure)."""
    from trainbench.models.registry import REGISTRY
    from trainbench.train import train_job

    obj = validate(cfg)  # bad input before any rank starts
    d = obj.trainer.distributed
    if d.nnodes > 1:
        raise ConfigError(f"trainer.distributed.nnodes={d.nnodes}: a job on more than one node runs under SLURM, "
                          "one task per rank (hydra/launcher=slurm_gpu hydra.launcher.nodes=<nodes> "
                          "hydra.launcher.tasks_per_node=<nproc>); on one machine set nnodes=1.")
    spec = REGISTRY.resolve(obj.model)
    if not spec.data_parallel:
        note = (f"model {spec.name} does not support data parallelism: it runs on one rank "
                f"(trainer.distributed.nproc={d.nproc} was asked)")
        log.warning("%s", note)
        with open_dict(cfg):
            cfg.trainer.distributed.nproc = 1
        return train_job(cfg, {**(extra_tags or {}), Tag.DIST_NOTE: note})
    _check_local_ranks(int(d.nproc), obj.trainer.device, d.backend)
    remove_orphaned_folders()
    with tempfile.TemporaryDirectory(prefix=_PREFIX) as tmp:
        folder = Path(tmp)
        (folder / _AGENT).write_text(f"{os.getpid()}\n{_pid_namespace()}")
        _write_job(folder, cfg, extra_tags or {})
        return _launch(folder, cfg, obj, int(d.nproc))


def _check_local_ranks(nproc: int, device_setting: Any, backend: Any) -> None:
    """Refuse, before any rank starts, ``nproc`` ranks this machine cannot hold (:func:`nproc_problem`), a backend
    its devices lack, and an ``OMP_NUM_THREADS`` no rank could use."""
    import psutil

    from trainbench.core.host_memory import host_memory_available
    from trainbench.measure.distributed import cpu_cores, omp_threads, resolve_backend
    from trainbench.measure.hardware import resolve_device

    device = resolve_device(device_setting)
    resolve_backend(backend, device.type)
    cores = cpu_cores()
    gpus = None
    if device.type == "cuda":
        import torch

        gpus = torch.cuda.device_count()
    else:
        omp_threads(os.environ.get("OMP_NUM_THREADS"), cores)
    problem = nproc_problem(nproc, device.type, cores, gpus, host_memory_available(),
                            min(psutil.Process().memory_info().rss, RANK_FLOOR_MAX))
    if problem:
        raise ConfigError(problem)


def nproc_problem(nproc: int, device_type: str, cores: int, gpus: int | None, available: int | None,
                  per_rank: int) -> str | None:
    """Why ``nproc`` local ranks cannot run here, or None: on a CPU more ranks than cores (each rank needs one at
    least); on CUDA more ranks than GPUs (each rank takes ``cuda:<local rank>``); anywhere, ranks whose
    memory at start (``per_rank`` bytes each: the agent's own resident memory, torch and the config loaded, at
    most :data:`RANK_FLOOR_MAX`: a lower bound of a rank's) is more than the host memory ``available`` (None:
    unknown, not checked)."""
    fix = "lower trainer.distributed.nproc"
    if device_type == "cuda" and gpus is not None and nproc > gpus:
        return (f"trainer.distributed.nproc={nproc} asks for more ranks than the {gpus} GPU(s) this process sees "
                f"(one GPU per rank): {fix} to at most {gpus}.")
    if device_type != "cuda" and nproc > cores:
        return (f"trainer.distributed.nproc={nproc} asks for more ranks than the {cores} CPU cores this process may "
                f"use (each rank needs one at least): {fix} to at most {cores}.")
    if available is not None and nproc * per_rank > available:
        most = max(1, available // max(1, per_rank))
        return (f"trainer.distributed.nproc={nproc}: each rank holds at least {per_rank / 2**20:,.0f} MB at start "
                f"(torch and the job loaded), {nproc * per_rank / 2**30:,.1f} GB for {nproc}, more than the "
                f"{available / 2**30:,.1f} GB of host memory available: {fix} to at most {most}.")
    return None


def remove_orphaned_folders(root: Path | None = None) -> list[Path]:
    """Remove the job folders (``trainbench-ranks-*`` in the temporary folder) of agents no longer running
    (killed outright before they could remove theirs); returns those removed. A folder without the agent's
    pid, another user's, a link, or one of an agent in another pid namespace (a container sharing the folder)
    is left alone."""
    removed = []
    for folder in sorted(Path(root or tempfile.gettempdir()).glob(f"{_PREFIX}*")):
        try:
            if folder.is_symlink() or folder.stat().st_uid != os.getuid():  # a link is never followed
                continue
            pid_text, _, namespace = (folder / _AGENT).read_text().strip().partition("\n")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        # a pid means this process's namespace only (another container's agent is never taken for dead)
        if namespace.strip() == _pid_namespace() and pid != os.getpid() and not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _pid_namespace() -> str:
    """This process's pid namespace (``pid:[...]``; empty where the system does not say)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_job(folder: Path, cfg: DictConfig, tags: dict[str, str]) -> None:
    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    (folder / _JOB).write_bytes(pickle.dumps({"cfg": resolved, "hydra": hydra_snapshot(), "tags": tags}))


def hydra_snapshot() -> dict[str, Any] | None:
    """Hydra's runtime config of this job (``hydra.*``) as plain containers (:func:`~trainbench.config.shared.
    hydra_plain`: a launcher that imports its plugins again, submitit, makes the typed one unpicklable), or None
    outside Hydra."""
    from trainbench.config.shared import hydra_plain

    with contextlib.suppress(ImportError, ValueError):
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return hydra_plain(HydraConfig.instance().cfg.hydra)
    return None


def restore_hydra(snapshot: dict[str, Any]) -> None:
    """Set Hydra's runtime config in this rank from :func:`hydra_snapshot`'s containers."""
    from hydra.core.hydra_config import HydraConfig

    from trainbench.config.shared import hydra_typed

    HydraConfig.instance().set_config(OmegaConf.create({"hydra": hydra_typed(snapshot)}))


def _launch(folder: Path, cfg: DictConfig, obj: Any, nproc: int) -> str:
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"trainbench-{uuid.uuid4().hex[:12]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                          logs_specs=DefaultLogsSpecs(log_dir=str(folder / "logs")), shutdown_timeout=SHUTDOWN_S)
    failed: str | None = None
    try:
        elastic_launch(config, entrypoint=sys.executable)("-m", "trainbench.ranks", str(folder))
    except ChildFailedError as e:
        failed = _describe_failures(e)
    except (KeyboardInterrupt, Exception) as e:  # the agent stopped by a signal (SignalException) or broken
        if type(e).__name__ != "SignalException" and not isinstance(e, KeyboardInterrupt):
            raise
        failed = f"the job was stopped by {e or 'a signal'}"
        _finish(folder, obj, Outcome.INTERRUPTED, failed)
        raise KeyboardInterrupt(failed) from None
    return _finish(folder, obj, Outcome.FAILED, failed)


def _describe_failures(e: Any) -> str:
    parts = []
    for rank, f in sorted(e.failures.items()):
        sig = -f.exitcode if f.exitcode < 0 else None
        how = f"killed by {signal.Signals(sig).name}" if sig else f"exit code {f.exitcode}"
        parts.append(f"rank {rank} {how}")
    return "; ".join(parts) or str(e)


def _finish(folder: Path, obj: Any, outcome_if_lost: str, failed: str | None) -> str:
    """The job's outcome from rank 0's result; where rank 0 left none, its run (if it opened one) is ended here
    as ``outcome_if_lost`` with what the agent knows, and the job fails."""
    result_file, run_id_file, refused = folder / _RESULT, folder / _RUN_ID, folder / _REFUSED
    opened = run_id_file.read_text().strip() if run_id_file.is_file() else None
    if result_file.is_file():
        r = json.loads(result_file.read_text())
        if r.get("user_error"):
            raise getattr(errors, r["user_error"], ConfigError)(r["message"])
    if refused.is_file():  # another rank refused the job's input: that is the job's error (exit 2)
        r = json.loads(refused.read_text())
        if opened and not result_file.is_file():
            _end_lost_run(obj, opened, outcome_if_lost, f"rank {r['rank']} refused the job: {r['message']}")
        raise getattr(errors, r["user_error"], ConfigError)(r["message"])
    if result_file.is_file():
        outcome, error, run_id = r["outcome"], r.get("error"), r.get("run_id") or opened
        if outcome == Outcome.COMPLETED and not failed:
            return outcome
        message = "; ".join(m for m in (error, f"ranks: {failed}" if failed else None) if m)
        raise JobFailed(outcome, message or "a rank failed", run_id)
    run_id = opened
    message = f"rank 0 ended without recording its run ({failed or 'no result'})"
    if run_id:
        _end_lost_run(obj, run_id, outcome_if_lost, message)
    raise JobFailed(outcome_if_lost, message, run_id)


def _end_lost_run(obj: Any, run_id: str, outcome: str, message: str) -> None:
    """End rank 0's run that rank 0 could not end (it was killed): outcome and error tags, terminal status; the
    epochs rank 0 had flushed stay."""
    from trainbench.tracking.connection import connect

    try:
        client, _ = connect(obj.tracking)
        if client.get_run(run_id).info.status not in ("RUNNING", "SCHEDULED"):
            return
        client.set_tag(run_id, Tag.OUTCOME, outcome)
        client.set_tag(run_id, Tag.ERROR, message[:5000])
        client.set_terminated(run_id, status=STATUS[outcome])
    except Exception as e:  # noqa: BLE001 - the job fails either way; the analysis reports a stale run
        log.error("could not end run %s after rank 0 died (%s: %s): the analysis will list it as stale", run_id,
                  type(e).__name__, e)


# --------------------------------------------------------------------------------------------------
# one rank: python -m trainbench.ranks <folder>
# --------------------------------------------------------------------------------------------------


def rank_main(folder: Path) -> int:
    """One rank started by :func:`run_ranks`: run the job as this rank; rank 0 writes its result to
    ``folder``. Returns the exit status (0, EXIT_FAILED, EXIT_BAD_INPUT)."""
    rank = int(os.environ.get("RANK", "0"))
    skip_final_collections()
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"[%(asctime)s][rank {rank}][%(name)s][%(levelname)s] - %(message)s")
    try:
        agent = int((folder / _AGENT).read_text().partition("\n")[0])
    except (OSError, ValueError):
        agent = os.getppid()
    orphaned = watch_agent(agent)
    stop_as_sigterm()
    try:
        return _run_rank(folder, rank)
    finally:
        if orphaned.is_set() and rank == 0:  # the agent that would have removed the job's folder is gone
            shutil.rmtree(folder, ignore_errors=True)


def stop_as_sigterm(signals: tuple[int, ...] = (signal.SIGHUP, signal.SIGQUIT)) -> None:
    """Make ``signals`` stop this rank as SIGTERM does (rank 0 records its run ``interrupted``): torchrun's agent
    passes on the signal that stopped it, and a SIGHUP (the terminal closed) or SIGQUIT (Ctrl-\\) would
    otherwise kill rank 0 before it records what it measured."""
    for s in signals:
        signal.signal(s, lambda signum, frame: os.kill(os.getpid(), signal.SIGTERM))


def watch_agent(agent: int, interval: float = WATCH_S, grace: float = SHUTDOWN_S,
                parent: Callable[[], int] = os.getppid, kill: Callable[[int, int], None] = os.kill,
                leave: Callable[[int], Any] = os._exit) -> threading.Event:
    """Watch, from a daemon thread, that this rank's parent is still the agent ``agent`` (a pid); once it is
    not (the agent was killed outright: the rank is re-parented), stop this rank as the agent would have
    (SIGTERM to itself: rank 0 records its run ``interrupted``) and, if it is still running ``grace`` seconds
    later, leave at once (``EXIT_FAILED``). Returns the event set when the agent was found gone."""
    gone = threading.Event()

    def watch() -> None:
        while parent() == agent:
            time.sleep(interval)
        gone.set()
        log.error("the job's agent (pid %d) is gone: this rank stops (at the latest in %.0f s)", agent, grace)
        kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        leave(EXIT_FAILED)

    threading.Thread(target=watch, name="trainbench-agent-watch", daemon=True).start()
    return gone


def _run_rank(folder: Path, rank: int) -> int:
    job = pickle.loads((folder / _JOB).read_bytes())
    if job["hydra"] is not None:
        restore_hydra(job["hydra"])

    def opened(run_id: str) -> None:
        if rank == 0:
            (folder / _RUN_ID).write_text(run_id)

    result: dict[str, Any] = {}
    code = EXIT_FAILED
    try:
        result, code = {"outcome": train_as_rank(job["cfg"], job["tags"], opened)}, 0
    except JobFailed as e:
        result = {"outcome": e.outcome, "error": str(e).partition(": ")[2] or str(e), "run_id": e.run_id}
    except USER_ERRORS as e:
        result, code = {"user_error": type(e).__name__, "message": str(e)}, EXIT_BAD_INPUT
        with contextlib.suppress(FileExistsError, OSError):  # the first rank to refuse names the job's error
            fd = os.open(folder / _REFUSED, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({**result, "rank": rank}, f)
    except BaseException as e:  # noqa: BLE001 - a rank reports every failure by its exit status
        traceback.print_exc()
        result = {"outcome": Outcome.FAILED, "error": f"{type(e).__name__}: {e}"}
    if rank == 0:
        (folder / _RESULT).write_text(json.dumps(result))
    return code


def train_as_rank(cfg: DictConfig, tags: dict[str, str], on_run_open: Any = None) -> str:
    """Join the process group torchrun's environment variables describe and run the job as this rank (its
    device ``cuda:<local rank>`` on GPUs; on a CPU its share of the cores); raises as ``train_job`` does."""
    import torch

    from trainbench.measure.distributed import DistContext, limit_threads, resolve_backend
    from trainbench.measure.hardware import resolve_device
    from trainbench.train import train_job

    obj = validate(cfg)
    device = resolve_device(obj.trainer.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        limit_threads(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    dist = DistContext.from_env(resolve_backend(obj.trainer.distributed.backend, device.type), device,
                                timeout_s=float(obj.trainer.distributed.timeout_s))
    outcome = train_job(cfg, tags, dist=dist, on_run_open=on_run_open)
    dist.close()  # after a failure the process exits instead: a peer may be gone
    return outcome


# --------------------------------------------------------------------------------------------------
# SLURM: each task of a job is a rank
# --------------------------------------------------------------------------------------------------


def slurm_tasks() -> int:
    """The tasks of the SLURM job this process is a task of (1 outside SLURM)."""
    return int(os.environ.get("SLURM_NTASKS", "1") or 1) if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" else 1


def run_slurm_rank(cfg: DictConfig, extra_tags: dict[str, str] | None = None) -> str:
    """This SLURM task as one rank of the job (``hydra.launcher.tasks_per_node`` x ``nodes`` tasks, each a
    rank, the rendezvous at the job's first node); rank 0 writes the run. Returns the outcome or raises as
    ``train_job`` does; a task other than rank 0 returns its outcome, which the sweep does not record."""
    import submitit

    from trainbench.models.registry import REGISTRY

    obj = validate(cfg)
    env = submitit.JobEnvironment()
    want = world_size(obj.trainer.distributed)
    if env.num_tasks != want:
        raise ConfigError(f"the SLURM job has {env.num_tasks} tasks (hydra.launcher.tasks_per_node x nodes) but "
                          f"trainer.distributed asks for {want} ranks (nproc x nnodes): set "
                          f"hydra.launcher.tasks_per_node=<nproc> and hydra.launcher.nodes=<nnodes>.")
    spec = REGISTRY.resolve(obj.model)
    if not spec.data_parallel:
        raise ConfigError(f"model {spec.name} does not support data parallelism: run it with one SLURM task "
                          "(hydra.launcher.tasks_per_node=1) and trainer.distributed.nproc=1.")
    port = rendezvous_port(os.environ.get("SLURM_JOB_ID"))
    os.environ.update({"RANK": str(env.global_rank), "WORLD_SIZE": str(env.num_tasks),
                       "LOCAL_RANK": str(env.local_rank), "LOCAL_WORLD_SIZE": str(env.num_tasks // env.num_nodes),
                       "MASTER_ADDR": env.hostnames[0], "MASTER_PORT": str(port)})
    return train_as_rank(cfg, extra_tags or {})


def rendezvous_port(job_id: str | None) -> int:
    """The rendezvous port of a SLURM job's ranks, the same on every task: 20000 + the job id mod 20000. Raises
    :class:`ConfigError` where ``SLURM_JOB_ID`` is not a job id (a number)."""
    text = (job_id or "").strip()
    if not re.fullmatch(r"[0-9]{1,18}", text):  # ASCII digits ("²".isdigit() is true)
        raise ConfigError(f"SLURM_JOB_ID={job_id!r} is not a SLURM job id (a number): a multi-task job's ranks derive "
                          "their rendezvous port from it. Run the job through sbatch/srun (hydra/launcher=slurm_gpu) "
                          "and do not set SLURM_JOB_ID by hand.")
    return 20000 + int(text) % 20000  # one per job (an array's tasks too), on every task

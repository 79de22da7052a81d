"""One job per GPU on a multi-GPU machine: ``hydra/launcher=local_gpus``.

An 8-GPU instance trains several models at once, one per GPU (the instances table's parallel mode). This
launcher runs a sweep's jobs that way on the machine it is started on:

* the GPUs are ``hydra.launcher.devices`` (indices, as ``CUDA_VISIBLE_DEVICES`` and nvidia-smi number
  them), by default every GPU of the machine: the list in ``CUDA_VISIBLE_DEVICES`` when the sweep's shell
  sets it, else NVML's count;
* each job gets ``gpus_per_job`` of them (default 1), or ``trainer.distributed.nproc`` when the job asks for
  more ranks than that (one GPU per rank), read from the job's own composed config;
* jobs start in their order, as soon as enough GPUs are free (the first job waiting is never overtaken);
  a GPU is held by one job at a time, so two timed jobs never share one;
* each job runs in its own process (submitit's local executor, as ``local_jobs``) whose
  ``CUDA_VISIBLE_DEVICES`` is its GPUs, and :data:`~trainbench.core.vocab.GPU_DEVICES_ENV` carries the same
  value to the run, which logs it as the ``gpu_devices`` tag.

Refused before any job starts, with one ``error:`` line and exit 2: no GPU found and none given, a list
that names a GPU twice or one the machine does not have, and a job that asks for more GPUs than the list
holds. A job that fails or whose process dies does not stop the others: it is recorded in the sweep's job
ledger (:mod:`trainbench.sweep.jobs`) when it could not record itself, so the summary counts it. The first
Ctrl-C or SIGTERM stops the running jobs (their runs end as interrupted) and the queued ones are recorded
as not run, as with ``local_jobs``.

Why submitit's local executor underneath: it already starts a fresh process per job (a GPU must be chosen
before CUDA initialises, so a pool of reused workers, as joblib's, cannot switch it), pickles the job,
passes the scheduler's signals on, and sets ``CUDA_VISIBLE_DEVICES`` per submission (``visible_gpus``);
what it lacks, and this module adds, is a device per job and a queue (its own launcher starts every job at
once on the same GPUs). The Hydra plugin that names this class is ``hydra_plugins.trainbench_launcher``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from trainbench.core.errors import EXIT_BAD_INPUT, DeviceRefused
from trainbench.core.vocab import GPU_DEVICES_ENV, Outcome
from trainbench.sweep.jobs import read_ledger, stop_requested, write_record

log = logging.getLogger(__name__)

#: Hydra instantiates launchers from ``hydra_plugins`` only: the plugin subclasses :class:`LocalGpusLauncher`.
PLUGIN_TARGET = "hydra_plugins.trainbench_launcher.LocalGpusLauncher"
NAME = "local_gpus"
_OTHER_LAUNCHERS = ("run the jobs with another launcher (hydra/launcher=local_jobs: one process per job, "
                    "all at once; or the default: one after another)")


# ---- which GPUs ---------------------------------------------------------------------------------


def machine_gpus() -> tuple[list[int] | None, str]:
    """This machine's GPU indices as NVML counts them and how that was found; None when NVML cannot be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - no driver, no library: no GPU to be found this way
        return None, f"NVML cannot be read ({type(e).__name__}: {str(e)[:120]})"
    return list(range(count)), f"NVML counts {count} GPU(s)"


def _visible_list(value: str) -> list[int]:
    """The GPU indices a ``CUDA_VISIBLE_DEVICES`` value lets CUDA see (it stops at the first negative one)."""
    out: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        try:
            index = int(entry)
        except ValueError:
            raise DeviceRefused(
                f"CUDA_VISIBLE_DEVICES={value!r} in this shell names GPUs by UUID or name, which "
                f"hydra/launcher={NAME} cannot split into jobs: give their indices with "
                "hydra.launcher.devices=[0,1] (as nvidia-smi numbers them)") from None
        if index < 0:
            break
        out.append(index)
    return out


def resolve_devices(given: Sequence[int] | None) -> list[int]:
    """The GPUs the sweep's jobs share out: ``given`` (``hydra.launcher.devices``) or every GPU of the machine.

    Raises :class:`DeviceRefused` when there is none, when one is named twice or is negative, or when the
    machine's GPUs are known (NVML) and one named is not among them.
    """
    machine, how = machine_gpus()
    if given is None:
        shell = os.environ.get("CUDA_VISIBLE_DEVICES")
        if shell is not None:
            devices, source = _visible_list(shell), f"CUDA_VISIBLE_DEVICES={shell!r} in this shell"
        else:
            devices, source = machine or [], how
        if not devices:
            raise DeviceRefused(
                f"hydra/launcher={NAME} found no GPU to run the jobs on ({source}) and none was given: name the "
                f"GPUs with hydra.launcher.devices=[0,1], or {_OTHER_LAUNCHERS}")
        _refuse_twice(devices, source, f"CUDA_VISIBLE_DEVICES={','.join(map(str, dict.fromkeys(devices)))}")
        return devices
    devices = [int(d) for d in given]
    listed = f"hydra.launcher.devices={_brackets(devices)}"
    if not devices:
        raise DeviceRefused(f"{listed} names no GPU: list the GPUs (hydra.launcher.devices=[0,1]), leave it unset "
                            f"for every GPU of this machine, or {_OTHER_LAUNCHERS}")
    _refuse_twice(devices, listed, f"hydra.launcher.devices={_brackets(list(dict.fromkeys(devices)))}")
    negative = [d for d in devices if d < 0]
    if negative:
        raise DeviceRefused(f"{listed}: GPU indices are 0 or more (as nvidia-smi numbers them), not "
                            f"{_words(negative)}")
    if machine:
        absent = [d for d in devices if d not in machine]
        if absent:
            raise DeviceRefused(f"{listed} names GPU {_words(absent)}, which this machine does not have ({how}: "
                                f"{_words(machine)}). List GPUs it has, or leave the list unset for all of them")
    elif (devices, how) not in _WARNED:  # once per sweep: the callback's check and the launcher's
        _WARNED.append((devices, how))
        log.warning("%s: the GPUs %s are not checked against the machine (%s)", NAME, _words(devices), how)
    return devices


_WARNED: list[tuple[list[int], str]] = []


def _refuse_twice(devices: Sequence[int], listed: str, once: str) -> None:
    """:class:`DeviceRefused` where ``devices`` (from ``listed``) names a GPU more than once."""
    twice = sorted({d for d in devices if devices.count(d) > 1})
    if twice:
        raise DeviceRefused(
            f"{listed} names GPU {_words(twice)} more than once: two jobs would run on one GPU at the same time "
            f"and each would time the other's work too. List each GPU once ({once})")


def _brackets(devices: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in devices) + "]"


def _words(items: Sequence[Any]) -> str:
    return ", ".join(str(i) for i in items)


def _select(job_config: DictConfig | None, key: str) -> Any:
    if job_config is None:
        return None
    try:
        return OmegaConf.select(job_config, key, default=None)
    except Exception:  # noqa: BLE001 - an interpolation the job itself will report
        return None


def job_gpus(job_config: DictConfig | None, gpus_per_job: int) -> tuple[int, str]:
    """How many GPUs one job needs and the key that says so: ``gpus_per_job``, or the job's
    ``trainer.distributed.nproc`` when it asks for more ranks than that (one GPU per rank). A job across
    several machines (``trainer.distributed.nnodes`` > 1) is refused: this launcher runs every job here."""
    nnodes = _select(job_config, "trainer.distributed.nnodes")
    if isinstance(nnodes, int) and nnodes > 1:
        raise DeviceRefused(f"trainer.distributed.nnodes={nnodes}: hydra/launcher={NAME} runs every job on this "
                            "machine; a job across machines needs a cluster launcher (hydra/launcher=slurm_gpu)")
    nproc = _select(job_config, "trainer.distributed.nproc")
    if isinstance(nproc, int) and nproc > gpus_per_job:
        return nproc, f"trainer.distributed.nproc={nproc}"
    return gpus_per_job, f"hydra.launcher.gpus_per_job={gpus_per_job}"


def check_request(devices: Sequence[int], gpus_per_job: int) -> None:
    """The sweep-wide request: at least one GPU per job, and no more than the list holds."""
    if gpus_per_job < 1:
        raise DeviceRefused(f"hydra.launcher.gpus_per_job={gpus_per_job}: each job needs at least one GPU of its "
                            f"own under hydra/launcher={NAME}; for CPU jobs, {_OTHER_LAUNCHERS}")
    if gpus_per_job > len(devices):
        raise DeviceRefused(_too_many(gpus_per_job, f"hydra.launcher.gpus_per_job={gpus_per_job}", devices))


def _too_many(need: int, why: str, devices: Sequence[int], job: str = "each job") -> str:
    return (f"{job} needs {need} GPUs ({why}) but hydra.launcher.devices has {len(devices)} ({_words(devices)}): "
            f"it could only run by sharing a GPU, which would time two jobs' work as one. Give more GPUs "
            "(hydra.launcher.devices=[...]) or ask for fewer per job")


def refuse(problem: DeviceRefused) -> None:
    """One ``error:`` line and exit 2."""
    print(f"error: {problem}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)


def check_launcher(launcher: DictConfig) -> None:
    """The device list of a ``local_gpus`` launcher config (``hydra.launcher``), checked at the start of a
    sweep, before the tracking store is opened (exit 2 on a problem); nothing for another launcher."""
    if launcher.get("_target_") != PLUGIN_TARGET:
        return
    given = launcher.get("devices")
    try:
        devices = resolve_devices(None if given is None else list(OmegaConf.to_container(given)))
        check_request(devices, int(launcher.get("gpus_per_job", 1)))
    except DeviceRefused as e:
        refuse(e)


# ---- the queue ----------------------------------------------------------------------------------


class DeviceQueue:
    """Jobs in their order, each started once as many GPUs as it needs are free; a GPU is held by one job.

    :meth:`start_next` hands out the first waiting job and its GPUs (the first free ones, in the list's
    order) when they are free, else None: a later job never overtakes an earlier one that waits.
    """

    def __init__(self, devices: Sequence[int], needs: Sequence[int]) -> None:
        self.order = list(devices)
        self.free = list(devices)
        self.needs = list(needs)
        big = [n for n in self.needs if n > len(self.order) or n < 1]
        if big:
            raise ValueError(f"a job needs {big[0]} GPUs of {len(self.order)}")
        self.waiting: deque[int] = deque(range(len(self.needs)))
        self.held: dict[int, tuple[int, ...]] = {}

    def start_next(self) -> tuple[int, tuple[int, ...]] | None:
        if not self.waiting or self.needs[self.waiting[0]] > len(self.free):
            return None
        job = self.waiting.popleft()
        gpus, self.free = tuple(self.free[:self.needs[job]]), self.free[self.needs[job]:]
        self.held[job] = gpus
        return job, gpus

    def release(self, job: int) -> tuple[int, ...]:
        gpus = self.held.pop(job)
        back = set(self.free) | set(gpus)
        self.free = [d for d in self.order if d in back]
        return gpus

    def drop_waiting(self) -> list[int]:
        """The jobs not started yet, removed from the queue (the sweep was stopped)."""
        dropped = list(self.waiting)
        self.waiting.clear()
        return dropped

    @property
    def finished(self) -> bool:
        return not self.waiting and not self.held


# ---- the launcher -------------------------------------------------------------------------------


class LocalGpusLauncher(Launcher):
    """A sweep's jobs in parallel on this machine's GPUs, one job per GPU (or per ``gpus_per_job`` GPUs)."""

    def __init__(self, devices: Sequence[int] | None = None, gpus_per_job: int = 1, timeout_min: float = 600,
                 signal_delay_s: int = 120, poll_s: float = 0.5,
                 submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j") -> None:
        self.devices = None if devices is None else [int(d) for d in devices]
        self.gpus_per_job, self.timeout_min, self.signal_delay_s = int(gpus_per_job), timeout_min, int(signal_delay_s)
        self.poll_s, self.submitit_folder = float(poll_s), str(submitit_folder)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    # ---- in the job's process ----------------------------------------------------------------

    def __call__(self, overrides: list[str], job_num: int, gpus: str, singleton_state: dict[Any, Any]) -> JobReturn:
        """One job, in the process submitit started for it with ``CUDA_VISIBLE_DEVICES=gpus``."""
        import submitit

        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible != gpus:  # never train on GPUs the queue did not give this job
            raise RuntimeError(f"job #{job_num} was given GPU(s) {gpus} but its process sees "
                               f"CUDA_VISIBLE_DEVICES={visible!r}")
        os.environ[GPU_DEVICES_ENV] = gpus
        Singleton.set_state(singleton_state)
        setup_globals()
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(sweep_config.hydra.job) as job:
            job.id = submitit.JobEnvironment().job_id
            job.num = job_num
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")

    # ---- in the sweep's process --------------------------------------------------------------

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        try:
            import submitit
        except ImportError:
            refuse(DeviceRefused(f"hydra/launcher={NAME} runs each job through submitit's local executor, which is "
                                 "not installed: pip install '.[slurm]' (make install includes it)"))
        try:
            devices = resolve_devices(self.devices)
            check_request(devices, self.gpus_per_job)
            needs = self._needs(job_overrides, initial_job_idx, devices)
        except DeviceRefused as e:
            refuse(e)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        executor = submitit.LocalExecutor(folder=self.submitit_folder, max_num_timeout=0)  # never requeue a benchmark
        executor.update_parameters(timeout_min=self.timeout_min, signal_delay_s=self.signal_delay_s,
                                   tasks_per_node=1, nodes=1)
        queue = DeviceQueue(devices, needs)
        log.info("%s: %d job(s) on GPU(s) %s, at most %d at a time; sweep output dir: %s", NAME, len(needs),
                 _words(devices), max(1, len(devices) // min(needs, default=1)), sweep_dir)
        results: list[JobReturn | None] = [None] * len(needs)
        running: dict[int, tuple[Any, tuple[int, ...], float]] = {}
        try:
            while not queue.finished:
                changed = False
                for pos, (job, gpus, t0) in list(running.items()):
                    if job.done():
                        del running[pos]
                        queue.release(pos)
                        results[pos] = self._result(job, job_overrides[pos], initial_job_idx + pos, gpus, t0,
                                                    sweep_dir)
                        changed = True
                if stop_requested():  # the first Ctrl-C/SIGTERM: jobs not started are not run
                    for pos in queue.drop_waiting():
                        results[pos] = self._not_run(job_overrides[pos], initial_job_idx + pos, sweep_dir)
                while (started := queue.start_next()) is not None:
                    pos, gpus = started
                    running[pos] = self._start(executor, job_overrides[pos], initial_job_idx + pos, gpus,
                                               len(queue.waiting))
                    changed = True
                if not changed and not queue.finished:
                    time.sleep(self.poll_s)
        finally:
            for job, _, _ in running.values():  # an error or a second signal: leave no job training
                job.cancel()
        done = [r for r in results if r is not None]
        assert len(done) == len(results), "a job of the queue has no return"
        return done

    def _needs(self, job_overrides: Sequence[Sequence[str]], first: int, devices: list[int]) -> list[int]:
        """Each job's GPU count, from its composed config; refuses a job that asks for more than ``devices``."""
        assert self.hydra_context is not None and self.config is not None
        needs = []
        for idx, overrides in enumerate(job_overrides, start=first):
            try:
                job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            except Exception:  # noqa: BLE001 - the job reports its own config error in its process, recorded
                job_config = None
            need, why = job_gpus(job_config, self.gpus_per_job)
            if need > len(devices):
                raise DeviceRefused(_too_many(need, why, devices, job=f"job #{idx} "
                                              f"({' '.join(filter_overrides(overrides))})"))
            needs.append(need)
        return needs

    def _start(self, executor: Any, overrides: Sequence[str], idx: int, gpus: tuple[int, ...],
               waiting: int) -> tuple[Any, tuple[int, ...], float]:
        executor.update_parameters(gpus_per_node=len(gpus), visible_gpus=list(gpus))
        value = ",".join(str(g) for g in gpus)
        job = executor.submit(self, list(overrides), idx, value, Singleton.get_state())
        log.info("\t#%d on GPU %s (CUDA_VISIBLE_DEVICES=%s; %d waiting): %s", idx, _words(gpus), value, waiting,
                 " ".join(filter_overrides(overrides)))
        return job, gpus, time.monotonic()

    def _result(self, job: Any, overrides: Sequence[str], idx: int, gpus: tuple[int, ...], t0: float,
                sweep_dir: Path) -> JobReturn:
        took = time.monotonic() - t0
        ret = None
        if not job.paths.result_pickle.exists():  # killed (OOM killer, SIGKILL): submitit would wait 15 s for it
            why = (f"the job's process ended without a result (killed, by the OOM killer or a signal, or it exited "
                   f"early); its log: {job.paths.stderr}")
        else:
            try:
                ret = job.results()[0]
            except Exception as e:  # noqa: BLE001 - it raised before its task ran: the others go on
                lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
                why = f"the job failed before its task ran: {lines[-1][:300] if lines else type(e).__name__}"
        if ret is not None:
            if ret.status == JobStatus.COMPLETED:
                log.info("\t#%d on GPU %s done after %.0f s: %s; GPU %s free", idx, _words(gpus), took,
                         str(ret.return_value)[:80], _words(gpus))
                return ret
            why = f"the job raised {type(ret._return_value).__name__}: {str(ret._return_value)[:300]}"
        # Hydra's sweeper would raise this job's error after the others and skip the sweep's summary: the job is
        # recorded as failed instead (when it could not record itself), and the summary counts it.
        log.error("\t#%d on GPU %s failed after %.0f s (%s); its log: %s", idx, _words(gpus), took, why,
                  job.paths.stderr)
        if idx not in read_ledger(sweep_dir):
            write_record(sweep_dir, idx, list(overrides), Outcome.FAILED, why)
        return _returned(overrides, f"{Outcome.FAILED} ({why})")

    @staticmethod
    def _not_run(overrides: Sequence[str], idx: int, sweep_dir: Path) -> JobReturn:
        write_record(sweep_dir, idx, list(overrides), Outcome.NOT_RUN,
                     "the sweep was stopped by a signal before this job started")
        return _returned(overrides, Outcome.NOT_RUN)


def _returned(overrides: Sequence[str], value: str) -> JobReturn:
    """A job's return without a job (not run, or no result): completed for Hydra, so that the sweep goes on to
    its summary, which reads the job's outcome from the ledger."""
    ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
    ret.return_value = value
    return ret


@dataclass
class LocalGpusConf:
    """``hydra/launcher=local_gpus``: every key can be given as ``hydra.launcher.<key>=...``."""

    _target_: str = PLUGIN_TARGET
    # the GPUs the jobs share out (indices as nvidia-smi and CUDA_VISIBLE_DEVICES number them); null: every GPU
    # of this machine (the list in CUDA_VISIBLE_DEVICES when the sweep's shell sets it, else NVML's count)
    devices: list[int] | None = None
    # GPUs per job; a job whose trainer.distributed.nproc is larger gets that many (one per rank)
    gpus_per_job: int = 1
    # a job still running after this long is stopped (its run ends as interrupted)
    timeout_min: float = 600
    # the job is signalled this long before its time limit, so that it ends its run in time
    signal_delay_s: int = 120
    # how often the sweep checks for finished jobs
    poll_s: float = 0.5
    # submitit's pickled jobs and their stdout/stderr
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"


def register_launcher_configs() -> None:
    """``hydra/launcher=local_gpus`` (called by hydra_plugins.trainbench_launcher when Hydra scans it)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="hydra/launcher", name=NAME, node=LocalGpusConf, provider="trainbench")

"""SLURM sweeps that never wait forever on a request no node can meet.

``hydra/launcher=slurm_gpu`` uses :class:`SlurmLauncher`, a thin subclass of hydra_submitit_launcher's
SLURM launcher. It submits exactly what the plugin submits (one job array through submitit) and adds:

* **a check before submitting**: the request of each job (CPUs, memory and GPUs per node, nodes, time
  limit, partition, features) is compared with what the partition's nodes offer (``scontrol show
  partition/node``). A request that no node can ever meet ends the sweep with one ``error:`` line that
  names the request and what the partition offers, exit 2, and nothing submitted. The check runs in
  the :class:`~trainbench.sweep.callbacks.LauncherChecksCallback`'s ``on_multirun_start`` (conf/config.yaml lists
  it first, so it runs before the tracking store is opened), and in the launcher when that callback is not
  configured;
* **a watch while waiting**, with ``squeue`` (it works without SLURM accounting, unlike submitit's
  ``sacct``, whose warnings it never triggers). Jobs that SLURM will never start (reason
  ``PartitionConfig``, ``PartitionTimeLimit``, ``BadConstraints``, a ``...PerJob...`` limit, or
  ``ReqNodeNotAvail``/``PartitionNodeLimit`` where no node of the partition fits) are cancelled and the
  sweep ends the same way. Waiting on a busy cluster (``Priority``, ``Resources``, ...) is normal: the
  sweep says so every ``report_every_s`` seconds;
* a job that ends without a result (cancelled, killed, node lost) no longer stops the wait for the
  others: it is reported, and the sweep exits 1 after its summary (the same callback).

Settings (``hydra.launcher.*``, on top of the plugin's): ``preflight`` (true: the check before
submitting), ``report_every_s`` (300) and ``poll_s`` (5). docs/scaling-out.md shows what each failure
looks like. What the cluster offers, what a job asks for and whether it can ever run are judged in
:mod:`trainbench.sweep.slurm_checks`; this module submits, waits and reports.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainbench.core.errors import EXIT_BAD_INPUT
from trainbench.sweep.slurm_checks import (
    FINAL_STATES,
    MAYBE_NEVER_REASONS,
    NEVER_REASONS,
    Request,
    describe_waiting,
    duration_text,
    join_words,
    queue_states,
    read_cluster,
    unmet,
)

log = logging.getLogger(__name__)

_LOST: list[str] = []  # jobs of this process's sweep that ended without a result (lost_jobs)
_CHECKED: list[Request] = []  # requests preflight() has checked (or could not check)


def preflight(request: Request) -> None:
    """Exit 2 with one ``error:`` line when no node of the partition can ever start such a job."""
    _CHECKED.append(request)
    try:
        parts = read_cluster()
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", None) or e
        log.warning("could not read the partitions with scontrol (%s); submitting without the check", detail)
        return
    problem = unmet(request, parts)
    if problem:
        _fail(f"SLURM can never start these jobs: {problem}")


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


try:
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _PluginSlurmLauncher
except ImportError:  # the slurm extra is not installed: nothing to register
    SlurmQueueConf = None  # type: ignore[assignment,misc]
    _PluginSlurmLauncher = object  # type: ignore[assignment,misc]

OWN_KEYS = ("preflight", "report_every_s", "poll_s")


class SlurmLauncher(_PluginSlurmLauncher):  # type: ignore[misc,valid-type]
    """hydra_submitit_launcher's SLURM launcher, with a check before submitting and a watch while waiting."""

    def __init__(self, preflight: bool = True, report_every_s: float = 300.0, poll_s: float = 5.0,
                 **params: Any) -> None:
        super().__init__(**params)
        self._problem: str | None = None
        self.preflight, self.report_every_s, self.poll_s = bool(preflight), float(report_every_s), float(poll_s)

    def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:
        import submitit
        from submitit.core.utils import UncompletedJobError

        request = Request.from_params(self.params)
        if self.preflight:
            self._check(request)
        try:
            jobs = self._submit(job_overrides, initial_job_idx)
        except UncompletedJobError as e:  # sbatch refused the jobs: it printed why on stderr already
            reason = str(e).strip().splitlines()[-1] if str(e).strip() else "sbatch failed"
            _fail(f"sbatch refused the jobs ({reason}): each job asks for {request.describe()}"
                  f"{self._offer(request)}. Lower the request or choose another partition "
                  "(hydra.launcher.partition; `sinfo -s` lists them)")
        lost = self._wait(jobs, request)
        results = []
        for job, overrides in zip(jobs, job_overrides, strict=True):
            if job.job_id in lost:
                results.append(self._lost(job, overrides, lost[job.job_id]))
                continue
            try:
                results.append(job.results()[0])
            except submitit.core.utils.UncompletedJobError as e:
                results.append(self._lost(job, overrides, str(e).splitlines()[0]))
        return results

    # ---- before submitting ---------------------------------------------------------------------

    def _check(self, request: Request) -> None:
        if request not in _CHECKED:  # preflight_launcher checked it already (LauncherChecksCallback)
            preflight(request)

    @staticmethod
    def _offer(request: Request) -> str:
        try:
            parts = read_cluster()
        except (OSError, subprocess.SubprocessError):
            return ""
        name = request.partition or next((p.name for p in parts.values() if p.default), None)
        if name in parts:
            return f"; {parts[name].offer()}"
        return f"; partition {name!r} does not exist (this cluster has {join_words(sorted(parts))})" if parts else ""

    # ---- submitting: what BaseSubmititLauncher.launch does, without its blocking wait ----------

    def _submit(self, job_overrides: Any, initial_job_idx: int) -> list[Any]:
        import os

        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        assert self.config is not None
        init_keys = {"max_num_timeout", "submitit_folder"}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=self.params["submitit_folder"],
                                         **{f"{self._EXECUTOR}_max_num_timeout": self.params["max_num_timeout"]}
                                         if "max_num_timeout" in self.params else {})
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"{self._EXECUTOR}_{k}": v
                                      for k, v in self.params.items() if k not in init_keys})
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        return list(executor.map_array(self, *zip(*job_params, strict=True)))

    # ---- waiting --------------------------------------------------------------------------------

    def _wait(self, jobs: list[Any], request: Request) -> dict[str, str]:
        """Until every job has a result or has ended; returns {job id: how it ended} for those without one."""
        ids = [j.job_id for j in jobs]
        log.info("submitted %d SLURM job(s) (%s): each asks for %s; waiting (squeue)", len(ids),
                 ids[0].split("_")[0], request.describe())
        start = time.monotonic()
        next_report = start + min(30.0, self.report_every_s)
        ended_at: dict[str, float] = {}
        last_error = ""
        states: dict[str, tuple[str, str]] = {}
        while True:
            try:
                states = {k: v for k, v in queue_states(ids).items() if k in ids}
                last_error = ""
            except (OSError, subprocess.SubprocessError) as e:
                if not last_error:
                    log.warning("squeue failed (%s); still waiting", getattr(e, "stderr", None) or e)
                last_error = str(e)
            self._stop_if_never(states, request, ids)
            now = time.monotonic()
            waiting = []
            for j in jobs:
                if j.paths.result_pickle.exists():
                    continue
                state = states.get(j.job_id, ("", ""))[0]
                if (not state and last_error) or (state and state not in FINAL_STATES):  # still queued or running
                    waiting.append(j)
                    continue
                # ended (or forgotten by the controller) without a result yet: allow the file to show up
                if now - ended_at.setdefault(j.job_id, now) < 15:
                    waiting.append(j)
            if not waiting:
                return {j.job_id: states.get(j.job_id, ("gone from the queue", ""))[0].lower()
                        for j in jobs if not j.paths.result_pickle.exists()}
            if now >= next_report and states:
                live = {k: v for k, v in states.items() if v[0] not in FINAL_STATES}
                if live:
                    log.info("still waiting on SLURM after %s: %s", duration_text(now - start), describe_waiting(live))
                next_report = now + self.report_every_s
            time.sleep(self.poll_s)

    def _static_problem(self, request: Request) -> str:
        """unmet() against the cluster's configuration, read once per sweep ('' = fits or unknown)."""
        if getattr(self, "_problem", None) is None:
            try:
                self._problem = unmet(request, read_cluster()) or ""
            except (OSError, subprocess.SubprocessError):
                self._problem = ""
        return self._problem

    def _stop_if_never(self, states: dict[str, tuple[str, str]], request: Request, ids: list[str]) -> None:
        pending = {k: r for k, (s, r) in states.items() if s == "PENDING"}
        never = {k: r for k, r in pending.items() if r in NEVER_REASONS or "PerJob" in r}
        if not never and any(r in MAYBE_NEVER_REASONS for r in pending.values()) and self._static_problem(request):
            never = {k: r for k, r in pending.items() if r in MAYBE_NEVER_REASONS}
        if not never:
            return
        job, reason = sorted(never.items())[0]
        bases = sorted({i.split("_")[0] for i in ids})
        subprocess.run(["scancel", *bases], capture_output=True, timeout=60)
        detail = self._static_problem(request) or f"each job asks for {request.describe()}{self._offer(request)}"
        _fail(f"SLURM will never start job {job} (reason {reason}: "
              f"{NEVER_REASONS.get(reason, 'no node of the partition can meet the request')}): {detail}. "
              f"Cancelled the sweep's job(s) {', '.join(bases)}")

    # ---- a job without a result ----------------------------------------------------------------

    def _lost(self, job: Any, overrides: Any, how: str) -> Any:
        from hydra.core.utils import JobReturn, JobStatus

        log.error("job %s ended (%s) without a result; its run, if it had opened one, is in MLflow as "
                  "interrupted or stale. Log: %s", job.job_id, how or "unknown", job.paths.stderr)
        _LOST.append(job.job_id)
        ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
        ret.return_value = f"lost ({how})"
        return ret


def preflight_launcher(launcher: Any) -> None:
    """:func:`preflight` of the request a ``trainbench_slurm`` launcher config makes (``hydra.launcher``), at
    the start of a sweep; nothing for another launcher or with ``preflight: false``."""
    if launcher.get("_target_") != PLUGIN_TARGET or not launcher.get("preflight", True):
        return
    from omegaconf import OmegaConf

    keys = ("partition", "nodes", "tasks_per_node", "cpus_per_task", "cpus_per_gpu", "gpus_per_node",
            "gpus_per_task", "gres", "mem_gb", "mem_per_cpu", "mem_per_gpu", "constraint", "timeout_min",
            "additional_parameters")
    params = {k: OmegaConf.to_container(launcher[k], resolve=True) if OmegaConf.is_config(launcher[k])
              else launcher[k] for k in keys if k in launcher}
    preflight(Request.from_params(params))


def lost_jobs() -> list[str]:
    """The SLURM jobs of this process's sweep that ended without a result."""
    return list(_LOST)


PLUGIN_TARGET = "hydra_plugins.trainbench_launcher.SlurmLauncher"  # Hydra instantiates launchers from there only

if SlurmQueueConf is not None:
    @dataclass
    class TrainbenchSlurmConf(SlurmQueueConf):  # type: ignore[misc,valid-type]
        _target_: str = PLUGIN_TARGET
        # compare each job's request with the partition's nodes before submitting (scontrol)
        preflight: bool = True
        # how often a sweep waiting on a busy cluster says so
        report_every_s: float = 300.0
        # how often the queue is read (squeue)
        poll_s: float = 5.0


def register_launcher_configs() -> None:
    """``hydra/launcher=trainbench_slurm`` (called by hydra_plugins.trainbench_launcher when Hydra scans it)."""
    if SlurmQueueConf is None:
        return
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="hydra/launcher", name="trainbench_slurm", node=TrainbenchSlurmConf,
                                 provider="trainbench")

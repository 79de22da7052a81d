"""SLURM sweeps that never wait forever on a request no node can meet.

``hydra/launcher=slurm_gpu`` uses :class:`SlurmLauncher`, a thin subclass of hydra_submitit_launcher's
SLURM launcher. It submits exactly what the plugin submits (one job array through submitit) and adds:

* **a check before submitting**: the request of each job (CPUs, memory and GPUs per node, nodes, time
  limit, partition, features) is compared with what the partition's nodes offer (``scontrol show
  partition/node``). A request that no node can ever meet ends the sweep with one ``error:`` line that
  names the request and what the partition offers, exit 2, and nothing submitted. The check runs in
  :class:`SlurmJobsCallback`'s ``on_multirun_start`` (conf/config.yaml lists it first, so it runs before
  the tracking store is opened), and in the launcher when that callback is not configured;
* **a watch while waiting**, with ``squeue`` (it works without SLURM accounting, unlike submitit's
  ``sacct``, whose warnings it never triggers). Jobs that SLURM will never start (reason
  ``PartitionConfig``, ``PartitionTimeLimit``, ``BadConstraints``, a ``...PerJob...`` limit, or
  ``ReqNodeNotAvail``/``PartitionNodeLimit`` where no node of the partition fits) are cancelled and the
  sweep ends the same way. Waiting on a busy cluster (``Priority``, ``Resources``, ...) is normal: the
  sweep says so every ``report_every_s`` seconds;
* a job that ends without a result (cancelled, killed, node lost) no longer stops the wait for the
  others: it is reported, and the sweep exits 1 after its summary (:class:`SlurmJobsCallback`).

Settings (``hydra.launcher.*``, on top of the plugin's): ``preflight`` (true: the check before
submitting), ``report_every_s`` (300) and ``poll_s`` (5). docs/scaling-out.md shows what each failure
looks like.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Job states after which a job never runs again (squeue %T).
FINAL_STATES = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}
# Pending reasons that no amount of waiting changes (only an administrator or a new request would).
NEVER_REASONS = {
    "PartitionConfig": "the partition's configuration cannot satisfy the request",
    "PartitionTimeLimit": "the time limit is longer than the partition allows",
    "BadConstraints": "no node has the requested features or resources",
    "InvalidQOS": "the QOS does not exist or is not allowed",
    "InvalidAccount": "the account does not exist or is not allowed",
    "DependencyNeverSatisfied": "a dependency can never be satisfied",
}
# Pending reasons that mean "never" only when no node of the partition can meet the request;
# otherwise nodes are down, drained or reserved, and that passes.
MAYBE_NEVER_REASONS = {"ReqNodeNotAvail", "PartitionNodeLimit"}
WAIT_REASONS = {
    "Priority": "other jobs come first",
    "Resources": "waiting for free CPUs, memory or GPUs",
    "JobArrayTaskLimit": "hydra.launcher.array_parallelism",
    "None": "about to be scheduled",
    "BeginTime": "not before its begin time",
    "Dependency": "waiting for a dependency",
    "ReqNodeNotAvail": "nodes down, drained or reserved",
    "PartitionNodeLimit": "too few nodes up in the partition",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "JobHeldUser": "held (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
}


class NeverRuns(Exception):
    """A request SLURM can never start; the message names it and what the cluster offers."""


# --------------------------------------------------------------------------------------------------
# What the cluster offers: `scontrol show partition/node -o`
# --------------------------------------------------------------------------------------------------

_KV = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


def parse_scontrol(text: str) -> list[dict[str, str]]:
    """One dict per line of ``scontrol show ... -o`` (values may hold spaces and '=')."""
    return [dict(_KV.findall(line.strip())) for line in text.splitlines() if "=" in line]


def parse_time_min(value: str | None) -> float | None:
    """SLURM's ``[days-]hours:minutes:seconds`` (or ``minutes``, ``UNLIMITED``) in minutes; None = no limit."""
    if value is None or value.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A", ""):
        return None
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
    parts = [int(p) for p in value.split(":")]
    if len(parts) == 1:  # minutes
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:  # minutes:seconds
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts[-3:]
    return days * 1440 + h * 60 + m + s / 60


def parse_mem_mb(value: Any) -> float | None:
    """A SLURM memory size (``4096``, ``4G``, ``4GB``, ``512M``, ``1T``; the default unit is MB) in MB."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*", str(value).upper())
    if not m:
        return None
    return float(m.group(1)) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]


def parse_gres_gpus(gres: str | None) -> dict[str, int]:
    """GPUs in a GRES string, by type ('' = untyped): ``gpu:a100:4(S:0-1),gpu:2`` -> {'a100': 4, '': 2}."""
    out: dict[str, int] = {}
    if not gres or gres in ("(null)", "N/A"):
        return out
    for item in re.split(r",(?![^(]*\))", gres):
        item = re.sub(r"\(.*?\)", "", item.strip())
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        count = 1
        if parts[-1].isdigit():
            count = int(parts.pop())
        kind = parts[1] if len(parts) > 1 else ""
        out[kind] = out.get(kind, 0) + count
    return out


@dataclass
class Node:
    name: str
    cpus: int
    mem_mb: float
    gpus: dict[str, int] = field(default_factory=dict)
    features: set[str] = field(default_factory=set)
    state: str = ""

    @classmethod
    def from_scontrol(cls, d: dict[str, str]) -> Node:
        cpus = int(d.get("CPUEfctv") or d.get("CPUTot") or 0)
        mem = float(d.get("RealMemory") or 0) - float(d.get("MemSpecLimit") or 0)
        feats = {f for f in (d.get("AvailableFeatures") or "").split(",") if f and f != "(null)"}
        return cls(d.get("NodeName", "?"), cpus, mem, parse_gres_gpus(d.get("Gres")), feats, d.get("State", ""))


@dataclass
class Partition:
    name: str
    nodes: list[Node]
    default: bool = False
    max_time_min: float | None = None
    max_nodes: int | None = None
    max_cpus_per_node: int | None = None
    max_mem_per_node_mb: float | None = None
    state: str = "UP"

    def cpus(self, node: Node) -> int:
        return min(node.cpus, self.max_cpus_per_node or node.cpus)

    def mem_mb(self, node: Node) -> float:
        return min(node.mem_mb, self.max_mem_per_node_mb or node.mem_mb)

    def per_node(self) -> str:
        """``1 node with at most 2 CPUs, 23.5 GB of memory and no GPU``."""
        if not self.nodes:
            return "no node"
        cpus = max(self.cpus(n) for n in self.nodes)
        mem = max(self.mem_mb(n) for n in self.nodes)
        gpus = max(sum(n.gpus.values()) for n in self.nodes)
        kinds = sorted({k for n in self.nodes for k in n.gpus if k})
        gpu = "no GPU" if not gpus else f"{gpus} GPU{'s' if gpus != 1 else ''}" + (f" ({', '.join(kinds)})" if kinds else "")
        n = len(self.nodes)
        return f"{n} node{'s' if n != 1 else ''} with at most {cpus} CPUs, {_gb(mem)} of memory and {gpu}"

    def offer(self) -> str:
        """What the partition offers, in words."""
        limit = "no time limit" if self.max_time_min is None else f"a time limit of {_minutes(self.max_time_min)}"
        return f"partition {self.name!r} has {self.per_node()}, and {limit}"


def _unlimited_int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and int(value) > 0 else None


def read_cluster(timeout_s: float = 30.0) -> dict[str, Partition]:
    """The partitions and their nodes, from ``scontrol`` (raises OSError/CalledProcessError when it fails)."""
    def scontrol(what: str) -> str:
        return subprocess.run(["scontrol", "show", what, "-o"], capture_output=True, text=True, check=True,
                              timeout=timeout_s).stdout

    nodes = {d.get("NodeName", ""): (Node.from_scontrol(d), (d.get("Partitions") or "").split(","))
             for d in parse_scontrol(scontrol("node"))}
    parts: dict[str, Partition] = {}
    for d in parse_scontrol(scontrol("partition")):
        name = d.get("PartitionName", "")
        parts[name] = Partition(
            name, [n for n, p in nodes.values() if name in p], default=d.get("Default") == "YES",
            max_time_min=parse_time_min(d.get("MaxTime")), max_nodes=_unlimited_int(d.get("MaxNodes")),
            max_cpus_per_node=_unlimited_int(d.get("MaxCPUsPerNode")),
            max_mem_per_node_mb=_unlimited_int(d.get("MaxMemPerNode")), state=d.get("State", "UP"))
    return parts


# --------------------------------------------------------------------------------------------------
# What each job asks for: the launcher's settings, as sbatch will see them
# --------------------------------------------------------------------------------------------------

@dataclass
class Request:
    partition: str | None
    nodes: int
    cpus: int  # per node
    mem_mb: float | None  # per node; None: the cluster's default
    gpus: int  # per node
    gpu_type: str  # '' = any
    time_min: float | None
    features: set[str]
    sources: dict[str, str]  # which settings say so, for the message

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Request:
        extra = {str(k).replace("-", "_"): v for k, v in (params.get("additional_parameters") or {}).items()}
        p = {**params, **{k: v for k, v in extra.items() if v is not None}}
        src: dict[str, str] = {}

        def setting(*keys: str) -> str:
            return ", ".join(f"hydra.launcher.{k}={p[k]}" for k in keys if p.get(k) is not None
                             and not (k == "tasks_per_node" and str(p[k]) == "1"))

        nodes = int(p.get("nodes") or 1)
        tasks = int(p.get("tasks_per_node") or p.get("ntasks_per_node") or 1)
        gpu_type, gpus = "", 0
        if p.get("gpus_per_node"):
            gpus, src["gpus"] = int(str(p["gpus_per_node"]).split(":")[-1]), setting("gpus_per_node")
            if ":" in str(p["gpus_per_node"]):
                gpu_type = str(p["gpus_per_node"]).split(":")[0]
        elif p.get("gpus_per_task"):
            gpus, src["gpus"] = int(p["gpus_per_task"]) * tasks, setting("gpus_per_task", "tasks_per_node")
        elif p.get("gres"):
            found = parse_gres_gpus(str(p["gres"]))
            if found:
                gpu_type, gpus = next(iter(found.items()))
                src["gpus"] = setting("gres")
        if p.get("cpus_per_gpu") and p.get("gpus_per_task"):
            cpus = int(p["cpus_per_gpu"]) * gpus
            src["cpus"] = setting("cpus_per_gpu", "gpus_per_task", "tasks_per_node")
        else:
            cpus = int(p.get("cpus_per_task") or 1) * tasks
            src["cpus"] = setting("cpus_per_task", "tasks_per_node")
        mem = None
        if p.get("mem") is not None:
            mem, src["mem"] = parse_mem_mb(p["mem"]), setting("mem")
        elif p.get("mem_gb") is not None:
            mem, src["mem"] = float(p["mem_gb"]) * 1024, setting("mem_gb")  # submitit writes --mem=<n>GB
        elif p.get("mem_per_cpu") is not None and parse_mem_mb(p["mem_per_cpu"]) is not None:
            mem, src["mem"] = parse_mem_mb(p["mem_per_cpu"]) * cpus, setting("mem_per_cpu", "cpus_per_task")
        elif p.get("mem_per_gpu") is not None and parse_mem_mb(p["mem_per_gpu"]) is not None and gpus:
            mem, src["mem"] = parse_mem_mb(p["mem_per_gpu"]) * gpus, setting("mem_per_gpu", "gpus_per_node")
        time_min = p.get("time", p.get("timeout_min"))
        src["time"] = setting("time" if "time" in p else "timeout_min")
        src["nodes"] = setting("nodes")
        features: set[str] = set()
        constraint = str(p.get("constraint") or "")
        if constraint and re.fullmatch(r"[\w.-]+([&,][\w.-]+)*", constraint):  # a plain AND of features
            features = set(re.split(r"[&,]", constraint))
            src["features"] = setting("constraint")
        return cls(p.get("partition"), nodes, cpus, mem, gpus, gpu_type,
                   float(time_min) if time_min is not None else None, features, src)

    def describe(self) -> str:
        what = [f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}"]
        if self.mem_mb is not None:
            what.append(f"{_gb(self.mem_mb)} of memory")
        if self.gpus:
            what.append(f"{self.gpus} {self.gpu_type + ' ' if self.gpu_type else ''}GPU{'s' if self.gpus != 1 else ''}")
        if self.features:
            what.append(f"features {'&'.join(sorted(self.features))}")
        per = "on one node" if self.nodes == 1 else f"on each of {self.nodes} nodes"
        time = f" for {_minutes(self.time_min)}" if self.time_min is not None else ""
        return f"{_join(what)} {per}{time}"

    def node_problems(self, part: Partition, node: Node) -> list[str]:
        """The dimensions in which ``node`` of ``part`` cannot hold one job ([] = it fits)."""
        bad = []
        if self.cpus > part.cpus(node):
            bad.append("cpus")
        if self.mem_mb is not None and self.mem_mb > part.mem_mb(node):
            bad.append("mem")
        if self.gpus:
            have = node.gpus.get(self.gpu_type, 0) if self.gpu_type else sum(node.gpus.values())
            if self.gpus > have:
                bad.append("gpus")
        if self.features - node.features:
            bad.append("features")
        return bad


def _gb(mb: float) -> str:
    return f"{mb / 1024:.0f} GB" if mb % 1024 == 0 else f"{mb / 1024:.1f} GB"


def _minutes(m: float) -> str:
    m = round(m)
    return f"{m} min" if m < 120 else f"{m // 60} h {m % 60:02d} min"


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else _minutes(s / 60)


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _unmet_in(req: Request, part: Partition) -> str | None:
    """Why ``part`` can never start a job with this request (None: enough of its nodes can)."""
    problems: list[str] = []
    settings: list[str] = []
    if part.max_time_min is not None and req.time_min is not None and req.time_min > part.max_time_min:
        problems.append(f"its time limit is {_minutes(part.max_time_min)}")
        settings.append(req.sources.get("time", ""))
    if part.max_nodes is not None and req.nodes > part.max_nodes:
        problems.append(f"a job may use at most {part.max_nodes} of its nodes")
        settings.append(req.sources.get("nodes", ""))
    fits = [n for n in part.nodes if not req.node_problems(part, n)]
    if len(fits) < req.nodes:
        if fits:
            problems.append(f"only {len(fits)} of its nodes can hold one")
            settings.append(req.sources.get("nodes", ""))
        elif part.nodes:
            problems.append(f"it has {part.per_node()}")
            dims = {d for n in part.nodes for d in req.node_problems(part, n)}
            settings += [req.sources.get(d, "") for d in ("cpus", "mem", "gpus", "features") if d in dims]
        else:
            problems.append("it has no node")
    if not problems:
        return None
    named = ", ".join(s for s in dict.fromkeys(settings) if s)
    return f"partition {part.name!r} cannot hold one ({named}): {_join(problems)}"


def unmet(req: Request, parts: dict[str, Partition]) -> str | None:
    """Why SLURM can never start a job with this request, or None when it can (or we cannot tell)."""
    if req.partition is None:
        candidates = [p for p in parts.values() if p.default][:1]
        if not candidates:
            return None  # no default partition: sbatch refuses it with its own message
    else:
        names = [n for n in str(req.partition).split(",") if n]
        candidates = [parts[n] for n in names if n in parts]
        if not candidates:
            have = _join([repr(n) for n in sorted(parts)]) if parts else "no partition"
            return (f"each job asks for partition {req.partition!r} (hydra.launcher.partition), which does not "
                    f"exist; this cluster has {have}")
    problems = [_unmet_in(req, p) for p in candidates]  # SLURM starts a job in the first one that can
    if any(x is None for x in problems):
        return None
    others = [p.name for p in parts.values() if p not in candidates and _unmet_in(req, p) is None]
    hint = f" It would fit partition{'s' if len(others) > 1 else ''} {_join([repr(o) for o in others])}." if others else ""
    return (f"each job asks for {req.describe()}, but {'; '.join(x for x in problems if x)}.{hint} Lower the "
            "request or choose another partition (hydra.launcher.partition; `sinfo -s` lists them)")


# --------------------------------------------------------------------------------------------------
# The queue: squeue works without accounting, unlike sacct
# --------------------------------------------------------------------------------------------------

def queue_states(job_ids: list[str], timeout_s: float = 60.0) -> dict[str, tuple[str, str]]:
    """{job id (``123`` or ``123_4``): (state, reason)} for the jobs the controller still knows."""
    bases = sorted({j.split("_")[0] for j in job_ids})
    if not bases:
        return {}
    out = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--jobs", ",".join(bases),
                          "--format=%i|%T|%r"], capture_output=True, text=True, check=True, timeout=timeout_s)
    states: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            states[parts[0]] = (parts[1].upper(), parts[2].split(",")[0].strip())
    return states


def describe_waiting(states: dict[str, tuple[str, str]]) -> str:
    """``3 job(s): 1 running, 2 pending (2 Resources: waiting for free CPUs, memory or GPUs)``."""
    by_state = Counter(s for s, _ in states.values())
    reasons = Counter(r for s, r in states.values() if s == "PENDING")
    pending = ", ".join(f"{n} {r}: {WAIT_REASONS.get(r, 'see squeue')}" for r, n in reasons.most_common())
    parts = [f"{by_state.pop('RUNNING', 0)} running"]
    if by_state.get("PENDING"):
        parts.append(f"{by_state.pop('PENDING')} pending ({pending})")
    parts += [f"{n} {s.lower()}" for s, n in sorted(by_state.items())]
    return f"{len(states)} job(s): " + ", ".join(parts)


# --------------------------------------------------------------------------------------------------
# The launcher and its Hydra config
# --------------------------------------------------------------------------------------------------

_LOST: list[str] = []  # jobs of this process's sweep that ended without a result (SlurmJobsCallback)
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


def _fail(message: str, code: int = 2) -> None:
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
        if request not in _CHECKED:  # SlurmJobsCallback.on_multirun_start checked it already
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
        return f"; partition {name!r} does not exist (this cluster has {_join(sorted(parts))})" if parts else ""

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
                    log.info("still waiting on SLURM after %s: %s", _duration(now - start), describe_waiting(live))
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


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover - hydra is a dependency
    _Callback = object  # type: ignore[assignment,misc]


class SlurmJobsCallback(_Callback):  # type: ignore[misc,valid-type]
    """The SLURM launcher's two ends of a sweep; does nothing with any other launcher.

    Listed first under hydra.callbacks: its on_multirun_start runs first (the request is checked against
    the partition before the tracking store is even opened), its on_multirun_end last (after the summary,
    it exits 1 if a SLURM job ended without a result).
    """

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        if launcher.get("_target_") != PLUGIN_TARGET or not launcher.get("preflight", True):
            return
        from omegaconf import OmegaConf

        keys = ("partition", "nodes", "tasks_per_node", "cpus_per_task", "cpus_per_gpu", "gpus_per_node",
                "gpus_per_task", "gres", "mem_gb", "mem_per_cpu", "mem_per_gpu", "constraint", "timeout_min",
                "additional_parameters")
        params = {k: OmegaConf.to_container(launcher[k], resolve=True) if OmegaConf.is_config(launcher[k])
                  else launcher[k] for k in keys if k in launcher}
        preflight(Request.from_params(params))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if _LOST:
            print(f"{len(_LOST)} SLURM job(s) ended without a result: {', '.join(_LOST)}", file=sys.stderr)
            sys.exit(1)


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

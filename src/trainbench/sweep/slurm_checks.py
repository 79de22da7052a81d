"""What a SLURM cluster offers, what each job asks for, whether SLURM can ever start it, what the queue says.

The judgement behind :mod:`trainbench.sweep.slurm`'s check before submitting and watch while waiting,
with no Hydra or submitit in it: :func:`read_cluster` reads the partitions and nodes (``scontrol show
partition/node -o``), :meth:`Request.from_params` turns the launcher's settings into what sbatch will ask
for, :func:`unmet` says why no node could ever hold such a job (naming the settings to change), and
:func:`queue_states` / :func:`describe_waiting` read the queue with ``squeue``, which works without SLURM
accounting (submitit's ``sacct`` does not).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

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
        limit = "no time limit" if self.max_time_min is None else f"a time limit of {minutes_text(self.max_time_min)}"
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
        time = f" for {minutes_text(self.time_min)}" if self.time_min is not None else ""
        return f"{join_words(what)} {per}{time}"

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


def minutes_text(m: float) -> str:
    m = round(m)
    return f"{m} min" if m < 120 else f"{m // 60} h {m % 60:02d} min"


def duration_text(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else minutes_text(s / 60)


def join_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _unmet_in(req: Request, part: Partition) -> str | None:
    """Why ``part`` can never start a job with this request (None: enough of its nodes can)."""
    problems: list[str] = []
    settings: list[str] = []
    if part.max_time_min is not None and req.time_min is not None and req.time_min > part.max_time_min:
        problems.append(f"its time limit is {minutes_text(part.max_time_min)}")
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
    return f"partition {part.name!r} cannot hold one ({named}): {join_words(problems)}"


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
            have = join_words([repr(n) for n in sorted(parts)]) if parts else "no partition"
            return (f"each job asks for partition {req.partition!r} (hydra.launcher.partition), which does not "
                    f"exist; this cluster has {have}")
    problems = [_unmet_in(req, p) for p in candidates]  # SLURM starts a job in the first one that can
    if any(x is None for x in problems):
        return None
    others = [p.name for p in parts.values() if p not in candidates and _unmet_in(req, p) is None]
    hint = f" It would fit partition{'s' if len(others) > 1 else ''} {join_words([repr(o) for o in others])}." if others else ""
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

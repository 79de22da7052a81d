"""The host memory a new allocation can take now: what the batch-size check (:mod:`trainbench.measure.fit`)
and the data readers (:mod:`trainbench.core.dbn_file`'s callers) bound themselves by."""

from __future__ import annotations

from pathlib import Path


def host_memory_available() -> int | None:
    """Bytes of host memory a new allocation can take now: the kernel's ``MemAvailable`` (psutil), lowered
    to what a cgroup limit (a container, a SLURM job) leaves; None when neither can be read."""
    avail = None
    try:
        import psutil

        avail = int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil, or it cannot read this platform
        avail = None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            avail = max(0, int(limit) - used) if avail is None else min(avail, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return avail

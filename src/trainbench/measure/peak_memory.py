"""Per-epoch peak memory, never mixed between kinds: allocator peaks on CUDA, peak RSS on CPU.

On CUDA: ``reset_peak_memory_stats`` before the epoch, ``max_memory_allocated/reserved`` after.
On CPU the figure is the process's peak resident set size (host memory), labelled ``host``. Linux lets
a process reset its own peak RSS (``/proc/self/clear_refs`` with ``5``), which makes it a per-epoch
peak; where that is not possible it is the process-lifetime peak and :attr:`MemoryProbe.per_epoch`
says so.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

from trainbench.core.vocab import PEAK_MEMORY, MemoryKind, Series

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def _read_hwm_mb() -> float | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class MemoryProbe:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = MemoryKind.VRAM if device.type == "cuda" else MemoryKind.HOST
        self.per_epoch = True
        if self.kind == MemoryKind.HOST:
            self.per_epoch = self._can_reset_hwm()

    @property
    def metric(self) -> str:
        """The per-epoch metric name of the run contract."""
        return PEAK_MEMORY[self.kind]

    @staticmethod
    def _can_reset_hwm() -> bool:
        try:
            _CLEAR_REFS.write_text("5")
            return _read_hwm_mb() is not None
        except OSError:
            return False

    def reset(self) -> None:
        if self.kind == MemoryKind.VRAM:
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.per_epoch:
            try:
                _CLEAR_REFS.write_text("5")
            except OSError:
                self.per_epoch = False

    def peak(self) -> dict[str, float]:
        """Peak since the last reset, in MB: the contract metric plus detail."""
        if self.kind == MemoryKind.VRAM:
            alloc = torch.cuda.max_memory_allocated(self.device) / 2**20
            reserved = torch.cuda.max_memory_reserved(self.device) / 2**20
            return {Series.PEAK_VRAM_MB: alloc, Series.PEAK_VRAM_RESERVED_MB: reserved}
        hwm = _read_hwm_mb() if self.per_epoch else None
        if hwm is None:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            hwm = rss / (2**20 if sys.platform == "darwin" else 1024.0)
        return {Series.PEAK_HOST_MB: hwm}

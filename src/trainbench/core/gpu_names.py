"""GPU identity, once: whether the name a device reports is the GPU a ``conf/hardware`` entry describes.

One strict rule, used by the run (MFU against the entry's peak, :func:`trainbench.measure.flops.peak_tflops`)
and by the analysis (which entry a run's ``device`` tag measured, :meth:`trainbench.analysis.projection.gpus.GpuSpec.matches`):
every token of the entry's ``gpu`` name (words split at spaces, hyphens, underscores, slashes and
parentheses; the vendor dropped) must appear in the device's name, and the device must name no other board
variant or memory size. "NVIDIA H200 NVL" is not the ``h200`` entry ("NVIDIA H200": NVL is another power
limit and other clocks), an "A100-SXM4-80GB" is not ``a100_40gb`` (31% less bandwidth), an "A100-PCIE-40GB"
is not the SXM4 entry. Of several entries that match, the one with the longest name is the most specific.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Tokens of a device name that name a board variant: a device naming one its entry does not is another GPU.
VARIANT_TOKENS = frozenset({"nvl", "pcie", "sxm", "sxm2", "sxm3", "sxm4", "sxm5", "laptop", "mobile", "max",
                            "q", "ti", "super", "hbm2", "hbm2e", "hbm3", "hbm3e", "nvlink", "mig"})
_SIZE = re.compile(r"\d+gb")


def device_tokens(name: str) -> list[str]:
    """Lower-case tokens of a GPU name, split at spaces, hyphens, underscores, slashes and parentheses,
    without the vendor."""
    return [t for t in re.split(r"[\s\-_/()]+", name.lower()) if t and t != "nvidia"]


def same_gpu(entry_gpu: str | None, device: str | None) -> bool:
    """Is ``device`` (the name a device reports, a run's ``device`` tag) the GPU named ``entry_gpu`` (a
    ``conf/hardware`` entry's ``gpu``)? The module's rule."""
    if not device or not entry_gpu:
        return False
    a, b = device_tokens(entry_gpu), device_tokens(device)
    if not a or not all(t in b for t in a):
        return False
    return not any(t not in a and (t in VARIANT_TOKENS or _SIZE.fullmatch(t)) for t in b)


def matching_entry(entries: Mapping[str, str | None], device: str | None) -> str | None:
    """The key of the entry (``{entry: gpu name}``) that ``device`` is, the most specific (longest ``gpu``
    name) when several are; None when none is."""
    hits = [k for k, gpu in entries.items() if same_gpu(gpu, device)]
    return max(hits, key=lambda k: len(str(entries[k]))) if hits else None

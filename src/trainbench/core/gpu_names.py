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


# --------------------------------------------------------------------------------------------------
# the same rule, read from a cloud catalogue's side (analysis/decision/offers.py)
# --------------------------------------------------------------------------------------------------

#: Board form factors as a cloud catalogue names them (SkyPilot's AcceleratorName, GpuInfo name, instance type):
#: SXM2 to SXM6 are one family there.
FORM_FACTORS = {"pcie": "pcie", "nvl": "nvl", "sxm": "sxm", "sxm2": "sxm", "sxm3": "sxm", "sxm4": "sxm",
                "sxm5": "sxm", "sxm6": "sxm"}
#: Words of a device name that name no GPU model: brands and memory kinds (a catalogue never repeats them).
_NOT_MODEL = frozenset({"tesla", "geforce", "hbm2", "hbm2e", "hbm3", "hbm3e"})


def size_gb(token: str) -> float | None:
    """``80gb`` -> 80.0; anything else None."""
    return float(token[:-2]) if _SIZE.fullmatch(token) else None


def catalogue_entries(entries: Mapping[str, str | None], names: list[str], memory_gb: float | None) -> list[str]:
    """The entries (``{entry: gpu name}``) a cloud offer may hold, from the names a catalogue gives it (its
    accelerator, the GpuInfo name, the instance type) and its memory per GPU (None: not told). The module's
    rule read from the catalogue's side: every model word of the entry is among the offer's words; the offer
    names no board variant the entry lacks (Ti, Max, MIG, ...); an entry naming a memory size needs the offer's
    memory within 10% of it, where the offer tells it; and the form factor: an offer naming NVL is only an entry
    naming NVL (another power limit, other clocks), an offer naming PCIe or SXM is an entry naming that form, or,
    where no entry of that GPU names it, an entry naming none. More than one left: the catalogue cannot tell them
    apart (the caller takes the slower and says so)."""
    words = {t for n in names if n for t in device_tokens(n)}
    forms = {FORM_FACTORS[t] for t in words if t in FORM_FACTORS}
    if memory_gb is None:
        sizes = [s for s in (size_gb(t) for t in words) if s]
        memory_gb = max(sizes) if sizes else None
    fits = []
    for key, gpu in entries.items():
        toks = device_tokens(gpu or "")
        model = [t for t in toks if t not in _NOT_MODEL and t not in FORM_FACTORS and not _SIZE.fullmatch(t)]
        if not model or not all(t in words for t in model):
            continue
        if any(t in VARIANT_TOKENS and t not in FORM_FACTORS and t not in _NOT_MODEL and t not in toks
               for t in words):
            continue
        size = next((s for s in (size_gb(t) for t in toks) if s), None)
        if size is not None and memory_gb is not None and abs(memory_gb - size) > 0.1 * size:
            continue
        fits.append((key, tuple(model), {FORM_FACTORS[t] for t in toks if t in FORM_FACTORS}))
    if len(forms) > 1:
        return []
    if forms:
        (form,) = forms
        named = [f for f in fits if form in f[2]]
        if named or form == "nvl":
            return [k for k, _, _ in named]
        # no entry of the GPU names the form: an entry naming none (not one naming another form)
        return [k for k, _, f in fits if not f]
    return [k for k, _, _ in fits]

"""The GPU catalogue: every ``conf/hardware/<entry>.yaml`` that can be projected to (it states peak TFLOP/s
per dtype and a memory bandwidth), and which entry a run's ``device`` tag names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainbench.core.gpu_names import matching_entry, same_gpu


@dataclass
class GpuSpec:
    """One ``conf/hardware`` entry that can be projected to (it has peaks and a bandwidth)."""

    name: str  # the entry: t4, a100_40gb, ...
    gpu: str  # the name the device reports: Tesla T4
    peak_tflops: dict[str, float]
    memory_gbps: float
    vram_mb: float | None = None
    power_w: float | None = None
    compute_capability: str | None = None
    source: str | None = None
    uncertain: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def matches(self, device: str | None) -> bool:
        """Is ``device`` (a run's `device` tag) this GPU? :func:`trainbench.core.gpu_names.same_gpu`'s strict
        rule, the one MFU uses: "NVIDIA H200 NVL" is not `h200` (NVL: another power limit and clocks), an
        "A100-SXM4-80GB" is not `a100_40gb` (31% less bandwidth), an "A100-PCIE-40GB" is not the SXM4 entry."""
        return same_gpu(self.gpu, device)


def default_conf_dir() -> Path:
    """The packaged catalogue (a team's own entries are in ``<project folder>/conf/hardware``)."""
    from trainbench import CONF_DIR

    return CONF_DIR / "hardware"


def load_gpus(conf_dir: str | Path | None = None) -> dict[str, GpuSpec]:
    """Every projectable entry of ``conf/hardware`` (those with ``peak_tflops`` and ``memory_gbps``): the team's
    own (``<project folder>/conf/hardware``, :mod:`trainbench.config.team`) and the packaged catalogue, or those
    of ``conf_dir``."""
    from trainbench.config.shared import load_hardware_profiles
    from trainbench.config.team import conf_dirs

    out = {}
    for name, hw in load_hardware_profiles(conf_dirs("hardware") if conf_dir is None else conf_dir).items():
        if hw.peak_tflops and hw.memory_gbps and hw.gpu:
            out[name] = spec_from_dict(name, hw)
    return out


def spec_from_dict(name: str, spec: Any) -> GpuSpec:
    get = spec.get if isinstance(spec, dict) else (lambda k, d=None: getattr(spec, k, d))
    return GpuSpec(name=name, gpu=str(get("gpu")), peak_tflops={k: float(v) for k, v in
                                                                 dict(get("peak_tflops") or {}).items()},
                   memory_gbps=float(get("memory_gbps")), vram_mb=get("vram_mb"), power_w=get("power_w"),
                   compute_capability=get("compute_capability"), source=get("source"),
                   uncertain=get("uncertain"))


def gpu_for_device(gpus: dict[str, GpuSpec], device: str | None) -> GpuSpec | None:
    key = matching_entry({k: g.gpu for k, g in gpus.items()}, device)
    return None if key is None else gpus[key]

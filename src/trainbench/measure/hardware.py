"""The device a run measures: resolution, description (NVML on GPUs), state checks, environment.json.

NVML comes from ``nvidia-ml-py`` (module ``pynvml``); everything here degrades to CPU facts when it or
a GPU is absent. :func:`environment` never reads environment variables: it cannot leak a secret.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from trainbench.core.errors import DeviceError
from trainbench.core.vocab import Series

log = logging.getLogger(__name__)

#: Packages whose versions every run records.
PACKAGES = ("torch", "numpy", "scipy", "pandas", "mlflow", "hydra-core", "omegaconf", "databento",
            "databento-dbn", "nvidia-ml-py", "psutil", "trainbench", "mamba-ssm", "triton")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is an error naming the fix."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("trainer.device=cuda but no CUDA device is visible to torch "
                          f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}). "
                          "Use trainer.device=cpu or trainer.device=auto, or install a CUDA build of torch.")
    return torch.device(str(name))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_label(device: torch.device) -> str:
    """The `device` tag: the GPU's marketing name, or ``cpu`` (the CPU's model is :func:`cpu_name`)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def hardware_label(device: torch.device | str) -> str:
    """What a benchmark figure was measured on: the GPU's marketing name, or ``cpu (<model>, N thread[s])``
    with N torch's current thread count (CPU figures depend on it)."""
    device = torch.device(device)
    if device.type == "cuda":
        return device_label(device)
    n = torch.get_num_threads()
    return f"cpu ({cpu_name()}, {n} thread{'s' if n > 1 else ''})"


class _Nvml:
    """A thin, failure-tolerant wrapper over pynvml for one device."""

    def __init__(self, index: int) -> None:
        self.ok = False
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.ok = True
        except Exception as e:  # no driver, no library, no permission: describe what torch knows
            log.debug("NVML unavailable: %s", e)

    def _get(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nv, fn)(self.h, *args)
        except Exception:
            return None

    def describe(self) -> dict[str, Any]:
        if not self.ok:
            return {}
        nv = self.nv
        mem = self._get("nvmlDeviceGetMemoryInfo")
        out = {
            "name": self._get("nvmlDeviceGetName"),
            "driver": _safe(nv.nvmlSystemGetDriverVersion),
            "memory_total_mb": mem.total / 2**20 if mem else None,
            "power_limit_w": _div(self._get("nvmlDeviceGetEnforcedPowerLimit"), 1000),
            "sm_clock_max_mhz": self._get("nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_SM),
            "mem_clock_max_mhz": self._get("nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_MEM),
        }
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in out.items()}

    def state(self) -> dict[str, Any]:
        if not self.ok:
            return {}
        nv = self.nv
        util = self._get("nvmlDeviceGetUtilizationRates")
        mem = self._get("nvmlDeviceGetMemoryInfo")
        procs = self._get("nvmlDeviceGetComputeRunningProcesses") or []
        me = os.getpid()
        other = sum((p.usedGpuMemory or 0) for p in procs if p.pid != me) / 2**20
        return {
            "utilization_pct": util.gpu if util else None,
            "memory_used_mb": mem.used / 2**20 if mem else None,
            "memory_other_processes_mb": other,
            "other_processes": sum(1 for p in procs if p.pid != me),
            "temperature_c": self._get("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": self._get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
            "power_w": _div(self._get("nvmlDeviceGetPowerUsage"), 1000),
            "power_limit_w": _div(self._get("nvmlDeviceGetEnforcedPowerLimit"), 1000),
        }

    def sample(self) -> dict[str, float]:
        """Cheap per-epoch sample (outside the timed region): temperature, SM clock, board power."""
        if not self.ok:
            return {}
        nv = self.nv
        out = {Series.GPU_TEMP_C: self._get("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
               Series.GPU_SM_CLOCK_MHZ: self._get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
               Series.GPU_POWER_W: _div(self._get("nvmlDeviceGetPowerUsage"), 1000),
               Series.GPU_OTHER_PROCESSES: self._other_processes()}  # measure/load.py flags such an epoch
        return {k: float(v) for k, v in out.items() if v is not None}


    def _other_processes(self) -> int | None:
        procs = self._get("nvmlDeviceGetComputeRunningProcesses")
        if procs is None:
            return None
        me = os.getpid()
        others = sum(1 for p in procs if p.pid != me)
        # In a container NVML reports host PIDs: then one of the processes is this one.
        return max(0, others - 1) if others == len(procs) else others


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _div(v: Any, d: float) -> float | None:
    return None if v is None else v / d


@dataclass
class DeviceInfo:
    device: torch.device
    label: str
    description: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _nvml: _Nvml | None = None

    def sample(self) -> dict[str, float]:
        return self._nvml.sample() if self._nvml else {}


def probe_device(device: torch.device, busy_util_pct: float = 10.0, busy_mem_mb: float = 256.0) -> DeviceInfo:
    """Describe the device and check, before measuring, that nothing else is using it."""
    info = DeviceInfo(device=device, label=device_label(device))
    if device.type != "cuda":
        info.description = {"name": cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}
        try:
            load1 = os.getloadavg()[0]
        except OSError:
            return info
        info.state = {"load_avg_1min": load1}
        cores = os.cpu_count() or 1
        if load1 >= 0.75 * cores:
            # torch's intra-op threads spin-wait on each other: on an oversubscribed CPU an epoch can
            # take 10x longer than on an idle one, so the figures would say more about the load.
            info.warnings.append(f"the CPU is busy before the run started (load average {load1:.1f} on {cores} "
                                 "cores): timings will be skewed by other work on this machine.")
        return info
    idx = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    info.description = {"name": props.name, "memory_total_mb": props.total_memory / 2**20,
                        "capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count}
    nvml = _Nvml(idx)
    info._nvml = nvml if nvml.ok else None
    info.description.update({k: v for k, v in nvml.describe().items() if v is not None})
    info.state = nvml.state()
    st = info.state
    if st.get("utilization_pct") is not None and st["utilization_pct"] >= busy_util_pct:
        info.warnings.append(f"GPU is {st['utilization_pct']}% busy before the run started: timings will be "
                             "skewed by other work on it.")
    if st.get("memory_other_processes_mb", 0) >= busy_mem_mb:
        info.warnings.append(f"other processes hold {st['memory_other_processes_mb']:.0f} MB on the GPU: timings "
                             "and memory headroom will be skewed.")
    return info


def package_versions() -> dict[str, str]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            continue
    return out


def environment(info: DeviceInfo) -> dict[str, Any]:
    """environment.json: versions and the device; no environment variables, hence no secrets."""
    cuda = None
    if torch.cuda.is_available():
        cuda = {"version": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "device_count": torch.cuda.device_count()}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "torch": torch.__version__,
        "cuda": cuda,
        "packages": package_versions(),
        "device": {"type": info.device.type, "label": info.label, **info.description},
        "device_state_before": info.state,
        "cpu": {"name": cpu_name(), "cores": os.cpu_count()},
    }

"""The GPU catalogue's calibration facts, as data (``calibration_data/catalogue.yaml``): which public table measured
which board and against which datasheet, which measured board each ``conf/hardware`` entry takes its curves from and
how they relate, and the defaults of an entry nothing calibrates.

Datasheet figures live once: a measured board that is a catalogue entry names it and its peaks and bandwidth are
read from that ``conf/hardware`` YAML (the packaged one: the fit does not move with a team's own entries); only
boards that are not entries (the P100, the B200) state their figures in the catalogue file. An entry the file does
not list projects with the uncalibrated defaults: adding a GPU with a datasheet and no per-kernel data is its
``conf/hardware`` YAML alone."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import cast

import yaml

from trainbench.analysis.projection.artifacts import (
    CatalogueBoard,
    CatalogueCalibration,
    CatalogueFile,
    MeasuredDevice,
    TensorCalibration,
    Uncalibrated,
)
from trainbench.analysis.projection.calibration import DATA_DIR
from trainbench.analysis.projection.gpus import GpuSpec, default_conf_dir, load_gpus

CATALOGUE_FILE = DATA_DIR / "catalogue.yaml"


@functools.lru_cache(maxsize=4)
def _load(path: str) -> CatalogueFile:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not {"measured", "tensor_measured", "entries", "uncalibrated"} <= set(data):
        raise ValueError(f"{path}: not the calibration catalogue (measured, tensor_measured, entries, uncalibrated)")
    return cast(CatalogueFile, data)


def load(path: str | Path = CATALOGUE_FILE) -> CatalogueFile:
    """The catalogue file's contents (a copy: callers may change it)."""
    return copy.deepcopy(_load(str(path)))


def _packaged() -> dict[str, GpuSpec]:
    return load_gpus(default_conf_dir())


def _bandwidth(v: float) -> float | int:
    return int(v) if float(v).is_integer() else float(v)


def _board(name: str, d: CatalogueBoard, dtypes: list[str], specs: dict[str, GpuSpec]) -> MeasuredDevice:
    """A measured board's datasheet figures: its conf/hardware entry's peaks of ``dtypes`` and bandwidth, or the
    figures the catalogue file states for a board that is not an entry."""
    out = cast(MeasuredDevice, {k: v for k, v in d.items() if k not in ("entry", "dtypes")})
    if "entry" in d:
        spec = specs.get(d["entry"])
        if spec is None:
            raise ValueError(f"{CATALOGUE_FILE.name}: {name} names conf/hardware entry {d['entry']!r}, which does "
                             "not exist")
        out["peak_tflops"] = {k: float(spec.peak_tflops[k]) for k in dtypes}
        out["memory_gbps"] = _bandwidth(spec.memory_gbps)
    else:
        out["peak_tflops"] = {k: float(v) for k, v in d["peak_tflops"].items()}
        out["memory_gbps"] = _bandwidth(d["memory_gbps"])
    return out


def measured_devices() -> dict[str, MeasuredDevice]:
    """The boards of the fp32 kernel table: {device: {peak_tflops: {fp32}, memory_gbps, datasheet, mem_from?}}."""
    specs = _packaged()
    return {g: _board(g, d, ["fp32"], specs) for g, d in load()["measured"].items()}


def tensor_measured_devices() -> dict[str, MeasuredDevice]:
    """The boards of XLA's tensor-core table: {device: {peak_tflops: {dtype}, memory_gbps, datasheet, ...}}."""
    specs = _packaged()
    return {g: _board(g, d, list(d.get("dtypes") or []), specs) for g, d in load()["tensor_measured"].items()}


def tensor_default() -> str:
    """The measured board whose tensor-core curves an entry without a better calibration takes."""
    return str(load()["tensor_default"])


def uncalibrated() -> Uncalibrated:
    """The curves and widening of an entry nothing calibrates."""
    return load()["uncalibrated"]


def entries() -> dict[str, CatalogueCalibration]:
    """conf/hardware entry -> {gpu, relation, widen, note?, tensor: {gpu, relation, note?}}: the measured board whose
    curves it takes before the fit looks for a better tensor-core one (:func:`fitting.resolve_tensor`)."""
    default = tensor_default()
    out: dict[str, CatalogueCalibration] = {}
    for name, e in load()["entries"].items():
        t = dict(e.get("tensor") or {})
        if "arch" in t or t.get("relation", "other generation") == "other generation":
            arch = t.get("arch", name)
            tensor: TensorCalibration = {"gpu": default, "relation": "other generation",
                      "note": f"no public {arch} tensor-core per-kernel data: the H100's curves at this GPU's peak "
                              "and balance"}
        else:
            tensor = {"gpu": t.get("gpu", default), "relation": t["relation"]}
        out[name] = {"gpu": e["gpu"], "relation": e["relation"], "widen": [float(w) for w in e.get("widen", [1, 1])],
                     "tensor": tensor, **({"note": e["note"]} if e.get("note") else {})}
    return out

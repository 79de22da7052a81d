"""A GPU session's figures (scripts/gpu_check.py's ``gpu-check.json``) taken into the calibration: its tensor-core
GEMMs as a table of their own, its projected-and-measured epochs as end-to-end checks. The whole report is checked
before any file is written. Beside the projection package, not in it: it reads the epochs' profiles as the analysis
reads a run's (analysis/runs.py), which itself reads the projection."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from trainbench.analysis.projection import calibration as cal
from trainbench.analysis.projection.extract import write_table
from trainbench.analysis.runs import profile_totals, workload_profile_from_json


def add_gpu_report(path: Path, data_dir: Path = cal.DATA_DIR) -> list[Path]:
    """Take a GPU session's figures (scripts/gpu_check.py's gpu-check.json) into the calibration:

    - its ``tensor_gemms`` stage as ``tensor_gemms_<entry>.csv.gz`` (fitted like XLA's table);
    - its ``projection`` stage's rows (an epoch projected and measured at fp32 and at a tensor-core precision,
      with the profile) as ``checks/gpu_<entry>.csv`` and their profiles: end-to-end checks, never fitted.

    One set per catalogue entry (a newer session of the same board replaces it), the source in each header.
    Returns the files written."""
    from trainbench.analysis.projection.gpus import gpu_for_device, load_gpus

    try:
        if not Path(path).is_file():  # a folder, a pipe or a device would be read forever or not at all
            raise OSError("not a regular file")
        if Path(path).stat().st_size > _REPORT_MAX_BYTES:
            raise ValueError(f"over {_REPORT_MAX_BYTES // 2**20} MB, far more than a session writes")
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as e:
        what = "nested too deep" if isinstance(e, RecursionError) else e
        raise ValueError(f"{path}: not a readable gpu-check JSON ({what})") from None
    stages = report.get("stages") if isinstance(report, dict) else None
    stages = stages if isinstance(stages, dict) else {}
    stage = stages.get("tensor_gemms")
    projection = stages.get("projection")
    listed = projection.get("rows") if isinstance(projection, dict) else None
    epochs = [_epoch_row(path, i, r) for i, r in enumerate(listed if isinstance(listed, list) else [])
              if isinstance(r, dict) and "error" not in r and isinstance(r.get("profile"), dict)]
    has_gemms = isinstance(stage, dict) and isinstance(stage.get("rows"), list) and stage.get("device")
    if not has_gemms and not epochs:
        raise ValueError(f"{path}: no tensor_gemms stage with rows and no projection rows with a profile (run "
                         "scripts/gpu_check.py, or the GPU kit scripts/gpu_run.sh, on a GPU with this version)")
    device = stage["device"] if has_gemms else report.get("device")
    if not isinstance(device, str) or not device.strip():
        raise ValueError(f"{path}: the device is {_shown(device)}, not a GPU name: give the report "
                         "scripts/gpu_check.py wrote")
    spec = gpu_for_device(load_gpus(), device)
    if spec is None:
        raise ValueError(f"{path}: {device!r} is not a conf/hardware entry; add one and rerun")
    rows = [g for i, r in enumerate(stage["rows"]) if (g := _gemm_row(path, i, r, device)) is not None] \
        if has_gemms else []
    if has_gemms and not rows and not epochs:
        raise ValueError(f"{path}: the tensor_gemms stage has no timed rows")
    written = []  # the whole report is valid: only now is anything written
    if rows:
        source = {"what": "latency (ms) of single GEMMs timed by scripts/gpu_check.py's tensor_gemms stage",
                  "device": device, "capability": stage.get("capability"), "date": stage.get("date"),
                  "torch": stage.get("torch"), "cuda": stage.get("cuda"), "method": stage.get("method"),
                  "report": Path(path).name, "host": report.get("host")}
        out = Path(data_dir) / f"tensor_gemms_{spec.name}.csv.gz"
        write_table(rows, out, source)
        written.append(out)
    if epochs:
        checks = Path(data_dir) / "checks"
        checks.mkdir(exist_ok=True)
        lines = [f"# Epochs measured and projected by scripts/gpu_check.py on {device} (report {Path(path).name}, "
                 f"host {report.get('host')}, torch {report.get('torch')}, CUDA {report.get('cuda')}): "
                 "end-to-end checks, never fitted; step_ms is the measured epoch (training + validation)",
                 "check,profile,gpu,device,precision,batch,items_per_s,step_ms,commit,container"]
        for r in epochs:
            name = f"gpu_{spec.name}_{r['model']}_{r['precision']}.json"
            (checks / name).write_text(json.dumps(r["profile"], indent=1, sort_keys=True))
            written.append(checks / name)
            lines.append(f"{r['model']},{name},{spec.name},{device},{r['precision']},,,{float(r['measured_ms']):.4g},,"
                         f"torch {report.get('torch')}")
        out = checks / f"gpu_{spec.name}.csv"
        out.write_text("\n".join(lines) + "\n")
        written.append(out)
    return written


#: What a report's figures may be: a single GEMM's time (ms), its work (FLOPs, bytes), an epoch (ms), and the
#: fastest any one GPU computes (FLOP/s, above every catalogued board's dense peak): a figure outside is not
#: a measurement, and the whole report is refused.
_MS_RANGE, _EPOCH_MS_MAX, _WORK_MAX, _FLOPS_PER_S_MAX = (1e-4, 6e4), 1e9, 1e18, 1e16
#: The largest gpu-check.json read (a session's is well under 1 MB).
_REPORT_MAX_BYTES = 64 * 2**20
#: A model or precision name, used in a file name under checks/.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _shown(value: object) -> str:
    return repr(value)[:60]


def _figure(path: Path, where: str, key: str, value: object, low: float, high: float) -> float:
    """``value`` as a float within (``low``, ``high``], or ValueError naming the row and the key."""
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer of 400 digits
        number = math.inf
    if not math.isfinite(number) or not low < number <= high:
        raise ValueError(f"{path}: {where}: {key}={_shown(value)} is not a measured figure (a finite number in "
                         f"({low:g}, {high:g}]): give the report scripts/gpu_check.py wrote, unedited")
    return number


def _gemm_row(path: Path, i: int, r: object, device: str) -> dict | None:
    """Row ``i`` of a tensor_gemms stage as a table row; None for a row that was not timed (an ``error``, another
    op or dtype); ValueError for a timed row whose figures are not measurements."""
    where = f"tensor_gemms row {i}"
    if not isinstance(r, dict):
        raise ValueError(f"{path}: {where} is {_shown(r)}, not an object: give the report scripts/gpu_check.py wrote")
    if "error" in r or r.get("op") != "gemm" or r.get("dtype") not in cal.TENSOR_DTYPES:
        return None
    flops = _figure(path, where, "flops", r.get("flops"), 0, _WORK_MAX)
    nbytes = _figure(path, where, "bytes", r.get("bytes"), 0, _WORK_MAX)
    ms = _figure(path, where, "ms", r.get("ms"), *_MS_RANGE)
    if flops / (ms / 1e3) > _FLOPS_PER_S_MAX:
        raise ValueError(f"{path}: {where}: {flops:g} FLOPs in {ms:g} ms is {flops / ms / 1e9:,.0f} TFLOP/s, faster "
                         "than any GPU: give the report scripts/gpu_check.py wrote, unedited")
    if not isinstance(r.get("shape"), str):
        raise ValueError(f"{path}: {where}: shape={_shown(r.get('shape'))} is not a shape name")
    return {"gpu": device, "op": "gemm", "dtype": r["dtype"], "shape": r["shape"], "flops": flops, "bytes": nbytes,
            "ms": ms}


def _epoch_row(path: Path, i: int, r: dict) -> dict:
    """Row ``i`` of a projection stage (one with a profile) checked: its model and precision plain names (they name
    files), its measured epoch a measured figure; ValueError otherwise."""
    where = f"projection row {i}"
    for key in ("model", "precision"):
        if not isinstance(r.get(key), str) or not _NAME.fullmatch(r[key]):
            raise ValueError(f"{path}: {where}: {key}={_shown(r.get(key))} is not a plain name (letters, digits, "
                             "'_', '.', '-'): give the report scripts/gpu_check.py wrote, unedited")
    try:
        profile = workload_profile_from_json(json.dumps(r["profile"]))
        if not profile_totals(profile)["flops"] > 0:
            raise ValueError("it describes no work (0 FLOPs)")
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(f"{path}: {where}: its profile is not a workload profile ({str(e)[:200]}): give the report "
                         "scripts/gpu_check.py wrote, unedited") from None
    return {**r, "profile": profile,
            "measured_ms": _figure(path, where, "measured_ms", r.get("measured_ms"), 0, _EPOCH_MS_MAX)}

"""Run the benchmark suite: ``python benchmarks/run_all.py [--quick] [--only NAME ...]``.

Discovers ``benchmarks/bench_*.py``, runs each one's ``run(quick)``, prints every figure and writes
``benchmarks/results/<date>-<host>.json`` (``<date>-gpu-<host>.json`` on a GPU: those are kept in git, the
CPU ones are git-ignored). Conventions every module keeps: see ``benchmarks/common.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import socket
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The suite's wall-time targets on a 2-core CPU machine (each module sizes or skips what a CPU is too slow for).
TARGET_S = 600
QUICK_TARGET_S = 120
sys.path.insert(0, str(HERE))


def cpu_seconds() -> float:
    """CPU seconds used so far by this process (all its threads) and its finished children (bench_compile's
    subprocesses): on a shared machine the wall time also counts everyone else's load, this does not."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run of the suite)")
    ap.add_argument("--only", nargs="*", default=None, help="bench module names, e.g. harness ssd")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/<date>-<host>.json)")
    args = ap.parse_args(argv)

    import torch

    names = sorted(p.stem[len("bench_"):] for p in HERE.glob("bench_*.py"))
    if args.only:
        names = [n for n in names if n in args.only]
    from trainbench.measure.hardware import cpu_name, device_label

    # the suite's machine: the GPU's name, or the CPU's model (each figure names its threads itself)
    device = device_label(torch.device("cuda", 0)) if torch.cuda.is_available() else f"cpu ({cpu_name()})"
    print(f"trainbench benchmark suite on {device}, torch {torch.__version__}, {len(names)} modules"
          f"{' (quick)' if args.quick else ''}\n")
    suite_t0, suite_c0 = time.perf_counter(), cpu_seconds()
    results, failures, timings, cpu = [], [], {}, {}
    for name in names:
        t0, c0 = time.perf_counter(), cpu_seconds()
        try:
            mod = importlib.import_module(f"bench_{name}")
            rows = mod.run(args.quick)
        except Exception as e:  # a broken benchmark is reported, the rest still run
            traceback.print_exc()
            failures.append({"bench": name, "error": repr(e)})
            timings[name], cpu[name] = round(time.perf_counter() - t0, 1), round(cpu_seconds() - c0, 1)
            print(f"  -- {name}: FAILED after {timings[name]:.1f}s ({cpu[name]:.1f} CPU s)\n")
            continue
        for r in rows:
            results.append(r.as_dict())
            tgt = f"  (target {r.target})" if r.target else ""
            skipped = r.details.get("skipped") if r.value != r.value else None  # NaN: not measured
            value = f"{'skipped':>14s} {'':10s}  {skipped}" if skipped else f"{r.value:14.4g} {r.unit:10s}{tgt}"
            print(f"  {r.name:48s} {value}  [{r.device}]")
        timings[name], cpu[name] = round(time.perf_counter() - t0, 1), round(cpu_seconds() - c0, 1)
        print(f"  -- {name}: {timings[name]:.1f}s ({cpu[name]:.1f} CPU s)\n")
    total, total_cpu = time.perf_counter() - suite_t0, cpu_seconds() - suite_c0
    target = QUICK_TARGET_S if args.quick else TARGET_S
    print(f"suite: {total:.0f}s of its {target / 60:.0f}-minute target"
          f"{' (over it)' if total > target else ''} ({', '.join(f'{k} {v:.0f}s' for k, v in timings.items())}); "
          f"{total_cpu:.0f} CPU s (load average {os.getloadavg()[0]:.1f} at the end)")

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    host = socket.gethostname()
    tag = "gpu-" if torch.cuda.is_available() else ""
    out = Path(args.out) if args.out else HERE / "results" / f"{stamp}-{tag}{host}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": stamp, "host": host, "device": device, "torch": torch.__version__,
                               "python": platform.python_version(), "quick": args.quick,
                               "seconds": round(total, 1), "module_seconds": timings, "cpu_seconds": round(total_cpu, 1),
                               "module_cpu_seconds": cpu, "results": results,
                               "failures": failures}, indent=2, default=str))
    print(f"wrote {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""DBN decode + features: bars per second for 10,000 and 1,000,000 bars (target: 1M bars in under 2 s).

Writes the files once into a temporary folder (synthetic 6E bars, zstd, as the default dataset), then
times ``read_bars`` + ``compute_features`` on CPU with torch on one thread, median of repeats. The
decode alone is reported too, so a regression shows where it is.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from common import Result, cpu_threads, interleaved

from trainbench.data.dbn import read_bars
from trainbench.data.features import compute_features
from trainbench.data.synth import write_ohlcv
from trainbench.measure.hardware import hardware_label

TICKS = {"6EH4": 0.00005}  # as the loader passes them from data.instruments
SIX_E = {"symbol": "6EH4", "instrument_id": 42, "tick_size": 0.00005, "price": 1.08, "daily_vol": 0.0045,
         "volume": 150.0}


def run(quick: bool) -> list[Result]:
    out: list[Result] = []
    with cpu_threads(1):
        label = hardware_label("cpu")
        with tempfile.TemporaryDirectory() as tmp:
            for n in (10_000, 1_000_000):
                path = write_ohlcv(Path(tmp) / f"bars_{n}.dbn.zst", [SIX_E], n_bars=n)
                repeats = 3 if quick else (7 if n > 100_000 else 21)
                # measured round-robin, so machine noise hits both alike
                t = interleaved({"decode": lambda p=path: read_bars(p, TICKS),
                                 "total": lambda p=path: compute_features(read_bars(p, TICKS))}, repeats=repeats)
                t_read, t_all = t["decode"], t["total"]
                size = f"{n // 1000}k" if n < 1_000_000 else f"{n // 1_000_000}M"
                details = {"bars": n, "file_mb": round(path.stat().st_size / 2**20, 2), "repeats": repeats,
                           "decode_s": round(t_read, 4), "total_s": round(t_all, 4), "threads": 1}
                out.append(Result(f"data.decode_features_{size}", n / t_all, "bars/s",
                                  target="1M bars < 2 s" if n == 1_000_000 else "", details=details))
                if n == 1_000_000:
                    out.append(Result("data.decode_features_1M_time", t_all, "s", target="< 2 s", details=details))
                out.append(Result(f"data.decode_only_{size}", n / t_read, "bars/s", details=details))
    for r in out:
        r.device = label
    return out


if __name__ == "__main__":
    for r in run(quick=False):
        print(f"{r.name:36s} {r.value:14.4g} {r.unit:8s} {r.target:14s} {r.details}")

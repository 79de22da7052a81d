"""What the fit is scored against beyond its own held-out split: DeepBench's fp32 GEMMs of two catalogue boards
(a second source; their spread sets those boards' fp32 matmul range), LLMCompass's A100 fp16 matmuls (a check),
the held-out test of the board-check range rule, and whether the committed constants are the fit."""

from __future__ import annotations

import json

import numpy as np

from trainbench.analysis.projection import calibration as cal
from trainbench.analysis.projection.extract import (
    LLMCOMPASS_HOST_MS,
    LLMCOMPASS_SOURCE,
    LLMCOMPASS_TABLE,
    VIDUR_GPU,
)

#: DeepBench's fp32 GEMMs scored against the fp32 (NeuSight) calibration of the catalogue entry of that board: a
#: second source of the same board (another software stack, the SXM2 board for the V100), not fitted to the curve;
#: its spread sets those entries' fp32 matmul range (kernel_model.calibrated).
FP32_CHECK_ENTRIES = {"Tesla V100-SXM2-16GB": "v100_16gb", "Tesla T4": "t4"}


def _fp32_ratios(c: dict, rows: list[dict]) -> dict[str, tuple[str, list[dict], np.ndarray]]:
    """{board: (entry, its DeepBench fp32 GEMMs, predicted/measured of each)}: the fp32 matmul curve the projection
    uses for that board (its catalogue entry's peak and bandwidth, no harness constant: DeepBench's floor rows are
    already left out)."""
    from trainbench.analysis.projection.gpus import load_gpus

    specs = load_gpus()
    out = {}
    for gpu, entry in FP32_CHECK_ENTRIES.items():
        mine = [r for r in rows if r["gpu"] == gpu and r["dtype"] == "fp32"]
        if not mine:
            continue
        fitted = c["gpus"][c["catalogue"][entry]["gpu"]]
        mm, mem = fitted["classes"]["matmul_attention"]["fp32"], fitted["classes"]["elementwise_norm"]
        spec = specs[entry]
        pred = np.array([float(cal.kernel_ms(r["flops"], r["bytes"], spec.peak_tflops["fp32"], spec.memory_gbps, mm,
                                             mem, mm["t_min_ms"])) for r in mine])
        out[gpu] = (entry, mine, pred / np.array([r["ms"] for r in mine]))
    return out


def fp32_check(c: dict, rows: list[dict]) -> dict:
    """{gpu: error summary} of DeepBench's fp32 GEMMs of each board of :data:`FP32_CHECK_ENTRIES` (all of them)
    predicted with the fp32 matmul curve its entry uses."""
    return {gpu: {"entry": entry, "fitted_on": c["catalogue"][entry]["gpu"],
                  **cal.error_summary(ratio, np.ones_like(ratio))}
            for gpu, (entry, _, ratio) in _fp32_ratios(c, rows).items()}


def board_check_coverage(c: dict, rows: list[dict]) -> dict[str, dict]:
    """The held-out test of the range rule "a board a second source measured spans that source's spread too": per
    board, DeepBench's fp32 GEMMs split by the tables' own hash of op and shape (:func:`cal.is_held_out`); the
    rule's band is the p10-p90 of the part not held out, united with the fit's held-out band; scored by the share
    of the held-out GEMMs inside the fit's band alone and inside the union (a p10-p90 range claims 80%)."""
    out = {}
    lo_q, hi_q = cal.RANGE_PERCENTILES
    for gpu, (entry, mine, ratio) in _fp32_ratios(c, rows).items():
        held = np.array([cal.is_held_out(r["op"], r["shape"]) for r in mine])
        fit = c["gpus"][c["catalogue"][entry]["gpu"]]["held_out"]["matmul_attention"]
        p10, p90 = (float(v) for v in np.percentile(ratio[~held], [lo_q, hi_q]))
        union = (min(fit["p10"], p10), max(fit["p90"], p90))
        test = ratio[held]
        out[gpu] = {"entry": entry, "held_out": int(held.sum()), "fit_band": [fit["p10"], fit["p90"]],
                    "fit_inside": float(np.mean((test >= fit["p10"]) & (test <= fit["p90"]))),
                    "union_band": list(union), "union_inside": float(np.mean((test >= union[0]) & (test <= union[1])))}
    return out


#: The boards of the two generations the published TFT steps compare (docs/projection.md, "Where the generations
#: part"): NeuSight measured the same kernel shapes on each.
GENERATION_PAIRS = (("Tesla V100-PCIE-32GB", "NVIDIA A100 80GB PCIe"), ("Tesla V100-PCIE-32GB", "NVIDIA A100-PCIE-40GB"))


def generation_ratios(c: dict, rows: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Does the model part the generations as the kernels do? Per pair of :data:`GENERATION_PAIRS` and op, over the
    kernel shapes NeuSight measured on both boards: the model's older/newer time ratio over the measured one
    (``cal.predict_rows`` with each board's fitted constants), an error summary; and the same over the held-out
    shapes only (``held_out``). Below 1: the model parts the generations less than the kernels do (the older board
    is slower than the model says, relative to the newer one); above 1, more. ``rows``: the NeuSight table."""
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        by.setdefault((r["op"], r["shape"]), {})[r["gpu"]] = r
    out: dict[str, dict[str, dict[str, float]]] = {}
    for old, new in GENERATION_PAIRS:
        if old not in c["gpus"] or new not in c["gpus"]:
            continue
        pair: dict[str, dict[str, float]] = {}
        for op in sorted({op for op, _ in by}):
            keys = [k for k, d in by.items() if k[0] == op and old in d and new in d]
            if not keys:
                continue
            ro, rn = [by[k][old] for k in keys], [by[k][new] for k in keys]
            pred = cal.predict_rows(ro, c["gpus"][old]) / cal.predict_rows(rn, c["gpus"][new])
            meas = np.array([a["ms"] for a in ro]) / np.array([b["ms"] for b in rn])
            held = np.array([cal.is_held_out(*k) for k in keys])
            pair[op] = {**cal.error_summary(pred, meas), "measured_median": float(np.median(meas)),
                        "held_out": cal.error_summary(pred[held], meas[held]) if held.any() else {}}
        out[f"{old} / {new}"] = pair
    return out


def generation_lines(c: dict, rows: list[dict]) -> list[str]:
    """:func:`generation_ratios`, one line per pair and op."""
    lines = ["the generations parted: the model's older/newer kernel time ratio over the measured one, on the shapes "
             "measured on both (median [p10, p90] (n); held-out shapes: median (n))"]
    for pair, ops in generation_ratios(c, rows).items():
        for op, s in ops.items():
            h = s["held_out"]
            lines.append(f"{pair:48s} {op:12s} measured ratio {s['measured_median']:.2f}; model/measured "
                         f"{s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}] ({s['n']}); held-out "
                         + (f"{h['median']:.2f} ({h['n']})" if h else "-"))
    return lines


def error_lines(c: dict, rows: list[dict]) -> list[str]:
    """The fit's errors, one line each: held-out per board and op, tensor-core fits and transfer tests, the second
    sources and checks (``rows``: the tensor-core tables, DeepBench's fp32 GEMMs among them), the chains."""
    lines: list[str] = []
    lines.append(f"held-out error, predicted/measured (median [p10, p90]), {c['held_out_share']:.0%} of shapes held out")
    lines.append(f"{'gpu':24s} {'op':18s} {'n':>5s} {'median':>7s} {'p10':>6s} {'p90':>6s}")
    for g, e in c["gpus"].items():
        for op, s in e["held_out"].items():
            lines.append(f"{g:24s} {op:18s} {s['n']:5d} {s['median']:7.2f} {s['p10']:6.2f} {s['p90']:6.2f}")
    tc = c["tensor_core"]
    lines.append("tensor-core GEMMs, held-out error, predicted/measured (median [p10, p90])")
    for g, e in tc["gpus"].items():
        for dtype, d in e.items():
            s = d["held_out"]
            lines.append(f"{g:24s} {'gemm ' + dtype:18s} {s['n']:5d} {s['median']:7.2f} {s['p10']:6.2f} {s['p90']:6.2f}")
            s = d["fit_error"]
            lines.append(f"{g:24s} {dtype + ' (fit part)':18s} {s['n']:5d} {s['median']:7.2f} {s['p10']:6.2f} {s['p90']:6.2f}")
            for what, s in d.get("transfer_held_out", {}).items():
                lines.append(f"{g:24s} {dtype + ' ' + what:18s} {s['n']:5d} {s['median']:7.2f} {s['p10']:6.2f} "
                      f"{s['p90']:6.2f}   (transfer rule test)")
    lines.append(f"transfer to another generation widened x{tc['transfer_widen'][0]:g}-{tc['transfer_widen'][1]:g} "
          f"(every pair pooled); TF32 of a GPU measured in half precision only: rule '{tc['tf32_rule']}'")
    for g, s in c.get("fp32_check", {}).items():
        lines.append(f"fp32 second source (DeepBench: sets the range width) {g} with {s['entry']}'s curve (fitted on {s['fitted_on']}): "
              f"n {s['n']}, median {s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}]")
    a = c.get("a100_check") or {}
    for part in ("all", "from_1ms"):
        if part in a:
            s = a[part]
            lines.append(f"A100 fp16 check (LLMCompass, host-timed, {a['host_ms_taken_off'] * 1e3:.0f} us taken off, never "
                  f"fitted) {part}: n {s['n']}, median {s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}]")
    for g, v in board_check_coverage(c, rows).items():
        lines.append(f"range rule test ({g}, {v['entry']}): {v['held_out']} held-out DeepBench fp32 GEMMs inside the "
                     f"fit's band [{v['fit_band'][0]:.2f}, {v['fit_band'][1]:.2f}] {v['fit_inside']:.0%}, inside its "
                     f"union with the rest's p10-p90 [{v['union_band'][0]:.2f}, {v['union_band'][1]:.2f}] "
                     f"{v['union_inside']:.0%}")
    ch = c.get("chains") or {}
    for p in cal.CHAIN_PASSES:
        if p in ch:
            s, f = ch[p]["held_out"], ch[p]
            lines.append(f"chains {p}: floors " + ", ".join(f"{k} {v * 1e3:.1f} us" for k, v in f["floor_ms"].items())
                  + f", beff {f['beff']:.2f}, eff fp32 {f['eff']['fp32']:.2f} tensor {f['eff']['tensor']:.2f}; "
                  f"held-out n {s['n']} median {s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}]")
    return lines


def same_fit(old: dict, new: dict, rows: list[dict], rel: float = 1e-3) -> bool:
    """The committed constants are the fit: the same GPUs and classes, and the same predicted time for every kernel
    of the table within ``rel``. Compared by prediction, not parameter by parameter: a parameter the data barely
    identifies (the half-saturation size of a memory curve whose kernels sit on its plateau) moves with the scipy
    and BLAS build by far more than the times it predicts, which are what the projection uses."""
    if old.keys() != new.keys():
        return False
    for g in old:
        if old[g]["classes"].keys() != new[g]["classes"].keys():
            return False
        mine = [r for r in rows if r["gpu"] == g]
        a, b = cal.predict_rows(mine, old[g]), cal.predict_rows(mine, new[g])
        if mine and float(np.max(np.abs(a - b) / np.maximum(a, b))) > rel:
            return False
    return True


def same_tensor_fit(old: dict, new: dict, rows: list[dict], fp32: dict, devices: dict, rel: float = 1e-3) -> bool:
    """:func:`same_fit` for the tensor-core curves (``old``/``new``: ``tensor_core.gpus``), on the tensor table."""
    if old.keys() != new.keys():
        return False
    for g in old:
        if old[g].keys() != new[g].keys():
            return False
        mem = fp32[devices[g].get("memory_from", g)]["classes"]["elementwise_norm"]
        for dtype in old[g]:
            mine = [r for r in rows if r["gpu"] == g and r["dtype"] == dtype]
            o, n = old[g][dtype], new[g][dtype]
            a = cal.predict_tensor_rows(mine, o["curve"], o["peak_tflops"], o["memory_gbps"], mem)
            b = cal.predict_tensor_rows(mine, n["curve"], n["peak_tflops"], n["memory_gbps"], mem)
            if mine and float(np.max(np.abs(a - b) / np.maximum(a, b))) > rel:
                return False
    return True


def same_chains(old: dict, new: dict, rel: float = 1e-3) -> bool:
    """The committed chain constants are the fit: the same floors and fractions within ``rel``."""
    if old.keys() != new.keys():
        return False
    for p in cal.CHAIN_PASSES:
        if p not in old:
            continue
        if old[p]["floor_ms"].keys() != new[p]["floor_ms"].keys():
            return False
        a = [*(old[p]["floor_ms"][k] for k in sorted(old[p]["floor_ms"])), old[p]["beff"], *sorted(old[p]["eff"].items())]
        b = [*(new[p]["floor_ms"][k] for k in sorted(new[p]["floor_ms"])), new[p]["beff"], *sorted(new[p]["eff"].items())]
        a, b = [v if isinstance(v, float) else v[1] for v in a], [v if isinstance(v, float) else v[1] for v in b]
        if len(a) != len(b) or any(abs(x - y) > rel * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True)):
            return False
    return True



def a100_check(c: dict) -> dict:
    """LLMCompass's host-timed A100 fp16 matmuls (:data:`LLMCOMPASS_TABLE`, never fitted) against the A100 fp16
    curve as the projection uses it (no harness constant), their 21 us host cost taken off: all rows, and those of
    1 ms or more (where that cost is under 2%)."""
    if not LLMCOMPASS_TABLE.is_file():
        return {}
    rows = cal.read_table(LLMCOMPASS_TABLE)
    fit = c["tensor_core"]["gpus"][VIDUR_GPU]["fp16"]
    mem = c["gpus"][c["tensor_core"]["devices"][VIDUR_GPU]["memory_from"]]["classes"]["elementwise_norm"]
    pred = np.array([float(cal.kernel_ms(r["flops"], r["bytes"], fit["peak_tflops"], fit["memory_gbps"], fit["curve"],
                                         mem, fit["curve"]["t_min_ms"])) for r in rows])
    meas = np.array([max(r["ms"] - LLMCOMPASS_HOST_MS, 1e-4) for r in rows])
    big = meas >= 1.0
    return {"source": LLMCOMPASS_SOURCE["repository"], "host_ms_taken_off": LLMCOMPASS_HOST_MS,
            "all": cal.error_summary(pred, meas), "from_1ms": cal.error_summary(pred[big], meas[big])}


def matches(old: dict, new: dict, rows: list[dict], trows: list[dict]) -> bool:
    """Are the committed constants ``old`` the fit ``new`` (``rows``: the kernel table, ``trows``: the tensor-core
    tables)? By prediction (:func:`same_fit`), the catalogue and the chains."""
    return same_fit(old["gpus"], new["gpus"], rows) and "gpus" in old.get("tensor_core", {}) and \
        same_tensor_fit(old["tensor_core"]["gpus"], new["tensor_core"]["gpus"], trows, new["gpus"],
                        new["tensor_core"]["devices"]) and \
        old["catalogue"] == new["catalogue"] and same_chains(old.get("chains") or {}, new.get("chains") or {})


def keep_committed(prev: dict, c: dict, rows: list[dict], trows: list[dict]) -> None:
    """A refit ``c`` that predicts the same times as the committed ``prev`` keeps the committed curves (no churn from
    the scipy/BLAS build in the last digits)."""
    new = json.loads(json.dumps(c))
    if prev.get("gpus") and same_fit(prev["gpus"], new["gpus"], rows):
        c["gpus"] = prev["gpus"]
        tprev = prev.get("tensor_core", {}).get("gpus")
        if tprev and same_tensor_fit(tprev, new["tensor_core"]["gpus"], trows, c["gpus"],
                                     new["tensor_core"]["devices"]):
            for g, by_dtype in c["tensor_core"]["gpus"].items():
                for dtype, d in by_dtype.items():
                    d["curve"] = tprev[g][dtype]["curve"]

"""The fit of the projection's constants (``calibration_data/constants.json``): the fp32 and memory curves per
measured board, the tensor-core curves and their transfer rules, the chains, each catalogue entry's calibration
(analysis/projection/catalogue.py names it, ``calibration_data/catalogue.yaml`` holds it). The command is
``scripts/calibrate_projection.py``; docs/projection.md describes the method."""

from __future__ import annotations

import math

import numpy as np

from trainbench.analysis.projection import calibration as cal
from trainbench.analysis.projection import catalogue as cat
from trainbench.analysis.projection.extract import (
    DEEPBENCH_FILES,
    DEEPBENCH_SOURCE,
    SOURCE,
    TENSOR_KEYS,
    TENSOR_SOURCE,
    VIDUR_GPU,
    VIDUR_SOURCE,
)

TENSOR_RULE = ("tensor-core GEMMs (tf32, bf16, fp16; bf16 and fp16 share a curve where one is measured): compute "
               "efficiency e_max / (1 + (f_half / f) ** k) / (1 + (i_half / i) ** ki), i = FLOPs per element moved, "
               "fitted per GPU and dtype on public per-shape measurements (XLA: H100 SXM and B200, bf16 and TF32; "
               "DeepBench: V100 SXM2 and T4, fp16; Vidur: A100 SXM4 80GB, fp16); a GPU without its own takes a "
               "measured GPU's curve at the same ideal time (f_half x peak ratio) and the same machine balance "
               "(i_half x ratio of peak x element bytes / bandwidth): the same architecture as measured, another "
               "generation widened by the pooled held-out error of that transfer over every pair the tables allow; "
               "TF32 on a GPU measured in half precision only by the rule the tables test best (tf32_rule)")
#: The chains' per-step calibration: DeepBench's V100 (DGX-1, SXM2) cuDNN RNN layers, at the v100_16gb entry's peaks.
CHAIN_GPU = "Tesla V100-SXM2-16GB"
CHAIN_ENTRY = "v100_16gb"
CHAIN_RULE = ("a chain (a recurrent layer's dependent time steps) takes count x steps x (floor + step bytes / "
              "(bandwidth x beff) + step FLOPs / (peak x eff)): a per-step latency floor per pass (forward; backward = cuDNN's backward-data, the dependent "
              "part; backward-weights is one GEMM over all steps, booked as kernels) and cell, and a fraction of the "
              "fp32 or tensor-core peak the step's GEMM reaches, fitted on DeepBench's V100 cuDNN layers (recurrent "
              "part only: CUDNN_SKIP_INPUT), 70/30 split by layer; other GPUs: the same floor and fractions at their "
              "own peak and bandwidth")
CHAIN_WIDEN_WHY = ("no per-step RNN timings of another GPU: the tensor-core curves' cross-generation transfer error, "
                   "an assumption for a latency floor")
def tensor_devices(trows: list[dict]) -> dict:
    """The datasheet figures of every GPU of the tensor-core tables: the catalogue's XLA boards, and for a GPU a GPU
    session measured (``--add-gpu-report``) its ``conf/hardware`` entry's peaks and bandwidth, its memory curve
    that of the GPU the entry's fp32 calibration uses."""
    from trainbench.analysis.projection.gpus import gpu_for_device, load_gpus

    out = cat.tensor_measured_devices()
    fp32_boards, entries, default = cat.load()["measured"], cat.entries(), cat.tensor_default()
    catalogue = load_gpus()
    for g in sorted({r["gpu"] for r in trows} - set(out)):
        spec = gpu_for_device(catalogue, g)
        if spec is None:
            raise ValueError(f"tensor-core rows of {g!r}: no conf/hardware entry names that device; add one "
                             "(docs/projection.md, the hardware catalogue) and rerun")
        peaks = {d: spec.peak_tflops[d] for d in cal.TENSOR_DTYPES if d in spec.peak_tflops}
        out[g] = {"peak_tflops": peaks, "memory_gbps": spec.memory_gbps, "datasheet": spec.source, "entry": spec.name,
                  "memory_from": g if g in fp32_boards else entries.get(spec.name, {}).get("gpu", default)}
    for g, d in out.items():
        d["source"] = tensor_source_of(g)
    return out


def tensor_source_of(gpu: str) -> str:
    """The public table (or a GPU session) a tensor-core GPU's figures come from."""
    if gpu in TENSOR_KEYS.values():
        return "XLA's per-shape measurements"
    if gpu in DEEPBENCH_FILES.values():
        return "Baidu DeepBench's cuBLAS GEMMs"
    if gpu == VIDUR_GPU:
        return "Vidur's profiled LLM linear layers"
    return "a GPU session's GEMMs"


def resolve_tensor(catalogue: dict, devices: dict, fitted: dict | None = None, tf32_rule: str = "generation") -> None:
    """Each entry's tensor-core calibration, the closest there is: a GPU measured as that very board (relation
    measured), else one of the same compute capability (same architecture), else what the catalogue's entry
    says (the tensor default's curves). A tensor dtype of the entry that GPU was not measured in (``fitted``:
    {gpu: dtypes fitted}; bf16 and fp16 stand for each other) gets ``tensor.by_dtype[dtype]``: for tf32 by
    ``tf32_rule`` (:func:`tf32_rule`): "generation", the default GPU's tf32 curve moved across generations, or
    "dtype", the entry's GPU's own half-precision curve moved to the tf32 peak and element size; for the rest
    the default GPU's curve (other generation)."""
    from trainbench.analysis.projection.gpus import load_gpus
    from trainbench.core.gpu_names import same_gpu

    specs = load_gpus()
    default = cat.tensor_default()
    fitted = fitted if fitted is not None else {g: set(d["peak_tflops"]) for g, d in devices.items()}
    cap = {g: specs[d["entry"]].compute_capability for g, d in devices.items() if d.get("entry") in specs}
    for name, entry in catalogue.items():
        spec = specs.get(name)
        if spec is None:
            continue
        if entry["tensor"]["relation"] != "measured":
            exact = [g for g in devices if same_gpu(spec.gpu, g)]
            if exact:
                entry["tensor"] = {"gpu": exact[0], "relation": "measured"}
            elif entry["tensor"]["relation"] == "other generation":
                same = sorted(g for g, c in cap.items() if c == spec.compute_capability)
                if same:
                    entry["tensor"] = {"gpu": same[0], "relation": "same architecture",
                                       "note": f"the curves of {same[0]} (compute capability "
                                               f"{spec.compute_capability}) at this GPU's peak and balance"}
        g = entry["tensor"]["gpu"]
        has = fitted.get(g, set())
        for dtype in (d for d in cal.TENSOR_DTYPES if d in spec.peak_tflops):
            if any(cal.same_family(dtype, d) for d in has):
                continue
            half = next((d for d in ("fp16", "bf16") if d in has), None)
            if dtype == "tf32" and tf32_rule == "dtype" and half:
                by = {"gpu": g, "dtype": half, "relation": "other dtype",
                      "note": f"no public {dtype} per-shape data for this GPU: its {half} curve at the {dtype} peak "
                              "and element size (the rule the tables test best, docs/projection.md)"}
            else:
                by = {"gpu": default, "relation": "other generation",
                      "note": f"no public {dtype} per-shape data for this GPU: the {default} {dtype} curve at "
                              "this GPU's peak and balance" + (" (the rule the tables test best, "
                                                               "docs/projection.md)" if dtype == "tf32" else "")}
            entry["tensor"].setdefault("by_dtype", {})[dtype] = by


def transfer_tests(tensor_gpus: dict, kind: str = "generation", dtype: str | None = None) -> list[dict]:
    """The held-out scores of the transfer rule the tables can test: ``kind`` "generation", each GPU's curve moved
    to another GPU's peak and balance in the same dtype (bf16 and fp16 alike); "dtype", one GPU's curve of another
    dtype moved to this dtype's peak and element size. ``dtype``: only transfers to that dtype."""
    out = []
    for g, by_dtype in tensor_gpus.items():
        for d, fit in by_dtype.items():
            if dtype and d != dtype:
                continue
            for k, s in fit.get("transfer_held_out", {}).items():
                across = k.removeprefix("from ") not in cal.TENSOR_DTYPES  # "from <gpu>[ <dtype>]" or "from <dtype>"
                if (kind == "generation") == across:
                    out.append({"to": g, "dtype": d, "from": k.removeprefix("from "), **s})
    return out


def _without_quantiles(tensor_gpus: dict) -> None:
    """Drop the transfer tests' ratio percentiles once the widening is computed (constants.json keeps the summary)."""
    for by_dtype in tensor_gpus.values():
        for fit in by_dtype.values():
            for s in fit.get("transfer_held_out", {}).values():
                s.pop("quantiles", None)


def transfer_widen(tensor_gpus: dict, kind: str = "generation", dtype: str | None = None) -> list[float]:
    """Range factors of a tensor-core curve moved by a transfer rule (:func:`transfer_tests`): the p10 and p90 of
    predicted/measured over every test of that rule the tables allow, each pair weighted alike (its held-out
    ratios' percentiles pooled), as factors on the truth: [1 / p90, 1 / p10]. Generation pairs come from
    :func:`cal.calibrate_tensor`'s cross-GPU tests (they carry their ratios' percentiles); a rule with no such
    test falls back to the worst test at each end."""
    tests = transfer_tests(tensor_gpus, kind, dtype) or transfer_tests(tensor_gpus, "dtype")
    pooled = [q for s in tests for q in s.get("quantiles", [])]
    if len(pooled) == 101 * len(tests):
        lo, hi = np.percentile(pooled, list(cal.RANGE_PERCENTILES))
    else:
        lo, hi = min(s["p10"] for s in tests), max(s["p90"] for s in tests)
    return [round(1.0 / float(hi), 3), round(1.0 / float(lo), 3)]


def tf32_rule(tensor_gpus: dict) -> str:
    """How a GPU measured in half precision only gets its TF32 curve: "generation" (a TF32 curve of another
    generation moved) or "dtype" (its own half-precision curve moved to the TF32 peak), whichever rule's
    held-out tests on the GPUs measured in both (H100, B200) are narrower (log of p90 / p10, worst test)."""
    def spread(kind):
        tests = transfer_tests(tensor_gpus, kind, "tf32")
        return max((math.log(max(s["p90"], 1 / s["p10"], s["p90"] / s["p10"])) for s in tests), default=math.inf)
    return "generation" if spread("generation") <= spread("dtype") else "dtype"


def constants(rows: list[dict], tensor_rows: list[dict]) -> dict:

    gpus = cal.calibrate(rows, cat.measured_devices())
    tdevices = tensor_devices(tensor_rows)
    tgpus = cal.calibrate_tensor(tensor_rows, tdevices, gpus)
    widen = transfer_widen(tgpus)
    rule = tf32_rule(tgpus)
    widen_of = {"other generation": widen, "other dtype": transfer_widen(tgpus, "dtype", "tf32")}
    catalogue = cat.entries()
    resolve_tensor(catalogue, tdevices, {g: set(d) for g, d in tgpus.items()}, rule)
    for entry in catalogue.values():
        t = entry["tensor"]
        t["widen"] = widen_of.get(t["relation"], [1.0, 1.0])
        for by in t.get("by_dtype", {}).values():
            by["widen"] = widen_of.get(by["relation"], [1.0, 1.0])
    _without_quantiles(tgpus)
    tests = {k: [{x: s[x] for x in ("to", "dtype", "from", "n", "median", "p10", "p90")}
                 for s in transfer_tests(tgpus, k)] for k in ("generation", "dtype")}
    return {"schema": 3, "source": SOURCE, "table": "kernels.csv.gz", "held_out_share": cal.HELD_OUT_SHARE,
            "split": "sha256 of 'op|shape', the same shapes held out on every GPU",
            "range_percentiles": list(cal.RANGE_PERCENTILES), "gpus": gpus, "catalogue": catalogue,
            "tensor_core": {"source": TENSOR_SOURCE, "sources": [TENSOR_SOURCE, DEEPBENCH_SOURCE, VIDUR_SOURCE],
                            "table": "tensor_gemms.csv.gz", "tables": [t.name for t in cal.tensor_tables()],
                            "rule": TENSOR_RULE,
                            "fp16": "bf16 and fp16 take each other's curve where only one is measured (the same "
                                    "tensor-core rate and element size)", "devices": tdevices, "gpus": tgpus,
                            "default_gpu": cat.tensor_default(), "transfer_widen": widen, "tf32_rule": rule,
                            "tf32_rule_widen": widen_of["other dtype" if rule == "dtype" else "other generation"],
                            "transfer_tests": tests},
            "chains": chain_constants(widen),
            "uncalibrated": cat.uncalibrated()}


def chain_constants(widen: list[float]) -> dict:
    """constants.json's ``chains``: the per-step fit of DeepBench's V100 cuDNN RNN layers (:func:`cal.fit_chains`) at
    the peaks and bandwidth of the board they were measured on (:data:`CHAIN_ENTRY`), and the widening of other GPUs
    (``widen``: the tensor-core curves' cross-generation one, :data:`CHAIN_WIDEN_WHY`); {} without the table."""
    from trainbench.analysis.projection.gpus import load_gpus

    if not cal.RNN_TABLE.is_file():
        return {}
    rows = [r for r in cal.read_rnn_table(cal.RNN_TABLE) if r["gpu"] == CHAIN_GPU]
    spec = load_gpus()[CHAIN_ENTRY]
    peaks = {"fp32": spec.peak_tflops["fp32"], "tensor": spec.peak_tflops["fp16"]}
    return {"source": DEEPBENCH_SOURCE["repository"], "commit": DEEPBENCH_SOURCE["commit"],
            "table": cal.RNN_TABLE.name, "gpu": CHAIN_GPU, "entry": CHAIN_ENTRY, "peaks": peaks,
            "memory_gbps": spec.memory_gbps, "rule": CHAIN_RULE, "widen": widen, "widen_why": CHAIN_WIDEN_WHY,
            **cal.fit_chains(rows, peaks, spec.memory_gbps)}


def fit_tables() -> tuple[dict, list[dict], list[dict]]:
    """(constants, kernel table rows, tensor-core table rows): the whole fit of the committed tables, with the second
    sources' and checks' scores (fit_checks)."""
    from trainbench.analysis.projection import fit_checks

    rows = cal.read_table(cal.TABLE)
    trows = [r for t in cal.tensor_tables() for r in cal.read_table(t)]
    c = constants(rows, trows)
    c["fp32_check"] = fit_checks.fp32_check(c, trows)
    c["a100_check"] = fit_checks.a100_check(c)
    return c, rows, trows

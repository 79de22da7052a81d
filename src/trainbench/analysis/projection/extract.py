"""The calibration tables, reduced from their public sources: NeuSight's fp32 kernels, XLA's tensor-core GEMMs,
DeepBench's V100/T4 GEMMs and RNN layers, Vidur's A100 fp16 GEMMs and LLMCompass's A100 check (the commands:
``scripts/calibrate_projection.py --extract*``; docs/projection.md). Only the figures are taken; FLOPs and bytes
are computed from each row's shape, and each table's header states its source."""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trainbench.analysis.projection import calibration as cal
from trainbench.analysis.projection import catalogue as cat

SOURCE = {"repository": "https://github.com/trsharm25/NeuSight",
          "path": "scripts/asplos/data/dataset/test/{linear,bmm,elem,ln,softmax}.csv",
          "commit": "db1fdc966633fe96c0717e0706e7621ad0921ed2", "retrieved": "2026-12-02",
          "what": "latency (ms) of single PyTorch 2.1.0 (CUDA 12.1, cuDNN 8.9) fp32 kernels: linear, bmm, "
                  "elementwise (add, mul, div, pow, relu, tanh, gelu and scalar variants), layernorm, softmax",
          "paper": "Lee, Phanishayee and Mahajan, Forecasting GPU Performance for Deep Learning Training and Inference (NeuSight), ASPLOS 2025, doi:10.1145/3669940.3707265"}

TEST_DIR = "scripts/asplos/data/dataset/test"
BYTES = 4  # fp32

#: Public per-GEMM tensor-core measurements: XLA's embedded matmul performance table (the GEMM cost model of its
#: latency-hiding scheduler), Hopper (sm_90) block: achieved FLOP/s of one (batched) GEMM per shape and dtype.
TENSOR_SOURCE = {"repository": "https://github.com/openxla/xla",
                 "path": "xla/service/gpu/model/matmul_interpolator_data.h (kDefaultMatmulPTable, keys sm_90 and "
                         "sm_100_B200)",
                 "commit": "ea2c45f2cacc930dcfa4e7bb0773616b8e353c34", "read_from": "github.com/ROCm/xla (a mirror "
                 "of openxla/xla; the file's last change there)", "retrieved": "2026-12-04",
                 "what": "achieved FLOP/s of single GEMMs (b x m x n x k, b 1-4, m/n/k 256-4096) on an H100 SXM "
                         "(sm_90: the largest bf16 figure, 808 TFLOP/s, exceeds the PCIe board's 756 dense peak) "
                         "and a B200 (sm_100_B200): 'bf16xbf16->bf16' (bf16 tensor cores) and 'f32xf32->f32' at "
                         "XLA's default precision, which runs on TF32 tensor cores (up to 402 TFLOP/s on the H100, "
                         "six times its 67 TFLOP/s fp32 peak)",
                 "license": "Apache-2.0 (figures only taken)"}
#: The table's device and dtype keys -> (the device name it reports, our dtype, element bytes).
TENSOR_KEYS = {"sm_90": "NVIDIA H100 80GB HBM3", "sm_100_B200": "NVIDIA B200"}
TENSOR_DTYPES = {"bf16xbf16->bf16": ("bf16", 2), "f32xf32->f32": ("tf32", 4)}
TENSOR_FILE = "xla/service/gpu/model/matmul_interpolator_data.h"


#: Baidu DeepBench's NVIDIA training results (GEMM and cuDNN RNN kernels, fp32 and fp16 tensor cores).
DEEPBENCH_SOURCE = {"repository": "https://github.com/baidu-research/DeepBench",
                    "path": "results/train/DeepBench_NV_V100.xlsx, results/train/DeepBench_NV_T4.xlsx (sheets "
                            "'Results FP32' and 'Results - FP16 ip, Mixed math')",
                    "commit": "30c51150869ee217f150ef5f31dc69241ed23b49 (2019-10-07, the files' last change; read at "
                              "da81ba7820739e2e506dc27f382d15be5479f98f)", "retrieved": "2026-12-05",
                    "what": "GEMM: one warm-up call, then 400 back-to-back cublasGemmEx calls timed on the host "
                            "(std::chrono) and divided by 400, rounded down to whole microseconds "
                            "(code/nvidia/gemm_bench.cu at that commit); fp16: fp16 inputs, tensor-core math "
                            "(CUBLAS_GEMM_DFALT_TENSOR_OP), dimensions padded to multiples of 8; fp32: SGEMM. "
                            "CUDA 10.1.243, cuDNN 7.6.2, driver 418.67; V100: NVIDIA DGX-1 (SXM2, memory size not "
                            "stated), T4: PCIe card. FLOPs 2MNK of the unpadded shape, bytes A + B + C once",
                    "license": "Apache-2.0 (figures only taken)"}
DEEPBENCH_FILES = {"results/train/DeepBench_NV_V100.xlsx": "Tesla V100-SXM2-16GB",
                   "results/train/DeepBench_NV_T4.xlsx": "Tesla T4"}
DEEPBENCH_SHEETS = {"Results FP32": ("fp32", 4), "Results - FP16 ip, Mixed math": ("fp16", 2)}
#: DeepBench's host timing of 400 pipelined calls has a floor of about 8 us (its smallest GEMMs, 512x16x512, take
#: 8 us on the V100 and 9-11 us on the T4) and whole-microsecond resolution: rows under this many ms are the
#: harness's floor, not the kernel's time, and are left out of the table (said in its header).
DEEPBENCH_FLOOR_MS = 0.012
DEEPBENCH_RNN_SECTIONS = {"Recurrent Layers - Vanilla": "rnn_tanh", "Recurrent Layers - LSTM": "lstm",
                          "Recurrent Layers - GRU": "gru"}
DEEPBENCH_TABLE = cal.DATA_DIR / "deepbench_gemms.csv.gz"
DEEPBENCH_RNN_TABLE = cal.DATA_DIR / "deepbench_rnn.csv.gz"

#: Microsoft Vidur's A100 operator profiles (fp16 LLM layers, per-op CUDA kernel time from the torch profiler).
VIDUR_SOURCE = {"repository": "https://github.com/microsoft/vidur",
                "path": "data/profiling/compute/a100/<model>/mlp.csv (8 models), columns "
                        "time_stats.{attn_pre_proj,attn_post_proj,mlp_up_proj,mlp_down_proj}.median",
                "commit": "2bb7a086c74cd4639e86ff74ab07cd1fa0f9a97f (2024-07-24, the folder's last change; read at "
                          "7d47513363ec447a741ac5e47241580b47724fbf)", "retrieved": "2026-12-05",
                "what": "median CUDA time (ms) of each linear layer of an fp16 LLM block on an A100 80GB DGX (SXM4), "
                        "torch profiler record_function (vidur/profiling/mlp); GEMM M = num_tokens, and from the "
                        "row's own n_embd, n_head, n_kv_head, n_expanded_embd, use_gated_mlp and tensor-parallel "
                        "width tp (head_dim = n_embd / n_head): attn_pre_proj K n_embd, N (n_head + 2 n_kv_head) "
                        "head_dim / tp; attn_post_proj K n_head head_dim / tp, N n_embd; mlp_up_proj K n_embd, "
                        "N (2 if gated else 1) n_expanded_embd / tp; mlp_down_proj K n_expanded_embd / tp, N n_embd; "
                        "bias (phi-2, Qwen's qkv) in the same cuBLAS call; token counts on a log grid (powers of two "
                        "and 1.5 x powers of two, 1-4096: the profiles step by 32 tokens, 26,000 shapes in all); a "
                        "shape profiled for several models or rows: the median of its medians",
                "license": "MIT (figures only taken)"}
VIDUR_DIR = "data/profiling/compute/a100"
VIDUR_GPU = "NVIDIA A100-SXM4-80GB"


def read_xlsx(path: Path) -> dict[str, list[dict[str, str]]]:
    """The cells of every sheet of an .xlsx workbook (standard library only: zipfile + ElementTree): {sheet name:
    [{"row": n, column letter: text}, ...]}, shared strings resolved, values as their stored text."""
    import xml.etree.ElementTree as ET
    import zipfile

    ns = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
    rel = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
    with zipfile.ZipFile(path) as z:
        strings = []
        if "xl/sharedStrings.xml" in z.namelist():
            for si in ET.fromstring(z.read("xl/sharedStrings.xml")).findall("m:si", ns):
                strings.append("".join(t.text or "" for t in si.iter(f"{{{ns['m']}}}t")))
        targets = {r.get("Id"): r.get("Target") for r in ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))}
        out = {}
        for sheet in ET.fromstring(z.read("xl/workbook.xml")).find("m:sheets", ns):
            target = targets[sheet.get(rel)].lstrip("/")
            xml = ET.fromstring(z.read(target if target.startswith("xl/") else "xl/" + target))
            rows = []
            for row in xml.iter(f"{{{ns['m']}}}row"):
                cells = {"row": row.get("r")}
                for c in row.findall("m:c", ns):
                    v = c.find("m:v", ns)
                    if v is None or v.text is None:
                        continue
                    col = re.match(r"[A-Z]+", c.get("r")).group()
                    cells[col] = strings[int(v.text)] if c.get("t") == "s" else v.text
                rows.append(cells)
            out[sheet.get("name")] = rows
    return out


def _number(text: str | None) -> float | None:
    try:
        x = float(text) if text is not None else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) and x > 0 else None


def extract_deepbench(checkout: Path, step_formulas: tuple[Callable, Callable]) -> tuple[list[dict], list[dict], int]:
    """(GEMM rows in the tensor table's schema, cuDNN RNN rows, GEMM rows left out under the harness floor) of
    DeepBench's V100 and T4 training results. ``step_formulas``: the workload profile's (forward, backward)
    recurrent-layer formulas (measure/op_formulas.py's ``rnn_layer_forward``, ``rnn_layer_backward``; passed in by
    the command: the analysis does not import the measurement code)."""
    gemms, rnns, floored = [], [], 0
    for rel, gpu in DEEPBENCH_FILES.items():
        book = read_xlsx(checkout / rel)
        for sheet, (dtype, eb) in DEEPBENCH_SHEETS.items():
            section = None
            for c in book.get(sheet, []):
                if c.get("A"):
                    section = c["A"].strip()
                    continue
                if section == "Dense Matrix Multiplication":
                    m, n, k, ms = (_number(c.get(x)) for x in "CDEI")
                    if not (m and n and k and ms):
                        continue
                    if ms < DEEPBENCH_FLOOR_MS:
                        floored += 1
                        continue
                    m, n, k = int(m), int(n), int(k)
                    gemms.append({"gpu": gpu, "op": "gemm", "dtype": dtype,
                                  "shape": f"gemm:1x{m}x{n}x{k}:{c.get('F', 'N')}{c.get('G', 'N')}",
                                  "flops": 2.0 * m * n * k, "bytes": float(eb * (m * k + k * n + m * n)), "ms": ms})
                elif section in DEEPBENCH_RNN_SECTIONS:
                    hidden, batch, steps = (_number(c.get(x)) for x in "CDE")
                    times = [_number(c.get(x)) for x in "GHI"]
                    if not (hidden and batch and steps) or not all(times):
                        continue  # the T4's RNN rows are #DIV/0! (not measured)
                    rnns.append(_rnn_row(step_formulas, gpu, DEEPBENCH_RNN_SECTIONS[section], dtype, eb, int(hidden),
                                         int(batch), int(steps), times))
    # a shape listed twice (DeepBench repeats a few across applications): the median of its times
    by: dict[tuple, list[dict]] = {}
    for r in gemms:
        by.setdefault((r["gpu"], r["dtype"], r["shape"]), []).append(r)
    gemms = [{**rs[0], "ms": float(np.median([r["ms"] for r in rs]))} for rs in by.values()]
    return gemms, rnns, floored


def _rnn_row(step_formulas: tuple[Callable, Callable], gpu: str, cell: str, dtype: str, eb: int, hidden: int,
             batch: int, steps: int, times: list) -> dict:
    """One DeepBench RNN layer with the FLOPs and bytes of one dependent step, forward and backward, by the
    workload profile's own formulas (measure/op_formulas.py: the chain step a profile books)."""
    rnn_layer_forward, rnn_layer_backward = step_formulas
    _, fwd = rnn_layer_forward(cell, steps, steps * batch, hidden, hidden, True, eb)
    _, bwd = rnn_layer_backward(cell, steps, steps * batch, hidden, hidden, True, eb)
    return {"gpu": gpu, "cell": cell, "dtype": dtype, "hidden": hidden, "batch": batch, "steps": steps,
            "forward_ms": times[0], "backward_data_ms": times[1], "backward_weights_ms": times[2],
            "forward_flops_per_step": fwd.flops, "forward_bytes_per_step": fwd.bytes,
            "backward_flops_per_step": bwd.flops, "backward_bytes_per_step": bwd.bytes}


def write_rnn_table(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    for k, v in {**DEEPBENCH_SOURCE, "what": "cuDNN RNN (1 layer, unidirectional, CUDNN_SKIP_INPUT: the recurrent "
                 "part only, the input GEMM excluded; 100 repeats timed on the host, code/nvidia/rnn_bench.cu) "
                 "forward, backward-data and backward-weights ms; fp16: tensor-core math (CUDNN_TENSOR_OP_MATH); "
                 "cells rnn_tanh (DeepBench's vanilla), lstm, gru; the T4's RNN sections are empty"}.items():
        buf.write(f"# {k}: {v}\n")
    buf.write("# columns: the layer (cell, dtype, hidden, batch, steps), its three measured times, and one dependent "
              "step's FLOPs and bytes forward and backward (the chain step of measure/op_formulas.py)\n")
    cols = ["gpu", "cell", "dtype", "hidden", "batch", "steps", "forward_ms", "backward_data_ms", "backward_weights_ms",
            "forward_flops_per_step", "forward_bytes_per_step", "backward_flops_per_step", "backward_bytes_per_step"]
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in sorted(rows, key=lambda r: tuple(r[c] for c in cols[:6])):
        w.writerow(r)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(buf.getvalue().encode())


#: LLMCompass's A100 fp16 matmuls: host-timed, an independent check of the A100 fp16 curve (never fitted).
LLMCOMPASS_SOURCE = {"repository": "https://github.com/PrincetonUniversity/LLMCompass",
                     "path": "ae/figure5/ab/real_hardware/matmul_A100.csv",
                     "commit": "b95c6c95a80071414d31da8ba8d2e62334753f3d (2024-04-25, the file's last change)",
                     "retrieved": "2026-12-05",
                     "what": "fp16 torch matmul M x N x K on an 'A100_80GB' (board not stated): the median over "
                             "iterations of host wall time around one call and torch.cuda.synchronize() "
                             "(ae/figure5/ab/test_matmul.py, software_model/matmul.py run_on_gpu), so launch and "
                             "sync time included; LLMCompass's own simulator adds 2.1e-5 s per call to match it",
                     "use": "a check of the A100 fp16 curve, never fitted: scored with LLMCompass's 21 us per-call "
                            "host cost taken off each time",
                     "license": "BSD-3-Clause (figures only taken)"}
LLMCOMPASS_FILE = "ae/figure5/ab/real_hardware/matmul_A100.csv"
LLMCOMPASS_HOST_MS = 0.021
LLMCOMPASS_TABLE = cal.DATA_DIR / "llmcompass_a100_check.csv.gz"


def extract_llmcompass(checkout: Path) -> list[dict]:
    """Rows (tensor-table schema) of LLMCompass's A100 fp16 matmul CSV ("M, N, K, <t>ms, <r>Tflops" per line)."""
    out = []
    for line in (checkout / LLMCOMPASS_FILE).read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[3].endswith("ms"):
            continue
        m, n, k = (int(x) for x in parts[:3])
        out.append({"gpu": VIDUR_GPU, "op": "gemm", "dtype": "fp16", "shape": f"gemm:1x{m}x{n}x{k}",
                    "flops": 2.0 * m * n * k, "bytes": float(2 * (m * k + k * n + m * n)),
                    "ms": float(parts[3].removesuffix("ms"))})
    return out


def _on_log_grid(n: int) -> bool:
    """Is ``n`` a power of two or 1.5 x one (the token counts taken from Vidur's 32-token steps)?"""
    return n > 0 and (n & (n - 1) == 0 or (n % 3 == 0 and (n // 3) & (n // 3 - 1) == 0 and n // 3 >= 1))


def extract_vidur(checkout: Path) -> list[dict]:
    """Rows of the tensor table from Vidur's A100 fp16 operator profiles (:data:`VIDUR_SOURCE` says the mapping)."""
    ops = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    by: dict[str, list[float]] = {}
    dims: dict[str, tuple[int, int, int]] = {}
    for path in sorted((checkout / VIDUR_DIR).glob("*/*/mlp.csv")):
        for r in _rows_of(path):
            try:
                tokens, e, heads, kv = (int(float(r[c])) for c in ("num_tokens", "n_embd", "n_head", "n_kv_head"))
                ff, tp = int(float(r["n_expanded_embd"])), int(float(r["num_tensor_parallel_workers"]))
            except (KeyError, ValueError):
                continue
            if not _on_log_grid(tokens):
                continue
            hd = e // heads
            gated = str(r.get("use_gated_mlp")).strip().lower() == "true"
            shapes = {"attn_pre_proj": (e, (heads + 2 * kv) * hd // tp), "attn_post_proj": (heads * hd // tp, e),
                      "mlp_up_proj": (e, (2 if gated else 1) * ff // tp), "mlp_down_proj": (ff // tp, e)}
            for op in ops:
                ms = _number(r.get(f"time_stats.{op}.median"))
                if ms is None:
                    continue
                k, n = shapes[op]
                key = f"gemm:1x{tokens}x{n}x{k}"
                by.setdefault(key, []).append(ms)
                dims[key] = (tokens, n, k)
    out = []
    for key, times in by.items():
        m, n, k = dims[key]
        out.append({"gpu": VIDUR_GPU, "op": "gemm", "dtype": "fp16", "shape": key, "flops": 2.0 * m * n * k,
                    "bytes": float(2 * (m * k + k * n + m * n)), "ms": float(np.median(times))})
    return out


def _rows_of(path: Path):
    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def extract(neusight: Path) -> list[dict]:
    """The kernel table's rows from a NeuSight checkout: the boards ``calibration_data/catalogue.yaml`` lists as
    measured."""
    measured = set(cat.load()["measured"])
    out = []
    base = neusight / TEST_DIR
    for fname, op in (("linear.csv", "linear"), ("bmm.csv", "bmm")):
        for r in _rows_of(base / fname):
            if r["Device"] not in measured:
                continue
            b, m, n, k = (int(float(r[c])) for c in "BMNK")
            flops = 2.0 * b * m * n * k
            if op == "linear":  # input (B*M, K), weight (N, K), output (B*M, N)
                nbytes = BYTES * (b * m * k + n * k + b * m * n)
            else:  # (B, M, K) @ (B, K, N) -> (B, M, N)
                nbytes = BYTES * b * (m * k + k * n + m * n)
            out.append({"gpu": r["Device"], "op": op, "dtype": "fp32", "shape": f"{r['OPName']}:{b}x{m}x{n}x{k}",
                        "flops": flops, "bytes": float(nbytes), "ms": float(r["Latency"])})
    binary = {"add", "mul", "div", "pow"}
    for fname, op in (("elem.csv", "elementwise"), ("ln.csv", "layernorm"), ("softmax.csv", "softmax")):
        for r in _rows_of(base / fname):
            if r["Device"] not in measured:
                continue
            b, h = int(float(r["B"])), int(float(r["H"]))
            n = b * h
            if op == "elementwise":
                tensors = 3 if r["OPName"] in binary else 2
                nbytes, flops = BYTES * tensors * n, float(n)
            elif op == "layernorm":  # x in, y out, mean and rstd per row, weight and bias
                nbytes, flops = BYTES * (2 * n + 2 * b + 2 * h), 8.0 * n
            else:
                nbytes, flops = BYTES * 2 * n, 5.0 * n
            out.append({"gpu": r["Device"], "op": op, "dtype": "fp32", "shape": f"{r['OPName']}:{b}x{h}",
                        "flops": flops, "bytes": float(nbytes), "ms": float(r["Latency"])})
    return out


def extract_xla(path: Path) -> list[dict]:
    """Rows of the tensor-core table from XLA's matmul performance table (``path``: an XLA checkout or the header
    itself): one row per (device, dtype, shape), ms = FLOPs / achieved FLOP/s."""

    text = (path / TENSOR_FILE if path.is_dir() else path).read_text()
    out = []
    keys = list(re.finditer(r'\n  entries \{\s*key: "([^"]+)"', text))
    for i, m in enumerate(keys):
        gpu = TENSOR_KEYS.get(m.group(1))
        if gpu is None:
            continue
        block = text[m.end(): keys[i + 1].start() if i + 1 < len(keys) else len(text)]
        for e in re.finditer(r"entries \{\s*b: (\d+)\s*m: (\d+)\s*n: (\d+)\s*k: (\d+)(.*?)\n      \}", block, re.S):
            b, mm, n, k = (int(x) for x in e.groups()[:4])
            for key, rate in re.findall(r'flops \{ key: "([^"]+)" value: (\d+) \}', e.group(5)):
                if key not in TENSOR_DTYPES:
                    continue
                dtype, eb = TENSOR_DTYPES[key]
                flops = 2.0 * b * mm * n * k
                out.append({"gpu": gpu, "op": "gemm", "dtype": dtype, "shape": f"gemm:{b}x{mm}x{n}x{k}",
                            "flops": flops, "bytes": float(eb * b * (mm * k + k * n + mm * n)),
                            "ms": flops / float(rate) * 1e3})
    return out


def write_table(rows: list[dict], path: Path, source: dict | None = None) -> None:
    buf = io.StringIO()
    for k, v in (source or SOURCE).items():
        buf.write(f"# {k}: {v}\n")
    buf.write("# columns: gpu (as the device reports), op, dtype, shape (op:dims), flops and bytes of the kernel "
              "(computed from the shape at the dtype's element size: fp32 and tf32 4 bytes, bf16 2), ms (measured latency, "
              "or FLOPs / achieved FLOP/s)\n")
    w = csv.DictWriter(buf, fieldnames=["gpu", "op", "dtype", "shape", "flops", "bytes", "ms"], lineterminator="\n")
    w.writeheader()
    for r in sorted(rows, key=lambda r: (r["gpu"], r["op"], r["shape"])):
        w.writerow({**r, "flops": f"{r['flops']:.6g}", "bytes": f"{r['bytes']:.6g}", "ms": f"{r['ms']:.5g}"})
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same table gives the same bytes
        f.write(buf.getvalue().encode())

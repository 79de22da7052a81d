"""The kernel-level projection model (analysis/projection/kernel_model.py): precision resolution and conversion, the
per-kernel time, chains, host/device overlap, ranges from the calibration, and the reference TFT's ordering."""

import copy
import math

import pytest
from analysis_helpers import REFERENCE_TFT

from trainbench.analysis.projection import calibration as cal
from trainbench.analysis.projection import gpus, kernel_model, roofline
from trainbench.analysis.projection.kernel_model import resolve_precision

GPUS = gpus.load_gpus(gpus.default_conf_dir())  # the packaged catalogue (not a team's conf/hardware)


def profile(kernels=(), chains=(), ops=0.0, syncs=0.0, precision="fp32"):
    return {"schema": 1, "profiled_on": "cpu", "precision": precision, "complete": True, "incomplete_reasons": [],
            "optimizer": {"measured_impl": "foreach", "booked_as": "fused"}, "kernels": list(kernels),
            "chains": list(chains), "host": {"ops": ops, "syncs": syncs}}


def group(cls, count, flops, nbytes, dtype="fp32", autocast="lower"):
    return {"cls": cls, "dtype": dtype, "autocast": autocast, "count": count, "flops": flops, "bytes": nbytes}


def ms(p, gpu, precision="fp32"):
    return roofline.project(p, GPUS[gpu], precision=precision)["epoch_ms"]


# --------------------------------------------------------------------------------------------------
# precision
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu,label,mixed,tf32", [("a100_80gb", "bf16", "bf16", True), ("h100_sxm", "bf16", "bf16", True),
                                                  ("l4", "bf16", "bf16", True), ("v100_16gb", "fp16", "fp16", False),
                                                  ("t4", "fp16", "fp16", False)])
def test_auto_resolves_like_the_trainer(gpu, label, mixed, tf32):
    t = resolve_precision(GPUS[gpu], "auto")
    assert (t.precision, t.mixed, t.tf32) == (label, mixed, tf32)
    assert resolve_precision(GPUS[gpu], "auto", tf32_setting=False).tf32 is False


def test_explicit_precisions_and_their_substitutes():
    a100, v100 = GPUS["a100_80gb"], GPUS["v100_16gb"]
    assert (resolve_precision(a100, "fp32").precision, resolve_precision(a100, "fp32").tf32) == ("fp32", False)
    assert (resolve_precision(a100, "tf32").precision, resolve_precision(a100, "tf32").tf32) == ("tf32", True)
    t = resolve_precision(v100, "tf32")
    assert t.precision == "fp32" and "no TF32" in t.notes[0]
    t = resolve_precision(v100, "bf16")
    assert t.precision == "fp16" and t.mixed == "fp16" and "no bf16" in t.notes[0]
    old = gpus.GpuSpec(name="old", gpu="Old GPU", peak_tflops={"fp32": 5.0}, memory_gbps=200, compute_capability="6.0")
    assert resolve_precision(old, "bf16").cannot and resolve_precision(old, "auto").precision == "fp32"
    with pytest.raises(ValueError, match="projection.precision='int8' is invalid"):
        resolve_precision(a100, "int8")


def test_lowered_groups_are_converted_and_the_rest_kept():
    # one big lowered GEMM group and one fp32-kept elementwise group (autocast "fp32", e.g. a softmax)
    gemm = group("matmul_attention", 10, 1e14, 4e9)
    keep = group("elementwise_norm", 100, 0.0, 8e10, autocast="fp32")
    a100 = GPUS["a100_80gb"]
    fp32 = kernel_model.epoch_ms(profile([gemm, keep]), a100, resolve_precision(a100, "fp32"))
    bf16 = kernel_model.epoch_ms(profile([gemm, keep]), a100, resolve_precision(a100, "bf16"))
    assert any("matmul_attention fp32->bf16" in n for n in bf16["notes"])
    assert not any("elementwise_norm fp32->" in n for n in bf16["notes"])
    assert bf16["by_class"]["elementwise_norm"] == pytest.approx(fp32["by_class"]["elementwise_norm"])
    assert bf16["by_class"]["matmul_attention"] < fp32["by_class"]["matmul_attention"] / 5
    # a lowered memory-bound group moves half the bytes in bf16
    stream = group("elementwise_norm", 100, 0.0, 8e10, autocast="lower")
    f = kernel_model.epoch_ms(profile([stream]), a100, resolve_precision(a100, "fp32"))["by_class"]
    b = kernel_model.epoch_ms(profile([stream]), a100, resolve_precision(a100, "bf16"))["by_class"]
    assert b["elementwise_norm"] == pytest.approx(f["elementwise_norm"] / 2, rel=0.05)


def test_a_bf16_gpu_profile_projected_at_fp32_doubles_its_lowered_bytes():
    stream = group("elementwise_norm", 100, 0.0, 4e10, dtype="bf16", autocast="lower")
    a100 = GPUS["a100_80gb"]
    b = kernel_model.epoch_ms(profile([stream], precision="bf16"), a100, resolve_precision(a100, "bf16"))
    f = kernel_model.epoch_ms(profile([stream], precision="bf16"), a100, resolve_precision(a100, "fp32"))
    assert f["by_class"]["elementwise_norm"] == pytest.approx(2 * b["by_class"]["elementwise_norm"], rel=0.05)


def test_tf32_only_changes_fp32_matmuls():
    gemm = group("matmul_attention", 10, 1e14, 4e9)
    a100 = GPUS["a100_80gb"]
    fp32 = kernel_model.epoch_ms(profile([gemm]), a100, resolve_precision(a100, "fp32"))["epoch_ms"]
    tf32 = kernel_model.epoch_ms(profile([gemm]), a100, resolve_precision(a100, "tf32"))["epoch_ms"]
    assert tf32 < fp32 / 4
    stream = group("elementwise_norm", 100, 0.0, 8e10)
    assert ms(profile([stream]), "a100_80gb", "tf32") == pytest.approx(ms(profile([stream]), "a100_80gb", "fp32"))


# --------------------------------------------------------------------------------------------------
# the kernel model
# --------------------------------------------------------------------------------------------------


def _cal(gpu):
    return kernel_model.calibrated(GPUS[gpu])


def test_a_large_gemm_runs_at_the_calibrated_ceiling_of_its_gpu():
    f = 1e15
    for gpu in ("a100_80gb", "v100_16gb", "l4", "h100_sxm"):
        t = ms(profile([group("matmul_attention", 10, f, 1e9)]), gpu, "fp32")
        e = _cal(gpu).matmul
        ceiling = f / (GPUS[gpu].peak_tflops["fp32"] * 1e12 * cal.saturating(f / 10, e["e_max"], e["f_half"], e["k"]))
        assert t == pytest.approx(ceiling * 1e3, rel=1e-6)
        assert 0.8 * e["e_max"] < cal.saturating(f / 10, e["e_max"], e["f_half"], e["k"]) <= e["e_max"]


def test_small_kernels_reach_a_lower_fraction_and_never_beat_the_minimum_kernel_time():
    a100 = "a100_80gb"
    big = ms(profile([group("matmul_attention", 1, 1e12, 1e8)]), a100)
    small = ms(profile([group("matmul_attention", 1000, 1e12, 1e8)]), a100)  # same work, 1000 kernels
    assert small > big
    tiny = ms(profile([group("elementwise_norm", 10_000, 0.0, 10_000 * 64)]), a100)
    assert tiny == pytest.approx(10_000 * cal.MIN_KERNEL_MS, rel=1e-6)


def test_a_bandwidth_bound_group_scales_with_calibrated_bandwidth():
    stream = profile([group("elementwise_norm", 10, 0.0, 1e12)])
    e40, e80 = _cal("a100_40gb").memory, _cal("a100_80gb").memory
    ratio = ms(stream, "a100_40gb") / ms(stream, "a100_80gb")
    expect = (2039 * cal.saturating(1e11, e80["b_max"], e80["b_half"], e80["kb"])) / \
             (1555 * cal.saturating(1e11, e40["b_max"], e40["b_half"], e40["kb"]))
    assert ratio == pytest.approx(expect, rel=1e-6)


def test_a_chain_of_dependent_steps_costs_its_calibrated_step_time():
    """A chain's step: the per-step floor of its pass and cell, its bytes at the fitted fraction of the GPU's
    bandwidth and its FLOPs at the fitted fraction of the unit's peak (calibration.fit_chains, DeepBench's V100
    cuDNN layers)."""
    chains = cal.load_constants()["chains"]
    lstm = {"what": "lstm", "cls": "matmul_attention", "dtype": "fp32", "autocast": "lower", "count": 4,
            "steps": 252, "flops_per_step": 1e5, "bytes_per_step": 1e4}
    back = {**lstm, "what": "lstm_backward"}
    for gpu in ("h100_sxm", "v100_16gb"):
        spec = GPUS[gpu]
        for ch, fit in ((lstm, chains["forward"]), (back, chains["backward"])):
            step = {"floor_ms": fit["floor_ms"]["lstm"], "beff": fit["beff"], "eff": fit["eff"]}
            t = ms(profile(chains=[ch]), gpu, "fp32")
            assert t == pytest.approx(4 * 252 * float(cal.chain_step_ms(1e5, 1e4, spec.peak_tflops["fp32"],
                                                                        spec.memory_gbps, step, "fp32")), rel=1e-6)
            assert t >= 4 * 252 * fit["floor_ms"]["lstm"]
    # the same work as independent kernels in one group is far faster: the chain is what costs
    t = ms(profile(chains=[lstm]), "h100_sxm")
    flat = ms(profile([group("matmul_attention", 1, 4 * 252 * 1e5, 4 * 252 * 1e4)]), "h100_sxm")
    assert flat < t / 50
    # the range: the pass's held-out error, widened on a GPU whose per-step latency is not measured (not the V100)
    for gpu, widened in (("v100_16gb", False), ("h100_sxm", True)):
        p = roofline.project(profile(chains=[lstm]), GPUS[gpu], precision="fp32")
        lo, hi = p["epoch_ms_range"]
        held = chains["forward"]["held_out"]
        w = (1.0, 1.0) if not widened else tuple(chains["widen"])
        c = kernel_model.calibrated(GPUS[gpu])
        assert lo == pytest.approx(p["epoch_ms"] / held["p90"] * w[0] * c.widen[0], rel=1e-6)
        assert hi == pytest.approx(p["epoch_ms"] / held["p10"] * w[1] * c.widen[1], rel=1e-6)
        assert "DeepBench's cuDNN RNN layers" in p["range_basis"] and ("widened" in p["range_basis"]) == widened


def test_host_and_device_overlap_the_larger_wins_plus_syncs():
    dev_only = profile([group("matmul_attention", 10, 1e14, 1e9)])
    d = kernel_model.epoch_ms(dev_only, GPUS["a100_80gb"], resolve_precision(GPUS["a100_80gb"], "fp32"))
    few_ops = copy.deepcopy(dev_only)
    few_ops["host"]["ops"] = 100  # 0.8 ms of host work hides behind the device
    assert ms(few_ops, "a100_80gb") == pytest.approx(d["epoch_ms"])
    host_bound = profile([group("elementwise_norm", 10, 0.0, 1e6)], ops=1e5)
    assert ms(host_bound, "a100_80gb") == pytest.approx(1e5 * kernel_model.LAUNCH_US[1] * 1e-3)
    # a launch-bound epoch is nearly the same on a laptop card and an H100
    assert ms(host_bound, "rtx3050ti_4gb") / ms(host_bound, "h100_sxm") < 1.1
    synced = copy.deepcopy(dev_only)
    synced["host"]["syncs"] = 1000
    assert ms(synced, "a100_80gb") == pytest.approx(d["epoch_ms"] + 1000 * kernel_model.SYNC_US[1] * 1e-3)


def test_an_incomplete_profile_is_not_used():
    p = profile([group("matmul_attention", 10, 1e12, 1e9)])
    p.update(complete=False, incomplete_reasons=["kernels bypassed the dispatcher: cuda graphs"])
    run = type("R", (), {"workload_profile": p, "metrics": {}, "params": {}})()
    prof, n, why = roofline.profile_of_runs([run])
    assert prof is None and n == 1 and "cuda graphs" in why


def test_the_old_aggregate_rows_are_the_coarse_path():
    rows = {("matmul_attention", "fp32"): {"flops": 1e12, "bytes": 1e9, "ops": 100},
            ("elementwise_norm", "fp32"): {"flops": 0.0, "bytes": 1e9, "ops": 500}}
    p = roofline.project(rows, GPUS["a100_80gb"], precision="bf16")
    assert p["precision"] == "bf16" and any("old coarse profile" in n for n in p["notes"])
    assert any("matmul_attention fp32->bf16" in n for n in p["notes"])
    run = type("R", (), {"workload_profile": None, "params": {},
                         "metrics": {"workload.matmul_attention.fp32.flops": 1e12,
                                     "workload.matmul_attention.fp32.ops": 100.0}})()
    prof, n, _ = roofline.profile_of_runs([run])
    assert prof["coarse"] and prof["kernels"][0]["count"] == 100.0 and n == 1


# --------------------------------------------------------------------------------------------------
# ranges
# --------------------------------------------------------------------------------------------------


def test_the_range_comes_from_the_held_out_percentiles():
    big = profile([group("matmul_attention", 10, 1e15, 1e9)])  # within the fitted sizes: no extrapolation
    p = roofline.project(big, GPUS["a100_80gb"], precision="fp32")
    held = _cal("a100_80gb").held_out["matmul_attention"]
    lo, hi = p["epoch_ms_range"]
    assert lo == pytest.approx(p["epoch_ms"] / held["p90"], rel=1e-6)
    assert hi == pytest.approx(p["epoch_ms"] / held["p10"], rel=1e-6)
    assert "held-out p10-p90" in p["range_basis"] and "A100 80GB PCIe" in p["range_basis"]


def test_a_board_measured_by_another_source_spans_that_error_too():
    """The V100 SXM2's fp32 GEMMs were measured by DeepBench as well (not fitted to the curve; they set this
    range's width): its fp32 matmul range spans
    both that check's p10-p90 and the fit's own held-out ones; its tensor-core range and another board's do not
    change."""
    consts = cal.load_constants()
    check = consts["fp32_check"]["Tesla V100-SXM2-16GB"]
    fit = consts["gpus"][consts["catalogue"]["v100_16gb"]["gpu"]]["held_out"]["matmul_attention"]
    c = _cal("v100_16gb")
    assert c.ratio_bounds("matmul_attention") == (min(fit["p10"], check["p10"]), max(fit["p90"], check["p90"]))
    assert c.ratio_bounds("matmul_attention") != (fit["p10"], fit["p90"])  # the check is wider here
    assert c.ratio_bounds("elementwise") == (c.held_out["elementwise_norm"]["p10"],
                                             c.held_out["elementwise_norm"]["p90"])
    assert c.ratio_bounds("matmul_attention", "fp16") == (c.tensor_fit("fp16")["held_out"]["p10"],
                                                         c.tensor_fit("fp16")["held_out"]["p90"])
    big = profile([group("matmul_attention", 10, 1e15, 1e9)])
    p = roofline.project(big, GPUS["v100_16gb"], precision="fp32")
    assert p["epoch_ms_range"][0] == pytest.approx(p["epoch_ms"] / max(fit["p90"], check["p90"]), rel=1e-6)
    assert "second source's measurement of this board (DeepBench" in p["range_basis"]
    assert _cal("v100_pcie_16gb").board_check is None  # no other source measured that board
    assert "DeepBench" not in roofline.project(big, GPUS["a100_80gb"], precision="fp32")["range_basis"]


def test_ranges_widen_without_calibration_data():
    big = profile([group("matmul_attention", 10, 1e15, 1e9)])

    def width(gpu, precision="fp32"):
        lo, hi = roofline.project(big, GPUS[gpu], precision=precision)["epoch_ms_range"]
        return math.log(hi / lo)

    assert width("h200") > width("h100_sxm")  # nearest architecture
    # A100 TF32: no per-shape data, the H100's curve moved across generations and widened; its bf16 is measured
    assert width("a100_80gb", "tf32") > width("a100_80gb", "bf16")
    assert width("l4", "bf16") > width("a100_80gb", "bf16")  # the L4's tensor cores: the H100's curve, widened
    small = profile([group("matmul_attention", 10_000, 1e10, 1e8)])  # 1 MFLOP kernels: below the table
    p = roofline.project(small, GPUS["a100_80gb"], precision="fp32")
    assert "smaller than any fitted" in p["range_basis"]
    lo, hi = p["epoch_ms_range"]
    assert math.log(hi / lo) > width("a100_80gb")
    assert "widened" in roofline.project(big, GPUS["a10g"], precision="fp32")["range_basis"]


def test_scaled_from_a_measured_gpu_uses_both_calibrations():
    w = profile([group("matmul_attention", 10, 1e14, 1e9)], ops=100)
    p = roofline.project(w, GPUS["h100_sxm"], measured_on=GPUS["a100_40gb"], measured_ms=500.0,
                         precision="bf16", measured_precision="bf16")
    assert p["method"] == "scaled from a100_40gb" and p["precision"] == "bf16"
    assert p["epoch_ms"] == pytest.approx(500.0 * ms(w, "h100_sxm", "bf16") / ms(w, "a100_40gb", "bf16"))
    lo, hi = p["epoch_ms_range"]
    alone = roofline.project(w, GPUS["h100_sxm"], precision="bf16")
    assert lo < p["epoch_ms"] < hi
    # wider than the target's own range, relatively: two calibrations' errors in quadrature
    assert math.log(hi / lo) > math.log(alone["epoch_ms_range"][1] / alone["epoch_ms_range"][0])
    assert "both GPUs' calibration" in p["range_basis"]


# --------------------------------------------------------------------------------------------------
# the reference TFT (fixture: reference-size TFT, one epoch, in the workload_profile.json format)
# --------------------------------------------------------------------------------------------------

# Hand-built from a CPU profile of one step of the reference TFT (experiment=tft_volatility; the aggregate
# rows in test_projection.TFT: 1.5e11 matmul FLOPs in 156 ops, 8.9 GB of elementwise traffic in 370 ops,
# fused AdamW), its LSTM encoder/decoder as chains (252 steps, hidden 160, batch 256: forward + backward).
TFT_PROFILE = profile(
    kernels=[group("matmul_attention", 120, 1.2e11, 2.8e9), group("matmul_attention", 36, 1.0e10, 7.0e8),
             group("elementwise_norm", 300, 0.0, 7.5e9), group("elementwise_norm", 70, 0.0, 1.4e9, autocast="fp32"),
             group("optimizer", 12, 0.0, 2.6e8, autocast="fp32")],
    chains=[{"what": "lstm", "cls": "matmul_attention", "dtype": "fp32", "autocast": "lower", "count": 4,
             "steps": 252, "flops_per_step": 2 * 3 * 256 * 160 * 4 * 160 * 2, "bytes_per_step": 4 * 256 * 160 * 12}],
    ops=650, syncs=2)


def test_reference_tft_orders_precisions_and_gpus():
    a100 = {p: ms(TFT_PROFILE, "a100_80gb", p) for p in ("fp32", "tf32", "bf16")}
    assert a100["bf16"] < a100["tf32"] < a100["fp32"]
    for p in ("fp32", "tf32", "bf16", "fp16"):
        assert ms(TFT_PROFILE, "l4", p) > ms(TFT_PROFILE, "a100_80gb", p), p
    # the coarse path gives the same ordering
    from helpers.workloads import TFT

    rows = roofline.workload_from_metrics(TFT)
    a = {p: roofline.project(rows, GPUS["a100_80gb"], precision=p)["epoch_ms"] for p in ("fp32", "tf32", "bf16")}
    assert a["bf16"] < a["tf32"] < a["fp32"]
    for p in ("fp32", "tf32", "bf16", "fp16"):
        assert roofline.project(rows, GPUS["l4"], precision=p)["epoch_ms"] > \
            roofline.project(rows, GPUS["a100_80gb"], precision=p)["epoch_ms"]


# --------------------------------------------------------------------------------------------------
# the catalogue
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device,entry", [
    ("NVIDIA A100-SXM4-40GB", "a100_40gb"), ("NVIDIA A100-SXM4-80GB", "a100_80gb"),
    # each board variant is its own entry, never another variant's
    ("NVIDIA A100-PCIE-40GB", "a100_40gb_pcie"), ("NVIDIA A100 80GB PCIe", "a100_80gb_pcie"),
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", None), ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H100 PCIe", "h100_pcie"), ("NVIDIA H100 NVL", None), ("Tesla V100-SXM2-32GB", "v100_sxm2_32gb"),
    ("Tesla V100-SXM2-16GB", "v100_16gb"), ("Tesla V100-PCIE-16GB", "v100_pcie_16gb"),
    ("Tesla V100-PCIE-32GB", "v100_pcie_32gb"), ("Tesla V100S-PCIE-32GB", None), ("NVIDIA L40S", None),
    ("NVIDIA GeForce RTX 3050 Ti Laptop GPU", "rtx3050ti_4gb"), ("NVIDIA A10G", "a10g"), ("Tesla T4", "t4")])
def test_device_names_match_only_their_own_entry(device, entry):
    g = gpus.gpu_for_device(GPUS, device)
    assert (g.name if g else None) == entry


def test_catalogue_peaks_follow_their_architecture_ratios():
    for name, g in GPUS.items():
        p = g.peak_tflops
        if "tf32" in p:  # no GA10x/GA100/AD10x/GH100 part has TF32 below FP32 or bf16 below TF32
            assert p["fp32"] <= p["tf32"] <= p["bf16"], name
    # GA10x GeForce-class ratios: TF32 = FP32, bf16 = 2x (A10G, RTX 3050 Ti)
    for name in ("a10g", "rtx3050ti_4gb"):
        p = GPUS[name].peak_tflops
        assert p["tf32"] == pytest.approx(p["fp32"], rel=0.01) and p["bf16"] == pytest.approx(2 * p["fp32"], rel=0.01)
    # every card at its maximum boost clock: the 3050 Ti Laptop's 2560 cores x 2 x 1.695 GHz
    assert GPUS["rtx3050ti_4gb"].peak_tflops["fp32"] == pytest.approx(2560 * 2 * 1.695e-3, rel=0.01)


def test_every_catalogue_gpu_has_a_calibration_and_says_how():
    c = cal.load_constants()
    for name in GPUS:
        m = cal.calibration_for(name, c)
        assert m and m["gpu"] in c["gpus"] and m["relation"] in ("measured", "same chip", "nearest architecture")
        if m["relation"] == "nearest architecture":
            assert m["widen"][0] < 1 < m["widen"][1] and m.get("note")


@pytest.mark.slow
@pytest.mark.xdist_group(REFERENCE_TFT)
def test_reference_tft_profiled_on_the_cpu_orders_precisions_and_gpus(reference_tft_step):
    """One step of the reference-size TFT (experiment=tft_volatility) profiled on this CPU with
    measure/workload.py: its (aggregate) profile projects faster in bf16 than tf32 than fp32 on an A100, and
    slower on an L4 than an A100 at every precision."""
    from trainbench.measure.workload import profile_metrics

    rows = roofline.workload_from_metrics(profile_metrics(reference_tft_step))
    a100 = {p: ms(rows, "a100_80gb", p) for p in ("fp32", "tf32", "bf16")}
    assert a100["bf16"] < a100["tf32"] < a100["fp32"]
    for p in ("fp32", "tf32", "bf16", "fp16", "auto"):
        assert ms(rows, "l4", p) > ms(rows, "a100_80gb", p), p

"""The GPU projector: the catalogue (gpus.py), the roofline per op class and dtype with launch cost and
calibration (roofline.py), the schedule and the choice of instance (projection.py)."""

from types import SimpleNamespace

import pytest
from analysis_helpers import REFERENCE_TFT, entry_of, report_from_store

from helpers.workloads import DQN, TFT
from trainbench.analysis.projection import gpus, roofline
from trainbench.analysis.projection import projection as pj
from trainbench.analysis.report_types import SCHEMA_VERSION, DeviceComparison, Instance
from trainbench.core.safe_text import md_text
from trainbench.core.vocab import ParamKey, ReportKey, Series, Summary

GPUS = gpus.load_gpus(gpus.default_conf_dir())  # the packaged catalogue (not a team's conf/hardware)


def ms(workload, gpu, precision="fp32"):
    return roofline.project(workload, GPUS[gpu], precision=precision)["epoch_ms"]


def test_catalogue_has_the_planned_gpus_with_sources():
    assert {"rtx3050ti_4gb", "t4", "a10g", "l4", "v100_16gb", "a100_40gb", "a100_80gb", "h100_sxm",
            "h200"} <= set(GPUS)
    for g in GPUS.values():
        assert g.source and g.memory_gbps > 0 and g.vram_mb and g.compute_capability and "fp32" in g.peak_tflops
    # pre-Ampere cards lack bf16 and tf32
    for name in ("t4", "v100_16gb"):
        assert "bf16" not in GPUS[name].peak_tflops and "tf32" not in GPUS[name].peak_tflops


# The model itself (per kernel group, chains, overlap, precision, ranges): tests/analysis/test_kernel_model.py


def test_precision_is_read_from_the_resolved_param_first():
    assert roofline.run_precision({ParamKey.TRAINER_PRECISION: "auto", ParamKey.PRECISION_RESOLVED: "bf16"}) == "bf16"
    assert roofline.run_precision({ParamKey.TRAINER_PRECISION: "fp16"}) == "fp16"
    assert roofline.run_precision({}) == "fp32"


def test_multi_gpu_schedule_hand_worked():
    # 5 models of 10, 8, 6, 4, 2 h. One GPU: one after another, 30 h. Two GPUs, longest first to the
    # least-loaded: {10, 4, 2} and {8, 6} -> 16 h (all sums are even, so 15 is impossible: 16 is optimal).
    # Eight GPUs: one model each, the longest decides: 10 h.
    hours = [4.0, 10.0, 2.0, 8.0, 6.0]
    assert pj.schedule_hours(hours, 1) == 30.0
    assert pj.schedule_hours(hours, 2) == 16.0
    assert pj.schedule_hours(hours, 8) == 10.0


def _inst(name, usd, wall, hi, complete=True, fits=True):
    return Instance(instance=name, gpu="t4", gpus=1, usd_per_hour=usd / wall, price_date=None, price_source=pj.PRICED,
                    models=[], missing=[], complete=complete, hours_serial=wall, hours_serial_range=[wall * 0.8, hi],
                    wall_hours=wall, wall_hours_range=[wall * 0.8, hi], gpus_used=1, usd=usd, usd_range=None,
                    wall_hours_conservative=None, usd_conservative=None, basis=None, model_basis={}, fits_all=fits,
                    does_not_fit=[], methods=[], within={})


def test_cheapest_instance_meeting_each_threshold():
    insts = [_inst("cheap_slow", 20.0, 40.0, 60.0), _inst("mid", 30.0, 20.0, 30.0),
             _inst("pricey_fast", 90.0, 3.0, 4.0), _inst("cheap_nofit", 5.0, 2.0, 3.0, fits=False),
             _inst("cheap_partial", 1.0, 1.0, 1.5, complete=False)]
    assert pj.cheapest_meeting(insts, 24).instance == "pricey_fast"  # mid's slow end (30 h) misses 24 h
    assert pj.cheapest_meeting(insts, 48).instance == "mid"
    assert pj.cheapest_meeting(insts, 1) is None


def _run(metrics, params=None):
    return SimpleNamespace(metrics=metrics, params=params or {ParamKey.TRAINER_PRECISION: "fp32"})


def _profile(flops, nbytes, ops):
    return {"workload.matmul_attention.fp32.flops": flops, "workload.matmul_attention.fp32.bytes": nbytes / 2,
            "workload.matmul_attention.fp32.ops": ops / 10, "workload.elementwise_norm.fp32.bytes": nbytes / 2,
            "workload.elementwise_norm.fp32.ops": ops * 0.9}


def test_project_report_fits_schedules_and_prefers_measurements():
    cat = [SimpleNamespace(name="g4dn.xlarge", gpu="t4", gpus=1, usd_per_hour=0.526, price_date="x",
                           relative_speed=None),
           SimpleNamespace(name="p4d.24xlarge", gpu="a100_40gb", gpus=8, usd_per_hour=32.77, price_date="x",
                           relative_speed=None)]
    models = {m: entry_of(source="measured", **{Series.EPOCH_TIME_MS: {"mean": 100.0, "ci95_mean": [90.0, 110.0]}},
                          projection={"target_epochs": 1000, "hours": 100 * 1000 / 3.6e6}) for m in ("a", "b")}
    runs = {"a": [_run({**_profile(1e12, 1e10, 5000), Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 20000.0})],
            "b": [_run(_profile(1e13, 1e10, 5000))]}
    comps = [DeviceComparison(model="b", reference_device="cpu", device="Tesla T4", reference_epoch_ms=84.0,
                              epoch_ms=42.0, reference_runs=1, runs=1, speedup=2.0)]
    out = pj.project_report(models, runs, ["a", "b"], "cpu", comps, cat, SimpleNamespace(name="rtx3050ti_4gb"),
                            0.0225, (24.0, 48.0), GPUS)
    by = {(p.instance, p.model): p for p in out.projections}
    assert len(out.projections) == 3 * 2  # local + 2 instances, 2 models
    # the p4d's 8 GPUs are also projected at 2, 4 and 8 GPUs per model; these runs do not declare they can be split
    split = out.projections_data_parallel
    assert sorted({(p.instance, p.data_parallel) for p in split}) == [("p4d.24xlarge", n) for n in (2, 4, 8)]
    assert all(p.epoch_ms is None and "cannot be split" in p.method for p in split)
    assert [i.data_parallel for i in out.instances] == [1, 1, 1]  # so no row across GPUs helps
    assert by[("g4dn.xlarge", "b")].method == "measured" and by[("g4dn.xlarge", "b")].epoch_ms == 42.0
    assert by[("g4dn.xlarge", "a")].method == "roofline from cpu profile"
    # 20 GB + context does not fit a 16 GB T4 or the 4 GB laptop card, fits a 40 GB A100; b is unknown
    assert by[("g4dn.xlarge", "a")].fits is False and by[("p4d.24xlarge", "a")].fits is True
    assert by[("local", "a")].fits is False and by[("p4d.24xlarge", "b")].fits is None
    inst = {i.instance: i for i in out.instances}
    p4 = inst["p4d.24xlarge"]
    hours = [by[("p4d.24xlarge", m)].hours for m in ("a", "b")]
    assert p4.wall_hours == pytest.approx(max(hours)) and p4.hours_serial == pytest.approx(sum(hours))
    assert p4.usd == pytest.approx(max(hours) * 32.77)
    assert inst["g4dn.xlarge"].fits_all is False and inst["g4dn.xlarge"].does_not_fit == ["a"]
    cheapest = {c.within_hours: c.instance for c in out.cheapest}
    assert cheapest == {24.0: "p4d.24xlarge", 48.0: "p4d.24xlarge"}  # the T4 would not hold model a


@pytest.mark.slow
@pytest.mark.xdist_group(REFERENCE_TFT)
def test_small_dqn_gains_far_less_from_an_a100_than_a_reference_tft(reference_tft_step):
    """From CPU profiles: a small DQN is launch-bound, a reference-size TFT is matmul/bandwidth-bound."""
    import torch

    from trainbench.compose import compose_run
    from trainbench.config.run import validate
    from trainbench.data.in_memory import make_market_data
    from trainbench.measure.workload import profile_epoch, profile_metrics
    from trainbench.models.base import BuildContext
    from trainbench.models.registry import REGISTRY

    cpu = torch.device("cpu")
    obj = validate(compose_run(["model=dqn", "model.updates_per_epoch=5"]))
    dqn = REGISTRY.get("dqn").build(obj.model, make_market_data(1200), BuildContext(device=cpu))
    p_dqn = profile_epoch(dqn, cpu)
    p_tft = reference_tft_step  # one step: the ratio is per step
    gain = {}
    for name, p in (("dqn", p_dqn), ("tft", p_tft)):
        w = roofline.workload_from_metrics(profile_metrics(p))
        gain[name] = ms(w, "t4", "auto") / ms(w, "a100_40gb", "auto")
    assert gain["dqn"] < 1.3 < 2.0 < gain["tft"], gain


# --------------------------------------------------------------------------------------------------
# through the analysis: a CPU sweep's report
# --------------------------------------------------------------------------------------------------

def _report(store, tmp_path, *overrides):
    return report_from_store(store, tmp_path, *overrides)


def test_cpu_sweep_projects_every_instance_and_the_local_card(store, tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    store = store.new_experiment("cpu-proj")  # alone: no other sweep measured these models on a GPU
    store.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(30)), sweep_id="cpu-proj", device="cpu",
                  extra_metrics={**DQN, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 300.0})
    store.add_run("tft", 9000 * (1 + 0.01 * rng.standard_normal(30)), sweep_id="cpu-proj", device="cpu",
                  extra_metrics={**TFT, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 5000.0})
    r = _report(store, tmp_path, "sweep=cpu-proj", "hardware=rtx3050ti_4gb", "project=[h100_sxm]")
    assert r["schema_version"] == SCHEMA_VERSION
    insts = [i["instance"] for i in r["instances"]]
    assert insts[0] == "local" and insts[-1] == "h100_sxm" and "p4d.24xlarge" in insts
    assert len(r["projections"]) == len(insts) * len(r["coverage"]["planned"])
    by = {(p["instance"], p["model"]): p for p in r["projections"]}
    for key in (("local", "dqn"), ("g4dn.xlarge", "tft")):
        p = by[key]
        assert {"instance", "gpu", "model", "epoch_ms", "epoch_ms_range", "hours", "method", "fits"} <= set(p)
        assert p["method"] == "roofline from cpu profile"
        assert p["epoch_ms_range"][0] < p["epoch_ms"] < p["epoch_ms_range"][1]
    # the DQN gains far less from the A100 (p4d) over the T4 (g4dn) than the TFT does
    gain = {m: by[("g4dn.xlarge", m)]["epoch_ms"] / by[("p4d.24xlarge", m)]["epoch_ms"] for m in ("dqn", "tft")}
    assert gain["dqn"] < 1.3 and gain["tft"] > 2 * gain["dqn"], gain
    # the TFT's 5 GB does not fit the 4 GB laptop card; the DQN does
    assert by[("local", "tft")]["fits"] is False and by[("local", "dqn")]["fits"] is True
    assert by[("local", "mamba2")]["epoch_ms"] is None  # not measured: nothing to project
    speeds = {c["instance"]: c for c in r["costs"]["cloud"]}
    assert speeds["p4d.24xlarge"]["basis"] == "projected"
    assert "local rtx3050ti_4gb" in r["decision"]["rationale"]
    loc = r["decision"]["local_instance"]
    assert loc["gpu"] == "rtx3050ti_4gb" and loc["methods"] == ["roofline from cpu profile"]
    assert loc["fits_all"] is False and loc["does_not_fit"] == ["tft"]
    # the models in the total (dqn, tft) both project onto the local card: the decision rests on it
    assert r["decision"][ReportKey.MODELS_IN_TOTAL] == ["dqn", "tft"]
    assert r["decision"]["basis"] == "projected (roofline from cpu profile)" and r["decision"]["on_local"]
    assert r["decision"]["confidence"] == "low"  # a projection, and the TFT does not fit the card
    assert all(c["instance"] is None and "not projected: mamba2, ppo, tlob" in c["why_none"] for c in r["cheapest"])
    from trainbench.analysis.report.report import projection_view

    view = projection_view(r, ["local", "h100_sxm"])
    assert "dqn" in view and "tft" in view and "h100_sxm" in view


def test_an_unknown_project_gpu_is_a_clear_error(store, tmp_path):
    from trainbench.core.errors import AnalysisError

    store.add_run("dqn", [5.0] * 10, sweep_id="cpu-proj-bad", device="cpu")
    with pytest.raises(AnalysisError, match="project=b200: no such GPU entry; choose from .*t4"):
        _report(store, tmp_path, "sweep=cpu-proj-bad", "project=[b200]")


def test_a_catalogue_gpu_that_is_not_an_entry_is_a_clear_error(store, tmp_path):
    from trainbench.core.errors import AnalysisError

    store.add_run("dqn", [5.0] * 10, sweep_id="cpu-proj-bad2", device="cpu")
    with pytest.raises(AnalysisError, match=r"decision.catalogue.1.gpu='L4 24GB': not a GPU entry"):
        _report(store, tmp_path, "sweep=cpu-proj-bad2", "decision.catalogue.1.gpu=L4 24GB")


def test_project_argv():
    from trainbench.config.analyze import project_argv

    assert project_argv(["project=t4,a100_40gb", "sweep=x"]) == ["project=['t4','a100_40gb']", "sweep=x"]


@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(p.stem for p in gpus.default_conf_dir().glob("*.yaml")))
def test_every_hardware_entry_composes_and_validates(entry):
    from trainbench.compose import compose_run
    from trainbench.config.run import validate

    hw = validate(compose_run([f"hardware={entry}"])).hardware
    assert hw.name == entry


def test_a_gpu_sweep_is_measured_on_its_gpu_and_scaled_to_the_others():
    cat = [SimpleNamespace(name="p4d.24xlarge", gpu="a100_40gb", gpus=8, usd_per_hour=32.77, price_date="x",
                           relative_speed=None)]
    models = {"a": entry_of(source="measured", **{Series.EPOCH_TIME_MS: {"mean": 50.0, "ci95_mean": [48.0, 52.0]}},
                            projection={"target_epochs": 100, "hours": 50 * 100 / 3.6e6})}
    runs = {"a": [_run({**_profile(1e13, 1e10, 5000), Summary.PEAK_VRAM_MB_MAX: 9000.0})]}
    out = pj.project_report(models, runs, ["a"], "NVIDIA H200", [], cat, SimpleNamespace(name="auto"), None,
                            (24.0, 48.0), GPUS, ["h200"])
    by = {p.instance: p for p in out.projections}
    assert by["h200"].method == "measured" and by["h200"].epoch_ms == 50.0
    assert by["h200"].epoch_ms_range == [48.0, 52.0]
    a100 = by["p4d.24xlarge"]
    assert a100.method == "scaled from h200" and a100.epoch_ms > 50.0  # an A100 is slower than an H200
    assert a100.memory_need_mb == pytest.approx(9000 * 1.1 + roofline.CUDA_CONTEXT_MB) and a100.fits is True


def test_an_unknown_peak_dtype_is_a_config_error():
    from trainbench.compose import compose_run
    from trainbench.config.run import validate
    from trainbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="hardware.peak_tflops.fp8"):
        validate(compose_run(["hardware=t4", "+hardware.peak_tflops.fp8=100"]))


def test_a_cpu_sweep_decides_on_the_projected_local_gpu(store, tmp_path):
    import numpy as np

    rng = np.random.default_rng(1)
    store = store.new_experiment("cpu-local")  # alone: no other sweep measured the DQN on a GPU
    # 700 ms/epoch on the CPU x 1,000 target epochs = 0.19 h measured; projected on the laptop GPU much less
    store.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(30)), sweep_id="cpu-local", device="cpu",
                  extra_metrics={**DQN, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 300.0})
    r = _report(store, tmp_path, "sweep=cpu-local", "hardware=rtx3050ti_4gb", "decision.plan=[dqn]",
                "decision.local_max_hours=0.05", "decision.cloud_min_hours=0.1")
    d = r["decision"]
    loc = d["local_instance"]
    assert d["basis"] == "projected (roofline from cpu profile)" and loc["gpu"] == "rtx3050ti_4gb"
    # the CPU hours alone are over the (tiny) cloud threshold; the projected GPU hours are what decide
    assert d["measured_device"]["recommendation"] == "cloud"
    assert d["recommendation"] == "local_gpu" and d[Summary.TOTAL_HOURS_CONSERVATIVE] == loc["hours_conservative"]
    assert loc["hours_conservative"] < d["measured_device"][Summary.TOTAL_HOURS_CONSERVATIVE]
    assert "on the local rtx3050ti_4gb" in d["rationale"] and "which alone would say cloud" in d["rationale"]
    from trainbench.analysis.report.report import console_summary, markdown

    assert "rests on: projected (roofline from cpu profile)" in console_summary(r)
    assert "(measured on cpu" in console_summary(r)
    assert f"Rests on: **{md_text('projected (roofline from cpu profile)')}**" in markdown(r)  # escaped: the basis names logged devices
    # the same runs analysed without a GPU named (hardware=auto): the CPU is the local machine, measured
    r2 = _report(store, tmp_path, "sweep=cpu-local", "decision.plan=[dqn]", "decision.local_max_hours=0.05",
                 "decision.cloud_min_hours=0.1")
    assert r2["decision"]["basis"].startswith("measured on cpu") and r2["decision"]["recommendation"] == "cloud"


def test_a_model_that_does_not_fit_gets_the_micro_batch_that_would() -> None:
    """The predicted peak split into a fixed part and activations linear in the micro-batch: on a 4 GB card a
    model needing 5.7 GB at batch 230 fits at the micro-batch whose activations leave room for the fixed part."""
    card = gpus.load_gpus()["rtx3050ti_4gb"]
    run = SimpleNamespace(metrics={Summary.PREDICTED_PEAK_VRAM_MB: 5000.0, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB:
                                   5500.0, Summary.PREDICTED_ACTIVATIONS_MB: 4000.0},
                          params={ParamKey.BATCH_SIZE_RESOLVED: "230", ParamKey.MICRO_BATCH_SIZE: "230"})
    need, _ = roofline.memory_need_mb([run])
    w = roofline.fitting_micro_batch([run], need, card)
    per = 4000.0 * 1.1 / 230  # reserved MB per sample
    assert w["per_sample_mb"] == pytest.approx(per, rel=1e-3) and w["fixed_mb"] == pytest.approx(need - 4400.0)
    assert w["micro_batch"] == int((card.vram_mb - w["fixed_mb"]) // per) and 0 < w["micro_batch"] < 230
    assert w["grad_accum"] == -(-230 // w["micro_batch"]) and w["batch"] == 230
    assert roofline.fitting_micro_batch([run], need, gpus.load_gpus()["a100_80gb"]) is None  # it fits there
    huge = SimpleNamespace(metrics={**run.metrics, Summary.PREDICTED_ACTIVATIONS_MB: 10.0}, params=run.params)
    none = roofline.fitting_micro_batch([huge], need, card)  # the fixed part alone exceeds the card
    assert none["micro_batch"] == 0 and none["grad_accum"] is None

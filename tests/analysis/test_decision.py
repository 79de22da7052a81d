"""One instances table, one cost per instance, the decision on the local instance and a confidence that
knows what it rests on (issue 29, items 1-4)."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import entry_of, noisy, report_from_store

from helpers.workloads import DQN as SMALL_DQN
from trainbench.analysis.decision import decision as dec
from trainbench.analysis.report_types import Decision, LocalInstance, MeasuredDevice, Recommendation
from trainbench.core.vocab import ParamKey, ReportKey, Summary

A100 = "NVIDIA A100-SXM4-40GB"
H200 = "NVIDIA H200"
LAPTOP = "NVIDIA GeForce RTX 3050 Ti Laptop GPU"  # what the laptop card reports: conf/hardware/rtx3050ti_4gb
PLAN5 = ["dqn", "ppo", "mamba2", "tft", "tlob"]
# A workload profile as a run records it (a CPU profile of the small DQN), with a predicted memory need
DQN = {**SMALL_DQN, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 300.0}
SMALL = {ParamKey.MODEL_SIZE: "small", "trainer.size": "small"}
REFERENCE = {ParamKey.MODEL_SIZE: "reference", "trainer.size": "reference"}


def decision_of(local_instance: dict | None = None, **fields) -> Decision:
    """A decision with the given fields (the rules read them), the local row's ``gpu`` and ``does_not_fit``."""
    loc = local_instance or {}
    return Decision(thresholds_hours={"local_max": 24.0, "cloud_min": 48.0}, buffer=0.5,
                    measured_device=MeasuredDevice(device=None, total_hours=None, total_hours_conservative=None,
                                                   total_hours_range=None, models=[],
                                                   recommendation=Recommendation.INSUFFICIENT_DATA),
                    local_instance=LocalInstance(gpu=loc.get("gpu"), gpu_name=None, local_kind=None, local_why=None,
                                                 models=[], missing=[], fits_all=None,
                                                 does_not_fit=loc.get("does_not_fit", []), methods=[], basis=None,
                                                 hours=None, hours_range=None, hours_conservative=None),
                    **fields)


def _inst(r, name):
    return next(i for i in r["instances"] if i["instance"] == name)


# --------------------------------------------------------------------------------------------------
# 1. one instances table, one cost per instance
# --------------------------------------------------------------------------------------------------


def test_five_10h_models_on_a_p4d_have_one_cost(store, tmp_path):
    """Five 10-hour models on a p4d.24xlarge (8 A100s, $32.77/h) run in parallel, one per GPU: 10 h wall,
    $328. The costs block once priced them one after another (50 h, $1,639) while the instances table said
    $328, and the rationale printed both."""
    exp = store.new_experiment("p4d-one-cost")
    for i, m in enumerate(PLAN5):  # 36 s per epoch x 1,000 epochs = 10 h each, measured on an A100
        exp.add_run(m, noisy(36_000.0, 30, 0.002, 60 + i), sweep_id="a100", device=A100, job=str(i),
                    target_epochs=1000, extra_params=REFERENCE)
    r = report_from_store(exp, tmp_path, "sweep=a100")
    p4d = _inst(r, "p4d.24xlarge")
    cloud = next(c for c in r["costs"]["cloud"] if c["instance"] == "p4d.24xlarge")
    assert cloud["usd"] == pytest.approx(p4d["usd"]) and cloud["hours"] == pytest.approx(p4d["wall_hours"])
    assert p4d["hours_serial"] == pytest.approx(50.0, rel=0.01) and p4d["wall_hours"] == pytest.approx(10.0, rel=0.01)
    assert p4d["gpus_used"] == 5 and p4d["basis"] == "measured"
    assert p4d["usd"] == pytest.approx(10.0 * 32.77, rel=0.01)
    assert cloud["usd_range"] == pytest.approx(p4d["usd_range"]) and cloud["gpus_used"] == 5
    from trainbench.analysis.report.report import console_summary, markdown

    for text in (r["decision"]["rationale"], markdown(r), console_summary(r)):
        assert "1639" not in text and "1,639" not in text and "1638" not in text and "1,638" not in text
    assert "for about $328" in r["decision"]["rationale"]


# --------------------------------------------------------------------------------------------------
# 2. local electricity: the local card's hours, never a CPU sweep's hours
# --------------------------------------------------------------------------------------------------


def test_local_electricity_prices_the_local_cards_hours_not_the_cpu_hours(store, tmp_path):
    store = store.new_experiment("cpu-elec")  # alone: no other sweep measured these models on a GPU
    rng = np.random.default_rng(3)
    store.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(30)), sweep_id="cpu-elec", device="cpu",
                  extra_metrics=DQN, extra_params=SMALL)
    r = report_from_store(store, tmp_path, "sweep=cpu-elec", "hardware=rtx3050ti_4gb", "decision.plan=[dqn]")
    local = _inst(r, "local")
    cpu_hours = r["models"]["dqn"]["projection"]["hours"]
    loc = r["costs"]["local"]
    assert loc["gpu"] == "rtx3050ti_4gb" and loc["basis"] == "projected"
    assert loc["hours"] == pytest.approx(local["wall_hours"]) and loc["hours"] < 0.5 * cpu_hours
    assert loc["usd"] == pytest.approx(local["wall_hours"] * 150 / 1000 * 0.15)  # the card's 150 W x tariff
    assert loc["usd"] == pytest.approx(local["usd"]) and loc["usd_conservative"] == pytest.approx(
        local["wall_hours_range"][1] * 1.5 * 150 / 1000 * 0.15)


def test_without_hours_on_the_local_machine_the_electricity_is_not_priced(store, tmp_path):
    """hardware=cpu for a sweep on an H200: nothing measures the local CPU, so no cost from the H200's hours."""
    exp = store.new_experiment("h200-cpu-local")
    exp.add_run("dqn", noisy(4.0, 40, 0.01, 5), sweep_id="h200", device=H200, extra_params=REFERENCE)
    r = report_from_store(exp, tmp_path, "sweep=h200", "hardware=cpu", "decision.plan=[dqn]")
    loc = r["costs"]["local"]
    assert loc["hours"] is None and loc["usd"] is None and "hardware=cpu" in loc["why_unpriced"]
    d = r["decision"]
    assert d["basis"].startswith(f"measured on {H200}, not the local cpu") and d["basis_kind"] == "other device"
    assert d["confidence"] == "low" and any("rests on hours measured on" in x for x in d["confidence_reasons"])


def test_the_power_of_another_device_never_prices_the_local_card(store, tmp_path):
    """NVML board power measured on a rented A100 is not the local card's power."""
    exp = store.new_experiment("a100-power")
    exp.add_run("dqn", noisy(5.0, 40, 0.01, 6), sweep_id="a100", device=A100, gpu_power_w=400.0,
                extra_metrics=DQN, extra_params=REFERENCE)
    r = report_from_store(exp, tmp_path, "sweep=a100", "hardware=rtx3050ti_4gb", "hardware.power_w=null",
                          "decision.plan=[dqn]")
    loc = r["costs"]["local"]
    assert loc["hours"] is not None and loc["power_w"] is None and loc["usd"] is None
    assert "power" in loc["why_unpriced"]
    # measured on the card itself, its NVML power prices it
    exp.add_run("dqn", noisy(9.0, 40, 0.01, 16), sweep_id="laptop", device=LAPTOP, gpu_power_w=60.0,
                extra_params=REFERENCE)
    loc = report_from_store(exp, tmp_path, "sweep=laptop", "hardware=rtx3050ti_4gb", "hardware.power_w=null",
                            "decision.plan=[dqn]")["costs"]["local"]
    assert loc["power_w"] == 60.0 and loc["usd"] == pytest.approx(loc["hours"] * 60 / 1000 * 0.15)


# --------------------------------------------------------------------------------------------------
# 3. the decision rests on the local instance, and says which basis
# --------------------------------------------------------------------------------------------------


def test_a_sweep_on_a_rented_a100_decides_on_the_local_3050ti(store, tmp_path):
    exp = store.new_experiment("a100-rented")
    exp.add_run("dqn", noisy(5.0, 40, 0.01, 7), sweep_id="a100", device=A100, target_epochs=1000,
                extra_metrics=DQN, extra_params=REFERENCE)
    args = ("sweep=a100", "hardware=rtx3050ti_4gb", "decision.plan=[dqn]")
    first = report_from_store(exp, tmp_path, *args)
    a100_cons = first["decision"]["measured_device"][Summary.TOTAL_HOURS_CONSERVATIVE]
    local_cons = _inst(first, "local")["wall_hours_conservative"]
    assert local_cons > 1.2 * a100_cons  # the laptop card is slower than an A100
    # thresholds between the two: the A100's hours alone would say local_gpu, the 3050 Ti's say cloud
    lo, hi = a100_cons * 1.05, a100_cons * 1.1
    r = report_from_store(exp, tmp_path, *args, f"decision.local_max_hours={lo}", f"decision.cloud_min_hours={hi}")
    d = r["decision"]
    assert d["measured_device"]["recommendation"] == "local_gpu" and d["recommendation"] == "cloud"
    assert d["basis"] == "scaled from a100_40gb" and d["basis_kind"] == "scaled"
    assert d["local_instance"]["gpu"] == "rtx3050ti_4gb" and d["local_instance"]["instance"] == "local"
    assert d[Summary.TOTAL_HOURS] == pytest.approx(_inst(r, "local")["wall_hours"])
    assert d[ReportKey.MODELS_IN_TOTAL] == ["dqn"]


def test_a_sweep_on_the_card_itself_is_measured_on_it(store, tmp_path):
    exp = store.new_experiment("on-the-card")
    exp.add_run("dqn", noisy(5.0, 40, 0.01, 8), sweep_id="laptop", device=LAPTOP, target_epochs=1000,
                extra_params=REFERENCE)
    r = report_from_store(exp, tmp_path, "sweep=laptop", "hardware=rtx3050ti_4gb", "decision.plan=[dqn]")
    d = r["decision"]
    assert d["basis"] == "measured on rtx3050ti_4gb" and d["basis_kind"] == "measured"
    assert d[Summary.TOTAL_HOURS] == pytest.approx(r["models"]["dqn"]["projection"]["hours"])
    assert r["costs"]["local"]["usd"] == pytest.approx(d[Summary.TOTAL_HOURS] * 150 / 1000 * 0.15)


def test_a_cpu_sweep_with_a_local_card_decides_on_its_projection(store, tmp_path):
    store = store.new_experiment("cpu-basis")  # alone: no other sweep measured these models on a GPU
    rng = np.random.default_rng(9)
    store.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(30)), sweep_id="cpu-basis", device="cpu",
                  extra_metrics=DQN, extra_params=SMALL)
    r = report_from_store(store, tmp_path, "sweep=cpu-basis", "hardware=rtx3050ti_4gb", "decision.plan=[dqn]")
    d = r["decision"]
    assert d["basis"] == "projected (roofline from cpu profile)" and d["on_local"]
    assert d[Summary.TOTAL_HOURS] == pytest.approx(_inst(r, "local")["wall_hours"])
    assert d["measured_device"]["device"] == "cpu"
    assert d["measured_device"][Summary.TOTAL_HOURS] == pytest.approx(r["models"]["dqn"]["projection"]["hours"])


def test_without_a_local_gpu_entry_the_basis_says_what_it_rests_on(store, tmp_path):
    store = store.new_experiment("cpu-only")  # alone: no other sweep measured these models on a GPU
    store.add_run("dqn", noisy(160.0, 30, 0.01, 11), sweep_id="cpu-only", device="cpu", extra_params=SMALL)
    d = report_from_store(store, tmp_path, "sweep=cpu-only", "hardware=cpu", "decision.plan=[dqn]")["decision"]
    assert d["basis"] == "measured on cpu" and d["local_instance"]["local_kind"] == "measured device"
    exp = store.new_experiment("auto-h200")
    exp.add_run("dqn", noisy(4.0, 40, 0.01, 12), sweep_id="h200", device=H200, extra_params=REFERENCE)
    d = report_from_store(exp, tmp_path, "sweep=h200", "decision.plan=[dqn]")["decision"]  # hardware=auto
    assert d["basis"].startswith(f"measured on {H200} (hardware=auto: the device the sweep ran on")


# --------------------------------------------------------------------------------------------------
# 4. confidence: after the basis, from the basis, the sizes, the epochs and the thresholds
# --------------------------------------------------------------------------------------------------


def test_the_default_cpu_run_decides_with_low_confidence_and_says_why(store, tmp_path):
    """`make run` without a GPU: a CPU sweep at size=small, hardware=rtx3050ti_4gb, default epochs."""
    store = store.new_experiment("make-run")  # alone: no other sweep measured these models on a GPU
    rng = np.random.default_rng(13)
    store.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(14)), sweep_id="make-run", device="cpu", warmup=2,
                  extra_metrics=DQN, extra_params=SMALL)
    r = report_from_store(store, tmp_path, "sweep=make-run", "hardware=rtx3050ti_4gb", "decision.plan=[dqn]")
    d = r["decision"]
    assert d["confidence"] == "low"
    text = " | ".join(d["confidence_reasons"])
    assert "size=small" in text and "not a measurement" in text and "target epochs not set" in text


def test_confidence_follows_the_basis_measured_scaled_projected(store, tmp_path):
    exp = store.new_experiment("basis-confidence")
    exp.add_run("dqn", noisy(5.0, 130, 0.01, 14), sweep_id="a100", device=A100, target_epochs=1000,
                extra_metrics=DQN, extra_params=REFERENCE)
    args = ("sweep=a100", "decision.plan=[dqn]", "+decision.target_epochs.dqn=1000")
    measured = report_from_store(exp, tmp_path, *args, "hardware=a100_40gb")["decision"]
    scaled = report_from_store(exp, tmp_path, *args, "hardware=rtx3050ti_4gb")["decision"]
    assert measured["basis"] == "measured on a100_40gb" and measured["confidence"] == "high", \
        measured["confidence_reasons"]
    assert scaled["basis_kind"] == "scaled" and scaled["confidence"] == "medium"
    assert any("scaled to the local rtx3050ti_4gb" in x for x in scaled["confidence_reasons"])
    s, m = dec.basis_reasons(decision_of(basis_kind="projected", basis="projected (roofline from cpu profile)",
                                         local_instance={"gpu": "rtx3050ti_4gb"}))
    assert s and not m and "not a measurement" in s[0].text
    assert dec.basis_reasons(decision_of(basis_kind="measured", basis="measured on t4")) == ([], [])


def test_a_decision_on_sizes_the_team_will_not_train_says_so_and_is_low():
    models = {"dqn": entry_of(size="small"), "tft": entry_of(size="reference"), "ppo": entry_of(size="unsized"),
              "tlob": entry_of(source="estimate", size=None)}
    severe, mild = dec.size_reasons(models, ["dqn", "tft", "ppo", "tlob"], None)
    assert len(severe) == 1 and "size=small (dqn)" in severe[0].text and "decision.size=small" in severe[0].text
    assert len(mild) == 1 and "ppo" in mild[0].text
    # the team chose the small size: it is what they will train
    assert dec.size_reasons(models, ["dqn", "tft"], "small") == ([], [])
    # through the confidence: the size rule alone makes it low
    small = {"dqn": entry_of(size="small", target_epochs_source="decision.target_epochs")}
    decision = decision_of(recommendation=Recommendation.LOCAL_GPU, models_in_total=["dqn"], basis_kind="measured")
    assert dec.confidence(small, [], 1, [], [], [], True, decision, None)[0] == "low"
    assert dec.confidence(small, [], 1, [], [], [], True, decision, "small") == ("high", [])


def test_default_target_epochs_lower_confidence():
    models = {"dqn": entry_of(target_epochs_source="run param model.target_epochs",
                              projection={"target_epochs": 1000}),
              "tft": entry_of(target_epochs_source="decision.target_epochs", projection={"target_epochs": 40}),
              "ppo": entry_of(target_epochs_source="run param model.target_epochs", projection={"target_epochs": 9},
                              plan={"epochs_basis": "early_stopping"})}
    severe, mild = dec.epochs_reasons(models, ["dqn", "tft", "ppo"])
    assert not severe and len(mild) == 1 and "dqn (1000)" in mild[0].text and "tft" not in mild[0].text \
        and "ppo" not in mild[0].text
    assert dec.epochs_reasons(models, ["tft", "ppo"]) == ([], [])


def _dec(rec, total, rng, cons, **p):
    return decision_of(recommendation=rec, total_hours=total, total_hours_range=rng, total_hours_conservative=cons,
                       **p)


def test_the_distance_to_the_thresholds_lowers_confidence():
    assert dec.threshold_reasons(_dec("local_gpu", 5.0, [4.0, 6.0], 9.0)) == ([], [])
    # within 10% of 24 h: medium
    s, m = dec.threshold_reasons(_dec("local_gpu", 14.0, [13.0, 15.5], 23.2))
    assert not s and "within 10% of the 24 h threshold" in m[0].text
    # the range from the fast end to the conservative total crosses 48 h: medium; spans both: low
    s, m = dec.threshold_reasons(_dec("cloud", 40.0, [38.0, 42.0], 63.0))
    assert not s and "crosses the 48 h threshold" in m[0].text
    s, m = dec.threshold_reasons(_dec("cloud", 30.0, [20.0, 40.0], 60.0))
    assert s and "spans both" in s[0].text


def test_the_monte_carlo_probabilities_win_over_the_range():
    # the plan's Monte Carlo: P(total < 24 h) and P(total > 48 h) where present
    assert dec.threshold_reasons(_dec("local_gpu", 14.0, [13.0, 15.5], 23.2, p_within_24h=0.97,
                                      p_over_48h=0.0)) == ([], [])
    s, m = dec.threshold_reasons(_dec("local_gpu", 20.0, [18.0, 22.0], 23.0, p_within_24h=0.7, p_over_48h=0.0))
    assert not s and "probability 70%" in m[0].text
    s, m = dec.threshold_reasons(_dec("cloud", 50.0, [40.0, 60.0], 90.0, p_within_24h=0.0, p_over_48h=0.4))
    assert s and "probability 40%" in s[0].text


def test_a_model_that_does_not_fit_the_local_card_lowers_confidence():
    s, m = dec.local_fit_reasons(decision_of(on_local=True, local_instance={"gpu": "rtx3050ti_4gb",
                                                                            "does_not_fit": ["tft"]}))
    assert s and "tft" in s[0].text and not m
    assert dec.local_fit_reasons(decision_of(on_local=True, local_instance={"gpu": "t4"})) == ([], [])

"""RunRecord.workload_profile: the run's workload_profile.json (schema 1) loaded with the run; a missing or
malformed artifact gives None and a note, never a crash."""

from __future__ import annotations

import copy
import json
import re

import pytest

from trainbench.analysis.runs import load_run, projectable_workload_profile, workload_profile_from_json
from trainbench.core.vocab import WORKLOAD_PROFILE_KEYS, Artifact

PROFILE = {
    "schema": 1, "profiled_on": "cpu", "precision": "fp32", "complete": True, "incomplete_reasons": [],
    "optimizer": {"measured_impl": "foreach", "booked_as": "fused"},
    "kernels": [{"cls": "matmul_attention", "dtype": "fp32", "autocast": "lower", "count": 12, "flops": 2.4e9,
                 "bytes": 3.1e7},
                {"cls": "optimizer", "dtype": "fp32", "autocast": "fp32", "count": 2, "flops": 1.4e6, "bytes": 2.8e6}],
    "chains": [{"what": "lstm", "cls": "matmul_attention", "dtype": "fp32", "autocast": "lower", "count": 2,
                "steps": 252, "flops_per_step": 8.2e6, "bytes_per_step": 4.1e5}],
    "host": {"ops": 14, "syncs": 3}}


def _run(store, sweep, artifact: str | None, metrics=None):
    rid = store.add_run("tft", [1000.0, 1010.0, 990.0], sweep_id=sweep, device="cpu", extra_metrics=metrics)
    if artifact is not None:
        store.client.log_text(rid, artifact, Artifact.WORKLOAD_PROFILE)
    return load_run(store.client, store.client.get_run(rid))


def test_a_recorded_profile_is_loaded_with_the_run(store):
    rec = _run(store, "wp-ok", json.dumps(PROFILE))
    assert rec.workload_profile == PROFILE
    assert not [n for n in rec.notes if Artifact.WORKLOAD_PROFILE in n]
    assert projectable_workload_profile(rec) == (PROFILE, None)


def test_a_run_without_the_artifact_gets_none_and_a_note(store):
    old = _run(store, "wp-old", None, metrics={"workload.matmul_attention.fp32.flops": 1e9})
    assert old.workload_profile is None
    assert any("old coarse profile" in n for n in old.notes)  # the aggregate metrics remain
    bare = _run(store, "wp-none", None)
    assert bare.workload_profile is None and any("not profiled" in n for n in bare.notes)


def _broken(change):
    obj = copy.deepcopy(PROFILE)
    change(obj)
    return json.dumps(obj)


@pytest.mark.parametrize(("text", "why"), [
    ("{not json", "Expecting"),
    ("[1, 2]", "not a JSON object"),
    (_broken(lambda o: o.update(schema=2)), "schema 2"),
    (_broken(lambda o: o.pop("host")), "missing keys ['host']"),
    (_broken(lambda o: o["kernels"][0].pop("flops")), "kernels[0] lacks"),
    (_broken(lambda o: o["chains"][0].update(steps=-1)), "chains[0].steps"),
    (_broken(lambda o: o["kernels"][1].update(bytes=float("nan"))), "kernels[1].bytes"),
    (_broken(lambda o: o.update(complete=False)), "names no reason"),
    (_broken(lambda o: o.update(optimizer={})), "measured_impl"),
    # bounded before use: nesting, names, finite host counts, rows
    ("[" * 200_000 + "]" * 200_000, "nested deeper than"),
    ('{"schema": 1, "x": ' + "[" * 30 + "]" * 30 + "}", "nested deeper than"),
    (_broken(lambda o: o["kernels"][0].update(cls=7)), "kernels[0].cls is not a name"),
    (_broken(lambda o: o["chains"][0].update(what=["lstm"])), "chains[0].what is not a name"),
    (_broken(lambda o: o["kernels"][0].update(dtype="x" * 1000)), "kernels[0].dtype is not a name"),
    (_broken(lambda o: o["host"].update(ops=float("nan"))), "host.ops = nan"),
    (_broken(lambda o: o["host"].update(syncs=float("inf"))), "host.syncs = inf"),
    (_broken(lambda o: o["host"].update(ops=-3)), "host.ops = -3"),
    (_broken(lambda o: o.update(kernels=o["kernels"] * 60_000)), "over the 100000"),
    (_broken(lambda o: o.update(complete=False, incomplete_reasons=[{"a": 1}])), "incomplete_reasons must be"),
])
def test_a_malformed_profile_is_refused_with_what_is_wrong(text, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        workload_profile_from_json(text)


def test_a_malformed_artifact_gives_none_and_a_note_not_a_crash(store):
    rec = _run(store, "wp-bad", _broken(lambda o: o.update(schema=7)))
    assert rec.workload_profile is None and projectable_workload_profile(rec)[0] is None
    assert any("unreadable" in n and "schema 7" in n for n in rec.notes)
    assert rec.series  # the rest of the run is read as ever


def test_an_incomplete_profile_is_loaded_with_its_reasons(store):
    reasons = ["kernels bypassed the dispatcher: cuda graphs (the update is replayed as one graph)"]
    rec = _run(store, "wp-inc", _broken(lambda o: o.update(complete=False, incomplete_reasons=reasons)))
    assert rec.workload_profile["complete"] is False and rec.workload_profile["incomplete_reasons"] == reasons
    assert tuple(rec.workload_profile) == WORKLOAD_PROFILE_KEYS
    # kept for the report, but never projected from: the reader says why
    assert any("incomplete" in n and "cuda graphs" in n for n in rec.notes)
    prof, why = projectable_workload_profile(rec)
    assert prof is None and why == "incomplete workload profile: " + reasons[0]


def test_a_profile_from_measure_projects_through_the_kernel_model_with_its_chains():
    """The artifact measure/workload.py writes is what analysis/projection/kernel_model.py reads: an LSTM's time steps
    are chains, each step costing at least its floor on any GPU (a recurrence cannot run in parallel)."""
    import torch

    from trainbench.analysis.projection import calibration, gpus, kernel_model, roofline
    from trainbench.measure.workload import profile_artifact, profile_callable

    torch.manual_seed(0)
    steps = 200
    lstm = torch.nn.LSTM(8, 16)
    x = torch.randn(steps, 4, 8)
    prof = json.loads(json.dumps(profile_artifact(profile_callable(lambda: lstm(x)[0].sum().backward()))))
    assert workload_profile_from_json(json.dumps(prof)) == prof and kernel_model.check_profile(prof) is None
    a100 = gpus.load_gpus()["a100_80gb"]
    with_chains = roofline.project(prof, a100, precision="fp32")["epoch_ms"]
    without = roofline.project({**prof, "chains": []}, a100, precision="fp32")["epoch_ms"]
    dependent = sum(c["count"] * c["steps"] for c in prof["chains"])
    assert dependent == 2 * steps  # forward and backward, one layer
    chains = calibration.load_constants()["chains"]
    floor = min(chains[p]["floor_ms"]["lstm"] for p in calibration.CHAIN_PASSES)  # the calibrated per-step floor
    assert with_chains - without >= dependent * floor * 0.99
    incomplete = {**prof, "complete": False, "incomplete_reasons": ["kernels bypassed the dispatcher: cuda graphs"]}
    assert "cuda graphs" in kernel_model.check_profile(incomplete)


def test_a_string_inside_a_profile_may_hold_brackets():
    """The nesting bound counts structure, not the brackets inside names."""
    text = _broken(lambda o: o.update(incomplete_reasons=[], precision="[" * 50))
    assert workload_profile_from_json(text)["precision"] == "[" * 50


@pytest.mark.parametrize(("change", "what"), [
    (lambda o: o["kernels"][0].update(flops=1e30, bytes=1e30), "flops"),
    (lambda o: o["kernels"][0].update(count=1e18), "ops"),
    (lambda o: o["chains"][0].update(steps=1e6, flops_per_step=0, bytes_per_step=1e12), "bytes"),
])
def test_a_profile_beyond_what_the_measured_epoch_can_hold_is_refused_as_invalid(store, change, what):
    """Finite but absurd values: a profile whose work per measured second of the run's own epoch is beyond any
    device is not this run's workload; refused with the reason, never projected from."""
    rec = _run(store, f"wp-absurd-{what}", _broken(change))
    assert rec.workload_profile is None and projectable_workload_profile(rec)[0] is None
    (note,) = [n for n in rec.notes if Artifact.WORKLOAD_PROFILE in n]
    assert "refused as invalid" in note and what in note and "beyond any device" in note, note


def test_aggregate_workload_metrics_beyond_the_measured_epoch_are_dropped(store):
    rec = _run(store, "wp-agg", None, metrics={"workload.matmul_attention.fp32.flops": 1e30,
                                               "workload.matmul_attention.fp32.bytes": 1e6})
    assert not [k for k in rec.metrics if k.startswith("workload.")]
    assert any("aggregate workload.* metrics refused as invalid" in n for n in rec.notes), rec.notes
    ok = _run(store, "wp-agg-ok", None, metrics={"workload.matmul_attention.fp32.flops": 1e9})
    assert ok.metrics["workload.matmul_attention.fp32.flops"] == 1e9

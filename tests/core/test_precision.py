"""The precision rule's one home (core/precision.py): the run and the projection resolve ``auto`` alike, and
the config's value sets are enums whose members are their plain strings."""

from __future__ import annotations

import json

import pytest

from trainbench.analysis.projection import gpus, kernel_model
from trainbench.config.analyze import OutlierRule
from trainbench.config.run import Device, OptimizerImpl
from trainbench.core.contamination_policy import ContaminatedPolicy
from trainbench.core.precision import Precision, ProjectionPrecision, auto_precision, parse_capability
from trainbench.measure import precision as run_side

GPUS = gpus.load_gpus(gpus.default_conf_dir())  # the packaged catalogue (not a team's conf/hardware)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_the_projection_resolves_auto_as_a_run_on_that_gpu_would(name):
    spec = GPUS[name]
    cap = parse_capability(spec.compute_capability)
    run_precision, _ = run_side.resolve_precision(Precision.auto, "cuda", cap)
    run_tf32, _ = run_side.resolve_tf32(True, "cuda", cap)
    target = kernel_model.resolve_precision(spec, "auto")
    assert target.precision == run_precision
    assert target.tf32 == (run_tf32 and run_precision == "bf16")


def test_a_changed_rule_changes_both_sides(monkeypatch):
    from trainbench.core import precision as rule

    monkeypatch.setattr(rule, "BF16_MIN_CAPABILITY", (9, 0))  # as if bf16 needed Hopper
    assert run_side.resolve_precision("auto", "cuda", (8, 0))[0] == "fp16"
    assert kernel_model.resolve_precision(GPUS["a100_80gb"], "auto").precision == "fp16"
    assert kernel_model.resolve_precision(GPUS["h100_sxm"], "auto").precision == "bf16"


def test_auto_falls_down_when_the_catalogue_lists_no_peak_for_it():
    spec = gpus.GpuSpec(name="x", gpu="X", peak_tflops={"fp32": 10, "fp16": 40}, memory_gbps=500,
                        compute_capability="8.6")
    t = kernel_model.resolve_precision(spec, "auto")
    assert t.precision == "fp16" and "no bf16 peak" in t.notes[0]
    assert auto_precision("cuda", (8, 6))[0] == "bf16"  # the rule itself is unchanged


@pytest.mark.parametrize("text,want", [("8.6", (8, 6)), ("9.0", (9, 0)), (None, None), ("n/a", None)])
def test_capability_text(text, want):
    assert parse_capability(text) == want


@pytest.mark.parametrize("member", [Precision.bf16, ProjectionPrecision.tf32, OptimizerImpl.fused, Device.cpu,
                                    OutlierRule.mad, ContaminatedPolicy.drop])
def test_a_config_enum_member_is_its_plain_string(member):
    value = member.value
    assert member == value and str(member) == value and f"{member}" == value and f"{member:>6}" == f"{value:>6}"
    assert json.dumps({"k": member}) == json.dumps({"k": value}) and {value: 1}[member] == 1


def test_the_value_sets_are_the_enums():
    assert [str(p) for p in ProjectionPrecision] == ["auto", "fp32", "tf32", "bf16", "fp16"]
    assert set(Precision) < set(ProjectionPrecision)
    with pytest.raises(ValueError, match="projection.precision='int8' is invalid: use one of auto, fp32"):
        kernel_model.resolve_precision(GPUS["a100_80gb"], "int8")

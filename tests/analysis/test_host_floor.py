"""The host's floor of a launch-bound step on the local card, and whether the card beats the CPU measured here
(analysis/projection/host_floor.py)."""

from types import SimpleNamespace

import pytest
from analysis_helpers import entry_of

from trainbench.analysis.fields import to_json
from trainbench.analysis.projection import gpus, host_floor
from trainbench.analysis.projection import projection as pj
from trainbench.analysis.report_types import HostFloor
from trainbench.core.vocab import ParamKey, Series

GPUS = gpus.load_gpus(gpus.default_conf_dir())


def test_the_dispatch_cost_is_the_least_cpu_time_per_op_measured_here():
    cpu = {"dqn": (50.0, 5000.0), "tft": (9000.0, 20000.0), "none": (0.0, 10.0)}
    d = host_floor.dispatch_cost(cpu)
    assert d["from"].startswith("dqn: 50 ms / 5000 ops") and d["us_per_op"] == pytest.approx(10.0)
    assert host_floor.dispatch_cost(cpu, leave_out="dqn")["from"].startswith("tft")  # a model's own: the others
    assert host_floor.dispatch_cost({}) is None and host_floor.dispatch_cost({"dqn": (50.0, 5000.0)}, "dqn") is None


def test_a_launch_bound_epoch_is_floored_and_not_faster_a_heavy_one_is():
    d = {"us_per_op": 10.0, "from": "dqn: 50 ms / 5000 ops measured on this CPU"}
    # the kernel model says 5 ms, but 5000 ops at 10 us dispatch + 2-6 us launch cannot issue in under 60 ms
    small = host_floor.host_floor(5.0, [3.0, 9.0], 50.0, 5000.0, d)
    assert small["floor_ms"] == pytest.approx(5000 * 14e-3) and small["gpu_epoch_ms"] == small["floor_ms"]
    assert small["gpu_epoch_ms_range"] == pytest.approx([60.0, 80.0])
    assert small["gpu_faster"] is False and small["speedup_range"][1] < 1
    assert "NOT projected faster than this CPU" in host_floor.phrase("dqn", "rtx3050ti_4gb", small)
    big = host_floor.host_floor(200.0, [150.0, 300.0], 9000.0, 20000.0, d)  # the floor (280 ms) is below the range
    assert big["gpu_faster"] is True and big["speedup"] == pytest.approx(9000.0 / 280.0)
    assert "projected faster than this CPU: x" in host_floor.phrase("tft", "rtx3050ti_4gb", big)
    near = host_floor.host_floor(40.0, [30.0, 70.0], 50.0, 1000.0, d)
    assert near["gpu_faster"] is None and "spans 1" in host_floor.phrase("m", "t4", near)


def _agg(flops, nbytes, ops):
    return {"workload.matmul_attention.fp32.flops": flops, "workload.matmul_attention.fp32.bytes": nbytes / 2,
            "workload.matmul_attention.fp32.ops": ops / 10, "workload.elementwise_norm.fp32.bytes": nbytes / 2,
            "workload.elementwise_norm.fp32.ops": ops * 0.9}


def test_a_cpu_sweeps_local_card_rows_carry_the_floor_and_their_hours_follow_it():
    models = {m: entry_of(source="measured", **{Series.EPOCH_TIME_MS: {"mean": ms, "ci95_mean": [ms * 0.9, ms * 1.1]}},
                          projection={"target_epochs": 100})
              for m, ms in (("small", 40.0), ("tiny", 30.0), ("big", 60000.0))}
    runs = {"small": [SimpleNamespace(metrics=_agg(1e6, 1e6, 4000), params={ParamKey.TRAINER_PRECISION: "fp32"})],
            "tiny": [SimpleNamespace(metrics=_agg(1e5, 1e5, 3000), params={ParamKey.TRAINER_PRECISION: "fp32"})],
            "big": [SimpleNamespace(metrics=_agg(1e14, 1e11, 20000), params={ParamKey.TRAINER_PRECISION: "fp32"})]}
    cat = [SimpleNamespace(name="g4dn.xlarge", gpu="t4", gpus=1, usd_per_hour=0.526, price_date="x",
                           relative_speed=None)]
    out = pj.project_report(models, runs, ["small", "tiny", "big"], "cpu", [], cat, SimpleNamespace(name="rtx3050ti_4gb"),
                            0.0225, (24.0, 48.0), GPUS)
    by = {(p.instance, p.model): p for p in out.projections}
    small, big = by[("local", "small")], by[("local", "big")]
    assert small.host_floor.dispatch_us_per_op == pytest.approx(30.0 * 1e3 / 3000)  # the least of the others
    assert by[("local", "tiny")].host_floor.dispatch_us_per_op == pytest.approx(40.0 * 1e3 / 4000)
    assert small.host_floor.gpu_faster is False and small.epoch_ms == small.host_floor.gpu_epoch_ms
    assert small.hours == pytest.approx(small.epoch_ms * 100 / 3.6e6)
    assert any("floored by this host" in n for n in small.notes)
    assert big.host_floor.gpu_faster is True
    assert by[("g4dn.xlarge", "small")].host_floor is None  # another machine's host is not this one
    assert "host_floor" not in to_json(by[("g4dn.xlarge", "small")])  # nor written
    assert isinstance(small.host_floor, HostFloor) and small.host_floor.launch_us == list(host_floor.GPU_LAUNCH_US)
    # one model alone on the CPU, from runs that predate the measured dispatch: no other model to take the
    # dispatch cost from, no floor
    alone = pj.project_report(models, runs, ["small"], "cpu", [], cat, SimpleNamespace(name="rtx3050ti_4gb"),
                              0.0225, (24.0, 48.0), GPUS)
    assert all(p.host_floor is None for p in alone.projections)
    # a sweep on a GPU has no CPU epoch to compare with
    gpu = pj.project_report(models, runs, ["small"], "Tesla T4", [], cat, SimpleNamespace(name="rtx3050ti_4gb"),
                            0.0225, (24.0, 48.0), GPUS)
    assert all(p.host_floor is None for p in gpu.projections)


def test_the_dispatch_a_run_measured_is_used_before_the_other_models_bound_even_alone():
    from trainbench.analysis.projection import kernel_model

    models = {"small": entry_of(source="measured", **{Series.EPOCH_TIME_MS: {"mean": 40.0, "ci95_mean": [36.0, 44.0]}},
                                projection={"target_epochs": 100})}
    rows = {("matmul_attention", "fp32"): {"flops": 1e6, "bytes": 5e5, "ops": 400.0},
            ("elementwise_norm", "fp32"): {"flops": 0.0, "bytes": 5e5, "ops": 3600.0}}
    profile = {**kernel_model.profile_from_aggregate(rows), "coarse": False}
    profile["host"]["dispatch_us_per_op"] = 7.5  # what the run's tiny step gave (measure/dispatch.py)
    runs = {"small": [SimpleNamespace(metrics={}, params={ParamKey.TRAINER_PRECISION: "fp32"},
                                      workload_profile=profile)]}
    out = pj.project_report(models, runs, ["small"], "cpu", [], [], SimpleNamespace(name="rtx3050ti_4gb"),
                            0.0225, (24.0, 48.0), GPUS)
    (row,) = [p for p in out.projections if p.instance == "local"]
    f = row.host_floor
    assert f.dispatch_us_per_op == 7.5 and "tiny tensors" in f.dispatch_from
    assert f.floor_ms == pytest.approx(4000 * (7.5 + host_floor.GPU_LAUNCH_US[1]) * 1e-3)
    assert host_floor.measured_dispatch({"host": {"ops": 3}}) is None  # older runs: not measured

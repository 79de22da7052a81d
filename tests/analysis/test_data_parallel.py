"""Data parallelism (issue 37): the projection across N GPUs, the instances rows where it helps, the decision's
advice, the plan's epochs at a global batch, and runs on several ranks never pooled with 1-rank runs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from analysis_helpers import entry_of, noisy, plan_of, report_from_store

from trainbench.analysis.decision import decision as dec
from trainbench.analysis.fields import from_json
from trainbench.analysis.plan.plan import data_parallel_epochs, data_parallel_epochs_range
from trainbench.analysis.projection import data_parallel as dp
from trainbench.analysis.projection import gpus
from trainbench.analysis.projection import projection as pj
from trainbench.analysis.report_types import DataParallelAdvice, DeviceComparison, ModelProjection
from trainbench.analysis.runs import RunRecord
from trainbench.core.vocab import Outcome, ParamKey, ReportKey, Series, Status, model_info

GPUS = gpus.load_gpus(gpus.default_conf_dir())  # the packaged catalogue (not a team's conf/hardware)
A100 = GPUS["a100_40gb"].gpu
P4D = SimpleNamespace(name="p4d.24xlarge", gpu="a100_40gb", gpus=8, usd_per_hour=32.77, price_date="x",
                      relative_speed=None)
D = SimpleNamespace(local_max_hours=24.0, cloud_min_hours=48.0, buffer=0.5)


def _params(split: bool | None, num_params: int = 25_000_000, **extra: str) -> dict[str, str]:
    p = {ParamKey.TRAINER_PRECISION: "bf16", ParamKey.BATCH_SIZE: "256", model_info("num_params"): str(num_params),
         model_info("train_windows"): "100000", **extra}
    if split is not None:
        p[ParamKey.DATA_PARALLEL_SUPPORTED] = str(split).lower()
    return p


def _rec(model: str, params: dict[str, str], epochs: list[float], comm: list[float] | None = None,
         device: str = A100) -> RunRecord:
    series = {Series.EPOCH_TIME_MS: np.asarray(epochs, dtype=float)}
    if comm is not None:
        series[Series.COMM_EXPOSED_MS] = np.asarray(comm, dtype=float)
    return RunRecord(run_id=f"{model}{len(epochs)}", run_name=f"0_{model}", model=model, device=device,
                     sweep_id="s", outcome=Outcome.COMPLETED, status=Status.FINISHED, start_time=0, warmup_epochs=0,
                     target_epochs=None, params=params, tags={}, metrics={}, series=series)


def test_the_all_reduce_is_zero_on_one_gpu_and_grows_as_the_ring_factor():
    board = dp.load_boards()["a100_40gb"]
    nbytes = 400e6
    assert dp.allreduce_ms(nbytes, 1, 200.0, 30.0) == 0.0
    assert dp.exposed_ms(nbytes, 1, 200.0, 30.0, backward_ms=0.0) == 0.0
    assert dp.step_comm_ms(nbytes, 1, board, 10.0) == (0.0, 0.0, 0.0)
    # without latency the time of one all-reduce is 2(N-1)/N x bytes / busbw: 1, 1.5, 1.75 x the 2-GPU time
    t = {n: dp.allreduce_ms(nbytes, n, 200.0, 0.0) for n in (2, 4, 8)}
    assert t[2] == pytest.approx(nbytes / 200e9 * 1e3)
    assert [t[n] / t[2] for n in (4, 8)] == pytest.approx([1.5, 1.75])
    # nothing to hide behind: the buckets one after another are the whole all-reduce, latency per bucket
    k = len(dp.buckets(nbytes))
    assert sum(dp.buckets(nbytes)) == pytest.approx(nbytes) and dp.buckets(nbytes)[0] == dp.FIRST_BUCKET_BYTES
    assert dp.exposed_ms(nbytes, 8, 200.0, 0.0, 0.0) == pytest.approx(t[8])
    assert dp.exposed_ms(nbytes, 8, 200.0, 10.0, 0.0) == pytest.approx(t[8] + k * 0.01)
    # a long backward hides all but the last bucket
    last = dp.allreduce_ms(dp.buckets(nbytes)[-1], 8, 200.0, 0.0)
    assert dp.exposed_ms(nbytes, 8, 200.0, 0.0, backward_ms=1e4) == pytest.approx(last)


def _oci_row(size: int) -> list[float]:
    """The committed OCI A100 table's row at ``size`` bytes: [size, out-of-place us, algbw, busbw]."""
    raw = json.loads(dp.TABLES_FILE.read_text())["tables"]["oci_bm_gpu4_8"]["rows"]
    return next(r for r in raw if r[0] == size)


def test_the_committed_tables_busbw_is_the_printed_column_and_each_names_its_source():
    raw = json.loads(dp.TABLES_FILE.read_text())
    tables = dp.load_tables()
    assert raw["read"] and set(tables) == set(raw["tables"])
    for name, t in tables.items():
        spec = raw["tables"][name]
        cols, rows = spec["columns"], sorted(spec["rows"])
        assert spec["gpus"] == t.gpus == 8 and t.source.startswith("https://") and spec["board"]
        assert list(t.sizes) == [r[0] for r in rows] and t.sizes[0] <= 2**20 <= t.sizes[-1]
        printed = [r[cols.index("busbw_gbps")] for r in rows]
        for size, want, got in zip(t.sizes, printed, t.busbw, strict=True):  # from the time where printed
            assert got == pytest.approx(want, abs=0.006 + 0.002 * want), (name, size)
    boards = dp.load_boards()
    assert all(b.tables for b in boards.values())  # every shipped board reads at least one table


def test_a_bucket_is_read_on_the_table_in_log_size_against_hand_computed_values():
    # a table of two rows: 1 MiB at 20 GB/s, 4 MiB at 80 GB/s; 2 MiB lies halfway in log(size)
    t = dp.BusbwTable(name="t", gpus=8, sizes=(2.0**20, 2.0**22), busbw=(20.0, 80.0), source="x")
    assert t.at(2.0**21) == pytest.approx(50.0) and t.at(2.0**20) == 20.0
    assert t.at(2.0**19) == pytest.approx(10.0)  # below the smallest row: its time (busbw in proportion)
    assert t.at(2.0**30) == 80.0  # above the largest: its busbw
    # the committed A100 tables at DDP's two bucket sizes, by hand from their printed rows
    tables = dp.load_tables()
    oci, azure = tables["oci_bm_gpu4_8"], tables["azure_nd_a100_v4"]
    bw = {s: 1.75 * s / (_oci_row(s)[1] * 1e-6) / 1e9 for s in (2**20, 2**24, 2**25)}  # 8 GPUs: 2 x 7/8
    assert oci.at(2**20) == pytest.approx(bw[2**20]) == pytest.approx(23.92, abs=0.01)
    f = math.log2(25 / 16)  # 25 MiB between the 16 and 32 MiB rows, at 0.644 of the way in log(size)
    assert oci.at(25 * 2**20) == pytest.approx(bw[2**24] + f * (bw[2**25] - bw[2**24]))
    assert oci.at(25 * 2**20) == pytest.approx(137.6, abs=0.1)
    assert azure.at(2**20) == 36.22 and azure.at(25 * 2**20) == pytest.approx(109.22 + f * (132.77 - 109.22))
    # the board reads both (the same HGX A100 fabric): central their mean
    board = dp.load_boards()["a100_40gb"]
    at_1, at_25 = (23.921 + 36.22) / 2, (137.61 + 124.38) / 2
    assert board.busbw_at(2**20)[0] == pytest.approx(at_1, rel=1e-4)
    assert board.busbw_at(25 * 2**20)[0] == pytest.approx(at_25, rel=1e-4)
    # one bucket's all-reduce: 2(N-1)/N x bytes / busbw(bytes), no latency added (the table's time has it)
    assert board.bucket_ms(25 * 2**20, 8) == pytest.approx(1.75 * 25 * 2**20 / (at_25 * 1e9) * 1e3, rel=1e-4)
    assert board.bucket_ms(25 * 2**20, 2) == pytest.approx(1.0 * 25 * 2**20 / (at_25 * 1e9) * 1e3, rel=1e-4)
    # the range: the tables' spread, each one's level moved to the large-message range's ends (200, 240 GB/s)
    lo = min(oci.at(2**20) * 200 / oci.plateau, azure.at(2**20) * 200 / azure.plateau)
    hi = max(oci.at(2**20) * 240 / oci.plateau, azure.at(2**20) * 240 / azure.plateau)
    assert board.busbw_at(2**20)[1:] == pytest.approx((lo, hi))
    assert board.bucket_ms(2**20, 8, dp.FAST) < board.bucket_ms(2**20, 8) < board.bucket_ms(2**20, 8, dp.SLOW)
    # a step's all-reduce with no overlap is the sum of its buckets' times, each at its own size
    gb = 60e6
    assert dp.allreduce_total_ms(gb, 8, board) == pytest.approx(sum(board.bucket_ms(s, 8) for s in dp.buckets(gb)))
    assert dp.step_comm_ms(gb, 8, board, 0.0)[0] == pytest.approx(dp.allreduce_total_ms(gb, 8, board))


def test_a_board_without_a_table_falls_back_to_the_large_message_figure_with_a_wider_range_and_says_so(
        tmp_path, monkeypatch):
    raw = json.loads(dp.BUSBW_FILE.read_text())
    raw["boards"]["h100_sxm"]["tables"] = []  # as if no table were published for it
    path = tmp_path / "busbw.json"
    path.write_text(json.dumps(raw))
    boards = dp.load_boards(path)
    fb = boards["h100_sxm"]
    assert not fb.tables and "no published nccl-tests size table for the h100_sxm board" in fb.basis(8)
    # the widening: the most the large-message figure (central busbw + 33.7 us) understated a tabled board's
    # time at 1 MiB or 25 MiB on 8 GPUs (here the A100 boards: x1.45)
    ratio = [b.bucket_ms(s, 8) / dp.allreduce_ms(s, 8, sum(b.busbw_gbps) / 2, 33.7)
             for b in boards.values() if b.tables for s in (2**20, 25 * 2**20)]
    assert fb.fallback_widen == pytest.approx(max(ratio)) == pytest.approx(1.45, abs=0.01)
    assert f"x{fb.fallback_widen:.2f}" in fb.basis(8)
    s = 25 * 2**20
    assert fb.bucket_ms(s, 8) == pytest.approx(dp.allreduce_ms(s, 8, 425.0, 33.7))  # the existing figure
    assert fb.bucket_ms(s, 8, dp.FAST) == pytest.approx(dp.allreduce_ms(s, 8, 480.0, 33.7))
    assert fb.bucket_ms(s, 8, dp.SLOW) == pytest.approx(dp.allreduce_ms(s, 8, 370.0, 33.7) * fb.fallback_widen)
    # through the projection: the row of a board with no table says so in its notes, a tabled one names its table
    monkeypatch.setattr(dp, "BUSBW_FILE", path)
    runs = {"a": [_rec("a", _params(True), [1000.0])]}
    p5 = SimpleNamespace(name="p5.48xlarge", gpu="h100_sxm", gpus=8, usd_per_hour=98.32, price_date="x",
                         relative_speed=None)
    comps = [_elsewhere("a", A100, 1000.0), _elsewhere("a", GPUS["h100_sxm"].gpu, 500.0)]  # measured on each elsewhere
    out = pj.project_report(_models(40.0, {"8": 1.6}), runs, ["a"], "cpu", comps, [P4D, p5],
                            SimpleNamespace(name="a100_40gb"), 0.06, (24.0, 48.0), GPUS)
    rows = {(p.instance, p.data_parallel): p for p in out.projections_data_parallel if p.model == "a"}
    h100, a100 = rows[("p5.48xlarge", 8)], rows[("p4d.24xlarge", 8)]
    assert h100.comm_ms is not None and any("no published nccl-tests size table" in n for n in h100.notes)
    assert any("oci_bm_gpu4_8" in n for n in a100.notes) and "azure_nd_a100_v4" in a100.range_basis


def test_a_mid_size_models_all_reduce_takes_longer_than_under_the_large_message_figure():
    """25 M parameters (100 MB of fp32 gradients: a 1 MiB bucket and four of at most 25 MiB) across 8 A100s: at the
    buckets' sizes the tables' busbw (30 and 131 GB/s) is a fraction of the large-message 200-240 GB/s; on every
    board the step's all-reduce is longer than under its large-message figure."""
    board = dp.load_boards()["a100_40gb"]
    large = replace(board, tables=())  # the large-message figure plus the per-call latency, as before
    gb = 25e6 * dp.GRAD_BYTES_PER_PARAM
    assert [round(b / 2**20, 1) for b in dp.buckets(gb)] == [1.0, 25.0, 25.0, 25.0, 19.4]
    assert dp.allreduce_total_ms(gb, 8, board) > 1.3 * dp.allreduce_total_ms(gb, 8, large)
    for other in dp.load_boards().values():
        assert dp.allreduce_total_ms(gb, 8, other) > 1.1 * dp.allreduce_total_ms(gb, 8, replace(other, tables=()))
    for step_ms in (0.0, 1.0, 5.0):  # the exposed time too, whatever the backward hides
        table, old = dp.step_comm_ms(gb, 8, board, step_ms), dp.step_comm_ms(gb, 8, large, step_ms)
        assert table[0] > old[0] and table[2] > old[2]
    runs = {"a": [_rec("a", _params(True), [1000.0])]}
    out = _project(_models(40.0, {"8": 1.6}), runs)
    row = next(p for p in out.projections_data_parallel if p.model == "a" and p.data_parallel == 8)
    steps = dp.steps_per_epoch(runs["a"][0], 8)
    assert row.comm_ms == pytest.approx(dp.step_comm_ms(gb, 8, board, 1000.0 / dp.steps_per_epoch(
        runs["a"][0]))[0] * steps)
    assert row.comm_ms > dp.step_comm_ms(gb, 8, large, 1000.0 / dp.steps_per_epoch(runs["a"][0]))[0] * steps


def _elsewhere(model: str, device: str, ms: float) -> DeviceComparison:
    """A model measured on ``device`` in another sweep (devices.device_comparison's row; the CPU its reference)."""
    return DeviceComparison(model=model, reference_device="cpu", device=device, reference_epoch_ms=ms * 10,
                            epoch_ms=ms, reference_runs=1, runs=1, speedup=10.0)


def _models(hours_a: float, f_a: dict[str, float] | None = None) -> dict[str, dict]:
    """Two measured models, 1000 ms an epoch on one A100; ``a``'s epochs give ``hours_a`` hours."""
    target = int(hours_a * 3.6e6 / 1000)
    out = {}
    for m, tgt in (("a", target), ("b", 1000)):
        out[m] = entry_of(source="measured", **{Series.EPOCH_TIME_MS: {"mean": 1000.0, "ci95_mean": [950.0, 1050.0]}},
                          projection={"target_epochs": tgt, "hours": 1000.0 * tgt / 3.6e6},
                          plan={"data_parallel_epochs": f_a if m == "a" else {}})
    return out


def _project(models, runs, hardware="a100_40gb"):
    comps = [_elsewhere(m, A100, 1000.0) for m in models]  # measured on an A100 elsewhere
    return pj.project_report(models, runs, list(models), "cpu", comps, [P4D], SimpleNamespace(name=hardware),
                             0.06, (24.0, 48.0), GPUS)


def test_a_row_across_gpus_appears_only_where_it_helps():
    runs = {"a": [_rec("a", _params(True), [1000.0])], "b": [_rec("b", _params(False), [1000.0])]}
    out = _project(_models(40.0, {"2": 1.1, "4": 1.25, "8": 1.6}), runs)
    rows = {(p.model, p.data_parallel): p for p in out.projections_data_parallel}
    assert all(p.data_parallel == 1 and p.comm_ms == 0.0 for p in out.projections)
    for n in (2, 4, 8):
        a = rows[("a", n)]
        assert 0 < a.comm_ms < a.epoch_ms and a.global_batch == 256 * n
        assert a.epoch_ms_range[0] < a.epoch_ms < a.epoch_ms_range[1]
        assert rows[("b", n)].epoch_ms is None and "cannot be split" in rows[("b", n)].method
    # the exposed all-reduce grows with N, the epoch shrinks
    assert rows[("a", 2)].comm_ms / 195 < rows[("a", 8)].comm_ms / 49  # per step (ceil(391 / N) steps)
    assert rows[("a", 8)].epoch_ms < rows[("a", 4)].epoch_ms < rows[("a", 2)].epoch_ms < 1000.0
    p4d = [i for i in out.instances if i.instance == "p4d.24xlarge"]
    plain = p4d[0]
    assert plain.data_parallel == 1 and plain.global_batch == {"a": 256, "b": 256}
    across = {i.data_parallel: i for i in p4d[1:]}
    assert set(across) == {2, 4, 8}  # a (40 h) split finishes sooner at every N; b stays on one GPU
    for n, row in across.items():
        assert row.split == ["a"] and "b" in row.not_split and row.global_batch["a"] == 256 * n
        assert row.wall_hours_range[1] < plain.wall_hours_range[1]
    # the same model whose epochs grow N-fold at the global batch (B >> B_noise): never sooner, no row
    out = _project(_models(40.0, {"2": 2.0, "4": 4.0, "8": 8.0}), runs)
    assert [i.data_parallel for i in out.instances if i.instance == "p4d.24xlarge"] == [1]
    # no noise scale measured: the hours take the conservative end (N x), so no row either
    out = _project(_models(40.0, None), runs)
    assert [i.data_parallel for i in out.instances if i.instance == "p4d.24xlarge"] == [1]
    assert any("no measured gradient noise scale" in n for p in out.projections_data_parallel
               for n in p.notes)


def test_a_too_long_model_gets_a_data_parallel_instance_and_a_dqn_says_it_cannot_be_split():
    runs = {"a": [_rec("a", _params(True), [1000.0])], "dqn": [_rec("dqn", _params(False), [1000.0])]}
    models = _models(40.0, {"2": 1.1, "4": 1.25, "8": 1.6})
    models["dqn"] = models.pop("b")
    models["dqn"].projection = ModelProjection(target_epochs=144000, hours=40.0)
    out = _project(models, runs)
    advice = {a.model: a for a in dec.data_parallel_advice(out, ["a", "dqn"], D)}
    a = advice["a"]
    assert a.recommended and a.instance == "p4d.24xlarge" and a.data_parallel in (2, 4, 8)
    assert a.hours_range[1] * 1.5 < 24.0 and a.global_batch == 256 * a.data_parallel
    assert "passes the 24 h threshold" in a.why and f"across {a.data_parallel} GPUs of p4d" in a.why
    assert a.usd == pytest.approx(a.hours * 32.77)
    # the cheapest N that brings it under 24 h (the conservative figure)
    under = [p for p in out.projections_data_parallel if p.model == "a"
             and p.hours_range[1] * 1.5 < 24.0]
    assert a.data_parallel == min(under, key=lambda p: p.hours).data_parallel
    q = advice["dqn"]
    assert not q.recommended and q.instance is None and "cannot be split" in q.why
    assert "data_parallel_supported=false" in q.why
    for entry in advice.values():  # every key is a documented field of the report's type
        assert from_json(DataParallelAdvice, entry, "decision.data_parallel").model == entry.model
    text = dec.data_parallel_rationale(list(advice.values()))
    assert "Data parallelism for a" in text and "dqn: no data-parallel instance" in text
    # a model under the threshold gets no advice
    assert dec.data_parallel_advice(_project(_models(5.0, {"8": 1.6}), runs), ["a"], D) == []


def test_a_measured_ddp_run_calibrates_the_all_reduce_and_measures_its_own_n():
    board = dp.load_boards()["a100_40gb"]
    params = _params(True, **{ParamKey.WORLD_SIZE: "2", ParamKey.BATCH_SIZE_PER_RANK: "256"})
    steps = dp.steps_per_epoch(_rec("a", params, [1.0]), 2)
    assert steps == 196  # ceil(ceil(100000 / 256) / 2)
    projected = dp.step_comm_ms(1e8, 2, board, 500.0 / steps)[0] * steps
    run = _rec("a", params, [600.0, 600.0], comm=[3 * projected] * 2)  # 100 ms of it the all-reduce
    factor, why = dp.calibration([run], board, GPUS["a100_40gb"].matches)
    assert factor == pytest.approx(3.0, rel=0.05) and "0_a (2 ranks, a)" in why
    assert dp.calibration([run], board, GPUS["h100_sxm"].matches) is None  # another GPU's run: not this one's
    got = dp.measured_dp([run], 2, GPUS["a100_40gb"].matches)
    assert got["epoch_ms"] == 600.0 and got["comm_ms"] == pytest.approx(3 * projected)
    out = _project(_models(40.0, {"2": 1.1, "4": 1.25, "8": 1.6}), {"a": [_rec("a", _params(True), [1000.0])],
                                                                    "b": [_rec("b", _params(True), [1000.0])]})
    plain = {p.data_parallel: p for p in out.projections_data_parallel if p.model == "a"}
    out = pj.project_report(_models(40.0, {"2": 1.1, "4": 1.25, "8": 1.6}),
                            {"a": [_rec("a", _params(True), [1000.0])], "b": [_rec("b", _params(True), [1000.0])]},
                            ["a", "b"], "cpu", [_elsewhere(m, A100, 1000.0) for m in "ab"],
                            [P4D], SimpleNamespace(name="a100_40gb"), 0.06, (24.0, 48.0), GPUS,
                            dp_runs={"a": [run]})
    cal = {p.data_parallel: p for p in out.projections_data_parallel if p.model == "a"}
    assert cal[2].method == "measured (2 ranks)" and cal[2].epoch_ms == 600.0
    assert cal[8].comm_ms == pytest.approx(plain[8].comm_ms * factor)
    assert "calibrated on measured DDP run(s) 0_a" in cal[8].range_basis


def test_the_validation_pass_is_divided_across_gpus_only_where_the_runs_shard_it():
    """A run of 800 ms of training and 200 ms of validation an epoch (loaded: ``epoch_time_ms`` is their sum): at N
    GPUs the training part takes steps(N)/steps(1), the validation part 1/N of the held-out windows where the runs
    shard validation, all of it where they predate that."""
    def rec(**extra: str) -> RunRecord:
        r = _rec("a", _params(True, **{model_info("val_windows"): "1001", **extra}), [1000.0, 1000.0])
        r.series[Series.TRAIN_TIME_MS] = np.asarray([800.0, 800.0])
        r.series[Series.EVAL_TIME_MS] = np.asarray([200.0, 200.0])
        return r

    sharded, old = rec(**{ParamKey.VALIDATION_SHARDED: "true"}), rec()
    assert dp.validation_split(sharded, 4)[:2] == pytest.approx((0.2, 251 / 1001))  # ceil(1001 / 4) windows a rank
    assert dp.validation_split(old, 4)[:2] == (pytest.approx(0.2), 1.0)
    assert dp.validation_split(_rec("a", _params(True), [1000.0]), 4)[:2] == (0.0, 1.0)  # no validation pass
    board = dp.load_boards()["a100_40gb"]
    base = {"gpu": "a100_40gb", "epoch_ms": 1000.0, "epoch_ms_range": [900.0, 1100.0], "hours": 10.0,
            "hours_range": [9.0, 11.0], "method": "measured", "range_basis": "runs", "notes": []}
    rows = {name: dp.dp_row(base, 4, r, None, board, (True, ""), 1e8) for name, r in (("sharded", sharded),
                                                                                     ("old", old))}
    steps = 98 / 391  # ceil(391 / 4) of the ceil(100000 / 256) steps
    for name, val in (("sharded", 251 / 1001), ("old", 1.0)):
        row = rows[name]
        assert row["epoch_ms"] - row["comm_ms"] == pytest.approx(1000.0 * (0.8 * steps + 0.2 * val)), name
    assert any("unsharded" in n for n in rows["old"]["notes"])
    assert any("sharded: x" in n for n in rows["sharded"]["notes"])


def test_the_plan_scales_the_epochs_of_a_global_batch_by_the_noise_scale():
    f, note = data_parallel_epochs(100, 200.0)  # E = E_min (1 + B / B_noise)
    assert f == pytest.approx({"2": 2 / 1.5, "4": 3 / 1.5, "8": 5 / 1.5}) and "McCandlish" in note
    assert data_parallel_epochs(100, None)[0] == {} and "noise scale" in data_parallel_epochs(100, None)[1]
    assert dp.epochs_scale(plan_of(data_parallel_epochs=f), 4)[:3] == pytest.approx((2.0, 2.0, 2.0))
    assert dp.epochs_scale(plan_of(), 4)[:3] == (4.0, 1.0, 4.0)  # unmeasured: the relation's bounds, the slow end
    assert dp.epochs_scale(None, 1)[:3] == (1.0, 1.0, 1.0)


def test_the_noise_scales_standard_error_gives_the_epochs_factor_a_range():
    """B_noise = 200 ± 1.645 x 30%: the factor at 4 GPUs spans f(200 x 1.4935) to f(200 x 0.5065), around f(200);
    an unresolved estimate (its range reaching 0) reaches the relation's bound N; no standard error: [1, N]."""
    def f(b_noise: float, n: int = 4, batch: int = 100) -> float:
        return (1 + n * batch / b_noise) / (1 + batch / b_noise)

    r = data_parallel_epochs_range(100, 200.0, 0.3)
    assert r["4"] == pytest.approx([f(200 * (1 + 1.645 * 0.3)), f(200 * (1 - 1.645 * 0.3))])
    assert r["4"][0] < f(200) < r["4"][1] and r["8"][1] < 8
    assert data_parallel_epochs_range(100, 200.0, 0.9)["4"] == pytest.approx([f(200 * 2.4805), 4.0])  # unresolved
    assert data_parallel_epochs_range(100, 200.0, None)["2"] == [1.0, 2.0]
    assert data_parallel_epochs_range(100, None, 0.3) == {}
    plan = plan_of(data_parallel_epochs=data_parallel_epochs(100, 200.0)[0], data_parallel_epochs_range=r)
    central, lo, hi, note = dp.epochs_scale(plan, 4)
    assert (central, lo, hi) == pytest.approx((f(200), *r["4"])) and "standard error" in note


def test_runs_on_two_ranks_are_never_pooled_with_one_rank_runs(store, tmp_path):
    store = store.new_experiment("ranks")
    store.add_run("tft", noisy(100.0, 30), sweep_id="ranks", device="cpu")
    store.add_run("tft", noisy(60.0, 30, seed=1), sweep_id="ranks", device="cpu", job="1",
                  extra_params={ParamKey.WORLD_SIZE: "2", ParamKey.BATCH_SIZE_PER_RANK: "230",
                                ParamKey.GLOBAL_BATCH_SIZE: "460"})
    r = report_from_store(store, tmp_path, "sweep=ranks", "hardware=cpu", "decision.plan=[tft]")
    one, two = r["models"]["tft"], r["models"][f"tft[{ParamKey.WORLD_SIZE}=2]"]
    assert one["runs"] == two["runs"] == 1 and one["in_plan"] and not two["in_plan"]
    assert one[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(100.0, rel=0.02)
    assert two[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(60.0, rel=0.02)
    assert r["decision"][ReportKey.MODELS_IN_TOTAL] == ["tft"]
    assert r["schema_version"] >= 5 and "projections_data_parallel" in r


def test_projection_data_parallel_projects_a_project_gpu_across_n_and_refuses_another_n(store, tmp_path):
    from analysis_helpers import analyze_cfg

    from trainbench.core.errors import ConfigError

    store = store.new_experiment("dp-project")
    store.add_run("tft", noisy(100.0, 20), sweep_id="dp-project", device="cpu",
                  extra_params={ParamKey.DATA_PARALLEL_SUPPORTED: "true"})
    store.add_run("dqn", noisy(50.0, 20), sweep_id="dp-project", device="cpu", job="1",
                  extra_params={ParamKey.DATA_PARALLEL_SUPPORTED: "false"})
    r = report_from_store(store, tmp_path, "sweep=dp-project", "hardware=cpu", "decision.plan=[tft,dqn]",
                          "project=[h100_sxm]", "projection.data_parallel=8")
    rows = {p["model"]: p for p in r["projections_data_parallel"] if p["instance"] == "h100_sxm"}
    assert {p["data_parallel"] for p in rows.values()} == {8} and rows["tft"]["gpus"] == 8
    assert "cannot be split" in rows["dqn"]["method"]
    # these runs hold no workload profile: the 1-GPU row says why, and the row across GPUs repeats it
    assert rows["tft"]["epoch_ms"] is None and rows["tft"]["method"].startswith("not projected")
    with pytest.raises(ConfigError, match="projection.data_parallel=3"):
        analyze_cfg(store, tmp_path, ["projection.data_parallel=3"])


def test_a_sweep_whose_model_passes_24_h_gets_rows_across_gpus_a_recommendation_and_its_text(store, tmp_path):
    """Through the analysis: the 1-GPU epoch measured on an A100 in another sweep, the noise scale measured."""
    from trainbench.analysis.report.report import markdown, projection_view
    from trainbench.core.vocab import Summary

    store = store.new_experiment("dp-e2e")
    params = {ParamKey.DATA_PARALLEL_SUPPORTED: "true", model_info("num_params"): "5000000",
              model_info("train_windows"): "100000"}
    store.add_run("tft", noisy(9000.0, 12), sweep_id="dp-e2e", device="cpu", target_epochs=200000,
                  extra_metrics={Summary.NOISE_SCALE: 2000.0, Summary.NOISE_SCALE_PAIRS: 16.0,
                                 Summary.NOISE_SCALE_REL_SE: 0.1}, extra_params=params)
    store.add_run("tft", noisy(2000.0, 12), sweep_id="on-a100", device=A100, job="1", extra_params=params)
    r = report_from_store(store, tmp_path, "sweep=dp-e2e", "hardware=a100_40gb", "decision.plan=[tft]")
    f = r["models"]["tft"]["plan"]["data_parallel_epochs"]
    assert f["2"] == pytest.approx((1 + 2 * 230 / 2000) / (1 + 230 / 2000))
    across = {i["data_parallel"]: i for i in r["instances"] if i["instance"] == "p4d.24xlarge"}
    assert across[1]["wall_hours"] == pytest.approx(2000 * 200000 / 3.6e6, rel=0.02)  # 111 h on one A100
    assert {2, 4, 8} <= set(across) and across[8]["wall_hours"] < across[4]["wall_hours"] < across[1]["wall_hours"]
    (advice,) = r["decision"]["data_parallel"]
    assert advice["recommended"] and advice["instance"] == "p4d.24xlarge" and advice["data_parallel"] == 8
    assert advice["global_batch"] == 8 * 230 and "passes the 24 h threshold" in advice["why"]
    assert "Data parallelism for tft: train it across 8 GPUs of p4d.24xlarge" in r["decision"]["rationale"]
    md = markdown(r)
    assert "One model across N GPUs" in md and "| tft | p4d.24xlarge | 8 | 1840 |" in md
    assert "p4d.24xlarge ×8 per model" in md and "One model across N GPUs: the 1-GPU epoch" in md
    view = projection_view(r, ["p4d.24xlarge"])
    assert "8 per model" in view and "p4d.24xlarge x8 tft:" in view


_A_DDP_RUN = {ParamKey.WORLD_SIZE: "2", ParamKey.BATCH_SIZE_PER_RANK: "128", ParamKey.GLOBAL_BATCH_SIZE: "256"}


@pytest.mark.parametrize(("params", "comm", "why"), [
    ({}, [-50.0, -50.0], "comm_exposed_ms holds 2 impossible value(s)"),
    ({}, [-1e30, 10.0], "comm_exposed_ms holds 1 impossible"),
    ({}, [1e30, 10.0], "comm_exposed_ms holds 1 impossible"),
    ({}, [float("inf"), 10.0], "comm_exposed_ms holds 1 impossible"),
    ({}, [700.0, 10.0], "longer than its epoch"),
    ({model_info("num_params"): "1e15"}, [10.0, 10.0], "model_info.num_params=1e15 is not a count"),
    ({model_info("num_params"): str(10**15)}, [10.0, 10.0], "model_info.num_params=1000000000000000 is not"),
    ({ParamKey.WORLD_SIZE: "-1"}, [10.0, 10.0], "world_size=-1 is not a count from 1 to 65,536"),
    ({ParamKey.WORLD_SIZE: "0"}, [10.0, 10.0], "world_size=0 is not"),
    ({ParamKey.WORLD_SIZE: "abc"}, [10.0, 10.0], "world_size=abc is not"),
    ({ParamKey.WORLD_SIZE: "1e9"}, [10.0, 10.0], "world_size=1e9 is not"),
    ({ParamKey.WORLD_SIZE: "1000000000"}, [10.0, 10.0], "world_size=1000000000 is not"),
    ({ParamKey.BATCH_SIZE_PER_RANK: "-3"}, [10.0, 10.0], "batch_size_per_rank=-3 is not"),
    ({ParamKey.SAMPLES_PER_EPOCH: "1e30"}, [10.0, 10.0], "samples_per_epoch=1e30 is not"),
    ({model_info("train_windows"): "0"}, [10.0, 10.0], "model_info.train_windows=0 is not"),
])
def test_a_forged_ddp_run_is_invalid_and_never_calibrates_the_all_reduce(params, comm, why):
    """A shared store is untrusted input: a multi-rank run whose exposed all-reduce is not a part of its epochs,
    or whose logged counts (ranks, parameters, batches) are not counts, is listed invalid with the reason and
    never computed with (it is not COMPLETED, so it neither calibrates nor measures a row across GPUs)."""
    from trainbench.analysis.runs import check_logged_values

    rec = _rec("a", {**_params(True), **_A_DDP_RUN, **params}, [600.0, 600.0], comm=comm)
    check_logged_values(rec)
    assert rec.outcome == Outcome.INVALID and why in rec.invalid_reason, rec.invalid_reason
    for key in params:
        assert key not in rec.params  # the forged count is never read (world_size then reads as 1)


def test_a_true_ddp_run_passes_the_screens():
    from trainbench.analysis.runs import check_logged_values

    rec = _rec("a", {**_params(True), **_A_DDP_RUN}, [600.0, 600.0, float("nan")], comm=[100.0, 0.0, 5.0])
    check_logged_values(rec)
    assert rec.outcome == Outcome.COMPLETED and rec.invalid_reason is None

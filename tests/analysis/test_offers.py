"""Cloud offers from SkyPilot's catalogue format (issue 50): screened rows with one counting line, the cheapest
region per instance type, GPU identity through core/gpu_names, spot rows with a restart allowance, the packaged
extract and `trainbench offers refresh|list`, and a decision priced exactly as a catalogue folder says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analysis_helpers import noisy, report_from_store

from helpers.workloads import DQN
from trainbench.analysis.decision import offers
from trainbench.analysis.projection.gpus import load_gpus
from trainbench.cli import main
from trainbench.core.errors import ConfigError

FIXTURE = Path(__file__).with_name("offers_catalogue")
A100 = "NVIDIA A100-SXM4-40GB"


@pytest.fixture(scope="module")
def gpus():
    return load_gpus()


@pytest.fixture(scope="module")
def cat(gpus):
    return offers.read_catalogue(FIXTURE, gpus, str(FIXTURE))


def _by(cat_or_list):
    items = cat_or_list.offers if hasattr(cat_or_list, "offers") else cat_or_list
    return {o.name: o for o in items}


def test_rows_are_screened_with_one_counting_line(cat):
    assert cat.rows == 23
    assert dict(cat.screened) == {"price": 2, "placeholder": 1, "spot_above": 2, "count": 2, "tpu": 1,
                                  "no_host": 2, "spot_tenth": 1}
    line = cat.screened_line()
    assert line.startswith("10 of 23 GPU rows left out: 2 no price")
    assert "2 spot above on-demand" in line and "1 a placeholder price (700.0)" in line
    assert "2 a GPU count that is not a whole number or disagrees with GpuInfo" in line
    assert "1 spot prices of exactly a tenth of on-demand dropped" in line
    names = set(_by(cat))
    # left out: no price (p5e), count 8 vs GpuInfo 4 (p4d), spot above on-demand (g5), a fractional count (A40,
    # whose spot price is also a tenth of on-demand: the count still leaves it out)
    assert not names & {"aws:p5e.48xlarge", "aws:p4d.24xlarge", "aws:g5.xlarge", "runpod:1x_A40_SECURE"}
    assert "aws:m5.large" not in names and "lambda:cpu_4x_general" not in names  # GPU rows only


def test_the_cheapest_region_per_instance_type_on_demand_and_spot(cat):
    by = _by(cat)
    g6 = by["aws:g6.xlarge"]
    assert (g6.usd_per_hour, g6.region, g6.spot_usd_per_hour, g6.spot_region) == \
        (0.8048, "us-east-1", 0.3697, "ap-south-1")
    p5 = by["aws:p5.4xlarge"]  # its ap-southeast-3 spot price is a tenth of on-demand: dropped, the row kept
    assert (p5.usd_per_hour, p5.region, p5.spot_usd_per_hour) == (6.88, "us-east-1", None)
    # GCP: the H100 row plus its host VM (a3-highgpu-1g) in the same zone; asia-east1 has no host row
    a3 = by["gcp:a3-highgpu-1g"]
    assert a3.usd_per_hour == pytest.approx(4.20076 + 1.18251) and a3.region == "us-central1"
    assert a3.spot_usd_per_hour == pytest.approx(2.6465 + 0.25831) and a3.spot_region == "europe-west4"
    rp = by["runpod:1x_A100-80GB_SECURE"]
    assert (rp.usd_per_hour, rp.spot_usd_per_hour, rp.region) == (1.64, 0.82, "CA")


def test_gpu_identity_slower_where_untold_and_unprojected_kept(cat):
    by = _by(cat)
    assert by["lambda:gpu_1x_h100_pcie"].gpu == "h100_pcie" and by["lambda:gpu_1x_h100_pcie"].gpu_note is None
    assert by["lambda:gpu_1x_a100_sxm4"].gpu == "a100_40gb"
    assert by["runpod:1x_A100-80GB_SECURE"].gpu == "a100_80gb_pcie"  # GpuInfo says 'A100 PCIe', 80 (GB)
    assert by["aws:p5.4xlarge"].gpu == "h100_pcie"  # "H100", 80 GB: PCIe or SXM not told
    assert "h100_pcie or h100_sxm" in by["aws:p5.4xlarge"].gpu_note and "slower" in by["aws:p5.4xlarge"].gpu_note
    assert by["lambda:gpu_8x_a100"].gpu == "a100_40gb_pcie"
    assert by["lambda:gpu_1x_a6000"].gpu is None and by["runpod:1x_H100-NVL_SECURE"].gpu is None  # not dropped


def test_decision_offers_counts_spot_rows_and_the_restart_allowance(cat):
    used = offers.decision_offers(cat, [1], spot=True, allowance=0.25)
    by = _by(used)
    assert "lambda:gpu_8x_a100" not in by  # 8 GPUs: not in gpu_counts [1]
    assert "lambda:gpu_1x_a6000" not in by  # no conf/hardware entry
    spot = by["aws:g6.xlarge (spot)"]
    assert spot.spot and spot.usd_per_hour == 0.3697 and spot.region == "ap-south-1" and spot.restart_allowance == 0.25
    assert not by["aws:g6.xlarge"].spot and by["aws:g6.xlarge"].restart_allowance == 0.0
    assert "aws:p5.4xlarge (spot)" not in by  # no spot price left
    summ = offers.summary(cat, used, [1], True, 0.25, ["quoted-h100"])
    assert summ.not_projected == 2 and summ.not_projected_gpus == ["A6000 x1", "H100-NVL x1"]
    assert summ.other_gpu_counts == 1 and summ.quoted == ["quoted-h100"]
    assert summ.screened_line == cat.screened_line()


def test_a_decision_is_priced_exactly_as_the_folder_says(store, tmp_path):
    """decision.offers=<folder>: the instances are that folder's offers at its prices, named with their source
    and date; spot rows carry the restart allowance in their conservative hours; the report says where the
    prices come from and what was left out."""
    exp = store.new_experiment("offers-folder")
    exp.add_run("dqn", noisy(36_000.0, 30, 0.002, 5), sweep_id="a100", device=A100, target_epochs=1000,
                extra_metrics=DQN)
    quoted = ("decision.catalogue=[{name: quoted-h100, gpu: h100_sxm, gpus: 1, usd_per_hour: 2.5, "
              "price_date: 'quote 2026-12-01'}]")
    r = report_from_store(exp, tmp_path, "sweep=a100", "decision.plan=[dqn]", f"decision.offers={FIXTURE}",
                          quoted, "decision.spot=true", "decision.gpu_counts=[1,8]")
    inst = {i["instance"]: i for i in r["instances"] if i.get("data_parallel", 1) == 1}
    # a price you were quoted is priced beside the offers, with its own date
    assert inst["quoted-h100"]["usd_per_hour"] == 2.5 and inst["quoted-h100"]["price_date"] == "quote 2026-12-01"
    assert r["offers"]["quoted"] == ["quoted-h100 (quote 2026-12-01)"]
    assert inst["lambda:gpu_1x_a100_sxm4"]["usd_per_hour"] == 1.99
    # the source and date of the price: the folder, and its files' date (no source.json in it)
    assert inst["lambda:gpu_1x_a100_sxm4"]["price_date"] == \
        f"{FIXTURE} (SkyPilot format), read {offers._files_date(list(FIXTURE.glob('*/vms.csv')))}"
    a100 = inst["lambda:gpu_1x_a100_sxm4"]  # the GPU the run measured: its hours are measured
    assert a100["basis"] == "measured" and a100["usd"] == pytest.approx(a100["wall_hours"] * 1.99)
    assert inst["aws:g6.xlarge"]["usd_per_hour"] == 0.8048 and inst["aws:g6.xlarge"]["spot_usd_per_hour"] == 0.3697
    assert inst["gcp:a3-highgpu-1g"]["usd_per_hour"] == pytest.approx(5.38327)
    assert inst["lambda:gpu_8x_a100"]["gpus"] == 8 and inst["lambda:gpu_8x_a100"]["usd_per_hour"] == 15.92
    od, sp = inst["aws:g6.xlarge"], inst["aws:g6.xlarge (spot)"]
    assert sp["usd_per_hour"] == 0.3697 and sp["spot"] is True and sp["restart_allowance"] == 0.25
    buffer = r["decision"]["buffer"]
    assert od["wall_hours_conservative"] == pytest.approx(od["wall_hours_range"][1] * (1 + buffer))
    assert sp["wall_hours_conservative"] == pytest.approx(sp["wall_hours_range"][1] * (1 + buffer) * 1.25)
    priced = {i["instance"] for i in r["instances"] if i["usd_per_hour"] is not None} - {"local"}
    assert not priced & {"aws:p5e.48xlarge", "aws:p4d.24xlarge", "lambda:gpu_1x_a6000"}
    o = r["offers"]
    assert o["source"] == str(FIXTURE) and o["screened_line"].startswith("10 of 23 GPU rows left out")
    assert o["not_projected"] == 2 and o["spot"] is True and o["restart_allowance"] == 0.25
    from trainbench.analysis.report.report import console_summary, markdown

    md = markdown(r)
    assert "Prices: " in md and "10 of 23 GPU rows left out" in md and "restart allowance" in md
    assert "spot $/h (region)" in md and "0.3697 (ap-south-1)" in md
    assert "prices: " in console_summary(r)


def test_the_packaged_extract_has_single_gpu_h100_and_a100_from_two_clouds_dated(gpus):
    """The default decision (decision.offers=packaged) considers single-GPU H100 and A100 offers from at least
    two providers, each priced with its source (a catalogue commit) and a date of 2025 or later."""
    cat = offers.load(offers.PACKAGED, gpus)
    used = offers.decision_offers(cat, [1, 2, 4, 8], spot=False, allowance=0.25)
    for family in ("h100", "a100"):
        single = [o for o in used if o.gpus == 1 and o.gpu.startswith(family)]
        assert len({o.cloud for o in single}) >= 2, family
    for o in used:
        assert o.read >= "2025" and "@" in o.source and o.usd_per_hour > 0
    meta = json.loads((offers.packaged_dir() / offers.SOURCE_FILE).read_text())
    assert set(meta["commits"]) >= {"aws", "gcp", "lambda", "runpod"} and meta["read"] >= "2025"
    size = sum(f.stat().st_size for f in offers.packaged_dir().rglob("*") if f.is_file())
    assert size < 1_000_000


def test_offers_refresh_writes_an_extract_that_reads_back_the_same(tmp_path, cat, gpus, capsys):
    out = tmp_path / "extract"
    assert main(["offers", "refresh", "--from", str(FIXTURE), "--to", str(out), "--commit", "aws=abc1234def",
                 "--read", "2026-01-02"]) == 0
    meta = json.loads((out / "source.json").read_text())
    assert meta["commits"] == {"aws": "abc1234def"} and meta["read"] == "2026-01-02" and meta["rows"] == 23
    back = offers.read_catalogue(out, gpus, "x")
    key = lambda o: (o.usd_per_hour, o.region, o.spot_usd_per_hour, o.spot_region, o.gpu, o.gpus)  # noqa: E731
    assert {n: key(o) for n, o in _by(back).items()} == {n: key(o) for n, o in _by(cat).items()}
    assert back.screened_line() == cat.screened_line() and back.read == "2026-01-02"
    assert _by(back)["aws:g6.xlarge"].source == "SkyPilot catalogue aws@abc1234"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main(["offers", "refresh", "--from", str(FIXTURE), "--to", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    assert "a folder with other files in it" in capsys.readouterr().err


def test_offers_list_filters_and_bad_input_is_one_error_line(tmp_path, capsys):
    assert main(["offers", "list", "gpu=h100", "--offers", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith(("aws:", "gcp:", "lambda:", "runpod:"))]
    assert rows and all("h100" in ln for ln in rows) and "10 of 23 GPU rows left out" in out
    bad = tmp_path / "bad" / "aws"
    bad.mkdir(parents=True)
    (bad / "vms.csv").write_text("foo,bar\n1,2\n")
    assert main(["offers", "list", "--offers", str(bad.parent)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainbench offers: error: ") and "no column" in err[0]


def test_an_oversized_or_unreadable_file_and_a_missing_folder_are_config_errors(tmp_path, gpus, monkeypatch):
    monkeypatch.setattr(offers, "MAX_FILE_BYTES", 100)
    with pytest.raises(ConfigError, match="over the 0 MB a catalogue file may have"):
        offers.read_catalogue(FIXTURE, gpus, "x")
    monkeypatch.undo()
    (tmp_path / "aws").mkdir()
    (tmp_path / "aws" / "vms.csv").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="not a readable CSV file"):
        offers.read_catalogue(tmp_path, gpus, "x")
    with pytest.raises(ConfigError, match="no such file or folder"):
        offers.load(str(tmp_path / "nowhere"), gpus)


def test_skypilot_takes_the_newest_local_catalogue(tmp_path, gpus):
    with pytest.raises(ConfigError, match="decision.offers=skypilot: no .*catalogs/<version>/"):
        offers.load(offers.SKYPILOT, gpus, home=tmp_path)
    for v in ("v7", "v10"):
        d = tmp_path / ".sky" / "catalogs" / v / "lambda"
        d.mkdir(parents=True)
        (d / "vms.csv").write_text((FIXTURE / "lambda" / "vms.csv").read_text())
    got = offers.load(offers.SKYPILOT, gpus, home=tmp_path)
    assert got.described.endswith("catalogs/v10") and "lambda:gpu_1x_h100_pcie" in _by(got)


def test_bad_gpu_counts_are_refused(store, tmp_path):
    from analysis_helpers import analyze_cfg

    with pytest.raises(ConfigError, match=r"decision.gpu_counts=\[0\] is invalid"):
        analyze_cfg(store, tmp_path, ["decision.gpu_counts=[0]"])


def test_the_console_names_the_cheapest_of_many_offers(store, tmp_path):
    from trainbench.analysis.report.report import CONSOLE_COSTS, console_summary

    exp = store.new_experiment("offers-console")
    exp.add_run("dqn", noisy(36_000.0, 30, 0.002, 6), sweep_id="a100", device=A100, target_epochs=1000,
                extra_metrics=DQN)
    r = report_from_store(exp, tmp_path, "sweep=a100", "decision.plan=[dqn]", f"decision.offers={FIXTURE}",
                          "decision.catalogue=[]", "decision.spot=true", "decision.gpu_counts=[1,8]")
    line = next(ln for ln in console_summary(r).splitlines() if ln.startswith("cost  "))
    priced = [i for i in r["instances"] if i["usd_per_hour"] is not None]  # the local one is not (no power)
    assert len(priced) > CONSOLE_COSTS and f"(+{len(priced) - CONSOLE_COSTS} more in report.md)" in line
    cheapest = min((i for i in priced if i["usd"] is not None), key=lambda i: i["usd"])
    assert line.startswith(f"cost  {cheapest['instance']} ")


def test_the_plots_show_the_local_instance_and_the_cheapest_offers():
    from types import SimpleNamespace

    from trainbench.analysis.report.plots import PLOT_INSTANCES, _cheapest

    rows = [SimpleNamespace(instance="local", usd=50.0)] + [SimpleNamespace(instance=f"c{k}", usd=float(30 - k))
                                                              for k in range(20)]
    shown, note = _cheapest(rows)
    assert len(shown) == PLOT_INSTANCES and shown[0].instance == "local"
    assert [r.usd for r in shown[1:]] == sorted(r.usd for r in rows[1:])[:PLOT_INSTANCES - 1]
    assert note == f" ({PLOT_INSTANCES} cheapest of 21)"
    assert _cheapest(rows[:5]) == (rows[:5], "")


def test_the_analysis_refuses_a_malformed_catalogue(store, tmp_path):
    """analyze.py turns this ConfigError into one `analyze: error:` line and exit 2 (cli.analyze_job)."""
    bad = tmp_path / "cat" / "gcp"
    bad.mkdir(parents=True)
    (bad / "vms.csv").write_text("InstanceType,Price\nx,1\n")
    exp = store.new_experiment("offers-bad")
    exp.add_run("dqn", noisy(36_000.0, 12, 0.002, 7), sweep_id="a100", device=A100)
    with pytest.raises(ConfigError, match=r"gcp/vms.csv: not a SkyPilot catalogue file: no column "
                                          r"AcceleratorName, AcceleratorCount, Region"):
        report_from_store(exp, tmp_path, "sweep=a100", "decision.plan=[dqn]", f"decision.offers={bad.parent}")

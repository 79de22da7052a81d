"""The team's own conf/: a `conf/` folder in the project folder (paths.root, the working folder by default) is
searched before the packaged configs, by run.py, analyze.py, --help, compose_run and what reads the configs
outside Hydra (the GPU catalogue, the data configs); a file there that is not valid YAML is one error line
naming it, exit 2 (trainbench.config.team). In-process, but for --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.procs import in_process
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.config.team import conf_dirs, find_config, group_names, set_root, team_conf_dir
from trainbench.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "conf" / "hardware" / "team_card.yaml"

MY_CARD = EXAMPLE.read_text().replace("name: team_card", "name: my_card").replace("power_w: 450", "power_w: 321")
MY_DATA = """defaults: [base_data, _self_]
name: my_data
schema: ohlcv-1m
synthetic: true
path: ${paths.data_dir}/my_data.dbn.zst
n_bars: 2000
seed: 7
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with the team's own card, dataset, decision plan, and its own T4 (a packaged name)."""
    conf = tmp_path / "conf"
    for group, name, text in (("hardware", "my_card", MY_CARD), ("data", "my_data", MY_DATA),
                              ("decision", "my_plan", "defaults: [default, _self_]\nbuffer: 0.25\n"),
                              ("hardware", "t4", (REPO / "src/trainbench/conf/hardware/t4.yaml").read_text()
                               .replace("price_per_kwh: 0.15", "price_per_kwh: 0.42"))):
        (conf / group).mkdir(parents=True, exist_ok=True)
        (conf / group / f"{name}.yaml").write_text(text)
    return tmp_path


def test_run_composes_the_teams_card_dataset_and_its_own_version_of_a_packaged_file(project):
    obj = validate(compose_run(["hardware=my_card", "data=my_data", "trainer=cpu"], root=project))
    assert (obj.hardware.name, obj.hardware.power_w, obj.hardware.peak_tflops["bf16"]) == ("my_card", 321, 165.2)
    assert (obj.data.name, obj.data.n_bars, obj.data.path) == ("my_data", 2000, f"{project}/data/my_data.dbn.zst")
    assert validate(compose_run(["hardware=t4", "trainer=cpu"], root=project)).hardware.price_per_kwh == 0.42
    analyze = compose_run(["decision=my_plan"], root=project, config_name="analyze")
    assert analyze.decision.buffer == 0.25 and analyze.decision.plan_data == "futures_90d"  # the rest: default


def test_without_a_conf_folder_only_the_packaged_configs_count(tmp_path):
    assert team_conf_dir(tmp_path) is None and len(conf_dirs("hardware", tmp_path)) == 1
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="my_card"):
        compose_run(["hardware=my_card", "trainer=cpu"], root=tmp_path)
    assert validate(compose_run(["hardware=t4", "trainer=cpu"], root=tmp_path)).hardware.price_per_kwh == 0.15


def test_help_lists_the_teams_options_and_paths_root_names_the_project(project, tmp_path_factory):
    """``--help`` in a process of its own (Hydra's help sets up its logging), ``--cfg job`` in this one."""
    from trainbench.cli import run_command

    p = subprocess.run([sys.executable, str(REPO / "run.py"), "--help"], cwd=project, capture_output=True,
                       text=True, timeout=300)
    code, out = p.returncode, p.stdout
    assert code == 0, p.stderr[-2000:]
    hardware = next(line for line in out.splitlines() if line.startswith("hardware: "))
    assert "my_card" in hardware.split(", ") and "t4" in hardware.split(", ")
    assert "my_data" in next(line for line in out.splitlines() if line.startswith("data: ")).split(", ")
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # another working folder: paths.root= names it
    p = in_process(run_command, [f"paths.root={project}", "hardware=my_card", "trainer=cpu", "--cfg", "job"],
                   cwd=elsewhere)
    assert p.returncode == 0 and "name: my_card" in p.stdout and "power_w: 321" in p.stdout


@pytest.mark.parametrize("text,what", [("name: [broken\n", "not valid YAML (line 2, column 1)"),
                                       ("- a\n- b\n", "not a list")], ids=["syntax", "list"])
def test_a_bad_file_in_the_teams_conf_is_one_error_line_naming_it(project, text, what):
    from trainbench.cli import analyze_command, run_command

    bad = project / "conf" / "hardware" / "broken.yaml"
    bad.write_text(text)
    for command, argv in ((run_command, ["trainer=cpu"]), (run_command, ["--help"]), (analyze_command, [])):
        p = in_process(command, argv, cwd=project)
        assert p.returncode == 2 and p.stdout == "", (command, p.stdout)
        assert p.stderr.startswith(f"error: {bad}: ") and what in p.stderr and p.stderr.count("\n") == 1, p.stderr
    with pytest.raises(ConfigError, match=f"{bad}: "):
        compose_run(["trainer=cpu"], root=project)


def test_what_reads_configs_outside_hydra_reads_the_teams_first(project):
    from trainbench.analysis.plan.plan import planned_layout
    from trainbench.analysis.projection.gpus import load_gpus
    from trainbench.data.__main__ import compose_data

    assert find_config("hardware", "t4", project) == project / "conf" / "hardware" / "t4.yaml"
    assert {"my_card", "t4", "a100_40gb"} <= set(group_names("hardware", project))
    set_root(project)
    gpus = load_gpus()
    assert gpus["my_card"].power_w == 321 and gpus["my_card"].memory_gbps == 1008 and "a100_40gb" in gpus
    assert compose_data(["data=my_data"], project).n_bars == 2000
    layout = planned_layout("my_data", type("Paths", (), {"root": str(project), "data_dir": str(project / "data")}))
    assert layout is not None and layout.size == 2000  # its start: the schema's default, as in a run
    (project / "conf" / "data" / "typo.yaml").write_text(MY_DATA.replace("n_bars", "n_barz"))
    from trainbench.core.errors import AnalysisError

    with pytest.raises(AnalysisError, match=r"decision.plan_data=typo: .*typo.yaml: Key 'n_barz' not in 'DataConfig'"):
        planned_layout("typo", type("Paths", (), {"root": str(project), "data_dir": str(project / "data")}))


def test_the_worked_example_of_the_repository_is_a_usable_card():
    """conf/hardware/team_card.yaml (described by conf/README.md) composes, validates and projects."""
    from trainbench.analysis.projection.gpus import load_gpus

    assert "hardware/team_card.yaml" in (REPO / "conf" / "README.md").read_text()
    hw = validate(compose_run(["hardware=team_card", "trainer=cpu"], root=REPO)).hardware
    assert hw.name == "team_card" and hw.gpu == "NVIDIA GeForce RTX 4090"
    card = load_gpus(conf_dirs("hardware", REPO))["team_card"]
    assert card.matches("NVIDIA GeForce RTX 4090") and card.peak_tflops["fp32"] == 82.6

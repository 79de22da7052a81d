"""A non-editable install works from any folder: ``pip install .`` (no ``-e``) into a folder of its own, then
``trainbench run`` and ``trainbench analyze`` in another folder, with nothing from the source tree on the path.

The configs come from the installed package (package data), the store, the data and the report from the
working folder. Offline and without the dependencies (``--no-deps``: they are this interpreter's), so it
takes seconds to install and about a minute to train one tiny job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.procs import REPO

#: What the copy of the source tree leaves out, at its top: the store, the data, the outputs, caches, and the
#: folders no install reads.
_NOT_SOURCE = {".git", ".venv", "mlruns", "data", "reports", "multirun", "outputs", "build", ".pytest_cache",
               ".ruff_cache", ".whl", "benchmarks", "tests", "examples"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    at_top = Path(folder) == REPO
    return {n for n in names if (at_top and n in _NOT_SOURCE) or n == "__pycache__" or n.endswith(".egg-info")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trainbench installed (not editable) into a folder of its own; returns that folder."""
    root = tmp_path_factory.mktemp("install")
    shutil.copytree(REPO, root / "source", ignore=_ignore)
    target = root / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(target), str(root / "source")],
                       capture_output=True, text=True, timeout=600, cwd=root)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    shutil.rmtree(root / "source")  # nothing of the source tree is left to find
    return target


def _trainbench(site: Path, cwd: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    code = "import sys; from trainbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_the_package_carries_its_configs(installed: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    code = ("import json, trainbench; print(json.dumps([trainbench.__file__, str(trainbench.CONF_DIR), "
            "sorted(p.name for p in trainbench.CONF_DIR.iterdir())]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    where, conf, names = json.loads(p.stdout.strip().splitlines()[-1])
    assert where.startswith(str(installed)) and conf.startswith(str(installed)), (where, conf)
    assert {"config.yaml", "analyze.yaml", "hardware", "model", "trainer", "offers"} <= set(names)
    p = _trainbench(installed, tmp_path, "offers", "list", "gpu=h100", timeout=300)  # the packaged cloud offers
    assert p.returncode == 0 and "SkyPilot catalogue" in p.stdout and "aws:p5.4xlarge" in p.stdout, p.stderr[-3000:]
    (tmp_path / "conf" / "hardware").mkdir(parents=True)  # the team's own card, beside the project
    shutil.copy(REPO / "conf" / "hardware" / "team_card.yaml", tmp_path / "conf" / "hardware")
    p = _trainbench(installed, tmp_path, "run", "--cfg", "job", "debug=default", "hardware=team_card", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"root: {tmp_path}" in p.stdout or "root: ${hydra:runtime.cwd}" in p.stdout
    assert "name: team_card" in p.stdout  # the search-path plugin ships with the package


@pytest.mark.slow
def test_run_and_analyze_from_another_folder(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    p = _trainbench(installed, work, "run", "-m", "debug=default", "model=dqn", "size=tiny", "sweep_id=installed")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (work / "mlruns" / "mlflow.db").is_file() and any((work / "multirun").iterdir())
    p = _trainbench(installed, work, "analyze", "sweep=installed", "analysis.bootstrap_resamples=200", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((work / "reports" / "installed" / "report.json").read_text())
    assert [m["model"] for m in report["models"]] == ["dqn"] if isinstance(report["models"], list) \
        else "dqn" in report["models"]
    assert not any(p.name in ("mlruns", "reports", "data") for p in installed.iterdir())  # nothing in the package
    p = _trainbench(installed, work, "analyze", "sweep=nope")
    assert p.returncode == 2 and "analyze: error:" in p.stderr, p.stderr[-2000:]

"""Shared fixtures: small in-memory market data (no DBN I/O), CPU-only single-thread torch, and the session's
real runs that tests only read (one default sweep with its analysis, one single run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

# every process a test starts inherits one thread per torch op: on a shared 2-core host, a child on several
# threads spin-waits for its peers while other tests run (one run.py of a TFT took 16 CPU-s under the suite's
# load for 5 CPU-s alone); a test that needs the variable unset or other says so (monkeypatch)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from trainbench.core.vocab import Tag
from trainbench.data.in_memory import make_market_data
from trainbench.data.market import MarketData

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

torch.set_num_threads(1)


@pytest.fixture
def market_data() -> MarketData:
    return make_market_data()


@pytest.fixture(autouse=True)
def _project_folder_is_the_working_folder():
    """Each test starts with the working folder as the project folder whose conf/ is searched
    (trainbench.config.team): compose_run(root=...) and the command line set it for the rest of a process."""
    from trainbench.config.team import set_root

    set_root(None)
    yield
    set_root(None)


#: Session fixtures that start something expensive or exclusive (a sweep, a store, a server, a SLURM cluster):
#: under pytest-xdist (`make test` runs two workers) every test using one is sent to the same worker
#: (``--dist loadgroup``), so each is built once per suite run, as without workers, and never twice at once.
SHARED_FIXTURE_GROUPS = {
    "slurm_cluster": "slurm", "slurm_data_dir": "slurm",
    "default_sweep": "default_sweep", "single_dqn_run": "single_dqn_run",
    "mlflow_server": "mlflow_server", "postgres_mlflow_server": "postgres_mlflow_server",
}


def _module_fixture_groups(item) -> set[str]:
    """A group for each module-scoped fixture of this suite that ``item`` uses (a sweep a test file runs once for
    its tests, a wheel it installs once): without one, two workers would each build it for their share."""
    info = getattr(item, "_fixtureinfo", None)
    groups = set()
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if not defs or defs[-1].scope != "module":
            continue
        where = Path(defs[-1].func.__code__.co_filename).resolve()
        if where.is_relative_to(TESTS):  # the suite's own, not a plugin's
            groups.add(f"{item.path.parent.name}.{item.path.stem}.{name}")
    return groups


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        groups = {g for name, g in SHARED_FIXTURE_GROUPS.items() if name in names}
        store = item._fixtureinfo.name2fixturedefs.get("store") if "store" in names else None
        if store and store[-1].scope == "session":  # tests/analysis' and tests/rerun's own session stores
            groups.add(f"{item.path.parent.name}_store")
        if not groups:
            groups = _module_fixture_groups(item)
        if groups:  # one group per test: a test needing two shares a worker with both (the first by name)
            item.add_marker(pytest.mark.xdist_group(sorted(groups)[0]))
    # xdist hands out the groups (largest first), then the other tests in collection order: those marked slow
    # go first, so that the suite's last minutes run short tests on every worker instead of one worker finishing
    # a sweep alone. A stable sort that moves no grouped test: a group keeps its order, and a module fixture
    # its tests one after the other (else it would be torn down and built again)
    items.sort(key=lambda item: 0 if item.get_closest_marker("xdist_group") else
               1 if item.get_closest_marker("slow") else 2)


_UNGROUPED: set[str] = set()


@pytest.hookimpl(trylast=True)  # after xdist's hook, which puts each test's group into its id on a worker
def pytest_collection_finish(session) -> None:
    """Under ``--dist loadgroup`` a grouped test's id ends in ``@<group>``, which is all xdist schedules by: a
    pytest/xdist pair that loses it (pytest-dev/pytest-xdist#1386) would build each shared fixture on every
    worker, and run SLURM clusters and servers twice at once, without a word. Such tests fail instead."""
    if hasattr(session.config, "workerinput") and session.config.getvalue("loadgroup"):
        _UNGROUPED.update(item.nodeid for item in session.items if item.get_closest_marker("xdist_group")
                          and "@" not in item.nodeid.rsplit("]", 1)[-1])


def pytest_runtest_setup(item) -> None:
    if item.nodeid in _UNGROUPED:
        pytest.fail("pytest-xdist did not put this test in its xdist_group: this pytest and pytest-xdist do not "
                    "work together (pytest-dev/pytest-xdist#1386); install the versions pyproject.toml's dev extra "
                    "names (make install).", pytrace=False)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def shared_data_dir(tmp_path_factory):
    """One data folder for the end-to-end jobs (tracking, sweep, core): the synthetic debug file is generated once."""
    return tmp_path_factory.mktemp("data")


def _python(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    from helpers.procs import child_env

    return subprocess.run([sys.executable, *args], cwd=cwd, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="session")
def default_sweep(tmp_path_factory):
    """`python run.py -m debug=default` (every registered model, as `make run` sweeps them) into a store of its
    own, then `analyze.py` over it, written once per session: the tests that only read a real sweep share it
    (the run contract, the report reading back what training wrote, MLflow's native view). Never write to it.

    ``root``, ``uri``, ``client``, ``exp``, ``stdout`` (run.py's), ``analysis_stdout``, ``sweep_id``,
    ``report`` (report.json), ``report_dir``, ``data_file`` (the bars' managed file of the configuration).
    """
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("default-sweep")
    uri = f"sqlite:///{root}/mlflow.db"
    p = _python(REPO, "run.py", "-m", "debug=default", f"tracking.uri={uri}",
                f"tracking.artifact_location={root}/artifacts", f"paths.data_dir={root}/data",
                f"hydra.sweep.dir={root}/multi")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trainbench")
    (sweep_id,) = {r.data.tags[Tag.SWEEP_ID] for r in client.search_runs([exp.experiment_id], "tags.kind = 'train'")}
    a = _python(REPO, "analyze.py", f"tracking.uri={uri}", f"paths.root={root}", f"sweep={sweep_id}",
                "analysis.bootstrap_resamples=200", "analysis.plots=false", timeout=600)
    assert a.returncode == 0, a.stdout[-2000:] + a.stderr[-3000:]
    report_dir = root / "reports" / sweep_id
    return SimpleNamespace(root=root, uri=uri, client=client, exp=exp, stdout=p.stdout, analysis_stdout=a.stdout,
                           sweep_id=sweep_id, report=json.loads((report_dir / "report.json").read_text()),
                           report_dir=report_dir,
                           data_file=next((root / "data" / "debug").glob("6e_ohlcv_1m.*.dbn.zst")))


@pytest.fixture(scope="session")
def single_dqn_run(tmp_path_factory):
    """One plain `python run.py debug=default model=dqn trainer.deterministic=true` (no -m) into a store of its
    own, written once per session: the run contract's checks read it, the rerun test reruns it (its reruns
    join the store; readers look the original up by ``run_id``). ``root``, ``uri``, ``client``, ``exp_id``,
    ``run_id``, ``stdout``, ``out`` (Hydra's job folder, with .hydra/config.pickle)."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("single-run")
    uri = f"sqlite:///{root}/mlflow.db"
    p = _python(REPO, "run.py", "debug=default", "model=dqn", "trainer.deterministic=true", f"tracking.uri={uri}",
                f"tracking.artifact_location={root}/artifacts", f"paths.data_dir={root}/data",
                f"hydra.run.dir={root}/out", f"hydra.sweep.dir={root}/multi", timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name("trainbench").experiment_id
    runs = client.search_runs([exp_id], "tags.kind = 'train'")
    assert len(runs) == 1  # one run.py without -m: one train run
    return SimpleNamespace(root=root, uri=uri, client=client, exp_id=exp_id, run_id=runs[0].info.run_id,
                           stdout=p.stdout, out=root / "out")

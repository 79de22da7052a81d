"""What the command line prints and writes cannot carry a secret: credentials in a tracking URI are refused
before Hydra writes anything, and a model's exception that holds a secret value is printed redacted, Hydra's
traceback included (issue 31, items 5 and 6). Real run.py / analyze.py processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from helpers.procs import child_env
from trainbench import CONF_DIR
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.config.shared import uri_credentials_problem
from trainbench.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pw-Zq81-s3cret"
SECRET = "sk-live-4f9a1c77e0d2"


def test_credentials_in_a_uri_are_recognised_without_repeating_the_password():
    for uri in (f"http://alice:{PASSWORD}@127.0.0.1:5000", f"https://alice:{PASSWORD}@mlflow.internal/",
                f"sqlite:///x.db,http://bob:{PASSWORD}@h:1"):
        problem = uri_credentials_problem(uri)
        assert problem and PASSWORD not in problem and "alice" not in problem, uri
        assert "MLFLOW_TRACKING_USERNAME" in problem and "MLFLOW_TRACKING_PASSWORD" in problem
    assert "http://127.0.0.1:5000" in uri_credentials_problem(f"http://alice:{PASSWORD}@127.0.0.1:5000")
    for uri in ("http://127.0.0.1:5000", "sqlite:////tmp/a@b/mlflow.db", None, "databricks",
                "postgresql+psycopg2://mlflow@db.internal:5432/mlflow", "databricks://scope:prefix",
                "mysql://db:3306/mlflow", "s3://bucket/key@v1", "file:///tmp/a:b@c"):
        assert uri_credentials_problem(uri) is None, uri
    # a URI from a config file (not the command line) is refused at validation
    cfg = compose_run(["model=dqn", f"tracking.uri=http://alice:{PASSWORD}@127.0.0.1:9"], root=str(REPO))
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_PASSWORD") as e:
        validate(cfg)
    assert PASSWORD not in str(e.value)


#: A password in a URI of any scheme with a user-info part, and the fix each refusal names.
DATABASE_URIS = {
    f"postgresql+psycopg2://alice:{PASSWORD}@db.internal:5432/mlflow": ("PGPASSWORD", "~/.pgpass",
                                                                         "postgresql+psycopg2://<user>@db.internal"),
    f"postgresql://alice@db.internal/mlflow?password={PASSWORD}": ("PGPASSWORD",),
    f"mysql+pymysql://alice:{PASSWORD}@db.internal/mlflow": ("read_default_file",),
    f"mssql+pyodbc://alice:{PASSWORD}@mydsn": ("mssql+pyodbc://@mydsn",),
    f"redis://:{PASSWORD}@cache:6379": ("redis://cache:6379",),
    # SQLAlchemy reads a password up to the first @ (a / in it included), and the message shows no part of it
    "postgresql://alice:pa/ss@w@rd@db.internal/mlflow": ("PGPASSWORD",),
}


@pytest.mark.parametrize("uri", list(DATABASE_URIS))
def test_a_password_in_a_uri_of_any_scheme_is_refused_with_the_fix_for_that_scheme(uri):
    problem = uri_credentials_problem(uri)
    assert problem is not None, uri
    secret = PASSWORD if PASSWORD in uri else "pa/ss@w@rd"
    assert "alice" not in problem and secret not in problem and "ss@w" not in problem, problem
    for fix in DATABASE_URIS[uri]:
        assert fix in problem, (fix, problem)
    # from a config file: run.py's and analyze.py's validation
    cfg = compose_run(["model=dqn", f"tracking.uri='{uri}'"], root=str(REPO))
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert secret not in str(e.value)


def test_a_password_in_a_uri_from_an_analyze_config_is_refused():
    from trainbench.compose import register_configs
    from trainbench.config.analyze import validate_analyze

    register_configs(include_models=False)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("analyze", overrides=[f"tracking.uri=postgresql://alice:{PASSWORD}@db/mlflow",
                                            "paths.root=/tmp"])
    with pytest.raises(ConfigError, match="PGPASSWORD") as e:
        validate_analyze(cfg)
    assert PASSWORD not in str(e.value)


@pytest.mark.parametrize("script,extra,uri", [
    ("run.py", [], f"tracking.uri=http://alice:{PASSWORD}@127.0.0.1:9"),
    ("run.py", [], f"tracking.uri=postgresql+psycopg2://alice:{PASSWORD}@127.0.0.1:9/mlflow"),
    ("run.py", ["-m", "model=dqn,ppo"], f"tracking.uri='mysql://alice:{PASSWORD}@127.0.0.1:9/mlflow'"),
    ("analyze.py", [], f"tracking.uri=mssql+pyodbc://alice:{PASSWORD}@dsn"),
    ("run.py", [], f"+data.source=https://alice:{PASSWORD}@files.internal/bars.dbn"),
], ids=["run-http", "run-postgresql", "sweep-mysql-quoted", "analyze-mssql", "any-key"])
@pytest.mark.slow
def test_a_uri_with_a_password_is_refused_and_written_nowhere(tmp_path, script, extra, uri):
    p = subprocess.run([sys.executable, script, *extra, uri,
                        f"hydra.run.dir={tmp_path}/out", f"hydra.sweep.dir={tmp_path}/sweep",
                        f"paths.reports={tmp_path}/reports"],
                       cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    key = uri.split("=", 1)[0].lstrip("+")
    assert len(lines) == 1 and lines[0].startswith(f"error: {key} carries"), p.stderr[-2000:]
    assert "Name or service not known" not in p.stderr
    assert PASSWORD not in p.stdout + p.stderr and "alice" not in p.stdout + p.stderr
    # nothing written: no .hydra/*.yaml, config.pickle, job log, store or config artifact
    written = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert written == [], written


BOOM = """import dataclasses, os
from trainbench.models.dqn import SPEC as _S

def _build(*args, **kwargs):
    raise RuntimeError("feature server refused key " + os.environ["TB_FEATURE_API_KEY"])

SPEC = dataclasses.replace(_S, name="boom", build=_build)
"""


@pytest.mark.parametrize("full_error", ["", "1"], ids=["hydra-short", "HYDRA_FULL_ERROR"])
@pytest.mark.slow
def test_a_models_exception_holding_a_secret_is_printed_redacted(tmp_path, shared_data_dir, full_error):
    (tmp_path / "boom_model.py").write_text(BOOM)
    env = child_env(TB_FEATURE_API_KEY=SECRET, HYDRA_FULL_ERROR=full_error)
    env["PYTHONPATH"] = f"{REPO / 'src'}:{tmp_path}"
    p = subprocess.run([sys.executable, str(REPO / "run.py"), "model=custom", "model.spec=boom_model:SPEC",
                        "debug=default", "trainer.latency.enabled=false",
                        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"paths.data_dir={shared_data_dir}",
                        f"tracking.artifact_location={tmp_path}/artifacts", f"hydra.run.dir={tmp_path}/out"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "RuntimeError: feature server refused key ***" in p.stderr, p.stderr[-3000:]
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.parametrize("uri", [
    f"sqlite:///mlruns/mlflow.db?sslpassword={PASSWORD}",
    f"postgresql://alice@db.internal/mlflow?sslmode=require&sslpassword={PASSWORD}",
    f"http://127.0.0.1:5000/?token={PASSWORD}",
    f"https://mlflow.internal/?access_token={PASSWORD}",
    f"https://store.blob.core.windows.net/c?sv=2022&sig={PASSWORD}",
    f"s3://bucket/x?X-Amz-Credential=AKIA1&X-Amz-Signature={PASSWORD}",
    f"http://h:1/#api_key={PASSWORD}",
    f"mssql+pyodbc://@dsn;PWD={PASSWORD}",
    f"http://{PASSWORD}@127.0.0.1:5000",  # a token as the user name
    f"postgresql://alice@db/mlflow?p%61ssword={PASSWORD}",  # percent-encoded
    f"https://mlflow.internal/api;jsessionid={PASSWORD}",
    f"https://mlflow.internal/?X-Amz-Security-Token={PASSWORD}",
    f"mongodb://alice:{PASSWORD}@db/mlflow",
])
def test_any_query_parameter_or_user_info_that_carries_a_secret_is_refused(uri):
    problem = uri_credentials_problem(uri)
    assert problem is not None and PASSWORD not in problem, (uri, problem)


def test_query_parameters_that_hold_no_secret_pass():
    for uri in ("postgresql://mlflow@db/mlflow?sslmode=require&sslkey=/k/client.key&sslcert=/k/c.crt",
                "mysql://db/mlflow?read_default_file=/etc/my.cnf", "http://127.0.0.1:5000/?experiment=1",
                "sqlite:///mlruns/mlflow.db?timeout=30"):
        assert uri_credentials_problem(uri) is None, uri

"""A shared store is untrusted input: forged runs (written with MLflow's client) cannot make ``rerun=<id>``
import code, read the environment, write outside the data folder, replace a data file, or print raw
terminal escapes and secrets (issue 31, items 1, 2, 3, 7 and 8)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from trainbench.compose import compose_run
from trainbench.core.errors import DataError, RerunError
from trainbench.core.vocab import Artifact, Outcome, Tag
from trainbench.rerun.orchestrate import prepare_rerun

REPO = Path(__file__).resolve().parents[2]


def _forge(store, original: dict[str, Any], overrides: list[str] | None = None, run_name: str | None = None) -> str:
    """A run as an attacker writes it to a shared store: run.py's tags, a config of their choosing."""
    _, client, exp = store
    run = client.create_run(exp, run_name=run_name, tags={Tag.KIND: "train", Tag.MODEL: "dqn", Tag.DEVICE: "cpu",
                                                           Tag.SWEEP_ID: "s0", Tag.JOB: "0",
                                                           Tag.OUTCOME: Outcome.COMPLETED})
    rid = run.info.run_id
    client.log_text(rid, yaml.safe_dump(original), Artifact.CONFIG)
    client.log_text(rid, yaml.safe_dump(overrides or ["model=dqn"]), Artifact.OVERRIDES)
    client.set_terminated(rid, "FINISHED")
    return rid


def _original(tmp_path, data_file: Path | None = None) -> dict[str, Any]:
    data_file = data_file or tmp_path / "data" / "bars.dbn"
    data_file.parent.mkdir(parents=True, exist_ok=True)
    if not data_file.exists():
        data_file.write_bytes(b"bars")
    cfg = compose_run(["model=dqn", "debug=default", f"data.path={data_file}", "data.synthetic=false",
                       f"paths.data_dir={tmp_path}/data"], root=str(REPO))
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


@pytest.mark.slow
def test_a_logged_model_spec_is_not_imported_without_the_users_confirmation(tmp_path, store, rerun_composition,
                                                                           monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "tb_forged_mod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    original = _original(tmp_path)
    original["model"]["spec"] = "tb_forged_mod:SPEC"
    rid = _forge(store, original)
    with pytest.raises(RerunError, match="rerun_allow_spec=tb_forged_mod:SPEC") as e:
        prepare_rerun(rerun_composition(store[0], rid), [f"rerun={rid}"], out=lambda s: None)
    assert "not a source of code" in str(e.value)
    assert not marker.exists() and "tb_forged_mod" not in sys.modules
    # another path confirmed is no confirmation of this one
    with pytest.raises(RerunError, match="rerun_allow_spec"):
        prepare_rerun(rerun_composition(store[0], rid, "rerun_allow_spec=other_mod:SPEC"), [f"rerun={rid}"],
                      out=lambda s: None)
    assert not marker.exists()
    # confirmed: imported (it has no SPEC, so the rerun then fails on the model, as a bad model path does)
    with pytest.raises(RerunError, match="does not have"):
        prepare_rerun(rerun_composition(store[0], rid, "rerun_allow_spec=tb_forged_mod:SPEC"),
                      [f"rerun={rid}", "rerun_allow_spec=tb_forged_mod:SPEC"], out=lambda s: None)
    assert marker.exists()
    sys.modules.pop("tb_forged_mod", None)


@pytest.mark.slow
def test_run_py_refuses_a_logged_spec_before_importing_it(tmp_path, store):
    """As the issue found it: `this:SPEC` printed the Zen of Python (import-time code ran)."""
    uri = store[0]
    original = _original(tmp_path)
    original["model"]["spec"] = "this:SPEC"
    rid = _forge(store, original)
    p = subprocess.run([sys.executable, "run.py", f"rerun={rid}", f"tracking.uri={uri}", f"paths.data_dir={tmp_path}/data",
                        f"hydra.run.dir={tmp_path}/out"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Beautiful is better than ugly" not in p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rerun_allow_spec=this:SPEC" in errors[0], p.stderr[-2000:]
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_interpolations_in_logged_values_are_refused_never_resolved(tmp_path, store, rerun_composition, monkeypatch):
    monkeypatch.setenv("TB_FORGED_DB_URL", "postgresql://victim:hunter2@db.internal/prod")
    original = _original(tmp_path)
    original["data"]["name"] = "${oc.env:TB_FORGED_DB_URL}"
    rid = _forge(store, original)
    with pytest.raises(RerunError, match="interpolation at 'data.name'") as e:
        prepare_rerun(rerun_composition(store[0], rid), [f"rerun={rid}"], out=lambda s: None)
    assert "hunter2" not in str(e.value)
    # a custom resolver or an interpolation inside a longer value, and in the logged overrides
    original = _original(tmp_path)
    original["trainer"]["profile"] = "x-${oc.env:TB_FORGED_DB_URL}"
    with pytest.raises(RerunError, match="trainer.profile"):
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)
    rid = _forge(store, _original(tmp_path), overrides=["model=dqn", "data.name=${oc.env:TB_FORGED_DB_URL}"])
    printed: list[str] = []
    with pytest.raises(RerunError, match="logged overrides"):
        prepare_rerun(rerun_composition(store[0], rid), [], out=printed.append)
    assert not any("hunter2" in s for s in printed)


def test_the_rerun_table_escapes_terminal_controls_and_redacts_secrets(tmp_path, store, rerun_composition,
                                                                      monkeypatch):
    monkeypatch.setenv("TB_TEST_API_TOKEN", "s3cr3t-value-123")
    rid = _forge(store, _original(tmp_path), overrides=["model=dqn", "x=\x1b[2J"],
                 run_name="evil\x1b]0;owned\x07\x1b[2J s3cr3t-value-123")
    printed: list[str] = []
    prepare_rerun(rerun_composition(store[0], rid), [f"rerun={rid}"], out=printed.append)
    table = printed[-1]
    assert "\x1b" not in table and "\x07" not in table
    assert "evil\\x1b]0;owned\\x07" in table
    assert "s3cr3t-value-123" not in table and "***" in table


def test_logged_values_get_the_command_lines_ranges(tmp_path, store, rerun_composition):
    original = _original(tmp_path)
    original["trainer"]["warmup_epochs"] = -2
    rid = _forge(store, original)
    with pytest.raises(RerunError, match=r"trainer.warmup_epochs=-2 is out of range"):
        prepare_rerun(rerun_composition(store[0], rid), [f"rerun={rid}"], out=lambda s: None)
    original = _original(tmp_path)
    original["hardware"]["price_per_kwh"] = float("inf")
    original["model"]["target_epochs"] = -1000
    with pytest.raises(RerunError, match="model.target_epochs=-1000"):
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)


def test_a_logged_data_path_outside_the_data_folder_is_refused_never_created(tmp_path, store, rerun_composition):
    evil = tmp_path / "anywhere" / "deep" / "evil.dbn"
    original = _original(tmp_path)
    original["data"].update(path=str(evil), synthetic=True)
    rid = _forge(store, original)
    with pytest.raises(RerunError, match="outside this checkout's data folder"):
        prepare_rerun(rerun_composition(store[0], rid), [f"rerun={rid}"], out=lambda s: None)
    assert not (tmp_path / "anywhere").exists()
    # ../ out of the data folder, and a symlink in it that points out, are outside too
    original["data"]["path"] = f"{tmp_path}/data/../anywhere/evil.dbn"
    with pytest.raises(RerunError, match="outside"):
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)
    (tmp_path / "outside").mkdir()
    (tmp_path / "data" / "link").symlink_to(tmp_path / "outside")
    original["data"]["path"] = f"{tmp_path}/data/link/evil.dbn"
    with pytest.raises(RerunError, match="outside"):
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)
    assert not any((tmp_path / "outside").iterdir()) and not (tmp_path / "anywhere").exists()


def _generated(tmp_path) -> tuple[Path, str]:
    from trainbench.data.loader import ensure_file

    cfg = compose_run(["model=dqn", "debug=default", f"paths.data_dir={tmp_path}/data", "data.n_bars=400"],
                      root=str(REPO))
    path, made = ensure_file(OmegaConf.to_object(cfg.data), cfg.paths.root, cfg.paths.data_dir, user_path=False,
                             explicit_synthetic=False)
    assert made
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_rerun_never_replaces_a_data_file(tmp_path, store, rerun_composition):
    path, sha = _generated(tmp_path)
    # other generator parameters and an invalid value: refused before the data file is looked at
    original = _original(tmp_path, path)
    original["data"].update(synthetic=True, n_bars=300)
    original["trainer"]["warmup_epochs"] = -1
    with pytest.raises(RerunError, match="warmup_epochs"):
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    # a valid config with other generator parameters: the file is kept and the rerun says why it stops
    original["trainer"]["warmup_epochs"] = 1
    with pytest.raises(DataError, match="never overwritten"):
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


@pytest.mark.slow
def test_a_rerun_prints_logged_text_escaped_in_its_progress_lines(tmp_path, store):
    """A logged data.name with ESC/OSC sequences and bidi controls: the job's log lines (console and job log)
    show them as visible escapes, never raw."""
    original = _original(tmp_path)
    original["data"]["name"] = "evil\x1b]0;owned\x07\x1b[2J\u202egnp.exe"
    original["trainer"]["profile_reason"] = "box\x1b[31m"  # printed in the plan line (print, not a log record)
    rid = _forge(store, original)
    p = subprocess.run([sys.executable, "run.py", f"rerun={rid}", f"tracking.uri={store[0]}",
                        f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert "evil\\x1b]0;owned\\x07\\x1b[2J\\u202egnp.exe" in out and "box\\x1b[31m" in out, out[-3000:]
    assert not any(c in out for c in "\x1b\x07\u202e"), out[-3000:]
    logs = list((tmp_path / "out").glob("*.log"))
    assert logs and "\x1b" not in logs[0].read_text() and "evil\\x1b]0;owned" in logs[0].read_text()


BOMB = ('a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(f'{c}: &{c} [{",".join(["*" + p] * 9)}]\n' for p, c in zip("abcdefgh", "bcdefghi", strict=True))
        + "model: {name: dqn}\n")  # 9**9 = 387 million strings once the aliases are expanded


def _forge_text(store, config_text: str) -> str:
    _, client, exp = store
    run = client.create_run(exp, tags={Tag.KIND: "train", Tag.MODEL: "dqn", Tag.OUTCOME: Outcome.COMPLETED})
    client.log_text(run.info.run_id, config_text, Artifact.CONFIG)
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


@pytest.mark.slow
def test_a_yaml_alias_bomb_in_a_logged_config_is_refused_before_it_is_built(tmp_path, store, rerun_composition):
    rid = _forge_text(store, BOMB)
    with pytest.raises(RerunError, match=r"config/config.yaml artifact is not read: it expands to more than "
                                         r"100,000 values \(YAML aliases"):
        prepare_rerun(rerun_composition(store[0], rid), [f"rerun={rid}"], out=lambda s: None)
    # deep nesting, and an artifact larger than any config run.py writes: refused before they are parsed
    with pytest.raises(RerunError, match="nests deeper than 64 levels"):
        prepare_rerun(rerun_composition(store[0], _forge_text(store, "a: " + "[" * 500 + "]" * 500)), [],
                      out=lambda s: None)
    with pytest.raises(RerunError, match="not valid YAML"):  # deeper than the YAML parser itself allows
        prepare_rerun(rerun_composition(store[0], _forge_text(store, "a: " + "[" * 5000 + "]" * 5000)), [],
                      out=lambda s: None)
    with pytest.raises(RerunError, match=r"artifact is 2,\d{3},\d{3} bytes, more than the 1,048,576"):
        prepare_rerun(rerun_composition(store[0], _forge_text(store, "a: " + "x" * 2_000_000)), [],
                      out=lambda s: None)
    # a small alias in an otherwise valid config is no bomb: the config is read (and fails later, on its keys)
    with pytest.raises(RerunError, match="no model.name"):
        prepare_rerun(rerun_composition(store[0], _forge_text(store, "x: &x {a: 1}\ny: *x\n")), [],
                      out=lambda s: None)


def test_the_bomb_check_is_what_stops_the_parse():
    """The bounded parse, in a process of its own with a deadline: before the check OmegaConf spun on the bomb
    at 100% CPU, its memory growing, for ever."""
    code = ("from trainbench.core.errors import RerunError\nfrom trainbench.rerun.fetch import parsed\nimport sys\n"
            "try:\n    parsed('r', 'config/config.yaml', sys.stdin.read(), dict)\nexcept RerunError as e:\n"
            "    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], input=BOMB, capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")})
    assert "expands to more than" in p.stdout, p.stderr[-2000:]


@pytest.mark.parametrize("key,value,says", [
    ("epochs", "abc", r"trainer.epochs' does not have the type this version of trainbench expects \(Value 'abc' "
                      r"of type 'str' could not be converted to Integer\)"),
    ("precision", "fp99", r"trainer.precision' does not have the type .* \(Invalid value 'fp99', expected one of"),
    ("zzz_renamed", 1, r"a key this version of trainbench does not know, 'trainer.zzz_renamed'.*renamed or "
                       r"removed since"),
])
def test_a_logged_value_of_the_wrong_type_is_one_line_that_says_so(tmp_path, store, rerun_composition, key, value,
                                                                   says):
    original = _original(tmp_path)
    original["trainer"][key] = value
    with pytest.raises(RerunError, match=says) as e:
        prepare_rerun(rerun_composition(store[0], _forge(store, original)), [], out=lambda s: None)
    text = str(e.value)
    assert "\n" not in text and "\\n" not in text and "full_key" not in text and "object_type" not in text
    if key != "zzz_renamed":
        assert "renamed or removed" not in text


@pytest.mark.slow
def test_run_py_prints_a_rerun_config_error_as_its_only_line(tmp_path, store):
    original = _original(tmp_path)
    original["trainer"]["epochs"] = "abc"
    rid = _forge(store, original)
    p = subprocess.run([sys.executable, "run.py", f"rerun={rid}", f"tracking.uri={store[0]}",
                        f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines() == [p.stderr.strip()], p.stderr[-3000:]  # no warning before it
    assert p.stderr.startswith("error: rerun=") and "does not have the type" in p.stderr
    assert "Warning" not in p.stderr

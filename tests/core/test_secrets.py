"""Secrets (values of *KEY*/*TOKEN*/*SECRET*/*PASSWORD* environment variables) never reach what a run writes."""

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainbench.core import secrets as S
from trainbench.core.vocab import Artifact, Outcome, Tag

TOKEN = "tok-9f8e7d6c5b4a"
KEY = "db-A1b2C3d4E5f6G7h8"


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("MY_TOKEN", TOKEN)
    monkeypatch.setenv("DATABENTO_API_KEY", KEY)
    monkeypatch.setenv("DEBUG_KEY", "1")  # too short to be a secret: left alone
    monkeypatch.setenv("SSH_KEY_PATH", "/home/u/.ssh/id_ed25519")  # a path to a key is not the key


def test_secret_values_and_redaction(env):
    vals = S.secret_values()
    assert TOKEN in vals and KEY in vals and "1" not in vals and "/home/u/.ssh/id_ed25519" not in vals
    assert S.redact(f"url?k={KEY}&t={TOKEN}") == "url?k=***&t=***"
    assert S.redact_mapping({"data.api_key": "anything", Tag.SWEEP_ID: f"s-{TOKEN}", "n": 3, "x.token": None}) == {
        "data.api_key": "***", Tag.SWEEP_ID: "s-***", "n": "3", "x.token": "None"}


def test_log_records_and_tracebacks_are_redacted(env, tmp_path):
    logger = logging.getLogger("tb-secret-test")
    logger.propagate = False
    h = logging.FileHandler(tmp_path / "job.log")
    logger.addHandler(h)
    try:
        assert S.install_log_redaction(logger) == 1 and S.install_log_redaction(logger) == 1
        assert sum(isinstance(f, S.RedactingFilter) for f in h.filters) == 1
        logger.warning("sweep %s", f"s-{TOKEN}")
        try:
            raise RuntimeError(f"bad key {KEY}")
        except RuntimeError:
            logger.exception(Outcome.FAILED)
    finally:
        h.close()
        logger.removeHandler(h)
    text = (tmp_path / "job.log").read_text()
    assert "sweep s-***" in text and "bad key ***" in text and TOKEN not in text and KEY not in text


def test_log_records_show_terminal_controls_as_escapes_even_without_secrets(tmp_path, monkeypatch):
    """A logged name in a log line (a rerun's progress line: ``phase data: started (data=...)``): ESC, OSC, BEL
    and bidi controls are escaped in the console and the job log, with or without secrets to redact."""
    from trainbench.core.progress import phase

    for k in [k for k in __import__("os").environ if S.is_secret_name(k)]:
        monkeypatch.delenv(k)
    logger = logging.getLogger("tb-escape-test")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    h = logging.FileHandler(tmp_path / "job.log")
    logger.addHandler(h)
    try:
        S.install_log_redaction(logger)
        with phase("data", "data=evil\x1b]0;owned\x07\x1b[2J\u202egnp", logger=logger):
            pass
        try:
            raise ValueError("bad \x1b[31mname")
        except ValueError:
            logger.exception("the step broke")
    finally:
        h.close()
        logger.removeHandler(h)
    text = (tmp_path / "job.log").read_text()
    assert "data=evil\\x1b]0;owned\\x07\\x1b[2J\\u202egnp" in text and "bad \\x1b[31mname" in text
    assert not any(c in text for c in "\x1b\x07\u202e")


def test_redact_tree_rewrites_hydra_files(env, tmp_path):
    (tmp_path / "overrides.yaml").write_text(f"- sweep_id={TOKEN}\n")
    (tmp_path / "config.yaml").write_text("model: dqn\n")
    assert [p.name for p in S.redact_tree(tmp_path)] == ["overrides.yaml"]
    assert (tmp_path / "overrides.yaml").read_text() == "- sweep_id=***\n"


def test_writer_redacts_params_tags_and_artifacts(env, tmp_path):
    from trainbench.tracking.writer import RunWriter

    sent = []
    client = SimpleNamespace(
        tracking_uri="sqlite:///x", create_run=lambda exp, run_name, tags: sent.append(("run", run_name, tags))
        or SimpleNamespace(info=SimpleNamespace(run_id="r1")),
        log_batch=lambda run_id, metrics=(), params=(), tags=(): sent.append(("batch", list(params), list(tags))),
        log_text=lambda run_id, text, f: sent.append(("text", text)),
        log_dict=lambda run_id, obj, f: sent.append(("dict", obj)),
        log_artifact=lambda run_id, path, ap: sent.append(("file", Path(path).read_text())),
        set_terminated=lambda run_id, status, end_time: None)
    w = RunWriter(client, "0")
    w.start(f"run-{TOKEN}", {Tag.SWEEP_ID: TOKEN}, {"data.path": f"/d/{KEY}.dbn", "data.api_key": "x"})
    w.set_tags({Tag.ERROR: f"FileNotFoundError: /d/{KEY}.dbn"})
    w.log_text(f"path: /d/{KEY}.dbn", Artifact.CONFIG)
    w.log_dict({"cmd": ["--token", TOKEN]}, Artifact.ENVIRONMENT)
    art = tmp_path / "notes.txt"
    art.write_text(f"token={TOKEN}")
    w.log_artifact(art)
    w.end(Outcome.COMPLETED)
    dump = repr(sent)
    assert TOKEN not in dump and KEY not in dump
    assert "/d/***.dbn" in dump and "key='data.api_key', value='***'" in dump and "token=***" in dump
    assert art.read_text() == f"token={TOKEN}"  # the user's file is untouched; the upload is a redacted copy


def test_redact_config_keeps_types_and_writes_read_only_nodes(env):
    from dataclasses import dataclass, field

    from omegaconf import OmegaConf

    @dataclass
    class Job:
        name: str = "job"
        seed: int = 0
        tags: list[str] = field(default_factory=list)

    cfg = OmegaConf.structured(Job(name=f"run-{TOKEN}", seed=1, tags=[f"k={KEY}", "plain", "1"]))
    OmegaConf.set_readonly(cfg.tags, True)  # as Hydra leaves hydra.overrides.task
    S.redact_config(cfg)
    assert cfg.name == "run-***" and list(cfg.tags) == ["k=***", "plain", "1"] and cfg.seed == 1
    assert OmegaConf.get_type(cfg) is Job and OmegaConf.is_readonly(cfg.tags)  # still typed, still read-only
    S.redact_config(cfg, secrets=["plain"])
    assert list(cfg.tags) == ["k=***", "***", "1"]


def test_only_this_module_says_what_a_secret_is():
    """No other source file keeps a rule of its own for secret names or for the redaction mark."""
    import re

    name_pattern = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)\|(KEY|TOKEN|SECRET|PASSWORD)")  # e.g. "KEY|TOKEN"
    here = Path(S.__file__).resolve()
    src = here.parents[2]
    own_rule = [str(p.relative_to(src)) for p in sorted(src.rglob("*.py")) if p != here
                and (name_pattern.search(text := p.read_text()) or f'"{S.REDACTED}"' in text
                     or f"'{S.REDACTED}'" in text)]
    assert own_rule == []
    assert name_pattern.search(here.read_text())  # the pattern finds the rule where it is

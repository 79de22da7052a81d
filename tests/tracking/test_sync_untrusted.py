"""`trainbench sync` on a crafted spool: only the spool's own files, only to its own run, only to the server the
user names or confirms, with secrets redacted as at run time (issue 31, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.procs import REPO, child_env
from trainbench.cli import main as cli_main

SECRET = "tok-Vq83-zz19-secret"


def _spool(root: Path, run_id: str, uri: str, ops: list[dict], meta_run_id: str | None = None) -> Path:
    folder = root / run_id
    (folder / "files").mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text(json.dumps({"tracking_uri": uri, "run_id": meta_run_id or run_id,
                                                  "experiment_id": "0"}))
    (folder / "ops.jsonl").write_text("".join(json.dumps(op) + "\n" for op in ops))
    return folder


def _artifacts(client, run_id: str) -> set[str]:
    return {a.path for a in client.list_artifacts(run_id)}


def test_a_spool_uploads_only_its_own_files_to_its_own_run(store, tmp_path, capsys):
    client, exp = store
    victim = tmp_path / "victim_secret.txt"
    victim.write_text("the victim's private key")
    (tmp_path / "outside").mkdir()
    cases = {
        "absolute": {"op": "log_artifact", "path": str(victim), "artifact_path": None},
        "dotdot": {"op": "log_artifact", "path": "../../victim_secret.txt", "artifact_path": None},
        "symlink": {"op": "log_artifact", "path": "files/0/link.txt", "artifact_path": None},
        "dest": {"op": "log_text", "text": "x", "artifact_file": "../../../escaped.txt"},
    }
    for name, op in cases.items():
        run_id = client.create_run(exp).info.run_id
        root = tmp_path / f"spool-{name}"
        folder = _spool(root, run_id, client.tracking_uri, [op])
        if name == "symlink":
            (folder / "files" / "0").mkdir(parents=True)
            (folder / "files" / "0" / "link.txt").symlink_to(victim)
        assert cli_main(["sync", str(root), "--yes"]) == 1, name
        err = capsys.readouterr().err
        assert "refused" in err, (name, err)
        assert _artifacts(client, run_id) == set() and folder.exists(), name
    assert not any(p.name == "escaped.txt" for p in tmp_path.rglob("*"))

    # meta.json naming another run (the victim's own run) than the folder's: nothing is written to it
    target = client.create_run(exp).info.run_id
    root = tmp_path / "spool-other-run"
    _spool(root, "f" * 32, client.tracking_uri, [{"op": "set_terminated", "status": "FAILED"}], meta_run_id=target)
    assert cli_main(["sync", str(root), "--yes"]) == 1
    assert "not the folder's own run" in capsys.readouterr().err
    assert client.get_run(target).info.status == "RUNNING"

    # a run folder that is a symbolic link out of the spool folder given is not one of its spools
    elsewhere = tmp_path / "elsewhere"
    run_id = client.create_run(exp).info.run_id
    _spool(elsewhere, run_id, client.tracking_uri, [{"op": "set_terminated", "status": "FINISHED"}])
    root = tmp_path / "spool-linked"
    root.mkdir()
    (root / run_id).symlink_to(elsewhere / run_id)
    assert cli_main(["sync", str(root), "--yes"]) == 2 and "no spool" in capsys.readouterr().err
    assert client.get_run(run_id).info.status == "RUNNING"


def test_the_recorded_server_needs_confirmation_and_uri_names_another(store, tmp_path):
    client, exp = store
    run_id = client.create_run(exp).info.run_id
    root = tmp_path / "spool"
    _spool(root, run_id, "http://attacker.invalid:5000", [{"op": "set_terminated", "status": "FINISHED"}])
    p = subprocess.run([sys.executable, "-m", "trainbench.tracking.sync", str(root)], cwd=REPO, env=child_env(),
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p.stderr
    assert "http://attacker.invalid:5000" in p.stderr and "--yes" in p.stderr and "--uri" in p.stderr
    assert client.get_run(run_id).info.status == "RUNNING" and (root / run_id).exists()
    # the user names the server: the recorded one is not contacted
    assert cli_main(["sync", str(root), "--uri", client.tracking_uri]) == 0
    assert client.get_run(run_id).info.status == "FINISHED"
    # credentials in --uri are refused as tracking.uri's are
    assert cli_main(["sync", str(root), "--uri", "http://u:pw-secret-1@127.0.0.1:9"]) == 2


def test_sync_redacts_secrets_as_at_run_time(store, tmp_path, monkeypatch):
    client, exp = store
    monkeypatch.setenv("TB_SYNC_API_TOKEN", SECRET)
    run_id = client.create_run(exp).info.run_id
    root = tmp_path / "spool"
    folder = _spool(root, run_id, client.tracking_uri, [
        {"op": "log_batch", "metrics": [], "params": [["data.name", f"db-{SECRET}"]], "tags": [["note", SECRET]]},
        {"op": "log_text", "text": f"key={SECRET}\n", "artifact_file": "notes.txt"},
        {"op": "log_artifact", "path": "files/0/weights.txt", "artifact_path": "model"},
    ])
    (folder / "files" / "0").mkdir(parents=True)
    (folder / "files" / "0" / "weights.txt").write_text(f"w {SECRET}")
    assert cli_main(["sync", str(root), "--yes"]) == 0
    run = client.get_run(run_id)
    assert run.data.params["data.name"] == "db-***" and run.data.tags["note"] == "***"
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        local = Path(client.download_artifacts(run_id, "", d))
        texts = [f.read_text() for f in local.rglob("*") if f.is_file()]
    assert len(texts) == 2 and all(SECRET not in t and "***" in t for t in texts)

"""Upload spooled writes of runs whose tracking server was unreachable: ``trainbench sync <path>``.

    trainbench sync mlruns/spool --yes               every run's spool under the folder, to the server it recorded
    trainbench sync mlruns/spool/<run_id> --yes      one run
    trainbench sync mlruns/spool --uri http://mlflow.internal:5000    to the server you name
    python -m trainbench.tracking.sync mlruns/spool  the same without the console script

A spool is input like any other: its meta.json names the server and the run, its ops.jsonl the writes. The
server a spool recorded is used only once confirmed (``--yes``, or the question on a terminal); ``--uri``
names it instead. Only the spool's own files (the copies under ``files/``) are uploaded, only to the run the
folder is named after, with the secret values of this environment redacted as at run time; a write that
names anything else is refused and the spool kept. Each spool is replayed in order (every write is idempotent, so a replay cut short can simply be run
again) and deleted once the store has taken all of it. Exits 0 when nothing is left, 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, SpoolDamaged, TrackingUnavailable
from trainbench.core.safe_text import term
from trainbench.core.secrets import redact
from trainbench.tracking.spool import find_spools

log = logging.getLogger(__name__)


def recorded_uris(path: str | Path) -> list[str]:
    """The tracking URIs the spools under ``path`` recorded (readable, own meta.json only), sorted."""
    uris = set()
    for sp in find_spools(path):
        try:
            uris.add(str(sp.check_identity()["tracking_uri"]))
        except SpoolDamaged:
            continue
    return sorted(uris)


def _send(client: Any, run_id: str, op: dict[str, Any], secrets: list[str]) -> None:
    """One write with secrets redacted as at run time (texts, params, tags; a file through a redacted copy)."""
    from trainbench.core.secrets import redact_file
    from trainbench.tracking.connection import retry
    from trainbench.tracking.writer import _redact_obj, apply_op

    if secrets:
        op = {k: (v if k == "path" else _redact_obj(v, secrets)) for k, v in op.items()}
    if op["op"] == "log_artifact" and secrets and any(x.encode() in Path(op["path"]).read_bytes() for x in secrets):
        with tempfile.TemporaryDirectory(prefix="tb-sync-") as d:
            copy = Path(d) / Path(op["path"]).name
            shutil.copy2(op["path"], copy)
            redact_file(copy, secrets)
            retry(lambda: apply_op(client, run_id, {**op, "path": str(copy)}), op["op"])
        return
    retry(lambda: apply_op(client, run_id, op), op["op"])


def sync(path: str | Path, uri: str | None = None, timeout_s: float = 10.0,
         recorded_confirmed: bool = True) -> tuple[int, int, int]:
    """Replay every spool under ``path``; returns (runs fully synced, writes sent, writes left).

    Each write goes to ``uri``, or, when None and ``recorded_confirmed``, to the URI the spool recorded.
    Only the spool's own files are uploaded (:meth:`Spool.resolve`), to the spool's own run
    (:meth:`Spool.check_identity`), with the secret values of this environment redacted.
    """
    from mlflow.tracking import MlflowClient

    from trainbench.config.shared import uri_credentials_problem
    from trainbench.core.secrets import secret_values
    from trainbench.tracking.connection import check_reachable

    done = sent = left = 0
    spools = list(find_spools(path))
    if not spools:
        raise FileNotFoundError(f"no spool at {term(path)} (a spool folder holds meta.json and ops.jsonl)")
    secrets = secret_values()
    clients: dict[str, MlflowClient] = {}
    for sp in spools:
        try:
            meta = sp.check_identity()
        except SpoolDamaged as e:
            print(f"error: {term(e)}", file=sys.stderr)
            left += 1
            continue
        run_id = str(meta["run_id"])
        if uri is None and not recorded_confirmed:
            print(f"run {term(run_id)}: not sent: the spool names {term(meta['tracking_uri'])}; confirm it with "
                  "--yes or name the server with --uri", file=sys.stderr)
            left += sp.pending()
            continue
        target = uri or str(meta["tracking_uri"])
        problem = uri_credentials_problem(target, "the tracking URI")
        if problem:
            print(f"run {term(run_id)}: not sent: {problem}", file=sys.stderr)
            left += sp.pending()
            continue
        try:
            if target not in clients:
                check_reachable(target, timeout_s)
                clients[target] = MlflowClient(tracking_uri=target)
            client = clients[target]
            n, rest = sp.replay(lambda op, c=client, r=run_id: _send(c, r, op, secrets))  # replay resolves (contains) each op
        except TrackingUnavailable as e:
            rest = sp.pending()
            print(f"run {term(run_id)}: {term(e)}", file=sys.stderr)
            n = 0
        except SpoolDamaged as e:
            rest = sp.pending()
            print(f"error: {term(e)}; {rest} write(s) stay in {term(sp.folder)}", file=sys.stderr)
            n = 0
        except Exception as e:  # noqa: BLE001 - report and go on with the next run
            rest = sp.pending()
            print(f"run {term(run_id)}: a write failed ({type(e).__name__}: {term(redact(str(e)[:300], secrets))}); "
                  f"{rest} write(s) stay in {term(sp.folder)}", file=sys.stderr)
            n = 0
        sent += n
        left += rest
        done += rest == 0
        print(f"run {term(run_id)}: sent {n} write(s) to {term(target)}"
              + ("; spool removed" if rest == 0 else f"; {rest} left in {term(sp.folder)}"))
    return done, sent, left


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trainbench sync", description=__doc__.splitlines()[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("path", help="a spool folder (tracking.spool_dir, default mlruns/spool) or one run's folder")
    ap.add_argument("--uri", default=None, help="send to this tracking URI (default: the one each run recorded, "
                                                "once confirmed)")
    ap.add_argument("--yes", action="store_true", help="confirm the tracking URIs the spools recorded")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the server to answer")


def _confirmed(path: str, uris: list[str]) -> bool | None:
    """Ask on a terminal whether the recorded servers are the right ones; None without a terminal."""
    if not sys.stdin.isatty():
        return None
    answer = input(f"send the spooled writes under {term(path)} to {', '.join(term(u) for u in uris)}? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def run(args: argparse.Namespace) -> int:
    from trainbench.config.shared import uri_credentials_problem

    problem = uri_credentials_problem(args.uri, "--uri")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    confirmed = True
    if args.uri is None and not args.yes:
        uris = recorded_uris(args.path)
        if uris:
            answer = _confirmed(args.path, uris)
            if answer is None:
                print(f"error: the spools under {term(args.path)} name the tracking server(s) "
                      f"{', '.join(term(u) for u in uris)}: a spool's meta.json says where its writes go, and "
                      "whoever wrote the spool chose it. Confirm with --yes, or name the server with --uri <uri>.",
                      file=sys.stderr)
                return EXIT_BAD_INPUT
            confirmed = answer
    try:
        done, sent, left = sync(args.path, args.uri, args.timeout, recorded_confirmed=confirmed)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{done} run(s) synced, {sent} write(s) sent, {left} left")
    return EXIT_OK if left == 0 else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

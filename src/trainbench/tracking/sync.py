"""Upload spooled writes of runs whose tracking server was unreachable: ``trainbench sync <path>``.

    trainbench sync mlruns/spool                     every run's spool under the folder
    trainbench sync mlruns/spool/<run_id>            one run
    trainbench sync mlruns/spool --uri http://mlflow.internal:5000    a server that moved
    python -m trainbench.tracking.sync mlruns/spool  the same without the console script

Each spool is replayed in order (every write is idempotent, so a replay cut short can simply be run
again) and deleted once the store has taken all of it. Exits 0 when nothing is left, 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, SpoolDamaged, TrackingUnavailable
from trainbench.tracking.spool import find_spools

log = logging.getLogger(__name__)


def sync(path: str | Path, uri: str | None = None, timeout_s: float = 10.0) -> tuple[int, int, int]:
    """Replay every spool under ``path``; returns (runs fully synced, writes sent, writes left)."""
    from mlflow.tracking import MlflowClient

    from trainbench.tracking.connection import check_reachable, retry
    from trainbench.tracking.writer import apply_op

    done = sent = left = 0
    spools = list(find_spools(path))
    if not spools:
        raise FileNotFoundError(f"no spool at {path} (a spool folder holds meta.json and ops.jsonl)")
    clients: dict[str, MlflowClient] = {}
    for sp in spools:
        try:
            meta = sp.meta
        except SpoolDamaged as e:
            print(f"error: {e}", file=sys.stderr)
            left += 1
            continue
        target = uri or meta["tracking_uri"]
        try:
            if target not in clients:
                check_reachable(target, timeout_s)
                clients[target] = MlflowClient(tracking_uri=target)
            client = clients[target]
            n, rest = sp.replay(lambda op, c=client, r=meta["run_id"]: retry(lambda: apply_op(c, r, op), op["op"]))
        except TrackingUnavailable as e:
            rest = sp.pending()
            print(f"run {meta['run_id']}: {e}", file=sys.stderr)
            n = 0
        except Exception as e:  # noqa: BLE001 - report and go on with the next run
            rest = sp.pending()
            print(f"run {meta['run_id']}: a write failed ({type(e).__name__}: {str(e)[:300]}); "
                  f"{rest} write(s) stay in {sp.folder}", file=sys.stderr)
            n = 0
        sent += n
        left += rest
        done += rest == 0
        print(f"run {meta['run_id']}: sent {n} write(s) to {target}"
              + ("; spool removed" if rest == 0 else f"; {rest} left in {sp.folder}"))
    return done, sent, left


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trainbench sync", description=__doc__.splitlines()[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("path", help="a spool folder (tracking.spool_dir, default mlruns/spool) or one run's folder")
    ap.add_argument("--uri", default=None, help="send to this tracking URI instead of the one the run used")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the server to answer")


def run(args: argparse.Namespace) -> int:
    try:
        done, sent, left = sync(args.path, args.uri, args.timeout)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{done} run(s) synced, {sent} write(s) sent, {left} left")
    return EXIT_OK if left == 0 else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

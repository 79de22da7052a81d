"""What a user sees at the end of a sweep: every job of it, its outcome, and how to open the runs.

The runs are read back from MLflow (jobs of any launcher, in any process) and merged with the sweep's job
ledger (:mod:`trainbench.sweep.jobs`), so a job that failed before its run opened, or did not run
because the sweep was stopped, is listed and counted too.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trainbench.core.vocab import Kind, Outcome, Summary, Tag, tag_filter


def sweep_id_of(config: DictConfig) -> str:
    """The sweep's id, as its jobs derive it (:func:`trainbench.core.safe_names.sweep_id`)."""
    from trainbench.core.safe_names import sweep_id

    return sweep_id(config.get("sweep_id"), str(config.hydra.sweep.dir), multirun=True)  # config key


def print_sweep_summary(config: DictConfig, runs_error: str | None = None) -> int:
    """Print every job of the sweep; return how many did not complete (a job with no record counts)."""
    from trainbench.sweep.jobs import read_ledger

    sweep_id = sweep_id_of(config)
    ledger = read_ledger(config.hydra.sweep.dir)
    runs: list[Any] = []
    exp_id: str | None = None
    uri = config.tracking.uri
    if runs_error is None:
        try:
            runs, exp_id = _sweep_runs(config, sweep_id)
        except Exception as e:  # noqa: BLE001 - the summary must never hide the jobs behind its own error
            runs_error = f"{type(e).__name__}: {e}"
    by_job: dict[int, Any] = {}
    extra = []  # runs without a usable job tag
    for r in runs:
        try:
            by_job.setdefault(int(r.data.tags.get(Tag.JOB)), r)
        except (TypeError, ValueError):
            extra.append(r)
    jobs = sorted(set(by_job) | set(ledger))
    print(f"\nsweep {sweep_id}: {len(jobs) + len(extra)} job(s), {len(runs)} run(s) in experiment "
          f"{config.tracking.experiment!r} at {uri}")
    if runs_error:
        print(f"  (the runs could not be read back: {runs_error[:300]})")
    bad = 0
    not_run = []
    w = max([8, *(len(r.data.tags.get(Tag.MODEL, "?")) for r in runs)])  # plugin names may be longer
    for num in jobs:
        r, rec = by_job.get(num), ledger.get(num, {})
        if r is not None:
            t = r.data.tags
            mean = r.data.metrics.get(Summary.EPOCH_TIME_MS_MEAN)
            outcome = t.get(Tag.OUTCOME, r.info.status.lower())
            timing = f"{mean:10.2f} ms/epoch" if mean is not None else " " * 19
            err = f"  ({t[Tag.ERROR][:120]})" if t.get(Tag.ERROR) else ""
            gpu = f"  gpu {t[Tag.GPU_DEVICES]}" if t.get(Tag.GPU_DEVICES) else ""  # hydra/launcher=local_gpus
            print(f"  job {num:>3}  {t.get(Tag.MODEL, '?'):{w}s} {outcome:11s} {timing}  run {r.info.run_id}{gpu}{err}")
        else:
            outcome = str(rec.get("outcome", "unknown"))
            if outcome == Outcome.COMPLETED and runs_error is None:
                outcome = Outcome.UNRECORDED  # the job said completed but its run is not in the store
            if outcome == Outcome.NOT_RUN:
                not_run.append(f"#{num} {' '.join(rec.get('overrides', []))}")
            err = f"  ({str(rec['error'])[:160]})" if rec.get("error") else ""
            print(f"  job {num:>3}  {outcome:20s} no run in the store{err}")
        bad += outcome != Outcome.COMPLETED
    for r in extra:
        outcome = r.data.tags.get(Tag.OUTCOME, r.info.status.lower())
        bad += outcome != Outcome.COMPLETED
        print(f"  job   ?  {r.data.tags.get(Tag.MODEL, '?'):{w}s} {outcome:11s} run {r.info.run_id}")
    if not_run:
        print(f"{len(not_run)} job(s) did not run (the sweep was stopped): " + "; ".join(not_run))
    from trainbench.tracking.conventions import ui_url

    if exp_id is None:
        pass  # the store could not be read: no link to give
    elif uri.startswith("sqlite:"):
        print(f"open them with `make ui` (MLflow UI on {ui_url('http://127.0.0.1:5000', exp_id)}), and "
              f"analyse the sweep with `python analyze.py sweep={sweep_id}`")
    else:
        print(f"open them in the MLflow UI at {ui_url(uri, exp_id)}; analyse with `python analyze.py "
              f"sweep={sweep_id} tracking=server`")
    total = len(jobs) + len(extra)
    if not total:
        print("no job of this sweep left a record: it failed before any job ran")
        return 1
    if bad:
        print(f"{bad} of {total} job(s) did not complete (see their `error`)")
    return bad


def _sweep_runs(config: DictConfig, sweep_id: str) -> tuple[list[Any], str]:
    from trainbench.core.safe_names import check_sweep_id
    from trainbench.tracking.connection import connect

    check_sweep_id(sweep_id)  # a quote would break the filter string
    client, exp_id = connect(config.tracking)
    return list(client.search_runs([exp_id], filter_string=tag_filter({Tag.SWEEP_ID: sweep_id, Tag.KIND: Kind.TRAIN}),
                                   max_results=10_000)), exp_id

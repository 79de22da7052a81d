"""What a user sees at the end of a sweep: every run of it, its outcome, and how to open them."""

from __future__ import annotations

import hashlib
from pathlib import Path

from omegaconf import DictConfig


def sweep_id_of(config: DictConfig) -> str:
    """The sweep id jobs derive (see trainbench.train.hydra_identity), computed from the sweep dir."""
    if config.get("sweep_id"):
        return str(config.sweep_id)
    base = Path(config.hydra.sweep.dir)
    return f"{base.name}-{hashlib.sha1(str(base.resolve()).encode()).hexdigest()[:6]}"


def print_sweep_summary(config: DictConfig) -> int:
    """Print the sweep's runs; return how many did not complete."""
    from trainbench.tracking.writer import connect

    sweep_id = sweep_id_of(config)
    client, exp_id = connect(config.tracking)
    runs = client.search_runs([exp_id], filter_string=f"tags.sweep_id = '{sweep_id}' and tags.kind = 'train'",
                              max_results=10_000)
    uri = config.tracking.uri
    print(f"\nsweep {sweep_id}: {len(runs)} run(s) in experiment {config.tracking.experiment!r} at {uri}")
    bad = 0
    for r in sorted(runs, key=lambda r: int(r.data.tags.get("job", 0))):
        t = r.data.tags
        mean = r.data.metrics.get("epoch_time_ms_mean")
        outcome = t.get("outcome", r.info.status.lower())
        bad += outcome != "completed"
        timing = f"{mean:10.2f} ms/epoch" if mean is not None else " " * 19
        err = f"  ({t['error'][:120]})" if t.get("error") else ""
        print(f"  job {t.get('job', '?'):>3}  {t.get('model', '?'):8s} {outcome:11s} {timing}  "
              f"run {r.info.run_id}{err}")
    from trainbench.tracking.native import ui_url

    if uri.startswith("sqlite:"):
        print(f"open them with `make ui` (MLflow UI on {ui_url('http://127.0.0.1:5000', exp_id)}), and "
              f"analyse the sweep with `python analyze.py sweep={sweep_id}`")
    else:
        print(f"open them in the MLflow UI at {ui_url(uri, exp_id)}; analyse with `python analyze.py "
              f"sweep={sweep_id} tracking=server`")
    if bad:
        print(f"{bad} of {len(runs)} run(s) did not complete (see their `error` tag)")
    return bad

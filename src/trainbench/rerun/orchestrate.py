"""``rerun=<run_id>`` from start to end: fetch the original, build the config, compare the setups and print
the table (:func:`prepare_rerun`), train, then compare the per-epoch losses (:func:`check_losses`)."""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from trainbench.config.run import validate
from trainbench.core.errors import ConfigError, DeviceError, RerunError
from trainbench.core.secrets import redact
from trainbench.core.vocab import DataInfo, Tag, data_tag
from trainbench.rerun.configs import _override_keys, rerun_config
from trainbench.rerun.environment import (
    MATERIAL,
    compare_facts,
    current_facts,
    environment_facts,
    format_diff,
)
from trainbench.rerun.fetch import epochs, fetch_original, store_client
from trainbench.rerun.losses import loss_comparison
from trainbench.rerun.names import (
    ARTIFACT_RERUN_DIFF,
    ARTIFACT_RERUN_LOSSES,
    TAG_DATA_SHA256,
    TAG_DEVICE,
    TAG_JOB,
    TAG_MODEL,
    TAG_OUTCOME,
    TAG_RERUN_DATA_MATCH,
    TAG_RERUN_DIFFERS,
    TAG_RERUN_LOSS_MAX_ABS_DIFF,
    TAG_RERUN_LOSSES_IDENTICAL,
    TAG_RERUN_NONCE,
    TAG_RERUN_OF,
    TAG_SWEEP_ID,
)
from trainbench.rerun.trust import check_logged_values, check_spec, confine_data_path, refuse_interpolations

log = logging.getLogger("trainbench")


@dataclass
class RerunPlan:
    """What :func:`prepare_rerun` found: the config to train with, the diff, the tags for the new run."""

    run_id: str
    cfg: DictConfig
    diff: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    nonce: str = ""  # tags the new run so that it can be found again after training


def prepare_rerun(current: DictConfig, invocation: list[str], out: Any = print) -> RerunPlan:
    """Fetch the original, build the rerun's config, compare the setups, print the table (before training)."""
    from trainbench.data.loader import ensure_file, sha256_file
    from trainbench.measure.hardware import resolve_device

    run_id = str(current.rerun).strip()
    client = store_client(current.tracking)
    run, original, overrides, env = fetch_original(client, run_id)
    tags = dict(run.data.tags)
    # a logged config is data: checked whole before anything is imported, resolved or created (rerun/trust.py)
    refuse_interpolations(original, run_id)
    refuse_interpolations({"overrides": overrides}, run_id, "overrides")
    check_logged_values(original, current, run_id)
    check_spec(original, current, run_id)
    cfg, cfg_diff, notes = rerun_config(current, original, invocation, run_id)
    user_keys = set(_override_keys(invocation))
    confine_data_path(cfg, current, user_keys, run_id)
    try:  # the whole typed config, the model's own rules included, before the data file is touched
        validate(cfg)
    except ConfigError as e:
        raise RerunError(f"rerun={run_id}: the rerun's config is invalid: {e}") from None

    try:
        device = resolve_device(cfg.trainer.device)
    except DeviceError as e:
        raise RerunError(f"{e} (the original ran on {tags.get(TAG_DEVICE)!r}; override trainer.device to rerun "
                         "it on this machine's device, and the diff will say so)") from None
    orig = environment_facts(tags, env)
    now = current_facts(str(cfg.paths.root), device)
    threads = orig.get("torch_threads")
    if device.type == "cpu" and isinstance(threads, int) and threads != now["torch_threads"] \
            and 1 <= threads <= (os.cpu_count() or threads):
        # CPU kernels split reductions by thread: another count changes the float results in the last bits.
        torch.set_num_threads(threads)
        notes.append(f"torch threads set to {threads} as in the original (this process had "
                     f"{now['torch_threads']}); CPU results depend on the thread count")
        now["torch_threads"] = threads

    # a missing synthetic file is generated (in the confined folder); an existing one is never replaced
    data_path, _ = ensure_file(OmegaConf.to_object(cfg.data), cfg.paths.root, cfg.paths.data_dir, user_path=True,
                               explicit_synthetic=bool(cfg.data.synthetic) and (
                                   "data.path" not in user_keys or "data.synthetic" in user_keys))
    data_sha = sha256_file(data_path)
    checks = compare_facts(orig, now, tags.get(TAG_DATA_SHA256), data_sha)
    checks[data_tag(DataInfo.SHA256)]["path"] = str(data_path)
    if checks[data_tag(DataInfo.SHA256)]["same"] is False:
        notes.append(f"the data file {data_path} differs from the one the original read "
                     f"(sha256 {str(tags.get(TAG_DATA_SHA256))[:12]}… vs {data_sha[:12]}…): it is not the same data")
    if "true" in (orig.get(Tag.GIT_DIRTY), now.get(Tag.GIT_DIRTY)) and not orig.get(Tag.GIT_DIFF_SHA256):
        notes.append("uncommitted changes: the code cannot be shown identical to the original's")
    if str(cfg.trainer.deterministic).lower() != "true":
        notes.append("trainer.deterministic=false: losses may differ in the last bits on GPUs (CPU kernels "
                     "are deterministic at a fixed thread count)")
    differs = [k for k in MATERIAL if k in checks and checks[k]["same"] is False]
    if cfg_diff["changed"]:
        differs.append("config")
    unknown = [k for k in MATERIAL if k in checks and checks[k]["same"] is None]
    diff = {
        "schema_version": 1,
        Tag.RERUN_OF: run_id,
        "original": {"run_name": run.info.run_name, "model": tags.get(TAG_MODEL), Tag.SWEEP_ID: tags.get(TAG_SWEEP_ID),
                     "job": tags.get(TAG_JOB), "outcome": tags.get(TAG_OUTCOME), "status": run.info.status,
                     "start_time": run.info.start_time, "overrides": overrides},
        "checks": checks,
        "config": cfg_diff,
        "differs": differs,
        "unknown": unknown,
        "notes": notes,
    }
    nonce = uuid.uuid4().hex[:16]
    run_tags = {TAG_RERUN_OF: run_id, TAG_RERUN_DIFFERS: ",".join(differs) or "none",
                TAG_RERUN_DATA_MATCH: {True: "true", False: "false", None: "unknown"}[checks[data_tag(DataInfo.SHA256)]["same"]],
                TAG_RERUN_NONCE: nonce}
    out(redact(format_diff(diff)))  # the console as the store: no secret value (format_diff escapes controls)
    return RerunPlan(run_id=run_id, cfg=cfg, diff=diff, tags=run_tags, nonce=nonce)


def check_losses(plan: RerunPlan, out: Any = print) -> dict[str, Any] | None:
    """After the rerun: compare its per-epoch losses with the original's; tag and print the result."""
    client = store_client(plan.cfg.tracking)
    exp = client.get_experiment_by_name(plan.cfg.tracking.experiment)
    if exp is None:
        out(f"rerun: experiment {plan.cfg.tracking.experiment!r} not found; per-epoch losses not compared")
        return None
    runs = client.search_runs([exp.experiment_id], f"tags.{TAG_RERUN_NONCE} = '{plan.nonce}'", max_results=1)
    if not runs:
        out(f"rerun: the new run (tag {TAG_RERUN_NONCE}={plan.nonce}) was not found; per-epoch losses not compared")
        return None
    new_id = runs[0].info.run_id
    a, b = epochs(client, plan.run_id), epochs(client, new_id)
    if a is None or b is None:
        out("rerun: per-epoch losses not compared (an epochs.json is missing)")
        return None
    res = loss_comparison(a, b)
    worst = max((s.get("max_abs_diff", float("inf")) for s in res["series"].values()), default=0.0)
    client.set_tag(new_id, TAG_RERUN_LOSSES_IDENTICAL, str(res["identical"]).lower())
    client.set_tag(new_id, TAG_RERUN_LOSS_MAX_ABS_DIFF, f"{worst:.6g}")
    client.log_dict(new_id, res, ARTIFACT_RERUN_LOSSES)
    out(f"rerun {new_id}: per-epoch losses {'identical to' if res['identical'] else 'DIFFER from'} the original's "
        f"{plan.run_id} (max |difference| {worst:.3g} over {', '.join(res['series'])})")
    return res


def task_overrides() -> list[str]:
    """This invocation's Hydra task overrides (empty outside a Hydra job)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):
        return []


def run_rerun(cfg: DictConfig) -> str:
    """``rerun=<run_id>``: prepare (and print the diff), train with the original's config, compare losses."""
    from trainbench.train import train_job

    plan = prepare_rerun(cfg, task_overrides())
    outcome = train_job(plan.cfg, plan.tags, {ARTIFACT_RERUN_DIFF: plan.diff})
    try:
        check_losses(plan)
    except Exception as e:  # noqa: BLE001 - the rerun itself completed; the check is a report
        log.warning("rerun: could not compare losses with the original: %s", e)
    return outcome

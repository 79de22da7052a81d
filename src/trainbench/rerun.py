"""Rerun a past training run from what MLflow holds, and say what differs from the original.

    python run.py rerun=<run_id>                      # same config, seed and data file as that run
    python run.py rerun=<run_id> trainer.device=cuda  # ... with that one value changed (reported)
    python run.py -m rerun=<id1>,<id2>                # several runs, as a sweep of reruns

The original's resolved ``config/config.yaml`` is the config of the rerun: it is merged onto the typed
schemas (this version's ``RunConfig`` and the model's config class) so that a key this version no longer
knows fails with a message, and a key added since takes its default (reported). What is not part of the
experiment comes from the current invocation: ``tracking.*`` (where to look and where to log) and
``paths.*`` (this checkout). Any other override given with ``rerun=`` replaces the original's value and is
listed under ``config`` in the diff.

Before anything trains, :func:`prepare_rerun` compares the original with this machine: git commit and
dirty tree (and the hash of the uncommitted diff), Python, torch, CUDA/cuDNN and package versions, the
device, the CPU, torch's thread count and the data file's sha256. It prints that table and returns it;
the run then logs it as ``rerun_diff.json`` with the tags ``rerun_of``, ``rerun_differs`` and
``rerun_data_match``. After training, :func:`check_losses` compares the per-epoch losses with the
original's (``rerun_losses_identical``).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from trainbench.config import ConfigError, RunConfig

log = logging.getLogger("trainbench")

#: Sections of the config that say where things are, not what is measured: always the current ones.
LOCATION_SECTIONS = ("tracking", "paths")
#: Series of epochs.json that are measurements of speed or memory, not of the training trajectory.
TIMING_SERIES = ("epoch_time_ms", "eval_time_ms", "samples_per_s", "peak_vram_mb", "peak_host_mb",
                 "peak_vram_reserved_mb", "gpu_power_w", "gpu_util_pct", "gpu_clock_mhz", "gpu_temp_c",
                 "contaminated")
#: Name patterns of the other measurement series: rates, times, the machine's load (measure/load.py), the GPU.
TIMING_PREFIXES, TIMING_SUFFIXES = ("cpu_", "gpu_", "peak_"), ("_per_s", "_ms", "_pct")


def is_measurement(series: str) -> bool:
    """Whether an epochs.json series measures speed, memory or the machine rather than the training itself."""
    return series in TIMING_SERIES or series.startswith(TIMING_PREFIXES) or series.endswith(TIMING_SUFFIXES)


class RerunError(ConfigError):
    """The rerun cannot be set up (unknown run, missing artifacts, incompatible config); says why and the fix."""


@dataclass
class RerunPlan:
    """What :func:`prepare_rerun` found: the config to train with, the diff, the tags for the new run."""

    run_id: str
    cfg: DictConfig
    diff: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    nonce: str = ""  # tags the new run so that it can be found again after training


# --------------------------------------------------------------------------------------------------
# reading the original
# --------------------------------------------------------------------------------------------------


def _client(tracking: Any) -> Any:
    from mlflow import MlflowClient

    from trainbench.tracking.connection import TrackingUnavailable, check_reachable, resolve_uri

    uri = resolve_uri(tracking)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise RerunError(f"no MLflow store at {uri[len('sqlite:///'):]} (tracking.uri={uri}): the run to rerun "
                         "must be in the store that tracking.* names. Use tracking=server or tracking.uri=<uri>.")
    try:
        check_reachable(uri, float(getattr(tracking, "timeout_s", 10.0)))
    except TrackingUnavailable as e:
        raise RerunError(str(e)) from None
    return MlflowClient(tracking_uri=uri)


def _artifact_text(client: Any, run_id: str, path: str) -> str | None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory(prefix="tb-rerun-") as tmp:
        try:
            return Path(client.download_artifacts(run_id, path, tmp)).read_text()
        except Exception:  # noqa: BLE001 - a missing artifact is reported by the caller
            return None


def fetch_original(client: Any, run_id: str) -> tuple[Any, dict[str, Any], list[str], dict[str, Any] | None]:
    """(run, resolved config, overrides, environment.json or None) of a logged training run."""
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001 - MlflowException(RESOURCE_DOES_NOT_EXIST) and friends
        raise RerunError(f"rerun={run_id}: no such run in the tracking store {client.tracking_uri} "
                         f"({type(e).__name__}). Copy the id from the MLflow UI or `analyze.py`'s report, and "
                         "point tracking.* at the store that holds it.") from None
    tags = run.data.tags
    if tags.get("kind", "train") != "train" or "model" not in tags:
        raise RerunError(f"rerun={run_id} is not a training run (kind={tags.get('kind')!r}): only runs made "
                         "by run.py can be rerun.")
    text = _artifact_text(client, run_id, "config/config.yaml")
    if text is None:
        raise RerunError(f"rerun={run_id}: the run has no config/config.yaml artifact (a run from before the "
                         "run contract, or its artifacts are gone), so it cannot be rerun exactly.")
    resolved = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    ov_text = _artifact_text(client, run_id, "config/overrides.yaml")
    overrides = list(OmegaConf.create(ov_text)) if ov_text else []
    env_text = _artifact_text(client, run_id, "environment.json")
    env = json.loads(env_text) if env_text else None
    return run, resolved, [str(o) for o in overrides], env


# --------------------------------------------------------------------------------------------------
# the config of the rerun
# --------------------------------------------------------------------------------------------------


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    out[prefix[:-1]] = d
    return out


def _plain(cfg: DictConfig) -> dict[str, Any]:
    return json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)))


def typed_config(original: dict[str, Any]) -> DictConfig:
    """The original's resolved config on this version's schemas (a missing key takes its default)."""
    from omegaconf.errors import OmegaConfBaseException

    from trainbench.models.registry import REGISTRY, UnknownModelError

    name = (original.get("model") or {}).get("name")
    try:
        spec = REGISTRY.get(str(name))
    except UnknownModelError as e:
        raise RerunError(f"the original trained model {name!r}, which this version does not have: {e}") from None
    schema = OmegaConf.structured(RunConfig)
    schema.model = OmegaConf.structured(spec.config_cls)
    try:
        merged = OmegaConf.merge(schema, original)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise RerunError(f"the original's config does not fit this version of trainbench at {key!r} "
                         f"({getattr(e, 'msg', e)}). The key was renamed or removed since: check out the original's commit "
                         "(tag git_commit) to rerun it exactly.") from None
    assert isinstance(merged, DictConfig)
    return merged


def _override_keys(overrides: list[str]) -> list[str]:
    keys = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key:
            keys.append(key)
    return keys


def _rebase(path: str | None, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """A data path of the original's checkout moved to this one when it does not exist here."""
    if not path or Path(path).exists():
        return path
    for key in ("data_dir", "root"):
        a, b = old.get(key), new.get(key)
        if a and b and a != b and (path == a or path.startswith(a.rstrip("/") + "/")):
            return b.rstrip("/") + path[len(a.rstrip("/")):]
    return path


def rerun_config(current: DictConfig, original: dict[str, Any], invocation: list[str],
                 run_id: str) -> tuple[DictConfig, dict[str, Any], list[str]]:
    """(config to train with, config diff, notes): the original's values, then location and the user's overrides."""
    cfg = typed_config(original)
    notes: list[str] = []
    now = _plain(current)
    cfg.merge_with({section: now[section] for section in LOCATION_SECTIONS})
    cfg.sweep_id = None  # a rerun is not one of the original sweep's jobs (unless sweep_id= is given)
    for key in _override_keys(invocation):
        if key == "rerun" or key.split(".")[0] in LOCATION_SECTIONS:
            continue
        if "/" in key or "@" in key or OmegaConf.select(current, key, default="__missing__") == "__missing__":
            notes.append(f"override {key!r} is not a config key of the run (e.g. a global group such as debug=); "
                         "it was ignored: give single keys (trainer.epochs=3) with rerun=")
            continue
        value = OmegaConf.select(current, key)
        if isinstance(value, DictConfig):
            value = OmegaConf.to_container(value, resolve=True)
            orig_name = (original.get(key) or {}).get("name") if isinstance(original.get(key), dict) else None
            if value.get("name") is not None and value.get("name") == orig_name:
                # model=ppo on a ppo run only lets ppo's own keys be overridden; it must not reset the section
                continue
            if key == "model":
                raise RerunError(f"model={value.get('name')} cannot rerun a {orig_name} run: a rerun keeps the "
                                 f"original's model. Train {value.get('name')} as a new run instead.")
        if isinstance(value, dict):
            cfg.merge_with({key: value})  # a group (trainer=quick): its whole section
        else:
            OmegaConf.update(cfg, key, value)
    old_paths = (original.get("paths") or {})
    data_path = cfg.data.path
    moved = _rebase(data_path, old_paths, now["paths"])
    if moved != data_path:
        cfg.data.path = moved
        notes.append(f"data.path {data_path} does not exist here; using {moved} (same place in this checkout)")
    cfg.rerun = run_id
    before, after = _flat(json.loads(json.dumps(original))), _flat(_plain(cfg))
    changed = {k: [before[k], after[k]] for k in sorted(before.keys() & after.keys())
               if before[k] != after[k] and k.split(".")[0] not in LOCATION_SECTIONS and k != "rerun"}
    added = {k: after[k] for k in sorted(after.keys() - before.keys()) if k != "rerun"}
    location = {k: [before[k], after[k]] for k in sorted(before.keys() & after.keys())
                if before[k] != after[k] and k.split(".")[0] in LOCATION_SECTIONS}
    return cfg, {"changed": changed, "added_since": added, "location": location}, notes


# --------------------------------------------------------------------------------------------------
# what differs
# --------------------------------------------------------------------------------------------------


def _check(original: Any, current: Any) -> dict[str, Any]:
    same = None if original in (None, "", "unknown") else original == current
    return {"original": original, "current": current, "same": same}


def current_facts(root: str, device: torch.device) -> dict[str, Any]:
    """This machine, as :func:`environment_facts` reads the original's environment.json and tags."""
    from trainbench.measure.hardware import cpu_name, device_label, git_state, package_versions

    cuda = None
    if torch.cuda.is_available():
        cuda = {"version": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    driver = None
    if device.type == "cuda":
        from trainbench.measure.hardware import probe_device

        driver = probe_device(device).description.get("driver")
    return {**git_state(root), "python": sys.version.split()[0], "torch": torch.__version__, "cuda": cuda,
            "packages": package_versions(), "device": device_label(device), "driver": driver,
            "cpu": cpu_name(), "host": platform.node(), "torch_threads": torch.get_num_threads()}


def environment_facts(tags: dict[str, str], env: dict[str, Any] | None) -> dict[str, Any]:
    env = env or {}
    dev = env.get("device") or {}
    cuda = env.get("cuda")
    return {"git_commit": tags.get("git_commit"), "git_dirty": tags.get("git_dirty"),
            "git_diff_sha256": tags.get("git_diff_sha256"), "python": env.get("python"),
            "torch": env.get("torch"),
            "cuda": {"version": cuda.get("version"), "cudnn": cuda.get("cudnn")} if isinstance(cuda, dict) else cuda,
            "packages": env.get("packages"), "device": tags.get("device") or dev.get("label"),
            "driver": dev.get("driver"), "cpu": (env.get("cpu") or {}).get("name"), "host": env.get("hostname"),
            "torch_threads": dev.get("torch_threads")}


def compare_facts(orig: dict[str, Any], now: dict[str, Any], data_sha_orig: str | None,
                  data_sha_now: str | None) -> dict[str, Any]:
    """{check: {original, current, same}} for every fact; ``same`` None when the original did not record it."""
    checks: dict[str, Any] = {"git_commit": _check(orig.get("git_commit"), now.get("git_commit")),
                              "git_dirty": _check(orig.get("git_dirty"), now.get("git_dirty"))}
    if "true" in (orig.get("git_dirty"), now.get("git_dirty")):
        # a clean tree has no diff; a dirty one from before the hash was recorded is unknown
        a = orig.get("git_diff_sha256") or ("clean" if orig.get("git_dirty") == "false" else None)
        b = now.get("git_diff_sha256") or ("clean" if now.get("git_dirty") == "false" else None)
        checks["git_diff_sha256"] = _check(a, b)
    for key in ("python", "torch", "cuda", "device", "driver", "cpu", "host",
                "torch_threads"):
        checks[key] = _check(orig.get(key), now.get(key))
    if orig.get("cuda") is None and orig.get("python") is not None:  # recorded: a CPU-only build
        checks["cuda"]["same"] = now.get("cuda") is None
    if orig.get("driver") is None and now.get("driver") is None:
        checks["driver"]["same"] = True
    po, pn = orig.get("packages"), now.get("packages") or {}
    if isinstance(po, dict):
        changed = {p: [po.get(p), pn.get(p)] for p in sorted(set(po) | set(pn)) if po.get(p) != pn.get(p)}
        checks["packages"] = {"original": po, "current": pn, "same": not changed, "changed": changed}
    else:
        checks["packages"] = {"original": None, "current": pn, "same": None, "changed": {}}
    checks["data_sha256"] = _check(data_sha_orig, data_sha_now)
    return checks


#: Differences that change what is measured (host and thread count are reported, and threads are matched).
_MATERIAL = ("git_commit", "git_dirty", "git_diff_sha256", "python", "torch", "cuda", "packages", "device",
             "driver", "cpu", "torch_threads", "data_sha256")


def _short(v: Any, n: int = 30) -> str:
    if isinstance(v, dict):
        v = ", ".join(f"{k} {x}" for k, x in v.items()) if v else "{}"
    s = "–" if v is None else str(v)
    return s if len(s) <= n else s[:n - 1] + "…"


def format_diff(diff: dict[str, Any]) -> str:
    """The table printed before the rerun trains."""
    o = diff["original"]
    lines = [f"rerun of {diff['rerun_of']} ({o.get('run_name')}, model {o.get('model')}, sweep {o.get('sweep_id')}, "
             f"job {o.get('job')}, {o.get('outcome')})",
             f"  original overrides: {' '.join(o.get('overrides') or []) or '(none)'}",
             f"  {'check':16s} {'original':32s} {'now':32s} verdict"]
    for key, c in diff["checks"].items():
        verdict = "same" if c["same"] else ("unknown" if c["same"] is None else "DIFFERS")
        if key == "packages" and c.get("changed"):
            orig = ", ".join(f"{p} {a}" for p, (a, _) in c["changed"].items())
            now = ", ".join(f"{p} {b}" for p, (_, b) in c["changed"].items())
            lines.append(f"  {key:16s} {_short(orig, 32):32s} {_short(now, 32):32s} {verdict}")
            continue
        if key == "packages":
            lines.append(f"  {key:16s} {str(len(c['original'] or {})) + ' recorded':32s} "
                         f"{str(len(c['current'])) + ' installed':32s} {verdict}")
            continue
        lines.append(f"  {key:16s} {_short(c['original'], 32):32s} {_short(c['current'], 32):32s} {verdict}")
    cfgd = diff["config"]
    for k, (a, b) in cfgd["changed"].items():
        lines.append(f"  config {k}: {a!r} -> {b!r}")
    for k, v in cfgd["added_since"].items():
        lines.append(f"  config {k}: not in the original's config; this version's default {v!r}")
    for n in diff["notes"]:
        lines.append(f"  note: {n}")
    lines.append("  => " + ("identical setup" if not diff["differs"] else "differs in: " + ", ".join(diff["differs"]))
                 + (f"; not recorded by the original: {', '.join(diff['unknown'])}" if diff["unknown"] else ""))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------------------------


def prepare_rerun(current: DictConfig, invocation: list[str], out: Any = print) -> RerunPlan:
    """Fetch the original, build the rerun's config, compare the setups, print the table (before training)."""
    from trainbench.measure.hardware import DeviceError, resolve_device
    from trainbench.data.loader import ensure_file, sha256_file

    run_id = str(current.rerun).strip()
    client = _client(current.tracking)
    run, original, overrides, env = fetch_original(client, run_id)
    tags = dict(run.data.tags)
    cfg, cfg_diff, notes = rerun_config(current, original, invocation, run_id)

    try:
        device = resolve_device(cfg.trainer.device)
    except DeviceError as e:
        raise RerunError(f"{e} (the original ran on {tags.get('device')!r}; override trainer.device to rerun it "
                         "on this machine's device, and the diff will say so)") from None
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

    data_path, _ = ensure_file(OmegaConf.to_object(cfg.data), cfg.paths.root, cfg.paths.data_dir)  # generates a synthetic file if gone
    data_sha = sha256_file(data_path)
    checks = compare_facts(orig, now, tags.get("data_sha256"), data_sha)
    checks["data_sha256"]["path"] = str(data_path)
    if checks["data_sha256"]["same"] is False:
        notes.append(f"the data file {data_path} differs from the one the original read "
                     f"(sha256 {str(tags.get('data_sha256'))[:12]}… vs {data_sha[:12]}…): it is not the same data")
    if "true" in (orig.get("git_dirty"), now.get("git_dirty")) and not orig.get("git_diff_sha256"):
        notes.append("uncommitted changes: the code cannot be shown identical to the original's")
    if str(cfg.trainer.deterministic).lower() != "true":
        notes.append("trainer.deterministic=false: losses may differ in the last bits on GPUs (CPU kernels "
                     "are deterministic at a fixed thread count)")
    differs = [k for k in _MATERIAL if k in checks and checks[k]["same"] is False]
    if cfg_diff["changed"]:
        differs.append("config")
    unknown = [k for k in _MATERIAL if k in checks and checks[k]["same"] is None]
    diff = {
        "schema_version": 1,
        "rerun_of": run_id,
        "original": {"run_name": run.info.run_name, "model": tags.get("model"), "sweep_id": tags.get("sweep_id"),
                     "job": tags.get("job"), "outcome": tags.get("outcome"), "status": run.info.status,
                     "start_time": run.info.start_time, "overrides": overrides},
        "checks": checks,
        "config": cfg_diff,
        "differs": differs,
        "unknown": unknown,
        "notes": notes,
    }
    nonce = uuid.uuid4().hex[:16]
    run_tags = {"rerun_of": run_id, "rerun_differs": ",".join(differs) or "none",
                "rerun_data_match": {True: "true", False: "false", None: "unknown"}[checks["data_sha256"]["same"]],
                "rerun_nonce": nonce}
    out(format_diff(diff))
    return RerunPlan(run_id=run_id, cfg=cfg, diff=diff, tags=run_tags, nonce=nonce)


def _epochs(client: Any, run_id: str) -> dict[str, Any] | None:
    text = _artifact_text(client, run_id, "epochs.json")
    return json.loads(text) if text else None


def loss_comparison(original: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Per-epoch training series (everything but timings and memory) of two runs, compared exactly."""
    keys = sorted(k for k in original.keys() & new.keys()
                  if isinstance(original[k], list) and not is_measurement(k))
    series: dict[str, Any] = {}
    identical = bool(keys)
    for k in keys:
        a = np.array([np.nan if x is None else x for x in original[k]], dtype=float)
        b = np.array([np.nan if x is None else x for x in new[k]], dtype=float)
        if a.shape != b.shape:
            series[k] = {"identical": False, "epochs": [int(a.size), int(b.size)]}
            identical = False
            continue
        same = bool(np.array_equal(a, b, equal_nan=True))
        d = np.abs(a - b)
        series[k] = {"identical": same, "max_abs_diff": float(np.nanmax(d)) if np.isfinite(d).any() else 0.0}
        identical &= same
    return {"identical": identical, "series": series}


def check_losses(plan: RerunPlan, out: Any = print) -> dict[str, Any] | None:
    """After the rerun: compare its per-epoch losses with the original's; tag and print the result."""
    client = _client(plan.cfg.tracking)
    exp = client.get_experiment_by_name(plan.cfg.tracking.experiment)
    if exp is None:
        out(f"rerun: experiment {plan.cfg.tracking.experiment!r} not found; per-epoch losses not compared")
        return None
    runs = client.search_runs([exp.experiment_id], f"tags.rerun_nonce = '{plan.nonce}'", max_results=1)
    if not runs:
        out(f"rerun: the new run (tag rerun_nonce={plan.nonce}) was not found; per-epoch losses not compared")
        return None
    new_id = runs[0].info.run_id
    a, b = _epochs(client, plan.run_id), _epochs(client, new_id)
    if a is None or b is None:
        out("rerun: per-epoch losses not compared (an epochs.json is missing)")
        return None
    res = loss_comparison(a, b)
    worst = max((s.get("max_abs_diff", float("inf")) for s in res["series"].values()), default=0.0)
    client.set_tag(new_id, "rerun_losses_identical", str(res["identical"]).lower())
    client.set_tag(new_id, "rerun_loss_max_abs_diff", f"{worst:.6g}")
    client.log_dict(new_id, res, "rerun_losses.json")
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
    outcome = train_job(plan.cfg, plan.tags, {"rerun_diff.json": plan.diff})
    try:
        check_losses(plan)
    except Exception as e:  # noqa: BLE001 - the rerun itself completed; the check is a report
        log.warning("rerun: could not compare losses with the original: %s", e)
    return outcome


def hydra_rerun(cfg: DictConfig, argv: list[str] | None = None) -> tuple[DictConfig, dict[str, str]]:
    """Hydra's own ``--experimental-rerun <job>/.hydra/config.pickle``: the pickled config reruns as is, but
    under a sweep id of its own (its Hydra folder would otherwise put it in the original's sweep) and
    tagged ``rerun_of_hydra=<pickle>``. Other invocations pass through unchanged."""
    import time

    argv = sys.argv if argv is None else argv
    if "--experimental-rerun" not in argv:
        return cfg, {}
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's rerun path skips it: without it ${hydra:runtime.cwd} (paths.root) cannot resolve
    i = argv.index("--experimental-rerun")
    pickle_path = argv[i + 1] if i + 1 < len(argv) else "?"
    given = cfg.get("sweep_id")
    OmegaConf.update(cfg, "sweep_id", (f"{given}-" if given else "") + f"hydra-rerun-{time.strftime('%Y%m%d-%H%M%S')}",
                     force_add=True)
    return cfg, {"rerun_of_hydra": str(Path(pickle_path).resolve())}


# --------------------------------------------------------------------------------------------------
# Hydra's config.pickle, without secrets
# --------------------------------------------------------------------------------------------------


def _secret_redactor() -> Any:
    """str -> str that removes the values of secret environment variables (trainbench.tracking.secrets's
    rule where that module exists; the same rule otherwise: a variable named *KEY*, *TOKEN*, *SECRET* or
    *PASSWORD*, not *_PATH/_FILE/_DIR, with a value of at least 8 characters)."""
    try:
        from trainbench.tracking.secrets import redact, secret_values  # type: ignore[import-not-found]

        values = secret_values()
        return lambda s: redact(s, values)
    except ImportError:
        import re

        name = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
        values = sorted({v for k, v in os.environ.items() if name.search(k) and len(v) >= 8
                         and not k.upper().endswith(("_PATH", "_FILE", "_DIR"))}, key=len, reverse=True)

        def redact_(s: str) -> str:
            for v in values:
                s = s.replace(v, "***")
            return s

        return redact_


def redact_config(node: Any, redact: Any) -> None:
    """Replace secret values inside every string of a config, in place, keeping its types (a pickled
    config must stay a valid, typed config: byte-level redaction of the file would corrupt it)."""
    from omegaconf import ListConfig, read_write

    keys = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for k in keys:
        child = node._get_node(k)
        if isinstance(child, DictConfig | ListConfig):
            redact_config(child, redact)
            continue
        raw = child._value() if child is not None else None
        if isinstance(raw, str):
            new = redact(raw)
            if new != raw:
                with read_write(node):  # Hydra marks nodes such as hydra.overrides.task read-only
                    node[k] = new


class SaveJobConfig(Callback):
    """Hydra callback writing ``<job>/.hydra/config.pickle`` for ``python run.py --experimental-rerun``.

    Hydra's own ``PickleJobInfoCallback`` pickles the config as typed, secrets included; this one pickles
    a copy with the values of secret environment variables removed (and no ``job_return.pickle``).
    """

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        import copy
        import pickle

        hc = config.hydra
        if hc.output_subdir is None:
            return
        cfg = copy.deepcopy(config)
        redact_config(cfg, _secret_redactor())
        out = Path(hc.runtime.output_dir) / str(hc.output_subdir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "config.pickle", "wb") as f:
            pickle.dump(cfg, f, protocol=4)

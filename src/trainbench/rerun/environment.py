"""What differs between the original's setup and this machine, and the table printed before training.

The original's facts come from its tags and ``environment.json``; this machine's from the same functions
that wrote them (:mod:`trainbench.measure.hardware`). A fact the original did not record is *unknown*,
never equal.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

import torch

from trainbench.core.safe_text import term
from trainbench.core.vocab import DataInfo, Tag, data_tag
from trainbench.rerun.names import (
    TAG_DEVICE,
    TAG_GIT_COMMIT,
    TAG_GIT_DIFF_SHA256,
    TAG_GIT_DIRTY,
)

#: The checks (the keys of ``rerun_diff.json``'s ``checks``, the words of the ``rerun_differs`` tag) that
#: change what is measured (host and thread count are reported, and threads are matched).
MATERIAL = (Tag.GIT_COMMIT, Tag.GIT_DIRTY, Tag.GIT_DIFF_SHA256, "python", "torch", "cuda", "packages", "device",
            "driver", "cpu", "torch_threads", data_tag(DataInfo.SHA256))


def _check(original: Any, current: Any) -> dict[str, Any]:
    same = None if original in (None, "", "unknown") else original == current
    return {"original": original, "current": current, "same": same}


def current_facts(root: str, device: torch.device) -> dict[str, Any]:
    """This machine, as :func:`environment_facts` reads the original's environment.json and tags."""
    from trainbench.core.gitstate import git_state
    from trainbench.measure.hardware import cpu_name, device_label, package_versions

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
    """The original's facts from its tags and environment.json (None where it recorded nothing)."""
    env = env or {}
    dev = env.get("device") or {}
    cuda = env.get("cuda")
    return {Tag.GIT_COMMIT: tags.get(TAG_GIT_COMMIT), Tag.GIT_DIRTY: tags.get(TAG_GIT_DIRTY),
            Tag.GIT_DIFF_SHA256: tags.get(TAG_GIT_DIFF_SHA256), "python": env.get("python"),
            "torch": env.get("torch"),
            "cuda": {"version": cuda.get("version"), "cudnn": cuda.get("cudnn")} if isinstance(cuda, dict) else cuda,
            "packages": env.get("packages"), "device": tags.get(TAG_DEVICE) or dev.get("label"),
            "driver": dev.get("driver"), "cpu": (env.get("cpu") or {}).get("name"), "host": env.get("hostname"),
            "torch_threads": dev.get("torch_threads")}


def compare_facts(orig: dict[str, Any], now: dict[str, Any], data_sha_orig: str | None,
                  data_sha_now: str | None) -> dict[str, Any]:
    """{check: {original, current, same}} for every fact; ``same`` None when the original did not record it."""
    checks: dict[str, Any] = {Tag.GIT_COMMIT: _check(orig.get(Tag.GIT_COMMIT), now.get(Tag.GIT_COMMIT)),
                              Tag.GIT_DIRTY: _check(orig.get(Tag.GIT_DIRTY), now.get(Tag.GIT_DIRTY))}
    if "true" in (orig.get(Tag.GIT_DIRTY), now.get(Tag.GIT_DIRTY)):
        # a clean tree has no diff; a dirty one from before the hash was recorded is unknown
        a = orig.get(Tag.GIT_DIFF_SHA256) or ("clean" if orig.get(Tag.GIT_DIRTY) == "false" else None)
        b = now.get(Tag.GIT_DIFF_SHA256) or ("clean" if now.get(Tag.GIT_DIRTY) == "false" else None)
        checks[Tag.GIT_DIFF_SHA256] = _check(a, b)
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
    checks[data_tag(DataInfo.SHA256)] = _check(data_sha_orig, data_sha_now)
    return checks


def _short(v: Any, n: int = 30) -> str:
    if isinstance(v, dict):
        v = ", ".join(f"{k} {x}" for k, x in v.items()) if v else "{}"
    s = "–" if v is None else str(v)
    return s if len(s) <= n else s[:n - 1] + "…"


def format_diff(diff: dict[str, Any]) -> str:
    """The table printed before the rerun trains."""
    o = diff["original"]
    lines = [f"rerun of {diff[Tag.RERUN_OF]} ({o.get('run_name')}, model {o.get('model')}, sweep {o.get(Tag.SWEEP_ID)}, "
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
    return "\n".join(term(line) for line in lines)  # logged text: no terminal control reaches the console

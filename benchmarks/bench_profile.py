"""What the workload profile costs beside the epoch it profiles, per built-in model at the CPU profile's size.

- ``workload_profile_share.<model>``: the profile of one epoch (:func:`profile_epoch`: a few steps of each loop
  over identical steps, scaled) on real tensors, as a percentage of the epoch it profiles (``train_epoch`` +
  ``eval_epoch``), both timed round-robin in one process on the default data (the run's: an epoch has the
  run's number of steps, which the share depends on). Target: at most 25% (issue 42).
- ``workload_profile_share_fake.<model>``: the same on fake tensors (shapes only), which a run picks where a
  step on fakes costs less than a real one (reference sizes with large batches); on a CPU at the small sizes
  the real trace is the cheaper, which this figure shows.

- ``workload_profile_share_reference.<model>`` (not in ``--quick``): the supervised models at their reference size,
  where a run profiles on fake tensors: that profile against an epoch estimated as its training steps x one timed
  training step (``memory_step``; the validation pass left out, so the share is an upper bound). On a CPU mamba2
  is skipped (one reference step takes ~25 s on one thread).

``--quick`` on a CPU skips mamba2 and tlob (:data:`QUICK_CPU_SKIP`, reported as skipped with the reason): each is
timed over two epochs on the default data, ~10-20 s each for mamba2 and ~5 s for tlob on one thread, which the
quick suite's two minutes do not hold beside tft's (the supervised model it keeps).
"""

from __future__ import annotations

import tempfile

import torch
from common import Result, bench_device, build_model, cpu_threads, interleaved, sync_fn

from trainbench.measure.hardware import hardware_label
from trainbench.measure.workload import profile_epoch

MODELS = ("dqn", "ppo", "tft", "tlob", "mamba2")


#: Supervised models measured at their reference size too (full run only), where a run's profile uses fake tensors.
REFERENCE_MODELS = ("tft", "tlob", "mamba2")
REFERENCE_CPU_SKIP = {"mamba2": "one reference-size step takes ~25 s on one thread"}

#: Skipped by ``--quick`` on a CPU (``make bench`` measures them), with the reason: their default-data epochs on one thread.
QUICK_CPU_SKIP = {"mamba2": "its epoch takes ~10-20 s on one thread", "tlob": "its epoch takes ~5 s on one thread, "
                  "timed twice beside tft's"}


def run(quick: bool) -> list[Result]:
    device = bench_device()
    out: list[Result] = []
    with cpu_threads(1), tempfile.TemporaryDirectory() as d:
        for name in MODELS:
            if quick and device.type == "cpu" and name in QUICK_CPU_SKIP:
                why = f"--quick on a CPU: {QUICK_CPU_SKIP[name]} (make bench measures it)"
                out += [Result(f"{figure}.{name}", float("nan"), "%", "", hardware_label(device), {"skipped": why})
                        for figure in ("workload_profile_share", "workload_profile_share_fake")]
                continue
            out += _model(name, d, device, quick)
        if not quick:
            for name in REFERENCE_MODELS:
                if device.type == "cpu" and name in REFERENCE_CPU_SKIP:
                    out.append(Result(f"workload_profile_share_reference.{name}", float("nan"), "%", "",
                                      hardware_label(device), {"skipped": f"on a CPU: {REFERENCE_CPU_SKIP[name]}"}))
                    continue
                out.append(_reference(name, d, device))
    return out


def _reference(name: str, data_dir: str, device: torch.device) -> Result:
    label, sync = hardware_label(device), sync_fn(device)
    m = build_model(name, data_dir, device, size="reference")
    steps = m.samples_per_epoch // m.batch_size
    step = m.memory_step(m.batch_size)
    how: dict[str, str] = {}

    def fake() -> None:
        how["fake"] = profile_epoch(m, device, fake=True)["method"]

    t = interleaved({"step": step, "fake": fake}, repeats=1, sync=sync)
    epoch_s = steps * t["step"]
    return Result(f"workload_profile_share_reference.{name}", 100 * t["fake"] / epoch_s, "%", "<= 25%", label,
                  {"size": "reference", "step_s": t["step"], "steps_per_epoch": steps, "epoch_s_est": epoch_s,
                   "profile_s": t["fake"], "method": how["fake"],
                   "epoch": "training steps x one timed step (validation left out: an upper bound on the share)"})


def _model(name: str, data_dir: str, device: torch.device, quick: bool) -> list[Result]:
    label, sync = hardware_label(device), sync_fn(device)
    m = build_model(name, data_dir, device)

    def epoch() -> None:
        m.train_epoch()
        if hasattr(m, "eval_epoch"):
            m.eval_epoch()

    how: dict[str, str] = {}

    def real() -> None:
        how["real"] = profile_epoch(m, device)["method"]

    def fake() -> None:
        how["fake"] = profile_epoch(m, device, fake=True)["method"]

    t = interleaved({"epoch": epoch, "real": real, "fake": fake}, repeats=1 if quick else 3, sync=sync)
    return [Result(f"workload_profile_share.{name}", 100 * t["real"] / t["epoch"], "%", "<= 25%", label,
                   {"epoch_s": t["epoch"], "profile_s": t["real"], "method": how["real"]}),
            Result(f"workload_profile_share_fake.{name}", 100 * t["fake"] / t["epoch"], "%", "", label,
                   {"epoch_s": t["epoch"], "profile_s": t["fake"], "method": how["fake"]})]

"""The data-scaling law of the plan on a real model: a supervised epoch (training + validation pass) takes time
in proportion to its training + validation windows (analysis/plan/plan.py, ``data_scale``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_tft_epoch_time_follows_the_windows_at_two_data_sizes() -> None:
    torch = pytest.importorskip("torch")
    from helpers.data import data_for
    from helpers.models import build_model

    torch.set_num_threads(1)
    sizes = (2000, 8000)
    models = {n: build_model("tft", data=data_for("bars", n)) for n in sizes}
    windows = {n: m.info()["train_windows"] + m.info()["val_windows"] for n, m in models.items()}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for rep in range(7):  # interleaved, so that a change in the machine's load hits both sizes alike
        for n, m in models.items():
            t = time.perf_counter()
            m.train_epoch()
            m.eval_epoch()
            if rep:  # the first epoch of each is warmup
                times[n].append(time.perf_counter() - t)
    law = windows[sizes[1]] / windows[sizes[0]]  # data_scale of the plan
    small, big = np.asarray(times[sizes[0]]), np.asarray(times[sizes[1]])
    ratio = np.median(big) / np.median(small)
    # the interval of the ratio of medians: percentile bootstrap over the epochs of each size
    rng = np.random.default_rng(0)
    boot = [np.median(rng.choice(big, big.size)) / np.median(rng.choice(small, small.size)) for _ in range(2000)]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    assert law > 3.5  # the two sizes differ enough to tell the law from a constant epoch time
    # within the interval, widened by the plan's own allowance for fixed per-epoch costs (±10% when counted)
    assert lo / 1.1 <= law <= hi * 1.1, (f"windows x{law:.2f} but epoch time x{ratio:.2f} "
                                         f"(95% interval {lo:.2f}-{hi:.2f})")
    assert ratio > (1 + law) / 2  # nearer the law than a constant epoch time

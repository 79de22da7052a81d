"""The data exponent α (analysis/plan/plan.py, ``data_alpha``) is fitted on where each curve is best, never on the
early-stopping epoch; its 5-95% range holds a known α (issue 48)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from trainbench.analysis.plan import curves
from trainbench.analysis.plan.plan import data_alpha
from trainbench.core.vocab import ParamKey, Series, model_info

BATCH = 64
RULE = curves.CurveRule()


@dataclass
class _Run:
    run_name: str
    params: dict[str, str]
    series: dict[str, np.ndarray] = field(default_factory=dict)


def _curve(best: int, n: int, seed: int) -> np.ndarray:
    """A validation loss with its minimum at ``best`` (a bowl in log epochs: falls, bottoms out, overfits), and
    per-epoch noise."""
    e = np.arange(1, n + 1, dtype=float)
    rng = np.random.default_rng(seed)
    return 0.6 + 0.4 * np.log(e / best) ** 2 + rng.normal(0.0, 0.01, n)


def _runs(alpha: float, windows: tuple[int, ...] = (4_000, 32_000), seeds: int = 3) -> list[_Run]:
    """Runs at each data size whose minima lie where ``steps ∝ windows^alpha`` puts them: best steps =
    100 x (windows / 1000)^alpha, best epoch = steps / steps per epoch."""
    out = []
    for w in windows:
        spe = math.ceil(w / BATCH)
        best = max(3, round(100 * (w / 1000) ** alpha * 60 / spe))
        for s in range(seeds):
            out.append(_Run(f"w{w}_s{s}", {model_info("train_windows"): str(w), model_info("val_windows"): "0",
                                          ParamKey.BATCH_SIZE: str(BATCH)},
                            {Series.VAL_LOSS: _curve(best, max(4 * best, 60), seed=1000 * s + w)}))
    return out


@pytest.mark.parametrize("alpha", [0.3, 0.7])
def test_the_range_of_alpha_holds_the_alpha_the_runs_were_made_with(alpha: float) -> None:
    fit = data_alpha(_runs(alpha), RULE, np.random.default_rng(0))
    assert fit is not None and len(fit["sizes"]) == 2
    lo, hi = fit["range"]
    assert lo <= alpha <= hi, fit
    assert abs(fit["alpha"] - alpha) < 0.1
    assert all(s["epochs_basis"] == "best epoch" for s in fit["sizes"])


def test_the_early_stopping_epoch_would_bias_it() -> None:
    """The reason for fitting on the best epoch: best + a patience with a floor is not proportional to the best
    epoch, so a fit on stopping epochs drifts away from the α the minima were placed by."""
    runs = _runs(0.3)
    by_size: dict[int, list[float]] = {}
    for r in runs:
        stop = curves.early_stop(r.series[Series.VAL_LOSS], RULE)
        assert stop is not None
        by_size.setdefault(int(r.params[model_info("train_windows")]), []).append(stop.epoch)
    (w1, e1), (w2, e2) = sorted((w, float(np.median(v))) for w, v in by_size.items())
    s1, s2 = e1 * math.ceil(w1 / BATCH), e2 * math.ceil(w2 / BATCH)
    biased = math.log(s2 / s1) / math.log(w2 / w1)
    fit = data_alpha(runs, RULE, np.random.default_rng(0))
    assert fit is not None
    assert abs(biased - 0.3) > abs(fit["alpha_raw"] - 0.3)


def test_a_curve_still_improving_at_its_end_gives_its_extrapolated_plateau() -> None:
    y = 0.5 + np.exp(-0.03 * np.arange(1, 61))
    assert curves.best_epoch(y, RULE) is None  # its smoothed minimum is at its end: not seen as one
    runs = [_Run(f"w{w}", {model_info("train_windows"): str(w), model_info("val_windows"): "0",
                           ParamKey.BATCH_SIZE: str(BATCH)}, {Series.VAL_LOSS: y}) for w in (4_000, 32_000)]
    fit = data_alpha(runs, RULE, np.random.default_rng(0))
    assert fit is not None and {s["epochs_basis"] for s in fit["sizes"]} == {"extrapolated plateau"}


def test_one_data_size_gives_no_alpha() -> None:
    assert data_alpha(_runs(0.5, windows=(4_000,)), RULE, np.random.default_rng(0)) is None

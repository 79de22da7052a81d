"""The training plan behind the hours: the data each model will train on, the epochs it needs, its batch.

Per planned model (``models.<m>.plan`` in report.json, docs/report-schema.md):

- **Data.** ``decision.plan_data`` (or ``decision.model_plans.<m>.data``) names a data config
  (``conf/data/<name>.yaml``), a DBN file, or ``measured``. A supervised epoch is one pass over the training
  windows plus the validation pass over the held-out ones, so its time scales with
  ``data_scale = windows_planned / windows_measured`` (training + validation windows, after session gaps and
  the split: :func:`trainbench.core.windows.count_windows`, the rule the models' data uses). The planned
  windows are counted exactly when the span of the model's windows can be recovered (the measured data's
  layout, from its file or, for synthetic data, the generator's calendar, gives the span whose count equals
  the logged ``model_info.train_windows``), else proportionally to the bars. An RL epoch is fixed work:
  ``data_scale = 1``. A model whose data kind (bars, book) differs from the planned data's keeps its
  measured data and says so. The scaling is *trusted* when the measured data held at least
  ``decision.plan_min_batches`` batches of training windows (a smaller epoch is dominated by fixed costs).
- **Epochs.** ``decision.epochs`` / ``decision.model_plans.<m>.epochs``: ``auto`` reads the runs' curves
  (:mod:`trainbench.analysis.plan.curves`: early stopping, else extrapolation, else the configured epochs with
  the reason), ``config`` or a number keeps the configured epochs (as before the plan existed).
- **Batch.** ``decision.model_plans.<m>.batch``: a planned batch B' other than the measured B scales the
  epochs by ``(1 + B'/B_noise) / (1 + B/B_noise)`` (McCandlish et al. 2018: samples to a given loss
  ``E = E_min (1 + B/B_noise)``), with B_noise the runs' gradient noise scale: a model-based estimate.
- **Data parallelism.** N GPUs at the measured per-GPU batch train at the global batch N x B: the same relation
  gives each N its epochs factor (``plan.data_parallel_epochs``), which the projection across GPUs
  (analysis/projection/data_parallel.py) multiplies the hours by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from trainbench.analysis.logged import logged_int
from trainbench.analysis.plan import curves
from trainbench.analysis.report_types import (
    ModelEntry,
    ModelProjection,
    Plan,
    ProjectionRow,
    Recommendation,
    Source,
)
from trainbench.config.analyze import DATA_PARALLEL_SIZES
from trainbench.config.team import find_config, group_names
from trainbench.core.errors import AnalysisError, DataError
from trainbench.core.vocab import (
    DataInfo,
    Outcome,
    ParamKey,
    Summary,
    Tag,
    data_tag,
    model_info,
)
from trainbench.core.windows import count_windows, read_layout, session_minutes

if TYPE_CHECKING:  # montecarlo loads scipy: imported where the Monte Carlo runs
    from trainbench.analysis.plan.montecarlo import ModelFactors

BOOK_SCHEMAS = ("mbp-10",)
MS_PER_HOUR = 3_600_000.0


@dataclass
class Layout:
    """What the window count needs of a dataset: the schema, and per bar its time and instrument."""

    name: str
    schema: str
    ts: np.ndarray | None  # None: only the size is known
    instrument: np.ndarray | None
    size: int  # bars (or book events)
    how: str  # how it was read: the file, the generator's calendar, ...

    @property
    def kind(self) -> str:
        return "book" if self.schema in BOOK_SCHEMAS else "bars"


def _from_file(name: str, path: Path, how: str) -> Layout:
    schema, ts, iid = read_layout(path)
    return Layout(name, schema, ts, iid, int(ts.size), how)


def _synthetic(name: str, schema: str, start: str, n: int, k: int, how: str) -> Layout:
    if schema in BOOK_SCHEMAS:
        return Layout(name, schema, None, None, n, how)
    ts = np.tile(session_minutes(start, n), k)
    return Layout(name, schema, ts, np.repeat(np.arange(k, dtype=np.int64), n), n * k, how)


def planned_layout(spec: str, paths: Any) -> Layout | None:
    """The layout of ``spec``: a data config name, a DBN file, or ``measured`` (None). Raises AnalysisError
    naming the fix when it is neither a data config nor a readable DBN file."""
    spec = str(spec).strip()
    if spec == "measured":
        return None
    root = Path(str(getattr(paths, "root", ".")))
    if spec.endswith((".dbn", ".dbn.zst")) or "/" in spec:
        p = Path(spec).expanduser()
        p = p if p.is_absolute() else root / p
        if not p.exists():
            raise AnalysisError(f"decision.plan_data={spec}: no such file ({p}). Name a .dbn/.dbn.zst file that "
                                "exists, a data config (conf/data/<name>.yaml), or `measured`.")
        try:
            return _from_file(p.name, p, f"read from {p}")
        except DataError as e:
            raise AnalysisError(f"decision.plan_data={spec}: {e}") from None
    yaml = find_config("data", spec, root)  # the team's conf/data first (trainbench.config.team)
    if yaml is None:
        names = group_names("data", root)
        raise AnalysisError(f"decision.plan_data={spec!r} is neither a data config ({', '.join(names)}) nor a "
                            ".dbn/.dbn.zst file; name one of them, or `measured`.")
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from trainbench.config.run import DataConfig

    try:  # on the schema, as run.py composes it: what a (team's) file leaves out takes the schema's default
        node = OmegaConf.load(yaml)
        node.pop("defaults", None)
        cfg = OmegaConf.merge({"paths": {"data_dir": str(getattr(paths, "data_dir", root / "data")),
                                         "root": str(root)}},
                              {"data": OmegaConf.merge(OmegaConf.structured(DataConfig), node)})
    except OmegaConfBaseException as e:
        raise AnalysisError(f"decision.plan_data={spec}: {yaml}: {e}".replace("\n", " ")) from None
    data = cfg.data
    path = Path(str(data.get("path") or f"{cfg.paths.data_dir}/{spec}.dbn.zst"))
    path = path if path.is_absolute() else root / path
    if path.exists():
        try:
            return _from_file(spec, path, f"read from {path}")
        except DataError:
            pass  # a damaged file: the config's own description follows
    if not data.get("synthetic", False):
        raise AnalysisError(f"decision.plan_data={spec}: its file {path} is not there and the config is not "
                            f"synthetic. Download it (`python -m trainbench.data download data={spec}`), point "
                            "decision.plan_data at the file, or use decision.plan_data=measured.")
    return _synthetic(spec, str(data.get("schema", "ohlcv-1m")), str(data.start), int(data.n_bars),
                      len(data.get("instruments") or [None]), "the synthetic generator's calendar (file not "
                      "generated yet)")


def _param(run: Any, key: str) -> str | None:
    v = run.params.get(key)
    return None if v in (None, "None", "") else v


def measured_layout(run: Any) -> Layout | None:
    """The layout of a run's data: its file when it is still there, else the generator's calendar when the
    run's data was synthetic; None when neither is known."""
    path = run.tags.get(data_tag(DataInfo.PATH))
    name = run.tags.get(Tag.DATA) or _param(run, "data.name") or "measured"
    if path and Path(path).exists():
        try:
            return _from_file(name, Path(path), f"read from {path}")
        except DataError:
            pass
    schema = run.tags.get(data_tag(DataInfo.SCHEMA)) or _param(run, "data.schema") or "ohlcv-1m"
    synthetic = str(run.tags.get(data_tag(DataInfo.SYNTHETIC), "")).lower() == "true"
    n = logged_int(_param(run, "data.n_bars"))
    start = _param(run, "data.start")
    k = len([s for s in str(run.tags.get(data_tag(DataInfo.INSTRUMENTS), "")).split(",") if s]) or None
    if synthetic and n and start and (k or schema in BOOK_SCHEMAS):
        return _synthetic(name, schema, start, n, k or 1, "the synthetic generator's calendar")
    size = logged_int(run.tags.get(data_tag(DataInfo.N_EVENTS if schema in BOOK_SCHEMAS else DataInfo.N_BARS)))
    return Layout(name, schema, None, None, size, "the run's tags (size only)") if size else None


def _split(run: Any) -> tuple[float, float]:
    gap = float(_param(run, "data.features.session_gap_minutes") or 30.0)
    frac = float(_param(run, "data.train_frac") or 0.8)
    return gap, frac


def recover_span(lay: Layout, train_windows: int, gap: float, frac: float) -> int | None:
    """The window span whose training-window count on ``lay`` is ``train_windows`` (bisection: the count
    falls as the span grows), or None when no span gives exactly that count."""
    if lay.ts is None or train_windows <= 0:
        return None

    def train(span: int) -> int:
        return count_windows(lay.ts, lay.instrument, span, schema=lay.schema, session_gap_minutes=gap,
                             train_frac=frac)[0]

    lo, hi = 1, max(2, lay.size + 1)
    while lo < hi:  # smallest span with train(span) <= train_windows
        mid = (lo + hi) // 2
        if train(mid) <= train_windows:
            hi = mid
        else:
            lo = mid + 1
    return lo if train(lo) == train_windows else None


class DataPlan(TypedDict):
    """The data fields of a model's plan (:func:`data_plan`; ``Plan``'s fields of the same names)."""

    data: str | None
    data_measured: str | None
    batch_measured: int | None
    windows_measured: int | None
    windows_planned: int | None
    windows_method: str | None
    data_scale: float
    data_scale_trusted: bool
    data_scale_note: str


def data_plan(runs: list[Any], planned: Layout | None, spec: str, min_batches: int) -> DataPlan:
    """The data fields of one model's plan from its timed runs and the planned layout."""
    run = runs[0]
    tw, vw = logged_int(_param(run, model_info("train_windows"))), logged_int(_param(run, model_info("val_windows")))
    batch = logged_int(_param(run, ParamKey.BATCH_SIZE_RESOLVED)) or logged_int(_param(run, ParamKey.BATCH_SIZE))
    data_name = run.tags.get(Tag.DATA) or _param(run, "data.name")
    out: DataPlan = {"data": spec if planned is not None else data_name, "data_measured": data_name,
                           "batch_measured": batch, "windows_measured": None, "windows_planned": None,
                           "windows_method": None, "data_scale": 1.0, "data_scale_trusted": True,
                           "data_scale_note": ""}
    if tw is None:  # RL: no windows, a fixed amount of environment steps per epoch
        out["data_scale_note"] = "RL: an epoch is a fixed number of environment steps, whatever the data"
        return out
    measured = tw + (vw or 0)
    out["windows_measured"] = measured
    if planned is None:
        out.update(windows_planned=measured, windows_method="measured data kept (decision.plan_data=measured)",
                   data_scale_note="the measured data is the planned data")
        return _trust(out, tw, batch, min_batches)
    have = measured_layout(run)
    kind = "book" if (run.tags.get(data_tag(DataInfo.SCHEMA)) or "") in BOOK_SCHEMAS else "bars"
    if planned.kind != kind:
        out.update(data=data_name, windows_planned=measured, windows_method="measured data kept",
                   data_scale_note=f"{spec} holds {planned.kind} but this model trains on {kind}: its measured "
                                   f"data is kept (set decision.model_plans.<model>.data to a {kind} dataset)")
        return _trust(out, tw, batch, min_batches)
    gap, frac = _split(run)
    span = recover_span(have, tw, gap, frac) if have is not None and planned.ts is not None else None
    if span is not None:
        t, v = count_windows(planned.ts, planned.instrument, span, schema=planned.schema, session_gap_minutes=gap,
                             train_frac=frac)
        if vw is None:
            v = 0
        out.update(windows_planned=t + v, windows_method=f"counted: windows of {span} bars on {planned.how}, "
                                                         f"after session gaps and the {frac:g} split")
    elif have is not None and have.size and planned.size:
        ratio = planned.size / have.size
        out.update(windows_planned=int(round(measured * ratio)),
                   windows_method=f"proportional to the {'events' if kind == 'book' else 'bars'} "
                                  f"({planned.size} planned / {have.size} measured; {planned.how})")
    else:
        out.update(windows_planned=measured, windows_method="measured data kept",
                   data_scale_note="the measured data's size is unknown (no data tags): not scaled")
        out["data_scale_trusted"] = False
        return out
    out["data_scale"] = out["windows_planned"] / measured if measured else 1.0
    return _trust(out, tw, batch, min_batches)


def _trust(out: DataPlan, tw: int, batch: int | None, min_batches: int) -> DataPlan:
    if batch and tw < min_batches * batch:
        out["data_scale_trusted"] = False
        note = (f"the measured data held {tw} training windows, fewer than decision.plan_min_batches={min_batches} "
                f"batches of {batch}: fixed per-epoch costs dominate it, so the scaling is not trusted; measure on "
                "more data")
        out["data_scale_note"] = "; ".join(x for x in (out["data_scale_note"], note) if x)
    elif not out["data_scale_note"]:
        out["data_scale_note"] = (f"epoch time scaled by the windows ({out['windows_method']})"
                                  if out["data_scale"] != 1.0 else "same windows as measured")
    return out


def noise_scale_of(runs: list[Any]) -> float | None:
    vals = [r.metrics.get(Summary.NOISE_SCALE) for r in runs]
    vals = [float(v) for v in vals if v is not None and math.isfinite(v) and v > 0]
    return float(np.median(vals)) if vals else None


def noise_scale_resolution(runs: list[Any]) -> dict[str, Any]:
    """How resolved the runs' noise scale is: the runs that gave one, the pairs of steps they took, the median
    of their relative standard errors (run metric ``noise_scale_rel_se``), and that in words; where no run gave
    one, ``not measured:`` with the runs' reasons (tag ``noise_scale_note``: the budget allowed no pair,
    turned off, a batch too small to split, an estimate not resolved)."""
    given = [r for r in runs if (v := r.metrics.get(Summary.NOISE_SCALE)) is not None and math.isfinite(v) and v > 0]
    pairs = [int(v) for r in given if (v := r.metrics.get(Summary.NOISE_SCALE_PAIRS)) is not None and math.isfinite(v)]
    rses = [float(v) for r in given if (v := r.metrics.get(Summary.NOISE_SCALE_REL_SE)) is not None
            and math.isfinite(v)]
    rse = float(np.median(rses)) if rses else None
    if given:
        words = (f"{sum(pairs)} pair(s) of steps in {len(given)} run(s), relative standard error "
                 + (f"{rse:.0%}" if rse is not None else "not computable (under two pairs a run)")
                 + (" (unresolved: a 95% interval of ±1.96 standard errors includes 0)"
                    if rse is not None and 1.96 * rse >= 1 else ""))
    else:
        notes = list(dict.fromkeys(n for r in runs if (n := r.tags.get(Tag.NOISE_SCALE_NOTE))))
        words = "not measured: " + ("; ".join(notes) if notes else "no run logged a noise scale")
    return {"noise_scale_runs": len(given), Summary.NOISE_SCALE_PAIRS: sum(pairs) if given else None,
            Summary.NOISE_SCALE_REL_SE: rse, "noise_scale_resolution": words}


def batch_plan(batch: int | None, planned: int | None, b_noise: float | None) -> tuple[float, str]:
    """(epochs factor, note) for a planned batch other than the measured one."""
    if planned is None or batch is None or planned == batch:
        return 1.0, "planned batch = measured batch"
    if b_noise is None:
        return 1.0, (f"planned batch {planned} differs from the measured {batch}, but no run measured the gradient "
                     "noise scale: epochs not scaled")
    f = (1 + planned / b_noise) / (1 + batch / b_noise)
    return f, (f"model-based estimate: epochs x {f:.3g} for batch {planned} instead of {batch} (E = E_min(1 + B/"
               f"B_noise), B_noise = {b_noise:.3g})")


#: The GPUs one model is projected across (analysis/projection/data_parallel.py): the config's set.
DATA_PARALLEL_GPUS = tuple(n for n in DATA_PARALLEL_SIZES if n > 1)


def data_parallel_epochs(batch: int | None, b_noise: float | None) -> tuple[dict[str, float], str]:
    """({N: epochs factor}, note) of N GPUs each at the measured batch B: the global batch N x B costs
    (1 + N B/B_noise) / (1 + B/B_noise) times the epochs (McCandlish et al. 2018, "An Empirical Model of
    Large-Batch Training": examples E = E_min(1 + B/B_noise), steps S = S_min(1 + B_noise/B)); {} without a
    measured noise scale or batch."""
    if batch is None or b_noise is None:
        return {}, ("no measured gradient noise scale" if b_noise is None else "no measured batch") + \
            ": the epochs at a global batch cannot be placed (between 1x and Nx)"
    out = {str(n): batch_plan(batch, n * batch, b_noise)[0] for n in DATA_PARALLEL_GPUS}
    return out, (f"E = E_min(1 + B/B_noise) at B = N x {batch}, B_noise = {b_noise:.3g} (the runs' gradient noise "
                 "scale B_simple; McCandlish et al. 2018)")


#: z of a 90% two-sided normal interval: the noise scale's range from its relative standard error
Z90 = 1.645


def data_parallel_epochs_range(batch: int | None, b_noise: float | None,
                               rel_se: float | None) -> dict[str, list[float]]:
    """{N: [low, high]} of the epochs factor at N GPUs from the noise scale's 90% range, ``B_noise (1 ± 1.645
    rel_se)``: the factor falls as B_noise grows, so its low end is the range's high end's factor and its high end
    the low end's (N, the relation's bound, where that low end reaches 0: the estimate is unresolved). Without a
    standard error (under two pairs of steps) the relation's bounds [1, N]; {} without a noise scale or batch."""
    if batch is None or b_noise is None:
        return {}
    out = {}
    for n in DATA_PARALLEL_GPUS:
        if rel_se is None or not math.isfinite(rel_se):
            out[str(n)] = [1.0, float(n)]
            continue
        lo_b, hi_b = b_noise * (1 - Z90 * rel_se), b_noise * (1 + Z90 * rel_se)
        high = batch_plan(batch, n * batch, lo_b)[0] if lo_b > 0 else float(n)
        out[str(n)] = [batch_plan(batch, n * batch, hi_b)[0], min(float(n), high)]
    return out


def windows_of(run: Any) -> int | None:
    """A supervised run's training + validation windows (None for RL: no windows)."""
    tw, vw = logged_int(_param(run, model_info("train_windows"))), logged_int(_param(run, model_info("val_windows")))
    return None if tw is None else tw + (vw or 0)


def largest_data(runs: list[Any]) -> tuple[list[Any], list[Any]]:
    """(the runs on the model's largest measured data, the others): a sweep over data sizes (the evidence for
    the data exponent) times the epoch on the data nearest the plan's."""
    sizes = {windows_of(r) for r in runs} - {None}
    if len(sizes) < 2:
        return runs, []
    top = max(sizes)
    return [r for r in runs if windows_of(r) in (top, None)], [r for r in runs if windows_of(r) not in (top, None)]


def _steps_per_epoch(run: Any) -> float | None:
    tw = logged_int(_param(run, model_info("train_windows")))
    batch = logged_int(_param(run, ParamKey.BATCH_SIZE_RESOLVED)) or logged_int(_param(run, ParamKey.BATCH_SIZE))
    return None if not tw or not batch else float(math.ceil(tw / batch))


#: alpha draws for the exponent's range
ALPHA_DRAWS = 2000


def _levels_off_samples(run: Any, rule: curves.CurveRule, rng: np.random.Generator) -> tuple[np.ndarray, str] | None:
    """(samples of the epoch where one run's curve is best, how it was read): the epochs as good as its smoothed
    minimum (:func:`curves.best_epoch`), drawn uniformly; where no minimum is seen (the curve still improves at
    its end), the extrapolated plateau's draws; None where neither gives one. Never the early-stopping epoch:
    best + a patience with a floor is not proportional to the best epoch, which would bias the exponent."""
    c = curves.curve_of(run.series)
    if c is None:
        return None
    y = c[1][np.isfinite(c[1])]
    best = curves.best_epoch(y, rule)
    if best is not None:
        return rng.integers(best.low, best.high + 1, size=ALPHA_DRAWS).astype(float), "best"
    est = curves.extrapolate(y, rule, rng)
    if est.epochs is not None and est.samples.size:
        return rng.choice(est.samples, ALPHA_DRAWS), "extrapolated"
    return None


class AlphaSize(TypedDict):
    """One data size :func:`data_alpha` fitted on: its windows, runs, best epochs (and 5-95% range, basis) and steps."""

    windows: int
    runs: list[str]
    epochs: int
    epochs_range: list[int]
    epochs_basis: str
    steps: int


class AlphaFit(TypedDict):
    """:func:`data_alpha`: the data exponent clipped to [0, 1], before clipping, its 5-95% range, the sizes."""

    alpha: float
    alpha_raw: float
    range: list[float]
    sizes: list[AlphaSize]


def data_alpha(runs: list[Any], rule: curves.CurveRule, rng: np.random.Generator) -> AlphaFit | None:
    """The data exponent from runs of one model at two or more data sizes: where each size's curves are best
    (their smoothed minimum, robust to noise; the extrapolated plateau where a curve shows none), in optimiser
    steps (best epoch x steps per epoch), ``steps ∝ windows^alpha`` fitted by least squares on the logs; the
    range from draws of each size's best epochs (5-95%). None when fewer than two sizes give one. ``alpha_raw``
    is the fit before clipping to [0, 1]."""
    groups: dict[int, list[Any]] = {}
    for r in runs:
        w, spe = windows_of(r), _steps_per_epoch(r)
        if w and spe:
            groups.setdefault(w, []).append(r)
    if len(groups) < 2:
        return None
    used: list[AlphaSize] = []
    logw, logs, draws = [], [], []
    for w, rs in sorted(groups.items()):
        per = [x for r in rs if (x := _levels_off_samples(r, rule, rng)) is not None]
        if not per:
            continue
        pooled = np.concatenate([x[0] for x in per])
        best = float(np.median(pooled))
        spe = float(np.median([_steps_per_epoch(r) for r in rs]))
        how = sorted({x[1] for x in per})
        used.append({"windows": w, "runs": [r.run_name for r in rs], "epochs": int(round(best)),
                     "epochs_range": [int(np.floor(np.percentile(pooled, 5))), int(np.ceil(np.percentile(pooled, 95)))],
                     "epochs_basis": "best epoch" if how == ["best"] else "extrapolated plateau" if how == [
                         "extrapolated"] else "best epoch, extrapolated plateau", "steps": round(best * spe)})
        logw.append(math.log(w))
        logs.append(math.log(max(1.0, best * spe)))
        draws.append(np.log(np.maximum(1.0, rng.choice(pooled, ALPHA_DRAWS) * spe)))
    if len(used) < 2:
        return None
    x = np.asarray(logw) - np.mean(logw)
    point = float(np.dot(x, np.asarray(logs)) / np.dot(x, x))
    d = np.vstack(draws)  # sizes x draws
    slopes = (x @ (d - d.mean(axis=0))) / np.dot(x, x)
    lo, hi = np.percentile(slopes, [5, 95])
    clip = lambda v: float(min(1.0, max(0.0, v)))  # noqa: E731
    return {"alpha": round(clip(point), 3), "alpha_raw": round(point, 3),
            "range": [round(clip(lo), 3), round(clip(hi), 3)], "sizes": used}


def _alpha_factor(scale: float, alpha: float) -> float:
    """Planned epochs / measured epochs at data scale ``scale``: steps ∝ windows^alpha, epochs = steps /
    steps per epoch (∝ windows), so epochs scale by ``scale^(alpha - 1)``."""
    return float(scale ** (alpha - 1.0))


def sweep_hint(model: str) -> str:
    return f"python run.py -m model={model} data.n_bars=10000,40000"


def _curve_length(runs: list[Any]) -> int:
    """The longest curve (finite epochs of val_loss, episode_reward or loss, warmup included) of the runs."""
    n = 0
    for r in runs:
        c = curves.curve_of(r.series)
        if c is not None:
            n = max(n, int(np.isfinite(c[1]).sum()))
    return n


def _keep_configured(out: dict[str, Any], configured: int | None, why: str) -> None:
    out.update(epochs=configured, epochs_range=[configured, configured] if configured else None,
               epochs_basis=f"{curves.CONFIGURED}: {why}")


def _best_of(epochs: float, early: bool, rule: curves.CurveRule) -> float:
    """The best epoch behind an estimate: early stopping's epochs less the patience it waited (which grows with
    the best epoch, ``max(patience, patience_growth x best)``); an extrapolated plateau is its own."""
    if not early:
        return float(epochs)
    return max(1.0, min(epochs - rule.patience, epochs / (1.0 + rule.patience_growth)))


def choose_epochs(out: dict[str, Any], model: str, runs: list[Any], runs_all: list[Any], configured: int | None,
                  rule: curves.CurveRule, rng: np.random.Generator, min_epochs: int) -> None:
    """The epochs of the plan (``epochs*`` and ``data_alpha*`` fields), on the planned data.

    The configured epochs (``model.target_epochs``, ``decision.target_epochs.<m>``, ``model_plans.<m>.epochs``,
    ``decision.epochs=<n>``) are the epochs the team plans on the planned data: they are never converted. A curve
    replaces them only where it is of the decided size (the row's runs are), at least ``decision.min_epochs``
    long, and shows where it levels off (``early_stopping`` or ``extrapolated``); its epochs hold on the measured
    data, so where the planned data differs they are converted only with a measured data exponent alpha
    (:func:`data_alpha`, fitted on where the curves are best): the best epoch is scaled by ``scale^(alpha - 1)``
    and early stopping's patience added after. Otherwise the configured epochs stand, and ``epochs_basis``
    says why the curve was not used (its own estimate stays in ``epochs_measured_data``)."""
    scale = float(out.get("data_scale") or 1.0)
    out.update(data_alpha=None, data_alpha_range=None, data_alpha_runs=[], epochs_measured_data=None,
               epochs_measured_data_range=None)
    basis = str(out["epochs_basis"])
    if not basis.startswith((curves.EARLY_STOPPING, curves.EXTRAPOLATED)):
        out["data_alpha_basis"] = ("not applied: an RL epoch is fixed work, whatever the data"
                                   if out.get("windows_measured") is None else
                                   "not applied: the configured epochs are meant for the planned data")
        return
    e, (elo, ehi) = out["epochs"], out["epochs_range"] or [out["epochs"]] * 2
    out["epochs_measured_data"], out["epochs_measured_data_range"] = e, [elo, ehi]
    length = _curve_length(runs)
    if length < min_epochs:
        _keep_configured(out, configured, f"the curve's {length} epochs are fewer than decision.min_epochs="
                                          f"{min_epochs}, too few to show where the model levels off (it reads "
                                          f"{e} [{elo}-{ehi}] epochs, not used); train longer (trainer.epochs) "
                                          "to use the curve")
        out["data_alpha_basis"] = "not applied: the curve is not used"
        return
    if out.get("windows_measured") is None:
        out["data_alpha_basis"] = "not applied: an RL epoch is fixed work, whatever the data"
        return
    if scale == 1.0:
        out["data_alpha_basis"] = "not applied: the planned data is the measured data, so the curve's epochs hold"
        return
    fit = data_alpha(runs_all, rule, rng)
    if fit is None:
        _keep_configured(out, configured, f"the curve's {e} epochs hold on the measured data; the planned data "
                                          f"holds {scale:.3g}x its windows and no run at another data size "
                                          "measures the data exponent alpha that converts them (a sweep that "
                                          f"measures it: `{sweep_hint(model)}`)")
        out["data_alpha_basis"] = (f"no evidence: no runs of {model} at another data size; the curve's epochs are "
                                   f"not converted. A sweep that measures it: `{sweep_hint(model)}`")
        return
    out.update(data_alpha=fit["alpha"], data_alpha_range=fit["range"], data_alpha_runs=fit["sizes"])
    sizes = ", ".join(f"{s['windows']} windows: best at epoch {s['epochs']} = {s['steps']} steps "
                      f"({', '.join(s['runs'])})" for s in fit["sizes"])
    clipped = f"; the fit gave {fit['alpha_raw']:g}, clipped to [0, 1]" if fit["alpha_raw"] != fit["alpha"] else ""
    out["data_alpha_basis"] = (f"fitted on where the curves are best at {len(fit['sizes'])} data sizes ({sizes})"
                               f"{clipped}; patience added after the conversion")
    early = basis.startswith(curves.EARLY_STOPPING)
    alpha, lo_a, hi_a = fit["alpha"], *fit["range"]
    f = [_alpha_factor(scale, a) for a in (lo_a, hi_a)]

    def planned(best: float) -> float:
        return best + (curves.patience_at(best, rule) if early else 0.0)

    out["epochs"] = max(1, int(round(planned(_best_of(e, early, rule) * _alpha_factor(scale, alpha)))))
    out["epochs_range"] = [max(1, int(math.floor(planned(_best_of(elo, early, rule) * min(f))))),
                           max(1, int(math.ceil(planned(_best_of(ehi, early, rule) * max(f)))))]


def epochs_plan(runs: list[Any], how: str | int, configured: int | None, rule: curves.CurveRule,
                rng: np.random.Generator) -> dict[str, Any]:
    """The epochs fields as the curves read them on the measured data: ``how`` is auto, config or a number."""
    base = {"target_epochs_configured": configured, "epochs_curve": None, "epochs_families": None,
            "epochs_notes": [], "epochs_labels": [], "diverged_after_epoch": None, "curve_worsened": None}
    if isinstance(how, int) and not isinstance(how, bool):
        return {**base, "epochs": how, "epochs_range": [how, how], "epochs_basis": "configured"}
    if how == "config":
        return {**base, "epochs": configured, "epochs_range": [configured, configured] if configured else None,
                "epochs_basis": "configured"}
    if not any(curves.curve_of(r.series) for r in runs):
        return {**base, "epochs": configured, "epochs_range": [configured, configured] if configured else None,
                "epochs_basis": f"{curves.CONFIGURED}: no curve at this size (profiled, not trained)"
                if runs and all(getattr(r, "profile_only", False) for r in runs)
                else f"{curves.CONFIGURED}: the runs log no val_loss, episode_reward or loss"}
    est = curves.estimate_model([r.series for r in runs], rule, rng)
    base.update(epochs_curve=est.curve, epochs_families=est.families, epochs_notes=est.notes,
                epochs_labels=est.labels, diverged_after_epoch=est.diverged_after, curve_worsened=est.worsened)
    if est.epochs is None:
        return {**base, "epochs": configured, "epochs_range": [configured, configured] if configured else None,
                "epochs_basis": est.basis}
    return {**base, "epochs": est.epochs, "epochs_range": est.epochs_range, "epochs_basis": est.basis}


def confirmed_epochs(name: str, entry: ModelEntry, mine: dict[str, Any], d: Any, out: dict[str, Any]) -> bool:
    """Whether the plan's epochs rest on more than an assumption: read off a curve (evidence), or given by the
    team in the analysis (``decision.model_plans.<m>.epochs``, ``decision.epochs=<n>``,
    ``decision.target_epochs.<m>``, ``decision.estimates``). The runs' ``model.target_epochs`` (the model's
    default unless the team set it at training time) is not: the Monte Carlo then spreads it
    (:data:`UNCONFIRMED_EPOCHS_SPREAD`)."""
    if str(out.get("epochs_basis")).startswith((curves.EARLY_STOPPING, curves.EXTRAPOLATED)):
        return True
    how = mine.get("epochs") or d.epochs
    if isinstance(how, int) and not isinstance(how, bool):
        return True
    return str(entry.target_epochs_source or "").startswith("decision.") or name in d.target_epochs


def rule_of(c: Any) -> curves.CurveRule:
    return curves.CurveRule(patience=c.patience, min_delta=c.min_delta, min_epochs=c.min_epochs,
                            threshold=c.threshold, max_epochs=c.max_epochs, bootstrap=c.bootstrap,
                            patience_growth=c.patience_growth, noise_z=c.noise_z, min_epochs_stop=c.min_epochs_stop)


def model_plan(name: str, entry: ModelEntry, runs: list[Any], d: Any, layouts: dict[str, Layout | None],
               rng: np.random.Generator, runs_all: list[Any] | None = None) -> Plan | None:
    """``models.<name>.plan`` of a model with runs (None without): a model whose runs hold no usable timing
    (e.g. every epoch contaminated) still gets its data and epochs, without an epoch time. ``runs_all``: every
    completed run of the model, at every data size (the data exponent's evidence)."""
    if not runs:
        return None
    runs, _ = largest_data(runs)
    mine = dict(d.model_plans.get(name) or {})
    spec = str(mine.get("data") or d.plan_data)
    out = data_plan(runs, layouts[spec], spec, d.plan_min_batches)
    configured = ((entry.projection.target_epochs if entry.projection else None) or d.target_epochs.get(name)
                  or max((r.target_epochs for r in runs if r.target_epochs), default=None))
    how = mine.get("epochs") or d.epochs
    rule = rule_of(d.curves)
    out.update(epochs_plan(runs, how, configured, rule, rng))
    choose_epochs(out, name, runs, runs_all or runs, configured, rule, rng, d.min_epochs)
    out["epochs_confirmed"] = confirmed_epochs(name, entry, mine, d, out)
    b_noise = noise_scale_of(runs)
    out[Summary.NOISE_SCALE] = b_noise
    out.update(noise_scale_resolution(runs))
    out["batch_planned"] = mine.get("batch") or out["batch_measured"]
    out["batch_scale"], out["batch_note"] = batch_plan(out["batch_measured"], mine.get("batch"), b_noise)
    out["data_parallel_epochs"], out["data_parallel_note"] = data_parallel_epochs(out["batch_measured"], b_noise)
    out["data_parallel_epochs_range"] = data_parallel_epochs_range(out["batch_measured"], b_noise,
                                                                   out.get(Summary.NOISE_SCALE_REL_SE))
    mean = entry.epoch_time_ms.mean if entry.source == Source.MEASURED and entry.epoch_time_ms else None
    out["epoch_ms_planned"] = None if mean is None else mean * out["data_scale"]
    out["epoch_ms_planned_label"] = "scaled" if out["data_scale"] != 1.0 else Source.MEASURED
    return Plan(**out)


def layouts_for(cfg: Any) -> dict[str, Layout | None]:
    """Every planned data spec's layout, read once."""
    d = cfg.decision
    specs = {str(d.plan_data)} | {str(p["data"]) for p in d.model_plans.values() if p.get("data")}
    return {s: planned_layout(s, cfg.paths) for s in sorted(specs)}


@dataclass
class Planned:
    """What the plan stage gives one model: its plan, and its projection made the planned one."""

    plan: Plan | None
    projection: ModelProjection | None


def apply_plans(entries: dict[str, ModelEntry], timed_by_model: dict[str, list[Any]], cfg: Any,
                rng: np.random.Generator, runs_by_model: dict[str, list[Any]] | None = None) -> dict[str, Planned]:
    """Every model's ``plan`` (None without runs), and its ``projection`` made the planned one: hours = epoch_ms x
    data_scale x epochs x batch_scale; ``hours_ci95`` from the epoch-time interval, ``hours_range`` with the
    epochs range too. A model without a plan keeps its projection. Reads the entries, changes none."""
    layouts = layouts_for(cfg)
    out: dict[str, Planned] = {}
    for name, entry in entries.items():
        runs = timed_by_model.get(name) or [r for r in (runs_by_model or {}).get(name, [])
                                            if r.outcome == Outcome.COMPLETED]
        every = [r for r in (runs_by_model or {}).get(name, []) if r.outcome == Outcome.COMPLETED] or runs
        if entry.source == Source.PROFILED:  # profiled at this size, not trained: its profile runs
            runs = every = [r for r in (runs_by_model or {}).get(name, []) if r.outcome == Source.PROFILED]
        plan = model_plan(name, entry, runs, cfg.decision, layouts, rng, every)
        out[name] = Planned(plan, _planned_projection(entry, plan))
    return out


def _planned_projection(entry: ModelEntry, plan: Plan | None) -> ModelProjection | None:
    """The model's projection with its plan's epochs and work (a new value; the entry's stays as it is)."""
    proj = entry.projection
    if plan is None or plan.epochs is None or entry.source not in (Source.PROFILED, Source.MEASURED):
        return proj
    work = plan.data_scale * plan.batch_scale
    if entry.source == Source.PROFILED:  # its hours on each GPU come from the projection stage
        return ModelProjection(target_epochs=plan.epochs, hours=None,
                               hours_ci95=proj.hours_ci95 if proj else None, work_scale=work,
                               hours_range=proj.hours_range if proj else None)
    ep = entry.epoch_time_ms
    mean, ci = ep.mean, ep.ci95_mean  # type: ignore[union-attr]
    lo_e, hi_e = plan.epochs_range or [plan.epochs] * 2
    return ModelProjection(
        target_epochs=plan.epochs, work_scale=work, hours=mean * work * plan.epochs / MS_PER_HOUR,
        hours_ci95=None if not ci else [max(0.0, ci[0]) * work * plan.epochs / MS_PER_HOUR,
                                        ci[1] * work * plan.epochs / MS_PER_HOUR],
        hours_range=[max(0.0, (ci or [mean])[0]) * work * lo_e / MS_PER_HOUR,
                     (ci or [mean, mean])[-1] * work * hi_e / MS_PER_HOUR])


#: The Monte Carlo's 90% range of epochs nobody confirmed (the runs' ``model.target_epochs``: the model's default
#: unless the team set it when training; ``plan.epochs_confirmed`` false): from half to twice them. An assumption,
#: not a measurement, stated as one (docs/report-schema.md): nothing measures how far a default is from what the
#: team will train, so the width is a round figure that keeps the probabilities off 0% and 100% where the epochs
#: alone could move the total across a threshold; ``decision.target_epochs.<model>`` removes it.
UNCONFIRMED_EPOCHS_SPREAD = 2.0

#: The spread (5-95%, relative) put on the data scaling in the Monte Carlo: the law (epoch time proportional to
#: the windows) holds up to fixed per-epoch costs; wider when the windows were scaled in proportion to the bars
#: rather than counted, and widest when the measured data was too small to trust the scaling.
DATA_SCALE_SPREAD = {"same": 0.0, "counted": 0.10, "proportional": 0.20, "untrusted": 0.50}


def _data_spread(plan: Plan) -> float:
    if plan.data_scale == 1.0 and plan.windows_planned == plan.windows_measured:
        return DATA_SCALE_SPREAD["same"]
    if not plan.data_scale_trusted:
        return DATA_SCALE_SPREAD["untrusted"]
    return DATA_SCALE_SPREAD["counted" if str(plan.windows_method or "").startswith("counted") else
                             "proportional"]


def mc_inputs(models: dict[str, ModelEntry], used: list[str],
              local: dict[str, ProjectionRow] | None = None) -> dict[str, ModelFactors]:
    """The Monte Carlo factors of each model in the total (analysis/plan/montecarlo.py).

    ``local``: {model: its projections[] entry on the instance the decision is based on} when the basis is a
    projection; then the epoch time keeps the measured interval and the projection is a factor of its own
    (its point relative to the measured mean, its ``epoch_ms_range`` relative to its point, read as a 90% range).
    """
    from trainbench.analysis.plan.montecarlo import Quantity

    out: dict[str, ModelFactors] = {}
    for name in used:
        m = models[name]
        proj, ep = m.projection, m.epoch_time_ms
        target = proj.target_epochs if proj else None
        profiled = m.source == Source.PROFILED
        e = (local or {}).get(name)
        e_ms = e.epoch_ms if e is not None else None
        e_range = (e.epoch_ms_range if e is not None else None) or [e_ms] * 2
        if profiled:  # no measured epoch: the projection onto the local card is the epoch time, with its range
            if e_ms is None or not target:
                continue
            lo, hi = e_range
            f: ModelFactors = {"projection": Quantity(float(e_ms), float(lo), float(hi), 0.9)}
        else:
            mean = (ep.mean if ep else None) if m.source == Source.MEASURED else m.estimate_epoch_ms
            if mean is None or not target or (ep is not None and ep.ci95_mean_resolved is False):
                continue  # an unresolved interval of the mean has no distribution: the model is left out
            ci = ep.ci95_mean if ep else None
            f = {"epoch_ms": Quantity(mean, ci[0], ci[1], 0.95) if ci else float(mean)}
        plan = m.plan
        if plan:
            s = _data_spread(plan)
            f["data_scale"] = Quantity(plan.data_scale, plan.data_scale * (1 - s), plan.data_scale * (1 + s))
            c = float(plan.epochs)  # type: ignore[arg-type]
            lo, hi = plan.epochs_range or [plan.epochs] * 2
            if not plan.epochs_confirmed and lo == hi:
                # epochs nobody confirmed (the runs' model.target_epochs): an assumption, spread as one
                lo, hi = c / UNCONFIRMED_EPOCHS_SPREAD, c * UNCONFIRMED_EPOCHS_SPREAD
            f["epochs"] = Quantity(c, float(lo), float(hi), 0.9)
            f["batch_scale"] = float(plan.batch_scale)
        else:
            f["epochs"] = float(target)
        if local is not None and not profiled:
            if e_ms is None:
                continue
            r = e_ms / mean
            lo, hi = e_range
            f["projection"] = Quantity(r, r * lo / e_ms, r * hi / e_ms, 0.9)
        out[name] = f
    return out


@dataclass
class HoursDistribution:
    """The total hours as a distribution (the decision's fields of the same names, docs/report-schema.md)."""

    hours_median: float | None
    hours_interval90: list[float] | None
    p_within_24h: float | None
    p_over_48h: float | None
    probability_thresholds_hours: list[float]
    probabilities_withheld: str | None
    uncertainty_drivers: dict[str, Any]
    distribution_models: list[str]
    distribution_left_out: list[str]
    recommendation_probabilistic: str
    probability_levels: dict[str, float]


def hours_distribution(models: dict[str, ModelEntry], used: list[str], d: Any, seed: int,
                       local: dict[str, ProjectionRow] | None = None, gpus: int = 1,
                       withheld: str | None = None) -> HoursDistribution:
    """The decision's distribution fields: ``hours_median``, ``hours_interval90``, ``p_within_24h`` (P(total <
    decision.local_max_hours)), ``p_over_48h`` (P(total > decision.cloud_min_hours)), ``uncertainty_drivers``
    and the recommendation those probabilities give (``recommendation_probabilistic``). Every assumed input is
    a factor of its own (epochs nobody confirmed: :data:`UNCONFIRMED_EPOCHS_SPREAD`); ``withheld``: why the
    probabilities cannot be given at all (the total rests on a size the team does not train, which no spread
    describes): they are then null, and the recommendation is the conservative rule's."""
    from trainbench.analysis.plan.montecarlo import recommend, total_hours

    inputs = mc_inputs(models, used, local)
    s = total_hours(inputs, gpus=gpus, within=d.local_max_hours, over=d.cloud_min_hours, samples=d.mc_samples,
                    seed=seed)
    left_out = [m for m in used if m not in inputs]
    p_in, p_over = (None, None) if withheld else (s["p_within"], s["p_over"])
    return HoursDistribution(
        hours_median=s["median"], hours_interval90=s["interval90"], p_within_24h=p_in, p_over_48h=p_over,
        probability_thresholds_hours=[d.local_max_hours, d.cloud_min_hours], probabilities_withheld=withheld,
        uncertainty_drivers={"dominant": s["dominant"], "shares": s["shares"]},
        distribution_models=sorted(inputs), distribution_left_out=left_out,
        recommendation_probabilistic=recommend(s, d.p_local, d.p_cloud) if inputs and not left_out
        and not withheld else Recommendation.INSUFFICIENT_DATA,
        probability_levels={"p_local": d.p_local, "p_cloud": d.p_cloud})

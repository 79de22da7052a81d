"""TLOB: a dual-attention transformer that predicts the mid-price trend from a Level-2 order book.

After Berti & Kasneci, "TLOB: A Novel Transformer Model with Dual Attention for Stock Price Trend
Prediction with Limit Order Book Data" (arXiv 2502.15757). Written from the paper's description and
the facts in ``references/models.md`` section 4; no reference code is copied.

Data: ``data.book`` (MBP-10, ``conf/data/mbp10.yaml``). Each event gives 40 columns, ten levels of
(ask price, ask size, bid price, bid size) in LOBSTER order. A sample is the window of the last
``seq_len`` events ending at event t; its label is the smoothed mid-price trend from t to t + horizon
(:func:`tlob_labels`). One epoch is one shuffled pass over every training window at
``model.batch_size`` (the last partial batch is dropped, so each epoch does the same work).

Features (:func:`book_features`). Prices are kept absolute (not relative to the mid) and z-scored with
one mean and std shared by all twenty price columns; sizes likewise with one mean and std for the
twenty size columns; both from the training split only (the paper's LOBSTER normalisation). Why not
mid-relative prices: the labels are about the mid's path, and absolute prices keep that path in the
window; the price *level* (which drifts out of the training range on a random walk) is removed anyway
by BiN's temporal normalisation, which centres every column on its own window mean. Shared price
statistics keep the levels on one scale, so spreads and depth gaps survive the normalisation.

Empty levels (NaN price, size 0) are filled before normalising: an empty level j takes the price of
level j-1 one tick further from the mid, so the ladder stays monotone; an empty best level takes the
last defined best price (forward fill; back-filled at the start of the file). Its size stays 0.

Sizes. The paper's TLOB (seq_len 128, hidden_dim 40, 4 layers, 1 head; 1.14 M parameters here)
costs about 5 ms of one CPU core per training window, so an epoch of the ~8,000 windows of
``data=mbp10`` takes ~40 s. The default is CPU-sized: seq_len 32 and hidden_dim 20 (91 k parameters,
~3 s per such epoch on one core); layers, heads, lr and labels are the paper's. Set
``model.seq_len=128 model.hidden_dim=40`` for the paper's model.

Fidelity. With the official TLOB's weights copied in (its q/k/v Linears stacked into ``qkv``, its head's
first Linear's columns permuted: it flattens the last (T/4, H/4) map feature-major, this one time-major),
this network's logits agree with the official forward to < 1e-6 at the paper's size; the two details
that made them differ were the block input added again after the MLP and BiN's unbiased std.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainbench.config.models.tlob import SCHEMA, TLOBConfig
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.arrays import Book
from trainbench.data.market import MarketData
from trainbench.models.base import (
    BuildContext,
    EpochMeter,
    ModelSpec,
    TrainableBase,
    accumulate,
    batches,
    clip_and_step,
    evaluate,
    make_optimizer,
)

#: Class indices, as in the paper: 0 = up, 1 = stationary, 2 = down; -1 marks an undefined label.
UP, STATIONARY, DOWN, NO_LABEL = 0, 1, 2, -1
N_LEVELS, LEVEL_WIDTH = 10, 4
N_FEATURES = N_LEVELS * LEVEL_WIDTH
#: Below this a standard deviation counts as zero and BiN divides by 1 instead (as the reference's
#: temporal branch does): a constant column normalises to 0, never to NaN or to amplified noise.
BIN_STD_FLOOR = 1e-4


# --------------------------------------------------------------------------------------------------
# labels and features (numpy, once at build time)
# --------------------------------------------------------------------------------------------------


def tlob_labels(mid: np.ndarray, horizon: int, smooth: int,
                alpha: float | None = None) -> tuple[np.ndarray, float]:
    """The paper's trend labels, aligned to the event they are predicted from.

    With k = min(smooth, horizon), at event t::

        past   = mean(mid[t-k+1 .. t])            (known at t)
        future = mean(mid[t+h-k+1 .. t+h])        (the same window, h events later; all after t as k <= h)
        pct    = (future - past) / past
        label  = UP (0) if pct > alpha, DOWN (2) if pct < -alpha, else STATIONARY (1)

    ``alpha`` None: mean |pct| / 2 over the defined labels. Returns ``(labels, alpha)`` with
    ``labels`` int64 of the same length as ``mid``; it is NO_LABEL (-1) where undefined: the first
    k-1 events, the last h events, and wherever a mid in either average is NaN or ``past`` is not
    positive.
    """
    mid = np.asarray(mid, dtype=np.float64)
    n = mid.shape[0]
    h, k = int(horizon), int(min(smooth, horizon))
    if h < 1 or k < 1:
        raise ValueError(f"horizon ({horizon}) and smooth ({smooth}) must be >= 1")
    labels = np.full(n, NO_LABEL, dtype=np.int64)
    pct = np.full(n, np.nan)
    if n >= k + h:
        # smoothed[i] = mean(mid[i .. i+k-1]), ending at event i+k-1; a NaN spoils only the k
        # averages that contain it (a running cumsum would spoil every later one)
        smoothed = np.lib.stride_tricks.sliding_window_view(mid, k).mean(axis=1)
        past, future = smoothed[:-h], smoothed[h:]  # past ends at t = i+k-1, future at t+h
        with np.errstate(divide="ignore", invalid="ignore"):
            change = np.where(past > 0, (future - past) / np.where(past > 0, past, 1.0), np.nan)
        pct[k - 1:n - h] = change
    ok = np.isfinite(pct)
    if alpha is None:
        alpha = float(np.abs(pct[ok]).mean() / 2) if ok.any() else 0.0
    labels[ok] = np.where(pct[ok] > alpha, UP, np.where(pct[ok] < -alpha, DOWN, STATIONARY))
    return labels, float(alpha)


def fill_book(levels: np.ndarray, tick: float) -> np.ndarray:
    """A copy of (E, 10, 4) ``levels`` with every empty level's NaN price filled (see module doc)."""
    out = np.array(levels, dtype=np.float64, copy=True)
    for col in (0, 2):  # best ask, best bid: last defined value, back-filled at the start
        px = out[:, 0, col]
        ok = np.isfinite(px)
        if ok.any() and not ok.all():
            idx = np.where(ok, np.arange(px.shape[0]), -1)
            np.maximum.accumulate(idx, out=idx)
            idx[idx < 0] = int(np.argmax(ok))
            out[:, 0, col] = px[idx]
    for j in range(1, N_LEVELS):
        for col, step in ((0, tick), (2, -tick)):  # asks rise, bids fall away from the mid
            px = out[:, j, col]
            bad = ~np.isfinite(px)
            px[bad] = out[bad, j - 1, col] + step
    return out


def book_features(book: Book, n_train: int) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """(E, 40) normalised float32 features, the (E,) mid of the filled book, and the statistics used.

    Columns: level-major, LOBSTER order (ask_px, ask_sz, bid_px, bid_sz for level 0, then level 1, ...).
    Statistics come from the first ``n_train`` events only. Non-finite values left over (a book with no
    price on one side at all) become 0.
    """
    filled = fill_book(book.levels, float(book.tick_size))
    mid = (filled[:, 0, 0] + filled[:, 0, 2]) / 2.0
    flat = filled.reshape(len(book), N_FEATURES)
    is_px = np.tile(np.array([True, False, True, False]), N_LEVELS)
    train = flat[:n_train]
    stats = {}
    out = np.empty_like(flat)
    for name, cols in (("price", is_px), ("size", ~is_px)):
        vals = train[:, cols]
        vals = vals[np.isfinite(vals)]
        mu = float(vals.mean()) if vals.size else 0.0
        sd = float(vals.std()) if vals.size else 1.0
        sd = sd if sd > 1e-12 else 1.0
        out[:, cols] = (flat[:, cols] - mu) / sd
        stats[f"{name}_mean"], stats[f"{name}_std"] = mu, sd
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32), mid, stats


# --------------------------------------------------------------------------------------------------
# the network
# --------------------------------------------------------------------------------------------------


def _safe_std(x: torch.Tensor, dim: int, mean: torch.Tensor) -> torch.Tensor:
    """Sample std along ``dim`` (the unbiased one, divided by n - 1, as the reference's ``torch.std``)
    that is 1 where the std is below BIN_STD_FLOOR.

    The variance is clamped before the square root so that the backward pass stays finite too (the
    derivative of sqrt at 0 is infinite, and 0 * inf is NaN even in the branch ``where`` discards).
    """
    n = x.shape[dim]
    var = (x - mean).pow(2).sum(dim=dim, keepdim=True) / max(n - 1, 1)
    std = var.clamp_min(BIN_STD_FLOOR ** 2).sqrt()
    return torch.where(std > BIN_STD_FLOOR, std, torch.ones_like(std))


class BiN(nn.Module):
    """Bilinear normalisation (Tran et al., as used by TLOB): a learned mix of two z-scores of a window.

    One z-scores every feature over time (removes each column's level within the window), the other
    z-scores every time step over the features (removes the step's cross-sectional level). Each has a
    learned scale and shift (per feature, per time step); the two results are mixed with two
    non-negative learned weights. The reference keeps them non-negative by swapping in a new
    Parameter when one goes negative (which the optimiser then no longer updates, and which allocates
    CUDA tensors); here they are softplus of unconstrained parameters, which is smooth and stays on
    the module's device.
    """

    def __init__(self, num_features: int, seq_len: int) -> None:
        super().__init__()
        self.scale_time = nn.Parameter(torch.empty(num_features, 1))  # per feature, for the temporal z
        self.shift_time = nn.Parameter(torch.zeros(num_features, 1))
        self.scale_feat = nn.Parameter(torch.empty(1, seq_len))  # per time step, for the feature z
        self.shift_feat = nn.Parameter(torch.zeros(1, seq_len))
        init = math.log(math.expm1(0.5))  # softplus(init) = 0.5: an equal mix at the start
        self.mix_raw = nn.Parameter(torch.full((2,), init))
        nn.init.xavier_normal_(self.scale_time)
        nn.init.xavier_normal_(self.scale_feat)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, F, T) -> (B, F, T)."""
        mean_t = x.mean(dim=2, keepdim=True)  # (B, F, 1)
        z_time = (x - mean_t) / _safe_std(x, 2, mean_t)
        mean_f = x.mean(dim=1, keepdim=True)  # (B, 1, T)
        z_feat = (x - mean_f) / _safe_std(x, 1, mean_f)
        w = F.softplus(self.mix_raw)
        return (w[0] * (self.scale_time * z_time + self.shift_time)
                + w[1] * (self.scale_feat * z_feat + self.shift_feat))


def sinusoidal_positions(seq_len: int, dim: int) -> torch.Tensor:
    """(seq_len, dim) fixed sine/cosine position codes (Vaswani et al.); works for odd ``dim``."""
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(seq_len, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return pe


class TLOBBlock(nn.Module):
    """Self-attention over the token axis of (B, N, dim), then an MLP that may shrink dim to ``out_dim``.

    The published layer projects q, k and v with its own Linears (dim -> dim*heads) and then feeds them
    to ``nn.MultiheadAttention``, which projects them again, before a final Linear back to dim. That
    double projection is kept (as one fused Linear for q, k, v) so that parameter count and cost match
    the published model, which is what a training-time benchmark has to measure.

    Residuals, as the published layer: post-norm around the attention (``h = norm1(x + attn(x))``);
    around the MLP ``y = gelu(norm2(h + mlp(h)))``; and when the width is kept, the block's input ``x``
    is added once more on top (``y + x``). The last, shrinking layer has neither MLP residual.
    """

    def __init__(self, dim: int, heads: int, out_dim: int) -> None:
        super().__init__()
        inner = dim * heads
        self.qkv = nn.Linear(dim, 3 * inner)
        self.attn = nn.MultiheadAttention(inner, heads, batch_first=True)
        self.proj = nn.Linear(inner, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, out_dim)
        self.norm2 = nn.LayerNorm(out_dim)
        self.residual = out_dim == dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, N, dim) -> (B, N, out_dim)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a, _ = self.attn(q, k, v, need_weights=False)
        h = self.norm1(x + self.proj(a))  # (B, N, dim)
        y = self.fc2(F.gelu(self.fc1(h)))  # (B, N, out_dim)
        if self.residual:
            y = y + h
        y = F.gelu(self.norm2(y))
        if self.residual:
            y = y + x  # the block input again (the reference adds it after its MLP)
        return y


class TLOB(nn.Module):
    """BiN -> Linear embedding -> + sinusoidal positions -> dual-attention layers -> MLP head (3 logits).

    Each layer attends over time (tokens: the T events, width H), then over the embedded feature axis
    (tokens: the H channels, width T). The last layer shrinks both, to H//4 and T//4; the head
    flattens and divides the width by 4 (Linear + GELU) until it is at most 128, then maps to 3.
    """

    def __init__(self, num_features: int, seq_len: int, hidden_dim: int, num_layers: int,
                 num_heads: int, num_classes: int = 3) -> None:
        super().__init__()
        self.bin = BiN(num_features, seq_len)
        self.embed = nn.Linear(num_features, hidden_dim)
        self.register_buffer("pos", sinusoidal_positions(seq_len, hidden_dim), persistent=False)
        layers = []
        for i in range(num_layers):
            last = i == num_layers - 1
            layers.append(TLOBBlock(hidden_dim, num_heads, hidden_dim // 4 if last else hidden_dim))
            layers.append(TLOBBlock(seq_len, num_heads, seq_len // 4 if last else seq_len))
        self.layers = nn.ModuleList(layers)
        width = (hidden_dim // 4) * (seq_len // 4)
        head: list[nn.Module] = []
        while width > 128:
            head += [nn.Linear(width, width // 4), nn.GELU()]
            width //= 4
        head.append(nn.Linear(width, num_classes))
        self.head = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, F) -> logits (B, 3)."""
        x = self.bin(x.transpose(1, 2)).transpose(1, 2)  # (B, T, F)
        x = self.embed(x) + self.pos  # (B, T, H)
        for layer in self.layers:
            x = layer(x).transpose(1, 2)  # time block: (B, T, H) -> (B, H, T); feature block: back
        return self.head(x.flatten(1))  # x: (B, T//4, H//4)


# --------------------------------------------------------------------------------------------------
# the update
# --------------------------------------------------------------------------------------------------


def _resolve_batch_size(bs: Any) -> int:
    if bs == "auto":  # train.py resolves `auto` (measure/fit.py) before any model is built
        raise ConfigError("model.batch_size=auto must be resolved to an integer before build "
                          "(run.py does this; in code, use trainbench.measure.fit).")
    return int(bs)


def min_events(seq_len: int, horizon: int, smooth: int, batch_size: int, train_frac: float) -> int:
    """Events a book needs so that its training split holds ``batch_size`` labelled windows.

    A window ending at event t needs t >= seq_len - 1 and t >= k - 1 (k = min(smooth, horizon)) for its
    input and past average, and t + horizon inside the training split for its label, so the split needs
    max(seq_len, k) + horizon + batch_size - 1 events.
    """
    need_train = max(seq_len, min(smooth, horizon)) + horizon + batch_size - 1
    n = math.ceil(need_train / train_frac)
    while math.floor(n * train_frac) < need_train:  # float rounding: make it the exact smallest n
        n += 1
    while n > 1 and math.floor((n - 1) * train_frac) >= need_train:
        n -= 1
    return n


class TLOBTrainable(TrainableBase):
    """TLOB with its book features and labels on the device, trained with cross-entropy and AdamW."""

    def __init__(self, cfg: TLOBConfig, data: MarketData, ctx: BuildContext, train_frac: float) -> None:
        book = data.book
        assert book is not None
        self.cfg, self.ctx = cfg, ctx
        self.batch_size = _resolve_batch_size(cfg.batch_size)
        n = len(book)
        n_train = int(math.floor(n * train_frac))
        feats, mid, self.feature_stats = book_features(book, n_train)
        # alpha from the training split only, then applied to every event (no look-ahead into val)
        _, alpha = tlob_labels(mid[:n_train], cfg.horizon, cfg.smooth, cfg.alpha)
        labels, self.alpha = tlob_labels(mid, cfg.horizon, cfg.smooth, alpha)

        t = np.arange(n)
        has_window = t >= cfg.seq_len - 1
        ends = np.nonzero(has_window & (labels >= 0) & (t + cfg.horizon < n_train))[0]
        val_ends = np.nonzero(has_window & (labels >= 0) & (t - cfg.seq_len + 1 >= n_train))[0]
        self.n_val_windows = int(val_ends.size)
        if ends.size < self.batch_size:
            need = min_events(cfg.seq_len, cfg.horizon, cfg.smooth, self.batch_size, train_frac)
            raise ModelDataError(
                f"tlob needs at least {self.batch_size} labelled training windows (model.batch_size) of "
                f"{cfg.seq_len} events with a label {cfg.horizon} events ahead, i.e. about {need} book "
                f"events at train_frac={train_frac}; the book has {n} events ({ends.size} windows). "
                f"Use a longer book (data.n_bars=...) or smaller model.seq_len / model.batch_size.")
        counts = np.bincount(labels[ends], minlength=3)
        self.label_frac = counts / counts.sum()

        dev = ctx.device
        self.x = torch.from_numpy(feats).to(dev)  # (E, 40)
        self.y = torch.from_numpy(labels).to(dev)  # (E,)
        self.ends = torch.from_numpy(ends).to(dev)  # (W,) window end events
        self.offsets = torch.arange(-cfg.seq_len + 1, 1, device=dev)  # (T,)
        self.n_windows = int(ends.size)
        self.batch_limit = self.n_windows
        self.samples_per_epoch = (self.n_windows // self.batch_size) * self.batch_size
        self.train_samples = self.samples_per_epoch
        self.val_ends = torch.from_numpy(val_ends).to(dev)  # the validation pass's windows

        self.module = TLOB(N_FEATURES, cfg.seq_len, cfg.hidden_dim, cfg.num_layers, cfg.num_heads).to(dev)
        self._forward = ctx.maybe_compile(self.module)
        self.optimizer = make_optimizer(self.module, cfg.lr, cfg.weight_decay, no_decay=("bin.",),
                                        impl=ctx.optimizer_impl)
        self.scaler = ctx.grad_scaler()  # fp16 only
        self.generator = ctx.generator()

    def window(self, ends: torch.Tensor) -> torch.Tensor:
        """ends: (B,) event indices -> (B, T, 40) inputs, gathered on the device."""
        return self.x[ends[:, None] + self.offsets]

    def loss(self, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy and accuracy (both 0-d) of the windows ending at ``ends``."""
        with self.ctx.autocast():
            logits = self._forward(self.window(ends))
        y = self.y[ends]
        logits = logits.float()
        return F.cross_entropy(logits, y), (logits.argmax(dim=1) == y).float().mean()

    def optimizer_step(self, ends: torch.Tensor) -> dict[str, torch.Tensor]:
        """One optimiser step on the windows ending at ``ends`` (B,), in ``ctx.grad_accum`` micro-batches."""
        def part(sl: slice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss, acc = self.loss(ends[sl])
            return loss, {"accuracy": acc}

        loss, parts = accumulate(part, ends.numel(), self.ctx.grad_accum, self.scaler)
        norm = clip_and_step(self.module, self.optimizer, self.cfg.max_grad_norm, self.scaler)
        return {"loss": loss, Series.GRAD_NORM: norm, **parts}

    # the harness's hooks, in HOOK_ORDER ------------------------------------------------------

    def train_epoch(self) -> dict[str, torch.Tensor]:
        """One shuffled pass over the n_windows // batch_size full batches of training windows."""
        self.module.train()
        meter = EpochMeter()
        for idx in batches(self.n_windows, self.batch_size, self.generator, self.ctx.device, dist=self.ctx.dist):
            meter.add(**self.optimizer_step(self.ends[idx]))
        return meter.means()

    def eval_epoch(self) -> dict[str, torch.Tensor]:
        """Validation pass over the held-out windows: ``val_loss``, ``val_accuracy`` (see base.evaluate)."""
        def losses(i: torch.Tensor) -> dict[str, torch.Tensor]:
            loss, acc = self.loss(self.val_ends[i])
            return {"loss": loss, "accuracy": acc}

        return evaluate(self.module, torch.arange(self.n_val_windows, device=self.ctx.device), self.batch_size,
                        losses, dist=self.ctx.dist)

    def memory_step(self, batch_size: int) -> Callable[[], dict[str, torch.Tensor]]:
        """One training step at ``batch_size`` windows (see TrainableBase)."""
        self.module.train()
        return lambda: self.optimizer_step(self.ends[next(batches(self.n_windows, batch_size, self.generator,
                                                        self.ctx.device))])

    def inference(self, batch_size: int) -> Callable[[], Any]:
        reps = math.ceil(batch_size / self.n_windows)
        x = self.window(self.ends.repeat(reps)[:batch_size])

        def run() -> torch.Tensor:
            self.module.eval()
            with torch.inference_mode(), self.ctx.autocast():
                return self._forward(x)

        return run

    def info(self) -> dict[str, Any]:
        up, stat, down = (float(f) for f in self.label_frac)
        return {**super().info(), "train_windows": self.n_windows, "val_windows": self.n_val_windows,
                "label_alpha": self.alpha, "label_frac_up": up, "label_frac_stat": stat,
                "label_frac_down": down}


def build(cfg: TLOBConfig, data: MarketData, ctx: BuildContext) -> TLOBTrainable:
    """TLOB on ``data.book``; the first ``train_frac`` of the events (``data.extra``, default 0.8) train.

    Needs :func:`min_events` book events: 339 at the defaults (seq_len 32, horizon 10, batch 230,
    train_frac 0.8), so that the training split holds one full batch of windows; one window and its
    label alone need max(seq_len, min(smooth, horizon)) + horizon events.
    """
    if data.book is None:
        raise ModelDataError(
            f"tlob needs MBP-10 order-book data: run with data=mbp10 (got {data.kind} data "
            f"{data.name!r}, schema {data.schema}).")
    train_frac = float(data.extra.get("train_frac", 0.8))
    return TLOBTrainable(cfg, data, ctx, train_frac)


SPEC = ModelSpec.of(SCHEMA, build, data_parallel=True)

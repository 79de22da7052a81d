"""A small LSTM forecaster of bar returns, written as a trainbench model plugin.

Task. From a window of ``window`` past bars (every column of ``data.features.values``), forecast the
cumulative log return over the next ``horizon`` bars, divided by its random-walk scale
``return_std * sqrt(horizon)`` so that the target is of unit scale. Loss: mean squared error.

One epoch = one shuffled pass over every training window at ``model.batch_size`` (the last partial batch
is dropped, so every epoch is the same number of steps of the same shape); the validation pass
(``eval_epoch``) covers the held-out windows. Nothing in an epoch reads a value on the host: the step
returns device tensors, which :class:`~trainbench.api.EpochMeter` averages on the device.

Everything this file imports from trainbench comes from :mod:`trainbench.api`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainbench.api import (
    BuildContext,
    ConfigError,
    EpochMeter,
    MarketData,
    ModelConfig,
    ModelDataError,
    ModelSpec,
    TrainableBase,
    accumulate,
    batches,
    clip_and_step,
    evaluate,
    make_optimizer,
    param,
)

# --------------------------------------------------------------------------------------------------
# config: the defaults are the `reference` size; SPEC.sizes holds what `small` and `tiny` change
# --------------------------------------------------------------------------------------------------


@dataclass
class LSTMForecasterConfig(ModelConfig):
    name: str = param("lstm_forecaster", "Registry key.")
    target_epochs: int = param(500, "Epochs the training plan needs (the decision projects time from it).", ge=1)
    batch_size: Any = param(256, "Windows per optimiser step (`auto`: the largest that fits the memory budget).")
    lr: float = param(1e-3, "AdamW learning rate.", gt=0)
    window: int = param(128, "Past bars each forecast reads.", ge=2)
    horizon: int = param(5, "Bars ahead: the target is the cumulative log return over the next `horizon` bars.",
                         ge=1)
    hidden: int = param(128, "LSTM hidden size.", ge=1)
    layers: int = param(2, "Stacked LSTM layers.", ge=1)
    dropout: float = param(0.1, "Dropout between the LSTM layers and before the output layer.", ge=0, lt=1)


SIZES = {
    "tiny": {"window": 8, "hidden": 8, "layers": 1, "batch_size": 64},  # for tests and smoke runs
    "small": {"window": 32, "hidden": 32, "layers": 1, "batch_size": 64},
    "reference": {},  # the dataclass defaults
}


# --------------------------------------------------------------------------------------------------
# the network
# --------------------------------------------------------------------------------------------------


class LSTMForecaster(nn.Module):
    def __init__(self, n_features: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(n_features, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, window, F) features -> (B,) forecasts."""
        out, _ = self.lstm(x)
        return self.head(out[:, -1]).squeeze(-1)


# --------------------------------------------------------------------------------------------------
# the update
# --------------------------------------------------------------------------------------------------


class LSTMForecasterTrainable(TrainableBase):
    def __init__(self, cfg: LSTMForecasterConfig, data: MarketData, ctx: BuildContext) -> None:
        if isinstance(cfg.batch_size, bool) or not isinstance(cfg.batch_size, int) or cfg.batch_size < 1:
            raise ConfigError(f"model.batch_size={cfg.batch_size!r}: lstm_forecaster needs a positive integer here.")
        if data.kind != "bars" or data.features is None:
            raise ModelDataError(f"lstm_forecaster trains on OHLCV bars; data {data.name!r} holds {data.kind}. "
                                 "Use an ohlcv data config (e.g. data=6e_ohlcv_1m).")
        fs = data.features.to(ctx.device)
        self.cfg, self.ctx, self.fs = cfg, ctx, fs
        self.batch_size = int(cfg.batch_size)
        span = cfg.window + cfg.horizon
        self.train_starts = fs.window_starts(cfg.window, horizon=cfg.horizon, split="train")
        self.n_train = int(self.train_starts.numel())
        if self.n_train < self.batch_size:
            raise ModelDataError(
                f"lstm_forecaster needs at least model.batch_size={self.batch_size} training windows of "
                f"window + horizon = {span} consecutive bars in one session; data {data.name!r} gives "
                f"{self.n_train}. Use more bars, a shorter model.window or a smaller model.batch_size.")
        self.train_targets = self.targets(self.train_starts)
        self.val_starts = fs.window_starts(cfg.window, horizon=cfg.horizon, split="val")
        self.val_targets = self.targets(self.val_starts)
        self._offsets = torch.arange(cfg.window, device=ctx.device)

        # what an epoch holds (logged as params) and the memory fitting's limit
        self.samples_per_epoch = (self.n_train // self.batch_size) * self.batch_size
        self.train_samples = self.samples_per_epoch
        self.batch_limit = self.n_train

        torch.manual_seed(ctx.seed)  # the same seed, the same initial weights
        self.module = LSTMForecaster(fs.n_features, cfg.hidden, cfg.layers, cfg.dropout).to(ctx.device)
        self.net = ctx.maybe_compile(self.module)  # trainer.compile=true: the training forward is compiled
        self.optimizer = make_optimizer(self.module, cfg.lr, cfg.weight_decay, impl=ctx.optimizer_impl)
        self.scaler = ctx.grad_scaler()  # fp16 only
        self.generator = ctx.generator()  # every shuffle draws from it: the seed reaches the epochs

    # data ------------------------------------------------------------------------------------

    def targets(self, starts: torch.Tensor) -> torch.Tensor:
        """(W,) window starts -> (W,) scaled cumulative log return over the ``horizon`` bars after each window."""
        w, h = self.cfg.window, self.cfg.horizon
        future = self.fs.returns[starts.unsqueeze(1) + w + torch.arange(h, device=starts.device)]
        return future.sum(1) / (self.fs.return_std * math.sqrt(h))

    def inputs(self, starts: torch.Tensor) -> torch.Tensor:
        """(B,) window starts -> (B, window, F) features."""
        return self.fs.values[starts.unsqueeze(1) + self._offsets]

    def loss_on(self, starts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self.ctx.autocast():
            pred = self.net(self.inputs(starts))
        return F.mse_loss(pred.float(), targets)

    # training --------------------------------------------------------------------------------

    def optimizer_step(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """One optimiser step on training windows ``idx``, in ``ctx.grad_accum`` micro-batches."""
        starts, targets = self.train_starts[idx], self.train_targets[idx]
        loss, _ = accumulate(lambda sl: (self.loss_on(starts[sl], targets[sl]), {}), idx.numel(),
                             self.ctx.grad_accum, self.scaler)
        grad_norm = clip_and_step(self.module, self.optimizer, self.cfg.max_grad_norm, self.scaler)
        return {"loss": loss, "grad_norm": grad_norm}

    # the harness's hooks, in HOOK_ORDER ------------------------------------------------------

    def train_epoch(self) -> dict[str, torch.Tensor]:
        self.module.train()
        meter = EpochMeter()
        for idx in batches(self.n_train, self.batch_size, self.generator, self.ctx.device):
            meter.add(**self.optimizer_step(idx))
        return meter.means()

    def eval_epoch(self) -> dict[str, torch.Tensor]:
        """Validation pass over the held-out windows: ``val_loss``."""
        return evaluate(self.module, torch.arange(self.val_starts.numel(), device=self.ctx.device), self.batch_size,
                        lambda i: {"loss": self.loss_on(self.val_starts[i], self.val_targets[i])})

    def memory_step(self, batch_size: int):
        """One training step at ``batch_size`` windows, as train_epoch does per step (memory fitting)."""
        self.module.train()
        return lambda: self.optimizer_step(next(batches(self.n_train, batch_size, self.generator, self.ctx.device)))

    def inference(self, batch_size: int):
        """One forward pass at ``batch_size`` windows, prepared before the call (latency)."""
        reps = -(-batch_size // self.n_train)
        x = self.inputs(self.train_starts.repeat(reps)[:batch_size])

        def run() -> torch.Tensor:
            self.module.eval()
            with torch.no_grad(), self.ctx.autocast():
                return self.net(x)

        return run

    def info(self) -> dict[str, Any]:
        return {**super().info(), "train_windows": self.n_train,
                "val_windows": int(self.val_starts.numel()),
                "target": f"cumulative log return over {self.cfg.horizon} bars / (return_std * sqrt(horizon))"}


def build(cfg: LSTMForecasterConfig, data: MarketData, ctx: BuildContext) -> LSTMForecasterTrainable:
    return LSTMForecasterTrainable(cfg, data, ctx)


SPEC = ModelSpec(name="lstm_forecaster", config_cls=LSTMForecasterConfig, build=build, data_kind="bars",
                 description="LSTM forecaster of the scaled cumulative return over the next bars (example plugin).",
                 sizes=SIZES)

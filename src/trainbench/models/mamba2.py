"""Mamba-2: a selective state-space sequence model with the chunked SSD scan, in plain PyTorch.

Task (supervised): from a window of ``seq_len`` bars of normalised features, predict the log return of
the *next* bar, divided by the training-split return std (so the target has unit scale). The loss is
Huber (``model.loss=huber``, delta ``model.huber_delta``; minute returns are fat-tailed and a few jumps
would otherwise dominate the gradient) or plain MSE (``model.loss=mse``).

One epoch is one pass over every training window (windows of ``seq_len + 1`` bars inside one segment
and the training split) in shuffled batches of ``model.batch_size``. The last incomplete batch is
dropped so that every optimiser step does the same work; ``samples_per_epoch`` counts the windows
actually used, ``(W // batch_size) * batch_size``. The whole dataset stays on the device; batches are
gathered on the device from a strided view, so an epoch never waits for the host.

The block follows the published Mamba-2 design (``mamba_ssm/modules/mamba2_simple.py``, ngroups 1):
input projection to z, x, B, C, dt; a short causal depthwise convolution over x, B, C with SiLU;
``dt = softplus(dt + dt_bias)`` and ``A = -exp(A_log)`` per head; the SSD scan; a per-head ``D`` skip;
gated RMSNorm (``norm(y * silu(z))``); an output projection. Blocks are stacked as pre-norm residuals.

The scan lives in :mod:`trainbench.models.ssd`: :func:`~trainbench.models.ssd.ssd_scan` is computed
chunk-wise (a masked, decay-weighted "attention" matrix product inside a chunk, a pass of the chunk-end
states between chunks); :func:`~trainbench.models.ssd.ssd_recurrent` is the step-by-step recurrence it
replaces (the benchmark's baseline). ``model.kernel`` picks the scan
(:func:`resolve_kernel`): ``auto`` (the default) uses the fused kernels of the ``mamba_ssm`` package
(``pip install trainbench[mamba]``) when they import on a CUDA device, as a team training Mamba-2 on a GPU
would, and the pure-PyTorch scan otherwise; ``torch`` and ``triton`` force one. The run records which
(``model_info.kernel_resolved`` and the reason, ``model_info.kernel_reason``). ``mamba_ssm`` is imported
lazily, only then. The pure-PyTorch path is the reference the fused one is tested against.

Initialisation follows ``mamba_ssm``'s ``_init_weights`` (rescale_prenorm_residual): each block's
``out_proj`` starts at PyTorch's default Linear init divided by sqrt(n_layers), so the residual stream's
variance at initialisation does not grow with depth (GPT-2's scheme; one residual branch per layer).

Default sizes are small (d_model 32, 2 layers, d_state 16, headdim 16: about 16k parameters) because an
epoch is ~1M window positions (7,744 windows x 128 bars on 10,000 bars) and CPU runs must stay short;
the reference sizes (d_model 256+, d_state 64-128, headdim 64, chunk 256) are one override away.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainbench.config.models.mamba2 import SCHEMA, Mamba2Config, _check_settings
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import Series
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
from trainbench.models.ssd import ssd_scan


def _check_config(cfg: Mamba2Config) -> None:
    _check_settings(cfg)
    bs = cfg.batch_size
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
        raise ConfigError(f"model.batch_size={bs!r}: mamba2 needs a positive integer here "
                          "(`auto` must be resolved before the model is built).")


# --------------------------------------------------------------------------------------------------
# the scan: the pure-PyTorch reference (models/ssd.py) or mamba_ssm's fused kernels
# --------------------------------------------------------------------------------------------------



def _import_fused() -> Callable[..., torch.Tensor]:
    """``mamba_ssm``'s ``mamba_chunk_scan_combined``; raises ImportError when it cannot be imported."""
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    return mamba_chunk_scan_combined


def resolve_kernel(kernel: str, device: torch.device) -> tuple[str, str]:
    """``model.kernel`` -> (``torch`` or ``triton``, the reason), for a run on ``device``.

    ``auto`` is ``triton`` when the device is CUDA and ``mamba_ssm``'s fused scan imports, else ``torch``;
    ``torch`` and ``triton`` are taken as asked (``triton`` is checked when the scan is built).
    """
    if kernel != "auto":
        return kernel, "asked for (model.kernel)"
    if device.type != "cuda":
        return "torch", f"auto: device {device.type} (mamba_ssm's fused kernels need CUDA)"
    try:
        _import_fused()
    except ImportError as e:
        return "torch", f"auto: mamba_ssm not importable ({e}); install the `mamba` extra for the fused kernels"
    return "triton", "auto: CUDA device and mamba_ssm imports"


def _triton_scan() -> Callable[..., torch.Tensor]:
    """mamba_ssm's fused chunked scan, imported only when asked for (it needs CUDA and Triton)."""
    if not torch.cuda.is_available():
        raise ConfigError("model.kernel=triton needs a CUDA device; none is available. "
                          "Use model.kernel=torch (the pure-PyTorch reference).")
    try:
        mamba_chunk_scan_combined = _import_fused()
    except ImportError as e:
        raise ConfigError("model.kernel=triton needs the mamba_ssm package "
                          "(`pip install mamba-ssm --no-build-isolation`, or the `mamba` extra); "
                          f"importing it failed: {e}. Use model.kernel=torch instead.") from e

    def scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
             chunk_size: int) -> torch.Tensor:
        return mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None)

    return scan


# --------------------------------------------------------------------------------------------------
# the network
# --------------------------------------------------------------------------------------------------


class GatedRMSNorm(nn.Module):
    """``rmsnorm(y * silu(z)) * weight`` over the last dim (Mamba-2's norm_before_gate=False)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """y, z: (..., dim) -> (..., dim)."""
        y = y * F.silu(z)
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba2Block(nn.Module):
    """One Mamba-2 mixer (ngroups 1): in_proj -> conv -> SSD (+ D skip) -> gated norm -> out_proj."""

    def __init__(self, cfg: Mamba2Config, scan: Callable[..., torch.Tensor] = ssd_scan) -> None:
        super().__init__()
        self.d_inner = cfg.expand * cfg.d_model
        self.d_state = cfg.d_state
        self.headdim = cfg.headdim
        self.nheads = self.d_inner // cfg.headdim
        self.chunk_size = cfg.chunk_size
        self.scan = scan
        conv_dim = self.d_inner + 2 * cfg.d_state
        self.in_proj = nn.Linear(cfg.d_model, 2 * self.d_inner + 2 * cfg.d_state + self.nheads, bias=False)
        self.d_conv = cfg.d_conv
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, cfg.d_conv, groups=conv_dim)  # causal: left-padded

        # dt log-uniform in [dt_min, dt_max], stored through the inverse of softplus
        u = torch.rand(self.nheads)
        dt = torch.exp(u * (math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min))
        dt = dt.clamp(min=cfg.dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        a = torch.empty(self.nheads).uniform_(cfg.a_init_min, cfg.a_init_max)
        self.A_log = nn.Parameter(torch.log(a))
        self.D = nn.Parameter(torch.ones(self.nheads))
        for p in (self.dt_bias, self.A_log, self.D):
            p._no_weight_decay = True  # type: ignore[attr-defined]  # read by base.param_groups

        self.norm = GatedRMSNorm(self.d_inner, eps=cfg.norm_eps)
        self.out_proj = nn.Linear(self.d_inner, cfg.d_model, bias=False)
        with torch.no_grad():  # mamba_ssm's rescale_prenorm_residual: default init / sqrt(n_layers)
            self.out_proj.weight /= math.sqrt(cfg.n_layers)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """u: (batch, length, d_model) -> (batch, length, d_model)."""
        b, length, _ = u.shape
        z, xbc, dt = self.in_proj(u).split([self.d_inner, self.d_inner + 2 * self.d_state, self.nheads], -1)
        # causal conv: pad d_conv - 1 steps on the left only; SiLU on a contiguous (b, length, C) tensor
        # (on CPU, SiLU's backward is several times slower on the conv's transposed layout)
        xbc = self.conv1d(F.pad(xbc.transpose(1, 2), (self.d_conv - 1, 0)))
        xbc = F.silu(xbc.transpose(1, 2).contiguous())
        x, B, C = xbc.split([self.d_inner, self.d_state, self.d_state], -1)
        dt = F.softplus(dt + self.dt_bias)  # (b, length, heads)
        A = -torch.exp(self.A_log.float())  # (heads,)
        x = x.reshape(b, length, self.nheads, self.headdim)
        y = self.scan(x, dt, A, B.unsqueeze(2), C.unsqueeze(2), self.chunk_size)
        y = y + x * self.D.unsqueeze(-1)
        y = self.norm(y.reshape(b, length, self.d_inner), z)
        return self.out_proj(y)


class Mamba2Net(nn.Module):
    """Feature windows -> next-bar return: embed, pre-norm residual Mamba-2 blocks, norm, linear head."""

    def __init__(self, n_features: int, cfg: Mamba2Config,
                 scan: Callable[..., torch.Tensor] = ssd_scan) -> None:
        super().__init__()
        self.embed = nn.Linear(n_features, cfg.d_model)
        self.norms = nn.ModuleList(nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps) for _ in range(cfg.n_layers))
        self.blocks = nn.ModuleList(Mamba2Block(cfg, scan) for _ in range(cfg.n_layers))
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, 1)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, length, n_features) -> (batch, length, d_model); position t sees inputs <= t only."""
        h = self.embed(x)
        for norm, block in zip(self.norms, self.blocks, strict=True):
            h = h + block(norm(h))
        return self.norm_f(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq_len, n_features) -> (batch,), the predicted std-scaled next-bar return."""
        return self.head(self.encode(x)[:, -1]).squeeze(-1)


# --------------------------------------------------------------------------------------------------
# the update
# --------------------------------------------------------------------------------------------------


class Mamba2Trainable(TrainableBase):
    """The network, its optimiser and the training windows, all on one device."""

    def __init__(self, cfg: Mamba2Config, data: MarketData, ctx: BuildContext) -> None:
        fs = data.features
        assert fs is not None
        self.cfg = cfg
        self.ctx = ctx
        self.device = ctx.device
        fs = fs.to(ctx.device)
        self.starts = fs.window_starts(cfg.seq_len, horizon=1, split="train")  # (W,)
        self.n_windows = int(self.starts.numel())
        self.windows = fs.windows(cfg.seq_len)  # (N - seq_len + 1, seq_len, F), a view
        self.targets = fs.returns[self.starts + cfg.seq_len] / fs.return_std  # (W,)
        self.batch_size = int(cfg.batch_size)
        self.steps_per_epoch = self.n_windows // self.batch_size
        self.batch_limit = self.n_windows
        self.samples_per_epoch = self.steps_per_epoch * self.batch_size
        self.train_samples = self.samples_per_epoch
        self.val_starts = fs.window_starts(cfg.seq_len, horizon=1, split="val")  # held-out windows
        self.val_targets = fs.returns[self.val_starts + cfg.seq_len] / fs.return_std

        torch.manual_seed(ctx.seed)
        self.kernel, self.kernel_reason = resolve_kernel(cfg.kernel, ctx.device)
        scan = _triton_scan() if self.kernel == "triton" else ssd_scan
        self.module = Mamba2Net(fs.n_features, cfg, scan).to(ctx.device)
        self.forward = ctx.maybe_compile(self.module)
        self.optimizer = make_optimizer(self.module, cfg.lr, cfg.weight_decay, impl=ctx.optimizer_impl)
        self.scaler = ctx.grad_scaler()  # fp16 only
        self.generator = ctx.generator()

    def loss_fn(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        pred = pred.float()
        if self.cfg.loss == "mse":
            return F.mse_loss(pred, target)
        return F.huber_loss(pred, target, delta=self.cfg.huber_delta)

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """idx: (B,) window indices -> inputs (B, seq_len, F), targets (B,)."""
        return self.windows[self.starts[idx]], self.targets[idx]

    def optimizer_step(self, xb: torch.Tensor, yb: torch.Tensor) -> dict[str, torch.Tensor]:
        """One optimiser step on (B, seq_len, F) inputs, in ``ctx.grad_accum`` micro-batches."""
        def part(sl: slice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            with self.ctx.autocast():
                return self.loss_fn(self.forward(xb[sl]), yb[sl]), {}

        loss, _ = accumulate(part, xb.shape[0], self.ctx.grad_accum, self.scaler)
        norm = clip_and_step(self.module, self.optimizer, self.cfg.max_grad_norm, self.scaler)
        return {"loss": loss, Series.GRAD_NORM: norm}

    # the harness's hooks, in HOOK_ORDER ------------------------------------------------------

    def train_epoch(self) -> dict[str, torch.Tensor]:
        """One shuffled pass over the training windows: ``steps_per_epoch`` steps of ``batch_size``."""
        self.module.train()
        meter = EpochMeter()
        for idx in batches(self.n_windows, self.batch_size, self.generator, self.device, drop_last=True,
                           dist=self.ctx.dist):
            meter.add(**self.optimizer_step(*self.batch(idx)))
        return meter.means()

    def eval_epoch(self) -> dict[str, torch.Tensor]:
        """Validation pass over the held-out windows: ``val_loss`` (see base.evaluate)."""
        def losses(i: torch.Tensor) -> dict[str, torch.Tensor]:
            with self.ctx.autocast():
                pred = self.forward(self.windows[self.val_starts[i]])
            return {"loss": self.loss_fn(pred, self.val_targets[i])}

        return evaluate(self.module, torch.arange(self.val_starts.numel(), device=self.device), self.batch_size,
                        losses, dist=self.ctx.dist)

    def memory_step(self, batch_size: int) -> Callable[[], dict[str, torch.Tensor]]:
        """One training step at ``batch_size`` windows (see TrainableBase)."""
        self.module.train()
        return lambda: self.optimizer_step(*self.batch(next(batches(self.n_windows, batch_size, self.generator,
                                                                    self.device))))

    def inference(self, batch_size: int) -> Callable[[], Any]:
        idx = torch.arange(batch_size, device=self.device) % self.n_windows
        xb, _ = self.batch(idx)

        def run() -> torch.Tensor:
            self.module.eval()
            with torch.no_grad(), self.ctx.autocast():
                return self.forward(xb)

        return run

    def info(self) -> dict[str, Any]:
        blk = self.module.blocks[0]
        return {**super().info(), "train_windows": self.n_windows, "val_windows": int(self.val_starts.numel()),
                "steps_per_epoch": self.steps_per_epoch, "nheads": blk.nheads, "d_inner": blk.d_inner,
                "kernel": self.cfg.kernel, "kernel_resolved": self.kernel, "kernel_reason": self.kernel_reason}


def build(cfg: Mamba2Config, data: MarketData, ctx: BuildContext) -> Mamba2Trainable:
    _check_config(cfg)
    if data.kind != "bars" or data.features is None:
        raise ModelDataError(f"mamba2 trains on OHLCV bars; dataset {data.name!r} holds {data.kind} data. "
                             "Use a bars dataset (e.g. data=6e_ohlcv_1m).")
    fs = data.features
    span = cfg.seq_len + 1
    n_windows = int(fs.window_starts(cfg.seq_len, horizon=1, split="train").numel())
    if n_windows < cfg.batch_size:
        n_bars = len(fs)
        n_train = int(fs.is_train.sum())
        frac = n_train / n_bars if n_bars else 1.0
        need_train = cfg.seq_len + cfg.batch_size  # windows of one unbroken segment: bars - seq_len
        need = math.ceil(need_train / max(frac, 1e-9))
        raise ModelDataError(
            f"mamba2 needs at least {cfg.batch_size} training windows (one batch) of {span} bars "
            f"(seq_len={cfg.seq_len} plus the bar it predicts) inside one segment; the data "
            f"{data.name!r} gives {n_windows} from {n_bars} bars ({n_train} in the training split). "
            f"That needs at least {need_train} unbroken training bars, i.e. about {need} bars per "
            f"instrument at this train fraction (more if session gaps split them). Use more bars, or "
            f"lower model.seq_len or model.batch_size.")
    return Mamba2Trainable(cfg, data, ctx)


SPEC = ModelSpec.of(SCHEMA, build, data_parallel=True)

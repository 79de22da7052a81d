"""Temporal Fusion Transformer (Lim et al., 2021): multi-horizon quantile forecasts of bar returns.

Task. From an encoder window of ``encoder_len`` past bars, forecast the cumulative log return from the
last encoder bar to each of ``horizons`` bars ahead, at each of ``quantiles``. The decoder runs
``max(horizons)`` steps; the outputs at the horizon offsets are the forecasts.

Inputs of one window starting at bar ``s`` (encoder ``[s, s+L)``, decoder ``[s+L, s+L+D)``):

- past observed inputs: the non-calendar columns of ``features.values`` over the encoder steps;
- known inputs: ``features.known`` (time of day, day of week) over encoder *and* decoder steps, so the
  encoder sees every column of ``features.values`` once and the decoder sees only what is known ahead;
- static covariate: the instrument index, through an embedding over ``features.n_instruments``.

Target for horizon h: ``sum(returns[s+L : s+L+h]) / (return_std * sqrt(h))``. Dividing by the random-walk
scale of an h-bar return puts every horizon on a comparable unit scale, so that no horizon dominates
the loss; ``return_std`` comes from training bars only.

Loss: the pinball (quantile) loss, summed over quantiles and averaged over the batch and the horizons
(the Google reference sums per-quantile losses too). Named parts ``loss_h<h>`` give each horizon's share.

The network follows the paper. Its building blocks live in :mod:`trainbench.models.tft_layers` (gated
residual networks, variable selection, the static covariate encoder, interpretable multi-head attention,
and where they follow pytorch-forecasting or Google's code); :class:`TemporalFusionTransformer` below
assembles them: input embeddings (the known inputs share one embedding across encoder and decoder
steps, as both references do), variable selection conditioned on the static context, an LSTM encoder
and decoder started from the static contexts, static enrichment, the attention under a causal mask, the
position-wise feed-forward GRN and a linear quantile head.

Attention span (``model.attention_span``): ``decoder`` (the default, pytorch-forecasting) lets only the
decoder steps query; ``all`` (Google's code, on in ``experiment=tft_volatility``) lets every step query
and runs the layers after the attention on every step. The forecasts are the same function; ``all`` is
the reference's work, which a benchmark of Google's recipe should time.

One epoch = one shuffled pass over every training window at ``model.batch_size`` (the last partial batch
is dropped so that every step has the same shape); ``samples_per_epoch`` = steps x batch size.

Default size (hidden 16, 4 heads, encoder 32, decoder 30): 32,417 parameters; one epoch on 10,000 bars
(7,878 windows) takes about 4 s of CPU time on one core. The Google volatility size (hidden 160, 1 head,
encoder 252, decoder 5): 2.79 M parameters (as pytorch-forecasting's at that size; 3.25 M with
``model.selection_weights=full``), about 8-10 min per such epoch on one core
(``python benchmarks/run_all.py --only tft``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

from trainbench.config.models.tft import ATTENTION_SPANS, SCHEMA, TFTConfig, _check_settings
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.features import KNOWN_NAMES
from trainbench.models import tft_artifacts
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
from trainbench.models.tft_layers import (
    GateAddNorm,
    GatedResidualNetwork,
    InterpretableMultiHeadAttention,
    RealEmbedding,
    StaticCovariateEncoder,
    VariableSelectionNetwork,
    run_lstm,
)

if TYPE_CHECKING:
    from trainbench.data.features import FeatureSet
    from trainbench.data.market import MarketData


def _check_config(cfg: TFTConfig) -> None:
    _check_settings(cfg)
    if isinstance(cfg.batch_size, bool) or not isinstance(cfg.batch_size, int) or cfg.batch_size < 1:
        raise ConfigError(f"model.batch_size={cfg.batch_size!r}: the TFT needs a positive integer here "
                          "(an `auto` batch size must be resolved before build).")


# --------------------------------------------------------------------------------------------------
# the network
# --------------------------------------------------------------------------------------------------


class TFTOutput(NamedTuple):
    quantiles: torch.Tensor  # (B, H, Q): decoder steps at the horizon offsets
    steps: torch.Tensor  # (B, D, Q): every decoder step
    static_weights: torch.Tensor  # (B, 1)
    encoder_weights: torch.Tensor  # (B, L, V_enc)
    decoder_weights: torch.Tensor  # (B, D, V_dec)
    attention: torch.Tensor  # (B, D, L + D), heads averaged


class TemporalFusionTransformer(nn.Module):
    def __init__(self, n_observed: int, n_known: int, n_static_categories: int, encoder_len: int,
                 horizons: list[int], n_quantiles: int, hidden: int = 16, heads: int = 4,
                 dropout: float = 0.1, lstm_layers: int = 1, var_hidden: int | None = None,
                 attention_span: str = "decoder", selection_weights: str = "compact") -> None:
        super().__init__()
        if attention_span not in ATTENTION_SPANS:
            raise ValueError(f"attention_span must be one of {ATTENTION_SPANS}, got {attention_span!r}")
        d = hidden
        self.encoder_len = encoder_len
        self.decoder_len = max(horizons)
        self.lstm_layers = lstm_layers
        # input embeddings; the known inputs' are shared by encoder and decoder steps (both references)
        self.static_embed = nn.Embedding(n_static_categories, d)
        self.observed_embed = RealEmbedding(n_observed, d)
        self.known_embed = RealEmbedding(n_known, d)
        # variable selection and static contexts
        self.static_vsn = VariableSelectionNetwork(1, d, dropout)  # one static variable: gate + norm
        self.static_encoder = StaticCovariateEncoder(d, dropout)
        self.encoder_vsn = VariableSelectionNetwork(n_observed + n_known, d, dropout, d, var_hidden,
                                                    selection_weights)
        self.decoder_vsn = VariableSelectionNetwork(n_known, d, dropout, d, var_hidden, selection_weights)
        # sequence-to-sequence layer
        lstm_drop = dropout if lstm_layers > 1 else 0.0
        self.lstm_encoder = nn.LSTM(d, d, lstm_layers, batch_first=True, dropout=lstm_drop)
        self.lstm_decoder = nn.LSTM(d, d, lstm_layers, batch_first=True, dropout=lstm_drop)
        self.post_lstm = GateAddNorm(d, d, dropout)
        # temporal self-attention
        self.static_enrichment = GatedResidualNetwork(d, d, d, dropout, d_context=d)
        self.attention = InterpretableMultiHeadAttention(d, heads, dropout)
        self.post_attention = GateAddNorm(d, d, dropout)
        self.positionwise_ff = GatedResidualNetwork(d, d, d, dropout)
        self.pre_output = GateAddNorm(d, d, 0.0)
        self.output = nn.Linear(d, n_quantiles)

        t = encoder_len + self.decoder_len
        # first step that queries the attention: 0 (all steps, Google) or the first decoder step
        self.query_start = 0 if attention_span == "all" else encoder_len
        query_pos = torch.arange(self.query_start, t).unsqueeze(1)  # (Tq, 1); mask (Tq, L + D)
        self.register_buffer("causal_mask", torch.arange(t).unsqueeze(0) > query_pos, persistent=False)
        self.register_buffer("horizon_idx", torch.tensor([h - 1 for h in horizons]), persistent=False)

    def forward(self, observed: torch.Tensor, known: torch.Tensor, static: torch.Tensor) -> TFTOutput:
        """observed (B, L, n_observed), known (B, L + D, n_known), static (B,) int64 -> :class:`TFTOutput`."""
        L = self.encoder_len
        s, w_static = self.static_vsn(self.static_embed(static).unsqueeze(0))  # (B, d), (B, 1)
        c_sel, c_enrich, h0, c0 = self.static_encoder(s)
        c_sel = c_sel.unsqueeze(1)  # broadcast over time

        # The encoder's embedding: the small weight tables and raw inputs are concatenated, not the
        # (V, B, L, d) embeddings, so the grouped layout is written once and never copied.
        obs_e, known_e = self.observed_embed, self.known_embed
        enc_e = RealEmbedding.embed(torch.cat([observed, known[:, :L]], -1), torch.cat([obs_e.weight, known_e.weight]),
                                    torch.cat([obs_e.bias, known_e.bias]))  # (V_enc, B, L, d)
        enc_in, w_enc = self.encoder_vsn(enc_e, c_sel)  # (B, L, d), (B, L, V_enc)
        dec_in, w_dec = self.decoder_vsn(known_e(known[:, L:]), c_sel)  # (B, D, d), (B, D, n_known)

        state = (h0.unsqueeze(0).expand(self.lstm_layers, -1, -1).contiguous(),
                 c0.unsqueeze(0).expand(self.lstm_layers, -1, -1).contiguous())
        enc_out, state = run_lstm(self.lstm_encoder, enc_in, state)
        dec_out, _ = run_lstm(self.lstm_decoder, dec_in, state)
        temporal = self.post_lstm(torch.cat([enc_out, dec_out], 1), torch.cat([enc_in, dec_in], 1))

        enriched = self.static_enrichment(temporal, c_enrich.unsqueeze(1))  # (B, L + D, d)
        q0 = self.query_start  # queries: steps q0 .. L + D - 1, Tq of them
        attn_out, attn_w = self.attention(enriched[:, q0:], enriched, self.causal_mask)  # (B, Tq, d)
        x = self.post_attention(attn_out, enriched[:, q0:])
        x = self.pre_output(self.positionwise_ff(x), temporal[:, q0:])  # (B, Tq, d)
        steps = self.output(x[:, L - q0:])  # (B, D, Q): the decoder steps only, as both references
        return TFTOutput(steps[:, self.horizon_idx], steps, w_static, w_enc, w_dec, attn_w[:, L - q0:])


def pinball_loss(pred: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """Quantile loss per horizon: pred (B, H, Q), target (B, H), quantiles (Q,) -> (H,).

    ``max(q * e, (q - 1) * e)`` with ``e = y - y_hat_q``, summed over quantiles, averaged over the batch.
    """
    e = target.unsqueeze(-1) - pred
    return torch.maximum(quantiles * e, (quantiles - 1) * e).sum(-1).mean(0)


# --------------------------------------------------------------------------------------------------
# the update
# --------------------------------------------------------------------------------------------------


class TFTTrainable(TrainableBase):
    def __init__(self, cfg: TFTConfig, data: MarketData, ctx: BuildContext) -> None:
        _check_config(cfg)
        if data.kind != "bars" or data.features is None:
            raise ModelDataError(f"tft trains on OHLCV bars; data {data.name!r} holds {data.kind} "
                                 "without bar features. Use an ohlcv data config (e.g. data=6e_ohlcv_1m).")
        fs: FeatureSet = data.features.to(ctx.device)
        self.cfg, self.ctx, self.fs = cfg, ctx, fs
        self.horizons = [int(h) for h in cfg.horizons]
        L, D = cfg.encoder_len, max(self.horizons)
        self.batch_size = int(cfg.batch_size)

        starts = fs.window_starts(L, horizon=D, split="train")
        n_train = int(starts.numel())
        if n_train < self.batch_size:
            train_bars = int(fs.is_train.sum())
            raise ModelDataError(
                f"tft needs at least model.batch_size={self.batch_size} training windows of "
                f"encoder_len + max(horizons) = {L} + {D} = {L + D} consecutive bars inside one session; "
                f"data {data.name!r} has {len(fs)} bars ({train_bars} in the training split) giving "
                f"{n_train}. Use more bars (at least {L + D + self.batch_size - 1} training bars in one "
                "session), a shorter model.encoder_len or horizons, or a smaller model.batch_size.")

        known_cols = [i for i, n in enumerate(fs.names) if n in KNOWN_NAMES]
        self.observed_cols = torch.tensor([i for i in range(fs.n_features) if i not in known_cols],
                                          device=ctx.device)
        self.encoder_vars = [fs.names[i] for i in self.observed_cols.tolist()] + list(KNOWN_NAMES)
        self.decoder_vars = list(KNOWN_NAMES)
        self._enc_offsets = torch.arange(L, device=ctx.device)
        self._all_offsets = torch.arange(L + D, device=ctx.device)

        self.train_starts = starts
        self.train_targets = self._targets(starts)
        self.samples_per_epoch = (n_train // self.batch_size) * self.batch_size
        self.n_train_windows = n_train
        self.train_samples = self.samples_per_epoch
        self.val_starts = fs.window_starts(L, horizon=D, split="val")  # the validation pass's windows
        self.val_targets = self._targets(self.val_starts)
        self.batch_limit = n_train
        self.quantiles = torch.tensor([float(q) for q in cfg.quantiles], device=ctx.device)

        torch.manual_seed(ctx.seed)
        self.module = TemporalFusionTransformer(
            n_observed=len(self.observed_cols), n_known=len(KNOWN_NAMES),
            n_static_categories=max(fs.n_instruments, 1), encoder_len=L, horizons=self.horizons,
            n_quantiles=len(cfg.quantiles), hidden=cfg.hidden, heads=cfg.heads, dropout=cfg.dropout,
            lstm_layers=cfg.lstm_layers, var_hidden=cfg.var_hidden,
            attention_span=cfg.attention_span, selection_weights=cfg.selection_weights).to(ctx.device)
        self.net = ctx.maybe_compile(self.module)
        self.optimizer = make_optimizer(self.module, cfg.lr, cfg.weight_decay, impl=ctx.optimizer_impl)
        self.scaler = ctx.grad_scaler()  # fp16 only
        self.generator = ctx.generator()

        # A fixed held-out batch for the importances: evenly spaced validation windows (training
        # windows only when the data has no validation window of this length).
        held = fs.window_starts(L, horizon=D, split="val")
        self.interpret_split = "val"
        if held.numel() == 0:
            held, self.interpret_split = starts, "train"
        pick = torch.linspace(0, held.numel() - 1, min(cfg.interpret_windows, held.numel()),
                              device=held.device).round().long()
        self.interpret_starts = held[pick]

    # data ------------------------------------------------------------------------------------

    def _targets(self, starts: torch.Tensor) -> torch.Tensor:
        """(W,) window starts -> (W, H) scaled cumulative log returns at each horizon."""
        L, D = self.cfg.encoder_len, max(self.horizons)
        fut = self.fs.returns[starts.unsqueeze(1) + L + torch.arange(D, device=starts.device)]  # (W, D)
        cum = fut.double().cumsum(1)[:, [h - 1 for h in self.horizons]]
        scale = torch.tensor([self.fs.return_std * math.sqrt(h) for h in self.horizons],
                             dtype=torch.float64, device=starts.device)
        return (cum / scale).float()

    def batch(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B,) window starts -> observed (B, L, n_obs), known (B, L + D, n_known), static (B,)."""
        enc_rows = starts.unsqueeze(1) + self._enc_offsets
        observed = self.fs.values[enc_rows][..., self.observed_cols]
        known = self.fs.known[starts.unsqueeze(1) + self._all_offsets]
        return observed, known, self.fs.instrument[starts]

    # training --------------------------------------------------------------------------------

    def loss_on(self, starts: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean loss and per-horizon losses (H,) of one batch (grad enabled, current train/eval mode)."""
        with self.ctx.autocast():
            out = self.net(*self.batch(starts))
        per_h = pinball_loss(out.quantiles.float(), targets, self.quantiles)
        return per_h.mean(), per_h

    def optimizer_step(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """One optimiser step on training windows ``idx`` (B,), in ``ctx.grad_accum`` micro-batches."""
        starts, targets = self.train_starts[idx], self.train_targets[idx]

        def part(sl: slice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss, per_h = self.loss_on(starts[sl], targets[sl])
            return loss, {f"loss_h{h}": per_h[i] for i, h in enumerate(self.horizons)}

        loss, parts = accumulate(part, idx.numel(), self.ctx.grad_accum, self.scaler)
        grad_norm = clip_and_step(self.module, self.optimizer, self.cfg.max_grad_norm, self.scaler)
        return {"loss": loss, Series.GRAD_NORM: grad_norm, **parts}

    # reporting -------------------------------------------------------------------------------

    def importances(self, chunk: int = 128) -> dict[str, Any]:
        """Mean variable-selection weights and mean attention on the fixed held-out batch (eval mode).

        Run in chunks of ``chunk`` windows so that a large model does not need the whole batch in memory.
        """
        self.module.eval()
        sums: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for part in self.interpret_starts.split(chunk):
                out = self.module(*self.batch(part))
                for key, value in (("static", out.static_weights), ("encoder", out.encoder_weights.sum(1)),
                                   ("decoder", out.decoder_weights.sum(1)),
                                   ("attention", out.attention[:, self.module.horizon_idx])):
                    s = value.float().sum(0)
                    sums[key] = sums[key] + s if key in sums else s
        n = int(self.interpret_starts.numel())
        L, D = self.cfg.encoder_len, max(self.horizons)
        att = (sums["attention"] / n).tolist()  # (H, L + D)
        return {
            "static": dict(zip(["instrument"], (sums["static"] / n).tolist(), strict=True)),
            "encoder": dict(zip(self.encoder_vars, (sums["encoder"] / (n * L)).tolist(), strict=True)),
            "decoder": dict(zip(self.decoder_vars, (sums["decoder"] / (n * D)).tolist(), strict=True)),
            # attention of each horizon's query over key offsets -L+1 .. D relative to the last encoder bar
            "attention": dict(zip(self.horizons, att, strict=True)),
            "offsets": list(range(-L + 1, D + 1)),
            "windows": n,
            "split": self.interpret_split,
        }

    # the harness's hooks, in HOOK_ORDER ------------------------------------------------------

    def train_epoch(self) -> dict[str, torch.Tensor]:
        self.module.train()
        meter = EpochMeter()
        for idx in batches(self.n_train_windows, self.batch_size, self.generator, self.ctx.device,
                           dist=self.ctx.dist):
            meter.add(**self.optimizer_step(idx))
        return meter.means()

    def eval_epoch(self) -> dict[str, torch.Tensor]:
        """Validation pass over the held-out windows: ``val_loss`` (mean pinball loss; see base.evaluate)."""
        return evaluate(self.module, torch.arange(self.val_starts.numel(), device=self.ctx.device),
                        self.batch_size, lambda i: {"loss": self.loss_on(self.val_starts[i], self.val_targets[i])[0]},
                        dist=self.ctx.dist)

    def memory_step(self, batch_size: int):
        """One training step at ``batch_size`` windows (see TrainableBase)."""
        self.module.train()
        return lambda: self.optimizer_step(next(batches(self.n_train_windows, batch_size, self.generator, self.ctx.device)))

    def inference(self, batch_size: int):
        reps = -(-batch_size // self.n_train_windows)
        starts = self.train_starts.repeat(reps)[:batch_size]
        inputs = self.batch(starts)

        def run() -> torch.Tensor:
            self.module.eval()
            with torch.no_grad(), self.ctx.autocast():
                return self.net(*inputs).quantiles

        return run

    def info(self) -> dict[str, Any]:
        return {**super().info(), "train_windows": self.n_train_windows,
                "val_windows": int(self.val_starts.numel()),
                "encoder_len": self.cfg.encoder_len, "decoder_len": max(self.horizons),
                "attention_span": self.cfg.attention_span, "selection_weights": self.cfg.selection_weights,
                "target": "cumulative log return / (return_std * sqrt(h))"}

    def write_artifacts(self, outdir: Path) -> list[Path]:
        """``tft_variable_importance.csv`` + ``.png`` and ``tft_attention.csv`` of :meth:`importances`
        (:mod:`trainbench.models.tft_artifacts`)."""
        return tft_artifacts.write(self.importances(), outdir)


def build(cfg: TFTConfig, data: MarketData, ctx: BuildContext) -> TFTTrainable:
    return TFTTrainable(cfg, data, ctx)


SPEC = ModelSpec.of(SCHEMA, build, data_parallel=True)

"""TFT's config: its keys with their types, ranges and docs, and the rules across them, and its
:data:`SCHEMA`, read without importing the model (:mod:`trainbench.models.tft`, which imports torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.config.models.spec import ModelSchema
from trainbench.config.run import ModelConfig
from trainbench.config.shared import param
from trainbench.core.errors import ConfigError


@dataclass
class TFTConfig(ModelConfig):
    name: str = param("tft", "Registry key.")
    target_epochs: int = param(1500, "Epochs the training plan needs; the decision projects time from it.", ge=1)
    batch_size: Any = param(230, "Windows per optimiser step.")
    lr: float = param(1e-3, "Adam(W) learning rate (Google reference: 1e-3 on most datasets).", gt=0)
    max_grad_norm: float = param(1.0, "Clip the global gradient norm to this; 0 disables clipping.", ge=0)
    encoder_len: int = param(32, "Past bars the encoder reads (Google volatility set: 252).", ge=1)
    horizons: list[int] = param(doc="Bars ahead to forecast; the decoder runs max(horizons) steps.",
                                factory=lambda: [1, 5, 15, 30])
    quantiles: list[float] = param(doc="Quantiles forecast for every horizon, each in (0, 1).",
                                   factory=lambda: [0.1, 0.5, 0.9])
    hidden: int = param(16, "Width d_model of every layer (pytorch-forecasting default 16; Google "
                        "volatility set: 160).", ge=1)
    heads: int = param(4, "Attention heads; `hidden` must be divisible by it (volatility set: 1).", ge=1)
    dropout: float = param(0.1, "Dropout inside GRNs, gates and attention.", ge=0, lt=1)
    lstm_layers: int = param(1, "Stacked layers of the LSTM encoder and decoder.", ge=1)
    var_hidden: int | None = param(
        None, "Inner width of each per-variable GRN in the selection networks; None = `hidden` (Google "
        "reference). pytorch-forecasting uses a small one (its hidden_continuous_size, 8).", ge=1)
    interpret_windows: int = param(
        512, "Held-out windows in the fixed batch used for the variable-importance artifact.", ge=1)
    selection_weights: str = param(
        "compact", "The GRN that computes a selection network's variable weights: compact "
        "(pytorch-forecasting: inner width min(hidden, number of variables), skip by linear interpolation "
        "plus LayerNorm) or full (Google's code: inner width hidden, linear skip; the paper leaves it open). "
        "At Google's volatility size `full` is ~10 GFLOP more per training step of 64 windows.")
    attention_span: str = param(
        "decoder", "Which steps query the temporal self-attention: decoder (pytorch-forecasting: only the "
        "decoder steps, whose outputs the forecasts use) or all (Google's reference: every encoder and "
        "decoder step, and the layers after the attention run over all steps too). The forecasts are the "
        "same function either way (causal mask, position-wise layers after it); `all` does the "
        "reference's extra work, which a training-time benchmark of Google's recipe must time. On in "
        "experiment=tft_volatility.")

    def check(self) -> None:  # at start-up, before any run opens (ModelConfig.check)
        _check_settings(self)


ATTENTION_SPANS = ("decoder", "all")
SELECTION_WEIGHTS = ("compact", "full")


def _check_settings(cfg: TFTConfig) -> None:
    if not cfg.horizons or any(int(h) < 1 for h in cfg.horizons):
        raise ConfigError(f"model.horizons={list(cfg.horizons)} is invalid: give positive bar counts, "
                          "e.g. model.horizons=[1,5,15,30].")
    if len(set(cfg.horizons)) != len(cfg.horizons):
        raise ConfigError(f"model.horizons={list(cfg.horizons)} repeats a horizon: list each once.")
    if not cfg.quantiles or any(not 0 < float(q) < 1 for q in cfg.quantiles):
        raise ConfigError(f"model.quantiles={list(cfg.quantiles)} is invalid: each must lie in (0, 1), "
                          "e.g. model.quantiles=[0.1,0.5,0.9].")
    if cfg.hidden % cfg.heads:
        raise ConfigError(f"model.hidden={cfg.hidden} is not divisible by model.heads={cfg.heads}: "
                          "pick heads among the divisors of hidden.")
    if cfg.selection_weights not in SELECTION_WEIGHTS:
        raise ConfigError(f"model.selection_weights={cfg.selection_weights!r} is invalid: use compact "
                          "(pytorch-forecasting) or full (Google's code).")
    if cfg.attention_span not in ATTENTION_SPANS:
        raise ConfigError(f"model.attention_span={cfg.attention_span!r} is invalid: use decoder "
                          "(pytorch-forecasting) or all (Google's reference).")


SCHEMA = ModelSchema(name="tft", config_cls=TFTConfig, data_kind="bars",
                     description="Temporal Fusion Transformer: multi-horizon quantile return forecasts.")

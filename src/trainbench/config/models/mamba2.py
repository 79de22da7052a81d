"""Mamba-2's config: its keys with their types, ranges and docs, and the rules across them, and its
:data:`SCHEMA`, read without importing the model (:mod:`trainbench.models.mamba2`, which imports torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.config.models.spec import ModelSchema
from trainbench.config.run import ModelConfig
from trainbench.config.shared import param
from trainbench.core.errors import ConfigError


@dataclass
class Mamba2Config(ModelConfig):
    name: str = param("mamba2", "Registry key.")
    target_epochs: int = param(1000, "Epochs the training plan needs; the decision projects time from it.", ge=1)
    seq_len: int = param(128, "Bars in each input window.", ge=2)
    d_model: int = param(32, "Width of the residual stream (reference models: 256-2048).", ge=1)
    n_layers: int = param(2, "Number of Mamba-2 blocks.", ge=1)
    d_state: int = param(16, "SSM state size N per head (reference: 64 or 128).", ge=1)
    headdim: int = param(16, "Channels per head P; expand * d_model must be a multiple (reference: 64).", ge=1)
    expand: int = param(2, "Inner width = expand * d_model.", ge=1)
    d_conv: int = param(4, "Kernel width of the causal depthwise convolution.", ge=1)
    chunk_size: int = param(32, "Chunk length Q of the SSD scan (cost of the intra-chunk part grows with Q).",
                            ge=1)
    kernel: str = param("auto", "SSD implementation: auto (mamba_ssm's fused kernels when they import on a "
                        "CUDA device, else torch; the run records which), torch (pure PyTorch, the "
                        "reference) or triton (the fused kernels; needs CUDA and the `mamba` extra).")
    dt_min: float = param(1e-3, "Lower end of the log-uniform initial step size dt.", gt=0)
    dt_max: float = param(0.1, "Upper end of the log-uniform initial step size dt.", gt=0)
    dt_init_floor: float = param(1e-4, "Initial dt values are clamped below at this.", gt=0)
    a_init_min: float = param(1.0, "A = -exp(A_log) starts uniform in [-a_init_max, -a_init_min].", gt=0)
    a_init_max: float = param(16.0, "See a_init_min.", gt=0)
    norm_eps: float = param(1e-5, "Epsilon of the RMS norms.", gt=0)
    loss: str = param("huber", "Regression loss on the std-scaled next-bar return: huber or mse.")
    huber_delta: float = param(1.0, "Huber threshold, in return standard deviations.", gt=0)
    batch_size: Any = param(230, "Windows per optimiser step.")
    lr: float = param(1e-3, "AdamW learning rate.", gt=0)
    weight_decay: float = param(0.01, "AdamW weight decay on matrices (never on A_log, D, dt_bias, norms, "
                                "biases).", ge=0)
    max_grad_norm: float = param(1.0, "Clip the global gradient norm to this; 0 disables clipping.", ge=0)

    def check(self) -> None:  # at start-up, before any run opens (ModelConfig.check)
        _check_settings(self)


#: model.kernel's values (trainbench.models.mamba2.resolve_kernel).
KERNELS = ("auto", "torch", "triton")


def _check_settings(cfg: Mamba2Config) -> None:
    d_inner = cfg.expand * cfg.d_model
    if d_inner % cfg.headdim:
        raise ConfigError(f"model.headdim={cfg.headdim} must divide expand * d_model = {d_inner}: "
                          f"set model.headdim to a divisor of {d_inner}.")
    if cfg.kernel not in KERNELS:
        raise ConfigError(f"model.kernel={cfg.kernel!r} is invalid: use one of {', '.join(KERNELS)}.")
    if cfg.loss not in ("huber", "mse"):
        raise ConfigError(f"model.loss={cfg.loss!r} is invalid: use huber or mse.")
    if cfg.dt_min > cfg.dt_max:
        raise ConfigError(f"model.dt_min={cfg.dt_min} exceeds model.dt_max={cfg.dt_max}.")
    if cfg.a_init_min > cfg.a_init_max:
        raise ConfigError(f"model.a_init_min={cfg.a_init_min} exceeds model.a_init_max={cfg.a_init_max}.")


SCHEMA = ModelSchema(name="mamba2", config_cls=Mamba2Config, data_kind="bars",
                     description=("Mamba-2 (chunked SSD scan, pure PyTorch): next-bar return from "
                                 "128-bar feature windows."))

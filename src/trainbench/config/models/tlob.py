"""TLOB's config: its keys with their types, ranges and docs, and its
:data:`SCHEMA`, read without importing the model (:mod:`trainbench.models.tlob`, which imports torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.config.models.spec import ModelSchema
from trainbench.config.run import ModelConfig
from trainbench.config.shared import param


@dataclass
class TLOBConfig(ModelConfig):
    name: str = param("tlob", "Registry key.")
    target_epochs: int = param(
        1000, "Epochs the training plan needs. The paper trains 10 epochs over LOBSTER training sets of "
        "the order of 10^6 windows; on the ~8,000 training windows of conf/data/mbp10 (10,000 events) "
        "1,000 epochs feed the model a comparable ~10^7 windows.", ge=1)
    seq_len: int = param(
        32, "Events per input window. Paper: 128. The default is CPU-sized (with hidden_dim 20 an epoch "
        "of ~8,000 windows takes about 3 s on one core); model.seq_len=128 model.hidden_dim=40 is the "
        "paper's model (~40 s per such epoch on one core).", ge=4)
    hidden_dim: int = param(
        20, "Width of the embedded feature axis. Paper: 40 (128 or 256 in its sweep); CPU-sized default.",
        ge=4)
    num_layers: int = param(4, "Dual-attention layers (each: attention over time, then over features). "
                               "Paper: 4 (or 6).", ge=1)
    num_heads: int = param(1, "Attention heads in every attention. Paper: 1.", ge=1)
    horizon: int = param(10, "Events ahead the trend label looks. Paper's LOBSTER horizons: 10, 20, 50, 100.",
                         ge=1)
    smooth: int = param(10, "Events the mid-price is averaged over for the label (capped at horizon). "
                            "Paper: 10.", ge=1)
    alpha: float | None = param(
        None, "Threshold on the smoothed relative change for up/down. None: mean |change| / 2 over the "
        "training split, as the paper.", gt=0)
    lr: float = param(1e-4, "Learning rate (paper: 1e-4, Adam).", gt=0)
    batch_size: Any = param(230, "Windows per optimiser step (paper: 128 on LOBSTER); "
                                 "`auto`: the largest that fits the memory budget (resolved before build).")


SCHEMA = ModelSchema(name="tlob", config_cls=TLOBConfig, data_kind="book",
                     description=("TLOB dual-attention transformer: up/stationary/down mid-price trend from "
                                 "a 10-level order book (Berti & Kasneci 2025)."))

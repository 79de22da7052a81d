"""The validation pass of the supervised models: held-out windows, eval mode, no grad, no host sync; and the
run params every model's info() shares."""

from __future__ import annotations

import pytest
import torch

from helpers.data import data_for
from helpers.models import build_model
from trainbench.core.vocab import Series
from trainbench.measure.host_sync import forbid_host_syncs
from trainbench.models.base import INFO_KEYS, evaluate
from trainbench.models.registry import REGISTRY


def _build(name):
    kind = REGISTRY.get(name).data_kind
    return build_model(name, data=data_for(kind, 1500 if kind == "book" else 3000))


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_info_holds_the_keys_every_model_shares(name):
    """num_params, and the training and held-out windows of a supervised model (None for RL, which has none)."""
    tr = _build(name)
    info = tr.info()
    assert set(INFO_KEYS) <= set(info)
    assert info["num_params"] == sum(p.numel() for p in tr.module.parameters() if p.requires_grad) > 0
    if hasattr(tr, "eval_epoch"):
        assert info["train_windows"] >= tr.samples_per_epoch and info["val_windows"] > 0
    else:
        assert info["train_windows"] is None and info["val_windows"] is None


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_eval_epoch_returns_val_loss_on_held_out_windows_without_syncs(name):
    """Every model with a validation pass (the supervised ones; an RL model has no held-out split)."""
    tr = _build(name)
    if not hasattr(tr, "eval_epoch"):
        pytest.skip(f"{name} has no validation pass (eval_epoch)")
    before = [p.detach().clone() for p in tr.module.parameters()]
    tr.module.train()
    with forbid_host_syncs(raise_on_sync=False) as syncs:
        out = tr.eval_epoch()
    assert syncs == []
    assert Series.VAL_LOSS in out and out[Series.VAL_LOSS].dim() == 0 and torch.isfinite(out[Series.VAL_LOSS])
    assert not out[Series.VAL_LOSS].requires_grad
    assert tr.module.training  # mode restored
    assert all(torch.equal(a, b) for a, b in zip(before, tr.module.parameters(), strict=True))  # no update
    # the pass is deterministic (eval mode: no dropout) and differs from the training loss's data
    assert torch.equal(tr.eval_epoch()[Series.VAL_LOSS], out[Series.VAL_LOSS])


def test_evaluate_weights_the_last_partial_batch_by_its_share():
    items = torch.arange(10, dtype=torch.float32)
    module = torch.nn.Linear(1, 1)
    out = evaluate(module, items, 4, lambda b: {"loss": b.mean()})  # batches 0-3, 4-7, 8-9
    assert out[Series.VAL_LOSS].item() == pytest.approx(items.mean().item())
    assert evaluate(module, items[:0], 4, lambda b: {"loss": b.mean()}) == {}

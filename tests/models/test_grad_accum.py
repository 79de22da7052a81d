"""Gradient accumulation: k micro-batches give the full batch's gradient, in the helper and in every model."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from helpers.models import build_model
from trainbench.models.base import accumulate, micro_sizes
from trainbench.models.registry import REGISTRY


def test_micro_sizes_split_evenly():
    assert micro_sizes(10, 3) == [4, 3, 3]
    assert micro_sizes(230, 4) == [58, 58, 57, 57]
    assert micro_sizes(3, 8) == [1, 1, 1]
    assert sum(micro_sizes(1001, 7)) == 1001


@pytest.mark.parametrize("k", [2, 3, 7])
def test_accumulated_gradient_equals_the_full_batch_gradient_on_an_mlp(k):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
    x, y = torch.randn(50, 6), torch.randn(50)

    def part(sl):
        err = net(x[sl]).squeeze(-1) - y[sl]
        return (err ** 2).mean(), {"mae": err.abs().mean()}

    full_loss, full_parts = accumulate(part, 50, 1)
    full = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    loss, parts = accumulate(part, 50, k)
    for g, p in zip(full, net.parameters(), strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss, full_loss)
    torch.testing.assert_close(parts["mae"], full_parts["mae"])
    # and it is not a tautology: an unweighted sum of micro-batch means is a different gradient
    net.zero_grad(set_to_none=True)
    for sl in (slice(0, 10), slice(10, 50)):
        part(sl)[0].backward()
    assert not torch.allclose(net[0].weight.grad, full[0], rtol=1e-3)


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_every_model_accumulates_to_the_full_batch_gradient(name, monkeypatch):
    """One optimiser step of each model's own update: grad_accum=3 vs 1, same seed, same batch."""
    module = importlib.import_module(f"trainbench.models.{name}")
    grads: list[list[torch.Tensor]] = []
    outs = []

    def capture(net, opt, max_norm, scaler=None, **_):  # set_to_none, as clip_and_step
        grads.append([p.grad.clone() for p in net.parameters()])
        opt.zero_grad(set_to_none=True)
        return torch.zeros(())

    monkeypatch.setattr(module, "clip_and_step", capture)
    # dropout draws other masks for three micro-batches than for one batch: off, so the gradients compare
    no_dropout = ["model.dropout=0.0"] if "dropout" in REGISTRY.get(name).config_cls.__dataclass_fields__ else []
    for accum in (1, 3):
        tr = build_model(name, "model.batch_size=30", *no_dropout, grad_accum=accum)
        outs.append(tr.memory_step(30)())
    assert len(grads) == 2
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in grads[0])
    loss = [o["loss"] for o in outs]
    torch.testing.assert_close(loss[1], loss[0], rtol=1e-5, atol=1e-7)

"""DQN and PPO updates under trainer.compile and trainer.cuda_graphs, and how the switch resolves.

CPU: the compiled updates trace and match eager ones (with the aot_eager backend: Dynamo and AOT
autograd, the parts that break on graph breaks and dynamic shapes, without Inductor's minute-long C++
codegen); ``cuda_graphs`` is ignored with a recorded reason. GPU (``gpu``-marked): a replayed CUDA
graph gives the same updates as eager ones, without host syncs.
"""

from __future__ import annotations

import functools

import pytest
import torch

from helpers.models import model_config
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.core.errors import ConfigError
from trainbench.core.vocab import Series
from trainbench.data.in_memory import make_market_data
from trainbench.models import dqn, ppo
from trainbench.models.base import BuildContext
from trainbench.models.runtime import resolve_cuda_graphs

#: The RL models at their `tiny` sizes, with a rollout of 8 x 16 for PPO.
RL_MODELS = [(dqn, ()), (ppo, ("model.rollout_steps=16",))]


def _build(module, overrides, device="cpu", **ctx):
    cfg = model_config(module.SPEC.name, *overrides)
    torch.manual_seed(0)  # the networks' initial weights
    return module.build(cfg, make_market_data(1500, device=device), BuildContext(device=torch.device(device), **ctx))


@pytest.mark.parametrize("module,overrides", RL_MODELS)
@pytest.mark.slow
def test_compiled_update_matches_eager_on_cpu(monkeypatch, module, overrides):
    real = torch.compile
    monkeypatch.setattr(torch, "compile", functools.partial(real, backend="aot_eager"))
    torch._dynamo.reset()
    eager = _build(module, overrides)
    comp = _build(module, overrides, compile=True)
    assert comp._q_fwd is not comp.q if module is dqn else comp._fwd is not comp.ac  # really wrapped
    a, b = eager.train_epoch(), comp.train_epoch()
    for key in ("loss", Series.GRAD_NORM):
        torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=1e-6)


def test_cuda_graphs_resolution_is_recorded_and_never_on_a_cpu():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_cuda_graphs(False, cuda, "bf16", True) == (False, "off (trainer.cuda_graphs=false)")
    on, why = resolve_cuda_graphs(True, cpu, "fp32", True)
    assert not on and "cpu" in why
    on, why = resolve_cuda_graphs(True, cuda, "fp32", False)
    assert not on and "not captured" in why
    on, why = resolve_cuda_graphs(True, cuda, "fp16", True)
    assert not on and "GradScaler" in why
    assert resolve_cuda_graphs(True, cuda, "bf16", True)[0]


def test_the_models_that_capture_their_update_say_so_in_their_spec():
    """train.py and the benchmarks ask the spec, not a list of names; a model whose build takes
    ``cuda_graphs`` is one that declares it."""
    import inspect

    from trainbench.models.registry import REGISTRY

    declared = {s.name for s in REGISTRY.specs() if s.cuda_graphs}
    assert declared == {"dqn", "ppo"}
    for name in declared:
        source = inspect.getsource(inspect.getmodule(REGISTRY.get(name).build))
        assert "ctx.cuda_graphs" in source and "GraphedUpdate" in source


def test_trainer_cuda_graphs_is_a_validated_switch():
    assert validate(compose_run(["model=dqn", "trainer.cuda_graphs=true"])).trainer.cuda_graphs is True
    assert validate(compose_run(["model=dqn"])).trainer.cuda_graphs is False
    with pytest.raises(Exception, match="cuda_graphs"):
        validate(compose_run(["model=dqn", "trainer.cuda_graphs=sometimes"]))


def test_ppo_refuses_cuda_graphs_with_target_kl():
    with pytest.raises(ConfigError, match="target_kl"):
        _build(ppo, ("model.rollout_steps=16", "model.target_kl=0.01"), cuda_graphs=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("module,overrides", RL_MODELS)
@pytest.mark.parametrize("compile_", [False, True])
def test_cuda_graph_update_matches_eager_without_host_syncs(module, overrides, compile_):
    eager = _build(module, overrides, "cuda", seed=1, compile=compile_)
    graphed = _build(module, overrides, "cuda", seed=1, compile=compile_, cuda_graphs=True)
    a, b = eager.train_epoch(), graphed.train_epoch()  # the first graphed epoch captures
    for key in ("loss", Series.GRAD_NORM):
        torch.testing.assert_close(b[key], a[key], rtol=1e-3, atol=1e-5)
    a, b = eager.train_epoch(), graphed.train_epoch()
    torch.testing.assert_close(b["loss"], a["loss"], rtol=1e-3, atol=1e-5)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        graphed.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")

"""The fast paths in every registered model: autocast in the forward passes, a GradScaler for fp16, the
compiled module on the training path, the optimiser implementation switch, and no host syncs in the epoch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.models import model_config
from trainbench.core.vocab import Series
from trainbench.data.in_memory import make_market_data
from trainbench.data.market import MarketData
from trainbench.data.synth import book_from_events, generate_book
from trainbench.measure.harness import read_scalars
from trainbench.measure.host_sync import forbid_host_syncs
from trainbench.models.base import BuildContext, optimizer_kwargs
from trainbench.models.registry import REGISTRY

CPU = torch.device("cpu")

_DATA: dict[str, MarketData] = {}


def _data(kind: str) -> MarketData:
    if kind not in _DATA:
        if kind == "book":
            book = book_from_events(generate_book(500, seed=0), 0.00005, "6EH4")
            _DATA[kind] = MarketData(name="test-book", schema="mbp-10", path=Path("memory"), synthetic=True,
                                     sha256="0" * 64, book=book, extra={"train_frac": 0.8})
        else:
            _DATA[kind] = make_market_data(600)
    return _DATA[kind]


def tiny(name: str, **ctx) -> object:
    spec = REGISTRY.get(name)
    torch.manual_seed(0)
    return spec.build(model_config(name), _data(spec.data_kind), BuildContext(device=CPU, **ctx))


MODELS = REGISTRY.builtin_names()


class _MatmulDtypes(TorchDispatchMode):
    """Records the dtype of every matmul-like op's first operand."""

    OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_dot_product_flash_attention_for_cpu",
           "convolution", "_convolution", "mkldnn_rnn_layer"}

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.OPS and args and isinstance(args[0], torch.Tensor):
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_bf16_autocast_reaches_the_forward_passes(name):
    tr = tiny(name, precision="bf16")
    with _MatmulDtypes() as seen:
        out = tr.train_epoch()
    assert torch.bfloat16 in seen.dtypes, f"{name}: no matmul ran in bf16 under trainer.precision=bf16"
    assert math.isfinite(read_scalars(out)["loss"])
    fp32 = tiny(name)
    with _MatmulDtypes() as seen32:
        fp32.train_epoch()
    assert torch.bfloat16 not in seen32.dtypes and torch.float16 not in seen32.dtypes


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_fp16_trains_with_a_grad_scaler(name):
    tr = tiny(name, precision="fp16")
    assert isinstance(tr.scaler, torch.amp.GradScaler)
    assert tiny(name, precision="bf16").scaler is None and tiny(name).scaler is None
    values = read_scalars(tr.train_epoch())
    assert math.isfinite(values["loss"]) and math.isfinite(values[Series.GRAD_NORM])  # skipped steps stay finite
    assert tr.scaler.get_scale() > 0  # the scaler ran (update() set a scale tensor)
    assert tr.scaler._scale is not None


class _Compiled(torch.nn.Module):
    """Stands in for torch.compile's wrapper: counts the calls that go through it."""

    made: list[_Compiled] = []

    def __init__(self, module: torch.nn.Module, **kwargs) -> None:
        super().__init__()
        self.inner = module
        self.calls = 0
        _Compiled.made.append(self)

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


@pytest.mark.parametrize("name", MODELS)
def test_compile_switch_routes_the_training_forward_through_torch_compile(name, monkeypatch):
    _Compiled.made = []
    monkeypatch.setattr(torch, "compile", _Compiled)
    tr = tiny(name, compile=True)
    assert _Compiled.made, f"{name} never called ctx.maybe_compile"
    own = set(map(id, tr.module.modules()))
    assert all(id(c.inner) in own for c in _Compiled.made)  # it compiles its own network
    tr.train_epoch()
    assert sum(c.calls for c in _Compiled.made) > 0, f"{name}: training never called the compiled module"
    _Compiled.made = []
    tiny(name)
    assert not _Compiled.made  # compile=false compiles nothing


@pytest.mark.parametrize("name", MODELS)
def test_optimizer_impl_switch(name):
    for impl, want in (("foreach", {"foreach": True, "fused": False}), ("forloop", {"foreach": False, "fused": False}),
                       ("auto", {"foreach": True, "fused": False})):
        tr = tiny(name, optimizer_impl=impl)
        opt = next(v for k, v in vars(tr).items() if isinstance(v, torch.optim.Optimizer))
        assert {k: bool(opt.defaults[k]) for k in want} == want, (name, impl)


def test_optimizer_kwargs_pick_fused_on_cuda_only():
    assert optimizer_kwargs("auto", cuda=True) == {"fused": True}
    assert optimizer_kwargs("auto", cuda=False)["foreach"] is True
    with pytest.raises(ValueError, match="optimizer_impl"):
        optimizer_kwargs("apex", cuda=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_no_host_sync_inside_train_epoch(name):
    tr = tiny(name)
    tr.train_epoch()  # first epoch outside: lazy state (optimiser moments) is created there
    with forbid_host_syncs():
        out = tr.train_epoch()
    assert all(isinstance(v, torch.Tensor) for v in out.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", MODELS)
def test_no_synchronising_op_inside_train_epoch_on_cuda(name):
    spec = REGISTRY.get(name)
    dev = torch.device("cuda")
    # bars: features built on the GPU (the environment lives where they are); the book moves itself
    data = make_market_data(600, device="cuda") if spec.data_kind == "bars" else _data("book")
    torch.manual_seed(0)
    tr = spec.build(model_config(name), data, BuildContext(device=dev))
    tr.train_epoch()
    torch.cuda.synchronize()
    with forbid_host_syncs():  # also torch.cuda.set_sync_debug_mode("error")
        tr.train_epoch()
    torch.cuda.synchronize()

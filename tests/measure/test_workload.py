"""The workload profile: FLOPs, bytes and ops per op class and dtype, outside the timed epochs."""

import contextlib

import pytest
import torch

from trainbench.core.vocab import Series, Summary
from trainbench.measure.flops import count_flops
from trainbench.measure.workload import op_class, profile_callable, profile_metrics


def _step(dtype=None):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.LayerNorm(128),
                            torch.nn.Linear(128, 8))
    opt = torch.optim.AdamW(m.parameters(), foreach=True)
    x = torch.randn(32, 64)

    def step():
        ctx = torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu", enabled=False)
        with ctx:
            loss = m(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def test_flops_bytes_and_ops_per_class():
    step = _step()
    step()  # optimiser state exists: the steady state
    p = profile_callable(step)
    # forward 2 GEMMs, backward 3 (no input gradient for the first layer): 2*(32*64*128 + 32*128*8) * 1 + ...
    assert p["flops"] == count_flops(step).total == p["classes"]["matmul_attention"]["flops"]
    assert p["flops"] == 2 * 32 * (64 * 128 + 128 * 8) + 2 * 32 * (64 * 128 + 2 * 128 * 8)
    mm = p["classes"]["matmul_attention"]
    assert mm["ops"] == 5 and set(mm["by_dtype"]) == {"fp32"}
    # a GEMM reads its inputs and writes its output: at least the weights and activations of both layers
    assert mm["bytes"] >= 4 * (32 * 64 + 64 * 128 + 32 * 128 + 128 * 8 + 32 * 8)
    assert p["classes"]["optimizer"]["ops"] > 0  # the foreach AdamW inside optimizer.step
    assert p["ops"] == sum(c["ops"] for c in p["classes"].values())
    assert "t" not in p["top_ops"] and "view" not in p["top_ops"]  # views run no kernel
    m = profile_metrics(p)
    assert m[Summary.WORKLOAD_FLOPS_PER_EPOCH] == p["flops"] and m["workload.matmul_attention.fp32.ops"] == 5


def test_autocast_books_matmuls_in_their_dtype():
    step = _step(torch.bfloat16)
    step()
    p = profile_callable(step)
    assert set(p["classes"]["matmul_attention"]["by_dtype"]) == {"bf16"}


def test_op_classes():
    assert op_class("bmm", False) == "matmul_attention" and op_class("convolution_backward", False) == "conv"
    assert op_class("cumsum", False) == "scan" and op_class("_foreach_mul_", False) == "optimizer"
    assert op_class("add", True) == "optimizer" and op_class("native_layer_norm", False) == "elementwise_norm"


def test_an_epoch_profile_includes_the_validation_pass():
    from trainbench.measure.workload import profile_epoch

    step = _step()
    step()
    w = torch.randn(64, 64)

    class WithEval:
        def train_epoch(self):
            step()

        def eval_epoch(self):  # one extra 64x64x64 matmul, as a validation pass would add forward work
            return {Series.VAL_LOSS: (w @ w).sum()}

    class TrainOnly:
        def train_epoch(self):
            step()

    both, train = profile_epoch(WithEval(), torch.device("cpu")), profile_epoch(TrainOnly(), torch.device("cpu"))
    assert both["flops"] == train["flops"] + 2 * 64 ** 3
    assert both["scope"] == "one train_epoch + eval_epoch" and train["scope"] == "one train_epoch"


# --------------------------------------------------------------------------------------------------
# the schema-1 profile: booked as a CUDA GPU runs it
# --------------------------------------------------------------------------------------------------

from trainbench.core.vocab import WORKLOAD_PROFILE_KEYS  # noqa: E402
from trainbench.measure.workload import (  # noqa: E402
    ADAMW_BYTES_PER_ELEMENT,
    ADAMW_FLOPS_PER_ELEMENT,
    INCOMPLETE_COMPILE,
    INCOMPLETE_CUDA_GRAPHS,
    bypass_reasons,
    fused_launches,
    incomplete_artifact,
    profile_artifact,
    profile_epoch,
)


def _adamw_step(impl):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    flags = {"foreach": {"foreach": True}, "for-loop": {"foreach": False}, "fused": {"fused": True}}[impl]
    opt = torch.optim.AdamW(m.parameters(), **flags)
    x = torch.randn(8, 16)

    def step():
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    step()
    return m, step


def _opt_kernels(p):
    return [k for k in p["kernels"] if k["cls"] == "optimizer"]


@pytest.mark.parametrize("impl", ["foreach", "for-loop", "fused"])
def test_adamw_is_booked_as_cuda_fused_adamw_whatever_ran(impl):
    m, step = _adamw_step(impl)
    p = profile_callable(step)
    n = sum(q.numel() for q in m.parameters())
    assert p["optimizer"] == {"measured_impl": impl, "booked_as": "fused"}
    ks = _opt_kernels(p)
    # one _foreach_add_ of the 4 step counters (8 bytes each: read + write), one _fused_adamw_ over 4 tensors
    assert sum(k["count"] for k in ks) == 2
    assert sum(k["bytes"] for k in ks) == ADAMW_BYTES_PER_ELEMENT * n + 8 * 4
    assert sum(k["flops"] for k in ks) == ADAMW_FLOPS_PER_ELEMENT * n + 4
    assert all(k["autocast"] == "fp32" and k["dtype"] == "fp32" for k in ks)
    # the CPU implementation's per-parameter .item() calls and small ops are gone
    assert p["host"]["syncs"] == 0
    assert "_local_scalar_dense" not in p["top_ops"] and "_foreach_sqrt" not in p["top_ops"]


def test_the_measured_cpu_optimizer_ops_would_be_there_without_the_booking():
    """The booking is what removes them: a SGD (not booked as another implementation) keeps its ops."""
    torch.manual_seed(0)
    m = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, foreach=True)
    x = torch.randn(8, 16)

    def step():
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    step()
    p = profile_callable(step)
    assert p["optimizer"] == {"measured_impl": "foreach", "booked_as": "foreach"}
    assert any(name.startswith("_foreach_") for name in p["top_ops"])


def test_fused_launches_follow_multi_tensor_apply_limits():
    assert fused_launches([10] * 40) == [360, 40]  # 36 tensors per launch
    big = 320 * 65536 + 5
    assert fused_launches([big]) == [320 * 65536, 5]  # 320 chunks of 65536 per launch
    assert fused_launches([3, 4]) == [7]


def test_host_syncs_are_counted_not_booked_as_kernels():
    x = torch.randn(64, 64)

    def fn():
        y = x @ x
        return y.sum().item()
    p = profile_callable(fn)
    assert p["host"]["syncs"] == 1
    assert p["host"]["ops"] == 2 == sum(k["count"] for k in p["kernels"])  # mm, sum; the .item() is no kernel


def test_cpu_dropout_is_booked_as_one_fused_kernel_forward_and_backward():
    torch.manual_seed(0)
    n = 32 * 128
    x = torch.randn(32, 128, requires_grad=True)
    drop = torch.nn.Dropout(0.25)

    def fn():
        drop(x).sum().backward()
    p = profile_callable(fn)
    assert p["top_ops"]["native_dropout (booked)"] == 1 and p["top_ops"]["native_dropout_backward (booked)"] == 1
    assert p["top_ops"]["bernoulli_"] == 1 and p["top_ops"]["div_"] == 1  # what the CPU ran
    ew = [k for k in p["kernels"] if k["cls"] == "elementwise_norm"]
    # booked: dropout (x in, out, a 1-byte mask), sum, ones_like/expand for the gradient, dropout backward
    # forward and backward, one group of two kernels: 4-byte data in and out, a 1-byte mask
    assert {"count": 2, "bytes": 2 * (4 * n + 4 * n + n)} in [{"count": k["count"], "bytes": k["bytes"]} for k in ew]
    assert sum(k["count"] for k in ew) == 4  # the two dropouts, sum, the sum's gradient (ones_like)
    assert p["host"]["ops"] == sum(k["count"] for k in p["kernels"])
    eval_mode = profile_callable(lambda: torch.nn.functional.dropout(x, 0.25, training=False).sum())
    assert "native_dropout (booked)" not in eval_mode["top_ops"]


def test_a_bernoulli_draw_that_is_not_dropout_stays_as_it_ran():
    x = torch.empty(100)
    p = profile_callable(lambda: x.bernoulli_(0.3).sum())
    assert p["top_ops"].get("native_dropout (booked)") is None
    assert sum(k["count"] for k in p["kernels"]) == 2  # bernoulli_, sum


def test_an_lstm_is_recorded_as_kernels_and_a_chain_per_layer():
    torch.manual_seed(0)
    T, B, NI, H = 9, 4, 5, 6
    lstm = torch.nn.LSTM(NI, H, num_layers=2, batch_first=True)
    x = torch.randn(B, T, NI)
    p = profile_callable(lambda: lstm(x)[0].sum().backward())
    # one chain per layer (both layers' steps are alike but read different inputs), T dependent steps each
    assert sorted((c["what"], c["count"], c["steps"]) for c in p["chains"]) == [("lstm", 2, T), ("lstm_backward", 2, T)]
    assert all(c["steps"] == T and c["autocast"] == "lower" and c["cls"] == "matmul_attention" for c in p["chains"])
    # the same FLOPs as the counter: kernels + chains, nothing twice
    work = sum(k["flops"] for k in p["kernels"] if k["cls"] == "matmul_attention")
    work += sum(c["count"] * c["steps"] * c["flops_per_step"] for c in p["chains"])
    assert work == p["flops"] == count_flops(lambda: lstm(x)[0].sum().backward()).total
    assert p["new_formula_flops"] == p["flops"]  # all of it from the formulas torch lacks


def test_kernels_are_grouped_by_class_dtype_autocast_and_size():
    a, b = torch.randn(64, 64), torch.randn(256, 256)

    def fn():
        for _ in range(3):
            a @ a
        b @ b
    p = profile_callable(fn)
    mm = sorted((k for k in p["kernels"] if k["cls"] == "matmul_attention"), key=lambda k: k["count"])
    assert [(k["count"], k["flops"]) for k in mm] == [(1, 2 * 256 ** 3), (3, 3 * 2 * 64 ** 3)]
    assert mm[1]["bytes"] == 3 * 3 * 4 * 64 * 64 and all(k["autocast"] == "lower" for k in mm)


def test_the_artifact_holds_exactly_the_schema_keys():
    _, step = _adamw_step("foreach")
    p = profile_callable(step, precision="fp32")
    art = profile_artifact(p)
    assert tuple(art) == WORKLOAD_PROFILE_KEYS
    assert art["schema"] == 1 and art["profiled_on"] == "cpu" and art["complete"] is True
    assert art["incomplete_reasons"] == []
    for k in art["kernels"]:
        assert set(k) == {"cls", "dtype", "autocast", "count", "flops", "bytes"}


class _Bypassing:
    """A model whose update runs where the dispatcher does not see it (as a CUDA graph replay or a Triton
    kernel would): the matmul below records nothing."""

    def __init__(self, graphs=False, kernel="torch"):
        self.w = torch.randn(32, 32)
        self.graphs, self.kernel = graphs, kernel

    def info(self):
        return {"cuda_graphs": self.graphs, "kernel_resolved": self.kernel}

    def train_epoch(self):
        with torch._C._DisableTorchDispatch():
            (self.w @ self.w).sum()


def test_a_profile_whose_kernels_bypass_the_dispatcher_is_incomplete():
    cpu = torch.device("cpu")
    plain = profile_epoch(_Bypassing(), cpu, "fp32", bypass_reasons(_Bypassing()))
    assert plain["complete"] is True and plain["kernels"] == []  # the bypass itself is invisible...
    graphs = _Bypassing(graphs=True)
    p = profile_epoch(graphs, cpu, "fp32", bypass_reasons(graphs))
    assert p["complete"] is False and p["incomplete_reasons"] == [INCOMPLETE_CUDA_GRAPHS]  # ...the flag marks it
    triton = _Bypassing(kernel="triton")
    assert "triton" in bypass_reasons(triton)[0]
    assert bypass_reasons(_Bypassing(), compile=True) == [INCOMPLETE_COMPILE]
    art = incomplete_artifact([INCOMPLETE_COMPILE], cpu, "bf16")
    assert art["complete"] is False and art["precision"] == "bf16" and tuple(art) == WORKLOAD_PROFILE_KEYS


@pytest.mark.parametrize(("name", "size"), [("dqn", "small"), ("ppo", "small"), ("dqn", "tiny"), ("mamba2", "tiny"),
                                          ("ppo", "tiny"), ("tft", "tiny"), ("tlob", "tiny")])
@pytest.mark.slow
def test_a_few_steps_scaled_book_what_the_whole_epoch_books(name, size):
    """The profile of a few steps per loop, scaled by the loop's length, equals the whole epoch's profile
    (FLOPs, bytes, ops, kernel groups, host syncs) for every built-in model (tiny: 7 to 37 steps per loop;
    the RL models' small sizes too: 100 steps, and 64 environment steps with 17 minibatches x 4 passes)."""
    from torch.utils.flop_counter import FlopCounterMode

    from helpers.models import build_model
    from trainbench.measure.op_formulas import flop_mapping
    from trainbench.measure.workload import counted_flops, profile_epoch

    torch.set_num_threads(1)
    m = build_model(name, size=size)
    m.train_epoch()  # the steady state a run profiles in: optimiser state exists
    torch_counts = (name, size) in (("mamba2", "tiny"), ("ppo", "tiny"))  # a convolution, an RL epoch: enough
    with FlopCounterMode(display=False, custom_mapping=flop_mapping()) if torch_counts else contextlib.nullcontext() \
            as counter:  # the count torch's own counter gives, as the profile took it before it counted itself
        whole = profile_epoch(m, torch.device("cpu"), scaled=False)
    scaled = profile_epoch(m, torch.device("cpu"))
    assert "steps scaled" in scaled["method"] and whole["method"] == "real tensors; whole epoch"
    if torch_counts:
        assert whole["flops"] == counted_flops(counter.get_flop_counts()["Global"]) > 0
    for key in ("flops", "bytes", "ops", "new_formula_flops", "host", "classes", "kernels", "chains", "optimizer"):
        assert scaled[key] == whole[key], key


@pytest.mark.parametrize("name", ["dqn", "mamba2", "tft"])  # one_hot, a convolution, dropout
@pytest.mark.slow
def test_fake_tensors_book_the_real_epoch(name):
    """Traced on fake tensors (a copy of the model: shapes only), the scaled epoch books the FLOPs the real one
    does, and its bytes within 0.5%: a few ops take another path on fakes (``one_hot`` checks its classes by
    reading them on real tensors, a host read; a few ops run decomposed), which the fakes cannot follow exactly."""
    from helpers.models import build_model
    from trainbench.measure.workload import profile_epoch

    torch.set_num_threads(1)
    m = build_model(name)
    m.train_epoch()
    before = [p.detach().clone() for p in m.module.parameters()]
    fake = profile_epoch(m, torch.device("cpu"), fake=True)
    assert all(torch.equal(a, b) for a, b in zip(before, m.module.parameters(), strict=True))  # a copy ran
    real = profile_epoch(m, torch.device("cpu"))
    assert fake["mode"] == "fake tensors" and real["mode"] == "real tensors"
    assert fake["method"].startswith("fake tensors; train_epoch: steps scaled")
    assert fake["flops"] == real["flops"] > 0 and fake["new_formula_flops"] == real["new_formula_flops"]
    assert fake["bytes"] == pytest.approx(real["bytes"], rel=5e-3)


def test_ops_that_need_values_fall_back_to_real_tensors_and_say_so():
    from trainbench.measure.workload import profile_epoch

    class NeedsValues:
        def __init__(self):
            self.w = torch.randn(8, 8)

        def train_epoch(self):
            keep = torch.nonzero(self.w > 0)  # a data-dependent shape: fakes cannot know it
            return self.w[keep[:, 0]] @ self.w

    p = profile_epoch(NeedsValues(), torch.device("cpu"), fake=True)
    assert p["mode"].startswith("real tensors (fake tensors failed: ") and p["flops"] > 0
    assert p["method"].startswith(p["mode"] + "; train_epoch: whole")


def test_a_pass_without_a_loop_over_steps_is_profiled_whole():
    from trainbench.measure.workload import sampled_trace

    step = _step()
    step()
    trace, counts, how = sampled_trace(step, None)
    assert how == "whole (no loop over identical steps)"
    assert sum(counts.values()) == profile_callable(step)["flops"] > 0
    assert trace.rows[("matmul_attention", "fp32")]["ops"] == 5  # the step ran once, whole

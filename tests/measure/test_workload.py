"""The workload profile: FLOPs, bytes and ops per op class and dtype, outside the timed epochs."""

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

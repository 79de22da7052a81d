"""What one eager op costs this host (measure/dispatch.py): a tiny training step timed and counted."""

import pytest
import torch

from trainbench.measure.dispatch import dispatch_us_per_op


def test_the_dispatch_cost_is_the_tiny_steps_time_over_its_profiled_ops_and_leaves_the_runs_generator_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    d = dispatch_us_per_op(steps=3, rounds=3)
    assert torch.equal(torch.get_rng_state(), before)  # the tiny layers' init drew from a forked generator
    # forward (2 matmuls, tanh, the loss) and backward: about a dozen kernels, whatever the torch version's booking
    assert 6 <= d["ops_per_step"] <= 40, d
    assert d["step_us"] > 0 and d["us_per_op"] == pytest.approx(d["step_us"] / d["ops_per_step"])

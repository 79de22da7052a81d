"""Data parallelism on a real gloo process group (two spawned ranks on this CPU, real all-reduce): two ranks at
a global batch reproduce one process's losses at that batch (a supervised model), PPO's ranks collect their own
rollouts and keep one set of weights; the harness's epoch is the slowest rank's (docs/distributed.md)."""

from __future__ import annotations

import math

import pytest

from helpers.ddp import run_one, run_ranks
from trainbench.core.vocab import Outcome, Series

#: tiny TFT, no dropout (dropout draws differ between one process and a rank's share of the batch)
TFT = ("model.dropout=0", "model.batch_size=256")
#: tiny PPO at a global minibatch of 32 over 8 environments
PPO = ("model.batch_size=32", "model.num_envs=8")
EPOCHS = 2


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Both models on the same two ranks (they start once): {model: [rank 0's result, rank 1's]}."""
    tft, ppo = run_ranks(tmp_path_factory.mktemp("ranks"), (("tft", TFT, EPOCHS), ("ppo", PPO, EPOCHS)))
    return {"tft": tft, "ppo": ppo}


def test_two_ranks_reproduce_one_process_at_the_same_global_batch_tft(two_ranks):
    ranks = two_ranks["tft"]
    one = run_one("tft", TFT, EPOCHS)
    assert [r["outcome"] for r in ranks] == [Outcome.COMPLETED] * 2
    assert [r["train_batches"] for r in ranks] == [[128], [128]]  # each rank trains on its half of 256
    for key in (Series.LOSS, Series.GRAD_NORM, Series.VAL_LOSS):
        assert ranks[0]["series"][key] == pytest.approx(one.series[key], rel=1e-4, abs=1e-6), key
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], abs=1e-7)  # one model on both ranks
    # the epoch's time is the slowest rank's, each rank's own kept; the exposed all-reduce time is within it
    times, per_rank = ranks[0]["series"][Series.EPOCH_TIME_MS], ranks[0]["ranks"]
    assert times == [max(a, b) for a, b in zip(*per_rank, strict=True)]
    assert all(0 <= c <= t for c, t in zip(ranks[0]["series"][Series.COMM_EXPOSED_MS], times, strict=True))


def test_ppo_ranks_collect_their_own_rollouts_and_average_gradients(two_ranks):
    ranks = two_ranks["ppo"]
    one = run_one("ppo", PPO, EPOCHS)
    assert [r["outcome"] for r in ranks] == [Outcome.COMPLETED] * 2
    assert [r["train_batches"] for r in ranks] == [[16], [16]]  # each rank its half of the minibatch of 32
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], abs=1e-7)  # gradients averaged: one model
    # the ranks' rollouts differ from one process's (each rank its own environments, seeded seed + rank), so
    # the losses are close, not equal: the same global minibatch, the same number of updates
    for key in (Series.LOSS, "entropy"):
        two, single = ranks[0]["series"][key], one.series[key]
        assert all(math.isfinite(v) for v in two)
        assert two != single
        assert two == pytest.approx(single, rel=0.5, abs=0.05), key

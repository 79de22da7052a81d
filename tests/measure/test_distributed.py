"""Data parallelism on a real gloo process group (two spawned ranks on this CPU, real all-reduce): two ranks at
a global batch reproduce one process's losses at that batch (a supervised model), PPO's ranks collect their own
rollouts and keep one set of weights; each rank validates its half of the held-out windows and every rank gets the
one-process ``val_loss``; the harness's epoch is the slowest rank's (docs/distributed.md)."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.ddp import run_one, run_ranks
from helpers.fakes import FakeTrainable
from helpers.models import build_model
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.core.errors import ConfigError
from trainbench.core.vocab import Outcome, Series
from trainbench.measure.distributed import CommTimer, DistContext, resolve_backend
from trainbench.measure.harness import run_epochs

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


@pytest.fixture(scope="module")
def one_tft():
    """The same TFT in this process: the harness's result."""
    return run_one("tft", TFT, EPOCHS)


@pytest.mark.slow
def test_two_ranks_reproduce_one_process_at_the_same_global_batch_tft(two_ranks, one_tft):
    ranks = two_ranks["tft"]
    one = one_tft
    assert [r["outcome"] for r in ranks] == [Outcome.COMPLETED] * 2
    assert [r["train_batches"] for r in ranks] == [[128], [128]]  # each rank trains on its half of 256
    for key in (Series.LOSS, Series.GRAD_NORM, Series.VAL_LOSS):
        assert ranks[0]["series"][key] == pytest.approx(one.series[key], rel=1e-4, abs=1e-6), key
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], abs=1e-7)  # one model on both ranks
    # the epoch's time is the slowest rank's, each rank's own kept; the exposed all-reduce time is within it
    times, per_rank = ranks[0]["series"][Series.EPOCH_TIME_MS], ranks[0]["ranks"]
    assert times == [max(a, b) for a, b in zip(*per_rank, strict=True)]
    assert all(0 <= c <= t for c, t in zip(ranks[0]["series"][Series.COMM_EXPOSED_MS], times, strict=True))


def test_two_ranks_validate_half_the_windows_each_with_the_one_process_val_loss(two_ranks, one_tft):
    ranks = two_ranks["tft"]
    n = ranks[0]["val_windows"]
    assert n >= 2 and [r["val_windows"] for r in ranks] == [n, n]
    halves = [n - n // 2, n // 2]  # contiguous shares, the first rank taking the odd one
    assert [r["evaluated_windows"] for r in ranks] == [EPOCHS * h for h in halves]
    # the ranks' loss sums are added: every rank holds the loss over all the windows, one process's to float tolerance
    for r in ranks:
        assert r["series"][Series.VAL_LOSS] == pytest.approx(one_tft.series[Series.VAL_LOSS], rel=1e-5, abs=1e-7)


def test_each_validation_window_goes_to_exactly_one_rank():
    items = torch.arange(7)
    shares = [DistContext(r, 3, r, "gloo", torch.device("cpu")).shard_eval(items) for r in range(3)]
    assert [s.tolist() for s in shares] == [[0, 1, 2], [3, 4], [5, 6]]
    few = [DistContext(r, 3, r, "gloo", torch.device("cpu")).shard_eval(torch.arange(2)) for r in range(3)]
    assert [s.tolist() for s in few] == [[0, 1]] * 3  # fewer windows than ranks: every rank evaluates them all


def test_a_data_parallel_model_that_validates_unsharded_fails_the_run():
    class Rank:  # what the harness reads of a rank before the exchange
        sharded_evals = 0  # the fake's validation pass evaluates every window: it never asks for its share

    r = run_epochs(FakeTrainable([1.0], with_eval=True), torch.device("cpu"), 2, 0, dist=Rank())
    assert r.outcome == Outcome.FAILED and "did not shard the held-out windows" in r.error


@pytest.mark.slow
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


@pytest.mark.gpu
def test_nccl_ranks_time_their_all_reduce_with_cuda_events(tmp_path):
    """On every GPU of the machine (one is enough: a world of 1 still all-reduces through NCCL): the CUDA-event
    path of the communication hook, and the ranks' losses against one process on cuda:0 at the same global batch."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    world = torch.cuda.device_count()
    overrides = ("model.dropout=0", f"model.batch_size={128 * world}")
    (ranks,) = run_ranks(tmp_path, (("tft", overrides, EPOCHS),), world=world, device_type="cuda")
    one = run_one("tft", overrides, EPOCHS, device=torch.device("cuda", 0))
    assert [r["outcome"] for r in ranks] == [Outcome.COMPLETED] * world
    assert ranks[0]["series"][Series.LOSS] == pytest.approx(one.series[Series.LOSS], rel=1e-3)
    times = ranks[0]["series"][Series.EPOCH_TIME_MS]
    comm = ranks[0]["series"][Series.COMM_EXPOSED_MS]
    assert all(math.isfinite(c) and 0 <= c <= t for c, t in zip(comm, times, strict=True))


@pytest.mark.parametrize(("overrides", "words"), [
    (["model=tft", "model.batch_size=63"], "a multiple of 2"),
    (["model=tft", "model.batch_size=auto"], "model.batch_size=auto does not combine"),
])
def test_a_global_batch_that_does_not_split_is_refused_with_the_fix(overrides, words):
    with pytest.raises(ConfigError, match=words):
        validate(compose_run([*overrides, "trainer.distributed.nproc=2"]))


def test_ppo_refuses_environments_that_do_not_split_and_target_kl():
    class Two:  # a rank's context: what the model reads of it at build
        world_size, rank = 2, 0

        @staticmethod
        def wrap(module):
            return module

    with pytest.raises(ConfigError, match="num_envs=7 .* multiple of 2"):
        build_model("ppo", "model.num_envs=7", "model.batch_size=32", dist=Two())
    with pytest.raises(ConfigError, match="target_kl does not combine"):
        build_model("ppo", "model.num_envs=8", "model.batch_size=32", "model.target_kl=0.02", dist=Two())


def test_backend_auto_is_nccl_on_cuda_and_gloo_on_a_cpu():
    assert (resolve_backend("auto", "cuda"), resolve_backend("auto", "cpu")) == ("nccl", "gloo")
    with pytest.raises(ConfigError, match="nccl needs CUDA"):
        resolve_backend("nccl", "cpu")


def test_exposed_communication_is_the_tail_after_the_last_launch():
    import torch

    timer = CommTimer(2, torch.device("cpu"))
    ms = 1_000_000  # ns
    # step 1: last bucket launched at 10 ms, all-reduces done at 4 ms and 13 ms -> 3 ms exposed
    # step 2: everything done before the last launch (hidden by the backward) -> 0
    timer._steps = [[10 * ms, [4 * ms, 13 * ms]], [30 * ms, [25 * ms, 29 * ms]]]
    assert timer.take_epoch_ms() == pytest.approx(3.0)
    assert timer.take_epoch_ms() == 0.0  # the next epoch starts empty

"""PPO: GAE and the clipped objective against hand-worked numbers, an objective-raising update, the
device-side target-KL stop, epoch outputs and determinism."""

import math

import pytest
import torch

from helpers.models import model_config
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import BuildContext, Trainable
from trainbench.models.ppo import (
    build,
    clipped_surrogate,
    clipped_value_loss,
    gae,
    normalise,
    policy_diagnostics,
)
from trainbench.models.runtime import seed_everything


def _agent(*overrides: str, seed: int = 0):
    """PPO at its `tiny` size with a rollout of 8 environments x 16 steps and two passes over it."""
    cfg = model_config("ppo", "model.rollout_steps=16", "model.update_epochs=2", *overrides)
    return build(cfg, make_market_data(1500), BuildContext(device=torch.device("cpu"), seed=seed))


def test_gae_hand_worked_with_a_terminal_in_the_middle():
    # gamma 0.9, lambda 0.8; rewards 1, 2, 3; values 0.5, 1.0, 1.5; value after the rollout 2.0.
    # Env 0: step 1 ends its episode (dones = 0, 1, 0). Env 1: no terminal.
    # env 0, t=2: delta = 3 + 0.9*2.0 - 1.5 = 3.3                      A2 = 3.3
    #        t=1: delta = 2 + 0 (terminal: no bootstrap) - 1.0 = 1.0    A1 = 1.0 (nothing inherited from A2)
    #        t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4                      A0 = 1.4 + 0.9*0.8*1.0 = 2.12
    #        returns = A + V = 2.62, 2.0, 4.8
    # env 1, t=2: A2 = 3.3; t=1: delta = 2 + 0.9*1.5 - 1.0 = 2.35, A1 = 2.35 + 0.72*3.3 = 4.726
    #        t=0: delta = 1.4, A0 = 1.4 + 0.72*4.726 = 4.80272
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    values = torch.tensor([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5]])
    dones = torch.tensor([[False, False], [True, False], [False, False]])
    adv, ret = gae(rewards, values, dones, torch.tensor([2.0, 2.0]), gamma=0.9, lam=0.8)
    assert torch.allclose(adv[:, 0], torch.tensor([2.12, 1.0, 3.3]), atol=1e-6)
    assert torch.allclose(ret[:, 0], torch.tensor([2.62, 2.0, 4.8]), atol=1e-6)
    assert torch.allclose(adv[:, 1], torch.tensor([4.80272, 4.726, 3.3]), atol=1e-5)


def test_gae_terminal_last_step_ignores_next_value():
    adv, _ = gae(torch.tensor([[1.0]]), torch.tensor([[0.25]]), torch.tensor([[1.0]]), torch.tensor([100.0]),
                 gamma=0.99, lam=0.95)
    assert adv.item() == pytest.approx(0.75)


def test_clipped_surrogate_matches_the_formula_on_both_clip_sides():
    c = 0.2
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.5, 1.1])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0])
    old = torch.zeros(5)
    new = ratio.log().requires_grad_()
    # min(r*A, clip(r)*A): 1.2 (clipped above), -0.8 (clipped below), 0.5, -1.5, 2.2 (unclipped)
    loss = clipped_surrogate(new, old, adv, c)
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 0.5 - 1.5 + 2.2) / 5, abs=1e-6)
    direct = -torch.min(ratio * adv, ratio.clamp(1 - c, 1 + c) * adv).mean()
    assert torch.allclose(loss, direct)
    loss.backward()
    # d/d(logp) of -r*A/5 is -r*A/5 where unclipped; zero where the clip binds
    assert torch.allclose(new.grad, torch.tensor([0.0, 0.0, -0.1, 0.3, -0.44]), atol=1e-6)
    kl, frac = policy_diagnostics(new.detach(), old, c)
    assert frac.item() == pytest.approx(0.8)
    assert kl.item() == pytest.approx(((ratio - 1) - ratio.log()).mean().item())


def test_clipped_value_loss_takes_the_larger_error():
    new_v, old_v, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 0.5])
    # sample 0: unclipped error 0, clipped value 0.2 -> error 0.64; sample 1: both 0.25
    assert clipped_value_loss(new_v, old_v, ret, 0.2).item() == pytest.approx(0.5 * (0.64 + 0.25) / 2)
    assert clipped_value_loss(new_v, old_v, ret, 0.2, clip=False).item() == pytest.approx(0.5 * 0.25 / 2)


def _surrogate_on_rollout(agent):
    s, c = agent.storage, agent.cfg
    adv, _ = gae(s.rewards, s.values, s.dones, s.next_value, c.gamma, c.gae_lambda)
    with torch.no_grad():
        logp_all, _ = agent.policy(s.obs.flatten(0, 1))
        new = logp_all.gather(1, s.actions.reshape(-1, 1)).squeeze(1)
        return -clipped_surrogate(new, s.logprobs.reshape(-1), normalise(adv.reshape(-1)), c.clip_coef)


def test_one_update_raises_the_surrogate_objective():
    # one full-batch gradient step, no entropy bonus: the step follows the surrogate's gradient
    agent = _agent("model.batch_size=128", "model.update_epochs=1", "model.ent_coef=0.0", "model.lr=1e-3")
    agent.collect()
    before = _surrogate_on_rollout(agent)
    assert abs(before.item()) < 1e-5  # ratio 1 everywhere: the mean of normalised advantages
    agent.learn_rollout()
    after = _surrogate_on_rollout(agent)
    assert after.item() > before.item() + 1e-3


def test_target_kl_masks_later_passes_on_the_device():
    # with a tiny target, everything after the first pass is undone: same weights as a single pass
    seed_everything(0, deterministic=False)
    a = _agent("model.update_epochs=3", "model.target_kl=1e-12")
    seed_everything(0, deterministic=False)
    b = _agent("model.update_epochs=1")
    a.collect()
    b.collect()
    out = a.learn_rollout()
    b.learn_rollout()
    for pa, pb in zip(a.ac.parameters(), b.ac.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert out["kl_stopped"].item() == pytest.approx(2 / 3)


def test_epoch_returns_device_scalars_and_fixed_work():
    agent = _agent()
    assert isinstance(agent, Trainable)
    out = agent.train_epoch()
    keys = {"loss", Series.GRAD_NORM, "loss_policy", "loss_value", "entropy", "approx_kl", "clip_frac",
            "episode_reward", "reward_mean", "lr"}
    assert keys <= set(out)
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 for v in out.values())
    assert all(math.isfinite(v.item()) for v in out.values())
    assert agent.samples_per_epoch == 8 * 16
    info = agent.info()
    assert info["updates_per_epoch"] == 2 * (128 // 32) and info["samples_dropped_per_pass"] == 0
    # staggered episode starts: a 16-step rollout of 20-bar episodes already finishes some of them
    assert out["episode_reward"].item() != 0.0
    assert out["entropy"].item() == pytest.approx(math.log(3), abs=0.01)  # near-uniform initial policy


def test_lr_anneals_linearly_over_target_epochs():
    agent = _agent("model.target_epochs=4", "model.lr=1e-3")
    lrs = [agent.train_epoch()["lr"].item() for _ in range(3)]
    assert lrs == pytest.approx([1e-3, 0.75e-3, 0.5e-3])



def test_too_few_bars_is_refused_with_the_count():
    with pytest.raises(ModelDataError, match="5008 consecutive bars"):
        _agent("model.episode_len=5000")


def test_minibatch_larger_than_rollout_is_refused():
    with pytest.raises(ConfigError, match="larger than one rollout"):
        _agent("model.batch_size=129")  # 8 x 16 + 1

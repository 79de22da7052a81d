"""DQN: the device replay buffer, the double-DQN target, a TD-loss-lowering update, determinism."""

import pytest
import torch

from helpers.models import model_config
from trainbench.core.errors import ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import BuildContext
from trainbench.models.dqn import ReplayBuffer, build


def _agent(*overrides: str, seed: int = 0):
    """DQN at its `tiny` size (3 updates of 32 transitions per epoch, 8 environments, 64 prefilled)."""
    return build(model_config("dqn", *overrides), make_market_data(1500), BuildContext(device=torch.device("cpu"), seed=seed))


def test_replay_buffer_is_circular_and_samples_stored_rows():
    buf = ReplayBuffer(5, torch.device("cpu"))
    for i in range(3):  # 3 x 2 transitions into 5 slots: the oldest one is overwritten
        v = torch.tensor([2 * i, 2 * i + 1])
        buf.add(v, v % 3 - 1, v % 3, v.float(), v % 2 == 0, v % 2 == 1)
    assert buf.size == 5 and buf.ptr == 1
    assert buf.bar.tolist() == [5, 1, 2, 3, 4]
    s = buf.sample(200, torch.Generator().manual_seed(0))
    assert set(s["bar"].tolist()) == {1, 2, 3, 4, 5}
    assert torch.equal(s["reward"], s["bar"].float())
    assert torch.equal(s["terminated"], (s["bar"] % 2 == 0).float())
    assert torch.equal(s["truncated"], (s["bar"] % 2 == 1).float())


def test_td_target_uses_online_argmax_and_target_value():
    agent = _agent()
    batch = agent.buffer.sample(16, agent.gen)
    with torch.no_grad():
        for p in agent.target.parameters():
            p.mul_(0.5)  # make the two networks differ
    next_obs = agent.env.observe_at(batch["bar"] + 1, batch["action"] - 1)
    a_star = agent.q(next_obs).argmax(1)
    expected_target = batch["reward"] + agent.cfg.gamma * (1 - batch["terminated"]) * \
        agent.target(next_obs).gather(1, a_star[:, None]).squeeze(1)
    q_sa = agent.q(agent.env.observe_at(batch["bar"], batch["pos"])).gather(1, batch["action"][:, None]).squeeze(1)
    loss, _ = agent.td_loss(batch)
    assert torch.allclose(loss, torch.nn.functional.smooth_l1_loss(q_sa, expected_target.detach()), atol=1e-6)


def _constant_q(net, values):
    """Make ``net`` output ``values`` (3,) for every observation (last layer: zero weights, bias = values)."""
    with torch.no_grad():
        net.net[-1].weight.zero_()
        net.net[-1].bias.copy_(torch.tensor(values))


def test_td_target_bootstraps_through_a_time_limit_but_not_a_terminal_state():
    # A hand-worked transition: reward 1.5, action 0. Online Q(s', .) = (0.5, 0.1, 0.9) picks a* = 2;
    # the target network values it at Q_target(s', 2) = 3; Q(s, 0) = 0.5; gamma 0.99, Huber delta 1.
    #   truncated (time limit): target = 1.5 + 0.99 * 3 = 4.47, error 3.97 -> Huber 3.97 - 0.5 = 3.47
    #   terminated:             target = 1.5,               error 1.0  -> Huber 0.5 * 1.0^2 = 0.5
    agent = _agent("model.gamma=0.99")
    _constant_q(agent.q, [0.5, 0.1, 0.9])
    _constant_q(agent.target, [1.0, 2.0, 3.0])
    one = {"bar": agent.buffer.bar[:1], "pos": torch.tensor([0]), "action": torch.tensor([0]),
           "reward": torch.tensor([1.5])}
    truncated, _ = agent.td_loss({**one, "terminated": torch.tensor([0.0]), "truncated": torch.tensor([1.0])})
    terminated, _ = agent.td_loss({**one, "terminated": torch.tensor([1.0]), "truncated": torch.tensor([0.0])})
    assert truncated.item() == pytest.approx(3.47, abs=1e-5)
    assert terminated.item() == pytest.approx(0.5, abs=1e-6)


def test_buffer_records_the_time_limit_as_truncated_not_terminated():
    agent = _agent("model.episode_len=3", "model.learning_starts=0", "model.buffer_size=100")
    for _ in range(3):
        agent._env_step(torch.ones(agent.env.num_envs, dtype=torch.long))
    n = agent.buffer.size
    assert agent.buffer.truncated[:n].tolist() == [0.0] * 16 + [1.0] * 8  # the third step hit the limit
    assert not agent.buffer.terminated[:n].any()
    # the stored transition rebuilds s' at bar + 1, not the auto-reset observation
    assert torch.equal(agent.buffer.bar[16:24] + 1, agent.buffer.bar[:8] + 3)


def test_optimizer_step_lowers_td_loss_on_a_fixed_batch():
    agent = _agent("model.lr=1e-3", "model.tau=1e-6")
    batch = agent.buffer.sample(64, agent.gen)
    with torch.no_grad():
        before, _ = agent.td_loss(batch)
    for _ in range(20):
        agent.optimizer_step(batch)
    with torch.no_grad():
        after, _ = agent.td_loss(batch)
    assert after.item() < 0.8 * before.item()


def test_epoch_returns_device_scalars_and_fixed_work():
    agent = _agent()
    out = agent.train_epoch()
    assert {"loss", Series.GRAD_NORM, "loss_td", "epsilon"} <= set(out)
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 for v in out.values())
    assert agent.samples_per_epoch == 3 * 32
    assert agent.buffer.size == 64 + 3 * 8



def test_too_few_bars_is_refused_with_the_count():
    with pytest.raises(ModelDataError, match="5008 consecutive bars"):
        _agent("model.episode_len=5000")

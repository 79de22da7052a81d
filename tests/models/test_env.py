"""The bar-trading environment: rewards by hand, auto-reset, episodes inside one segment."""

import torch

from trainbench.data.in_memory import make_market_data
from trainbench.models.env import BarTradingEnv


def _env(num_envs=4, window=5, episode_len=3, cost=0.5):
    md = make_market_data(400)
    g = torch.Generator().manual_seed(0)
    return BarTradingEnv(md.features, num_envs, window, episode_len, cost, g), md.features


def test_reward_hand_worked_example():
    env, fs = _env()
    fs.close_ticks[:6] = torch.tensor([100.0, 102.0, 101.0, 101.0, 105.0, 104.0])
    t = torch.tensor([0, 1, 2, 3])
    pos = torch.tensor([0, 1, -1, 0])
    action = torch.tensor([2, 0, 0, 1])  # long, short, short, flat
    # bar 0->1 +2 ticks, long from flat: +2 - 0.5*1 = 1.5
    # bar 1->2 -1 tick, short from long: +1 - 0.5*2 = 0.0
    # bar 2->3 0 ticks, short from short: 0 - 0 = 0
    # bar 3->4 +4 ticks, flat from flat: 0
    r = env.rewards(t, pos, action)
    assert torch.allclose(r, torch.tensor([1.5, 0.0, 0.0, 0.0]))


def test_step_accumulates_and_auto_resets_after_episode_len():
    env, fs = _env(num_envs=8, episode_len=3)
    start_t = env.t.clone()
    total = torch.zeros(8)
    for k in range(3):
        expected = env.rewards(env.t, env.pos, torch.full((8,), 2))
        _, r, terminated, truncated = env.step(torch.full((8,), 2))
        assert torch.allclose(r, expected)
        total += r
        assert bool(truncated.all()) == (k == 2)  # the time limit truncates ...
        assert not terminated.any()  # ... and nothing terminates in this environment
        if k < 2:
            assert torch.equal(env.t, start_t + k + 1)
            assert bool((env.pos == 1).all())
    # after the reset every position is flat again and the finished returns were recorded
    assert bool((env.pos == 0).all())
    assert torch.allclose(env.pop_episode_stats(), total.mean())


def test_episode_stats_repeat_the_last_mean_when_no_episode_finished():
    """An epoch in which no episode ended repeats the last finished episodes' mean (it used to read 0, and
    DQN's curve alternated between its return and 0); before any episode ends the mean is 0."""
    env, _ = _env(num_envs=4, episode_len=3)
    assert env.pop_episode_stats().item() == 0.0
    for _ in range(3):
        env.step(torch.full((4,), 2))
    first = env.pop_episode_stats()
    assert first.item() != 0.0
    env.step(torch.full((4,), 2))  # no episode ends in this "epoch"
    assert torch.equal(env.pop_episode_stats(), first)
    env.step(torch.full((4,), 0))
    expected_second = env.ep_return.clone()  # not yet reset: the next step ends the second episodes
    _, r, _, truncated = env.step(torch.full((4,), 0))
    assert bool(truncated.all())
    assert torch.allclose(env.pop_episode_stats(), (expected_second + r).mean())


def test_episodes_never_cross_a_segment():
    env, fs = _env(num_envs=64, window=20, episode_len=50)
    for _ in range(200):
        seg_start = fs.segment[env.t - (env.window - 1)]
        seg_next = fs.segment[env.t + 1]
        assert torch.equal(seg_start, seg_next)
        assert bool(fs.is_train[env.t + 1].all())
        env.step(torch.randint(0, 3, (64,)))


def test_observation_is_window_and_position():
    env, fs = _env(window=5)
    obs = env.observe()
    assert obs.shape == (4, 5 * fs.n_features + 3)
    t0 = int(env.t[0])
    assert torch.equal(obs[0, : 5 * fs.n_features].view(5, -1), fs.values[t0 - 4:t0 + 1])
    assert torch.equal(obs[0, -3:], torch.tensor([0.0, 1.0, 0.0]))  # flat

"""The SAC learner: it learns a bandit, resumes exactly, refuses what it cannot do."""

from __future__ import annotations

import gin
import numpy as np
import pytest
import torch

from alf_async.algorithms.sac_learner import SACLearner
from alf_async.algorithms.sac_policy import SACPolicy
from alf_async.envs.spaces import ActionSpec
from alf_async.utils.validation import ConfigError

O, A = 3, 2
GOAL = np.array([0.5, -0.3], np.float32)


@pytest.fixture(autouse=True)
def small_networks():
    """(64, 64) networks keep these tests to seconds."""
    gin.clear_config()
    gin.bind_parameter("SquashedGaussianActor.hidden_sizes", (64, 64))
    gin.bind_parameter("TwinQNetwork.hidden_sizes", (64, 64))
    yield
    gin.clear_config()


def bandit_batch(rng: np.random.Generator, n: int) -> dict:
    """One-step episodes: reward -|a - GOAL|^2, always terminated."""
    obs = rng.normal(size=(n, O)).astype(np.float32)
    action = rng.uniform(-1, 1, size=(n, A)).astype(np.float32)
    return {"observation": obs, "action": action,
            "reward": -((action - GOAL) ** 2).sum(-1).astype(np.float32),
            "next_observation": obs, "terminated": np.ones(n, bool)}


def test_learns_the_best_action_of_a_bandit():
    learner = SACLearner(O, A, batch_size=128, learning_rate=3e-3, initial_alpha=0.01,
                         learn_alpha=False, seed=0)
    rng = np.random.default_rng(0)
    data = bandit_batch(rng, 4096)
    for _ in range(800):
        index = rng.integers(0, 4096, 128)
        stats = learner.train_step({k: v[index] for k, v in data.items()})
    policy = SACPolicy(O, A, deterministic=True)
    policy.load_weights(learner.weight_arrays())
    action, _, value = policy.act(rng.normal(size=(16, O)).astype(np.float32))
    assert np.abs(action.mean(0) - GOAL).max() < 0.08, action.mean(0)
    assert np.abs(action - GOAL).max() < 0.25, action
    assert (value == 0).all()
    assert learner.gradient_steps == 800 and np.isfinite(stats["critic_loss"])


def test_temperature_falls_when_entropy_is_above_target():
    learner = SACLearner(O, A, batch_size=64, seed=0, target_entropy=-20.0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        learner.train_step(bandit_batch(rng, 64))
    assert learner.alpha < 1.0


def test_state_dict_round_trip_continues_identically():
    rng = np.random.default_rng(2)
    batches = [bandit_batch(rng, 32) for _ in range(6)]
    a = SACLearner(O, A, batch_size=32, seed=3)
    for batch in batches[:3]:
        a.train_step(batch)
    state = a.state_dict()
    b = SACLearner(O, A, batch_size=32, seed=99)
    b.load_state_dict(state)
    fresh = SACLearner(O, A, batch_size=32, seed=99)
    for batch in batches[3:]:
        sa, sb, sf = a.train_step(batch), b.train_step(batch), fresh.train_step(batch)
        assert sb == sa
        assert sf != pytest.approx(sa, rel=1e-4, abs=1e-6)
    for pa, pb in zip(a.actor.parameters(), b.actor.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    assert b.gradient_steps == 6


def test_actors_act_uniformly_until_the_first_gradient_step():
    learner = SACLearner(O, A, seed=0)
    policy = SACPolicy(O, A, seed=1)
    policy.load_weights(learner.weight_arrays())
    obs = np.zeros((2000, O), np.float32)
    action, log_prob, _ = policy.act(obs)
    assert policy.uniform and action.min() >= -1 and action.max() <= 1
    assert abs(action.mean()) < 0.05 and abs(action.std() - 1 / np.sqrt(3)) < 0.03
    np.testing.assert_allclose(log_prob, -A * np.log(2), rtol=1e-6)
    learner.train_step(bandit_batch(np.random.default_rng(0), 256))
    policy.load_weights(learner.weight_arrays())
    policy.reseed(5)
    assert not policy.uniform
    action, log_prob, _ = policy.act(obs[:8])
    # The network's own samples: the learner's actor with the same noise.
    want, want_log_prob = learner.actor.sample(torch.from_numpy(obs[:8]),
                                               torch.Generator().manual_seed(5))
    np.testing.assert_allclose(action, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_prob, want_log_prob.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_refuses_discrete_actions_and_bad_settings():
    with pytest.raises(ConfigError, match="continuous"):
        SACLearner(O, ActionSpec("discrete", 1, (3,), (0,)))
    with pytest.raises(ConfigError, match="SACLearner.tau"):
        SACLearner(O, A, tau=0.0)
    with pytest.raises(ConfigError, match="SACLearner.batch_size"):
        SACLearner(O, A, batch_size=0)


def test_gsde_policy_holds_each_envs_draw_for_the_sample_interval():
    gin.bind_parameter("SquashedGaussianActor.use_sde", True)
    gin.bind_parameter("SquashedGaussianActor.initial_log_std", -1.0)
    gin.bind_parameter("SquashedGaussianActor.sde_sample_interval", 3)
    learner = SACLearner(O, A, seed=0)
    learner.train_step(bandit_batch(np.random.default_rng(0), 256))
    policy = SACPolicy(O, A, seed=1)
    policy.load_weights(learner.weight_arrays())
    assert not policy.uniform
    obs = np.zeros((2, O), np.float32)   # the same state in both envs
    actions = [policy.act(obs)[0] for _ in range(7)]
    # Held for 3 steps: steps 0-2 equal, 3-5 equal and new, 6 new again.
    for a, b in ((0, 1), (1, 2), (3, 4), (4, 5)):
        np.testing.assert_array_equal(actions[a], actions[b])
    for a, b in ((2, 3), (5, 6)):
        assert not np.allclose(actions[a], actions[b])
    # Each env has its own draw.
    assert not np.allclose(actions[0][0], actions[0][1])
    # Acting for one env at a time (an actor with env_splits = 2 names the
    # envs of each call): each env still holds its own draw for 3 of its steps.
    split = SACPolicy(O, A, seed=1)
    split.load_weights(learner.weight_arrays())
    assert split.per_env_exploration
    by_env = [np.concatenate([split.act(obs[k:k + 1], env_ids=np.array([k]))[0]
                              for k in (0, 1)]) for _ in range(7)]
    np.testing.assert_allclose(np.stack(by_env), np.stack(actions), rtol=1e-6, atol=1e-7)
    # Reseeding draws afresh from the new seed: the same actions again.
    policy.reseed(1)
    np.testing.assert_array_equal(policy.act(obs)[0], actions[0])
    # Deterministic acting ignores the draws: tanh(mean).
    player = SACPolicy(O, A, deterministic=True)
    player.load_weights(learner.weight_arrays())
    mean, _ = learner.actor.distribution(torch.from_numpy(obs))
    np.testing.assert_allclose(player.act(obs)[0], torch.tanh(mean).detach().numpy(),
                               rtol=1e-5, atol=1e-6)

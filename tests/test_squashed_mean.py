"""The PPO learner's ``mean_outside_box`` statistic (the fraction of the policy
mean's entries outside the action box [-1, 1], where the env clips the mean
itself) measures exactly that, is 0 once ``ActorNetwork.squash_mean`` keeps
the mean inside, and is absent for discrete actions."""

from __future__ import annotations

import math

import gin
import numpy as np
import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.envs.spaces import ActionSpec

T, K, OBS, A = 8, 8, 4, 3


@pytest.fixture(autouse=True)
def _clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _batch(rng: np.random.Generator, action_dim: int) -> dict:
    return {
        "observation": rng.standard_normal((T, K, OBS)).astype(np.float32),
        "action": rng.uniform(-1, 1, (T, K, action_dim)).astype(np.float32),
        "reward": rng.standard_normal((T, K)).astype(np.float32),
        "terminated": np.zeros((T, K), bool), "truncated": np.zeros((T, K), bool),
        "log_prob": np.full((T, K), -3.0, np.float32),
        "value": np.zeros((T, K), np.float32),
        "truncation_value": np.zeros((T, K), np.float32),
        "bootstrap_value": np.zeros(K, np.float32),
    }


def _learner(squash: bool) -> PPOLearner:
    """One gradient step on the whole batch, whose statistics are read before
    it changes the weights; an output layer large enough to leave the box."""
    gin.bind_parameter("ActorNetwork.squash_mean", squash)
    learner = PPOLearner(OBS, A, num_epochs=1, mini_batch_size=T * K,
                         normalize_observations=False)
    torch.manual_seed(0)
    with torch.no_grad():
        learner.model.actor.mean.weight.normal_(0.0, 0.5)
    return learner


@pytest.mark.parametrize("squash", [False, True])
def test_mean_outside_box_is_the_fraction_of_mean_entries_the_env_clips(squash):
    learner = _learner(squash)
    batch = _batch(np.random.default_rng(0), A)
    actor = learner.model.actor
    with torch.no_grad():
        raw = actor.mean(actor.body(torch.from_numpy(batch["observation"]).reshape(-1, OBS)))
    want = float((raw.abs() > 1.0).float().mean())
    assert 0.1 < want < 0.9  # the weights put part of the mean outside
    stats = learner.train(batch)
    assert stats["gradient_steps"] == 1
    if squash:
        assert stats["mean_outside_box"] == 0.0
    else:
        assert stats["mean_outside_box"] == pytest.approx(want, abs=1e-9)
    assert math.isfinite(stats["policy_loss"])


def test_discrete_actions_have_no_mean_outside_box():
    learner = PPOLearner(OBS, ActionSpec("discrete", 1, (3,), (0,)), num_epochs=1,
                         mini_batch_size=T * K)
    batch = _batch(np.random.default_rng(1), 1)
    batch["action"] = np.random.default_rng(1).integers(0, 3, (T, K, 1)).astype(np.float32)
    assert "mean_outside_box" not in learner.train(batch)

"""Actors run the policy the learner trains: the published weights rebuild it exactly.

In particular, with ``PPOLearner.normalize_observations=False`` the actors must see
the raw observations, as the learner does (no stand-in normalizer clipping them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.runtime.weight_store import pack_weights, unpack_weights

OBS, ACT = 5, 2


def _batch(T: int = 8, K: int = 4, scale: float = 50.0):
    rng = np.random.default_rng(0)
    return {
        "observation": (rng.standard_normal((T, K, OBS)) * scale).astype(np.float32),
        "action": rng.uniform(-1, 1, (T, K, ACT)).astype(np.float32),
        "reward": rng.standard_normal((T, K)).astype(np.float32),
        "terminated": np.zeros((T, K), bool),
        "truncated": np.zeros((T, K), bool),
        "log_prob": np.full((T, K), -2.0, np.float32),
        "value": np.zeros((T, K), np.float32),
        "truncation_value": np.zeros((T, K), np.float32),
        "bootstrap_value": np.zeros(K, np.float32),
    }


def test_pack_and_unpack_are_inverse():
    groups = {"param": {"w": torch.arange(6.0).reshape(2, 3)},
              "normalizer": {"mean": np.array([1.0, 2.0])}}
    arrays = pack_weights(groups)
    assert sorted(arrays) == ["normalizer/mean", "param/w"]
    back = unpack_weights(arrays)
    np.testing.assert_array_equal(back["param"]["w"], np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(back["normalizer"]["mean"], [1.0, 2.0])


@pytest.mark.parametrize("normalize", [False, True])
def test_actor_policy_equals_learner_policy(normalize):
    learner = PPOLearner(OBS, ACT, num_epochs=1, mini_batch_size=16,
                         normalize_observations=normalize)
    batch = _batch()
    learner.train(batch)  # updates the normalizer statistics when enabled
    policy = NeuralPolicy(OBS, ACT, deterministic=True)
    policy.load_weights(learner.weight_arrays())
    assert policy.normalize is normalize
    obs = batch["observation"][0]  # values far outside [-10, 10]
    assert np.abs(obs).max() > 20
    x = torch.from_numpy(obs)
    with torch.no_grad():
        if normalize:
            x = learner.normalizer.normalize(x)
        want_value = learner.model.predict_value(x).numpy()
        want_mean = learner.model.actor(x).mode().numpy()
    np.testing.assert_allclose(policy.value(obs), want_value, rtol=1e-5, atol=1e-5)
    action, _, _ = policy.act(obs)
    np.testing.assert_allclose(action, want_mean, rtol=1e-5, atol=1e-5)


def test_without_normalization_no_statistics_are_published():
    learner = PPOLearner(OBS, ACT, normalize_observations=False)
    assert not any(k.startswith("normalizer/") for k in learner.weight_arrays())

"""Lag-corrected PPO: V-trace and the decoupled objective, against values computed
by hand, and their on-policy equivalence with PPO2 / GAE."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.ppo_loss import clipped_surrogate_loss, decoupled_surrogate_loss
from alf_async.algorithms.value_ops import generalized_advantage_estimation, vtrace
from alf_async.utils.validation import ConfigError


def col(*values):
    """[T, 1] float tensor."""
    return torch.tensor(values, dtype=torch.float32).reshape(-1, 1)


def flags(*values):
    return torch.tensor(values, dtype=torch.bool).reshape(-1, 1)


def test_vtrace_by_hand_with_clipped_importance_weights():
    # ratios pi/mu = 2, 0.5, 1 -> rho = c = 1, 0.5, 1 (rho_bar = c_bar = 1)
    vs, adv = vtrace(col(math.log(2), math.log(0.5), 0.0), col(1, 2, 3), col(0.5, 1.0, 1.5),
                     flags(0, 0, 0), flags(0, 0, 0), col(0, 0, 0), torch.tensor([2.0]),
                     gamma=0.9)
    # deltas 1.4, 1.175, 3.3; A = 3.794, 2.66, 3.3
    np.testing.assert_allclose(vs.reshape(-1), [4.294, 3.66, 4.8], rtol=1e-5)
    np.testing.assert_allclose(adv.reshape(-1), [3.794, 5.32, 3.3], rtol=1e-5)


def test_vtrace_gae_shaped_advantages_by_hand():
    # ratios as above (rho = 1, 0.5, 1), lambda 0.5; TD errors 1.4, 2.35, 3.3;
    # adv[t] = TD error[t] + gamma * lambda * A[t + 1] (A: the corrections vs - V)
    vs, adv = vtrace(col(math.log(2), math.log(0.5), 0.0), col(1, 2, 3), col(0.5, 1.0, 1.5),
                     flags(0, 0, 0), flags(0, 0, 0), col(0, 0, 0), torch.tensor([2.0]),
                     gamma=0.9, trace_lambda=0.5, gae_advantages=True)
    # c = 0.5 * (1, 0.5, 1): A = 1.4 + 0.45 * 1.9175, 1.175 + 0.225 * 3.3, 3.3
    np.testing.assert_allclose(vs.reshape(-1), [0.5 + 2.262875, 1.0 + 1.9175, 4.8],
                               rtol=1e-5)
    np.testing.assert_allclose(adv.reshape(-1), [1.4 + 0.45 * 1.9175, 2.35 + 0.45 * 3.3, 3.3],
                               rtol=1e-5)


def test_vtrace_c_bar_below_rho_bar():
    vs, adv = vtrace(col(math.log(2), math.log(2)), col(1, 1), col(0, 0), flags(0, 0),
                     flags(0, 0), col(0, 0), torch.tensor([0.0]), gamma=1.0,
                     rho_bar=2.0, c_bar=1.0)
    np.testing.assert_allclose(vs.reshape(-1), [4.0, 2.0])
    np.testing.assert_allclose(adv.reshape(-1), [3.0, 1.0])


def test_vtrace_stops_at_termination_and_truncation():
    vs, adv = vtrace(col(0, 0, 0), col(1, 2, 3), col(0.5, 1.0, 1.5), flags(1, 0, 0),
                     flags(0, 1, 0), col(0, 7, 0), torch.tensor([2.0]), gamma=0.9)
    np.testing.assert_allclose(vs.reshape(-1), [1.0, 8.3, 4.8], rtol=1e-5)
    np.testing.assert_allclose(adv.reshape(-1), [0.5, 7.3, 3.3], rtol=1e-5)


@pytest.mark.parametrize("lam", [0.95, 1.0])
def test_vtrace_on_policy_equals_gae(lam):
    g = torch.Generator().manual_seed(0)
    T, K = 7, 3
    rewards, values = torch.randn(T, K, generator=g), torch.randn(T, K, generator=g)
    terminated = torch.rand(T, K, generator=g) < 0.15
    truncated = (torch.rand(T, K, generator=g) < 0.15) & ~terminated
    truncation_value, bootstrap = torch.randn(T, K, generator=g), torch.randn(K, generator=g)
    gae_adv, gae_ret = generalized_advantage_estimation(
        rewards, values, terminated, truncated, truncation_value, bootstrap, 0.99, lam)
    vs, adv = vtrace(torch.zeros(T, K), rewards, values, terminated, truncated,
                     truncation_value, bootstrap, 0.99, lam)
    torch.testing.assert_close(vs, gae_ret)
    if lam == 1.0:
        torch.testing.assert_close(adv, gae_adv)
    vs, adv = vtrace(torch.zeros(T, K), rewards, values, terminated, truncated,
                     truncation_value, bootstrap, 0.99, lam, gae_advantages=True)
    torch.testing.assert_close(vs, gae_ret)
    torch.testing.assert_close(adv, gae_adv)


def test_decoupled_loss_by_hand():
    log_prob = torch.log(torch.tensor([1.5, 0.7, 1.1])).requires_grad_()
    proximal = torch.zeros(3)
    behaviour = torch.log(torch.tensor([0.5, 2.0, 1.0]))
    advantages = torch.tensor([1.0, -1.0, 2.0])
    loss = decoupled_surrogate_loss(log_prob, proximal, behaviour, advantages, 0.2,
                                    max_importance_weight=1.5)
    # w = min(pi_prox/mu, 1.5) = 1.5, 0.5, 1; r = 1.5, 0.7, 1.1
    np.testing.assert_allclose(loss.detach().numpy(), [-1.5 * 1.2, 0.5 * 0.8, -2.2], rtol=1e-6)
    loss.sum().backward()
    # clipped where r > 1.2 with A > 0 and r < 0.8 with A < 0: no gradient there
    np.testing.assert_allclose(log_prob.grad.numpy(), [0.0, 0.0, -2.2], rtol=1e-6)


def test_decoupled_equals_ppo_without_lag():
    g = torch.Generator().manual_seed(1)
    log_prob, behaviour = torch.randn(50, generator=g), torch.randn(50, generator=g)
    advantages = torch.randn(50, generator=g)
    torch.testing.assert_close(
        decoupled_surrogate_loss(log_prob, behaviour, behaviour, advantages, 0.2, 1.0),
        clipped_surrogate_loss(log_prob, behaviour, advantages, 0.2))


def _batch(seed=0, T=8, K=4):
    rng = np.random.default_rng(seed)
    return {
        "observation": rng.standard_normal((T, K, 3)).astype(np.float32),
        "action": rng.uniform(-1, 1, (T, K, 2)).astype(np.float32),
        "reward": rng.standard_normal((T, K)).astype(np.float32),
        "terminated": rng.random((T, K)) < 0.1, "truncated": np.zeros((T, K), bool),
        "log_prob": np.zeros((T, K), np.float32), "value": np.zeros((T, K), np.float32),
        "truncation_value": np.zeros((T, K), np.float32),
        "bootstrap_value": np.zeros(K, np.float32),
    }


def _acted(batch, learner, numpy_inference=True, seed=0):
    """The batch re-acted as an actor with the learner's published weights
    does (``NeuralPolicy.act``: actions, log-probs and values; numpy inference
    by default, as actors run): on-policy data for that learner."""
    from alf_async.algorithms.policy import NeuralPolicy

    policy = NeuralPolicy(3, 2, seed=seed, numpy_inference=numpy_inference)
    policy.load_weights(learner.weight_arrays())
    for t in range(len(batch["observation"])):
        batch["action"][t], batch["log_prob"][t], batch["value"][t] = policy.act(
            batch["observation"][t])
    return batch


def _moving_batch(iteration):
    """A batch whose observations are far from the statistics of the earlier
    ones (mean 3 i, std 1 + i): the normalizer moves a lot when it adds them."""
    batch = _batch(seed=iteration)
    batch["observation"] = batch["observation"] * (1 + iteration) + 3.0 * iteration
    return batch


@pytest.mark.parametrize("version", ["current", None])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("mode,lam", [("decoupled", 0.95), ("vtrace_gae", 0.95),
                                      ("vtrace", 1.0)])
def test_on_policy_learner_step_equals_ppo2(mode, lam, normalize, version):
    """On-policy data (acted by the learner's weights, as in a sync run) takes
    PPO2's ("none") steps in every mode (vtrace only with gae_lambda = 1, where
    its advantages are GAE's), with observation normalization on and off, over
    iterations in which the normalizer's statistics move. ``version``: the batch
    comes with its behaviour version (the learner's iteration: the decoupled
    step is then PPO2's bit for bit) or without one (the learner recomputes
    pi_prox, equal to the actor's mu to float rounding)."""
    kwargs = dict(num_epochs=2, mini_batch_size=16, seed=4, gae_lambda=lam,
                  normalize_observations=normalize)
    ppo2 = PPOLearner(3, 2, lag_correction="none", **kwargs)
    corrected = PPOLearner(3, 2, lag_correction=mode, **kwargs)
    for iteration in range(3):
        batch = _acted(_moving_batch(iteration), ppo2, seed=iteration)
        corrected.weight_arrays()  # published too, as the training loop does
        acting_version = iteration if version == "current" else None
        ppo2.train(batch, acting_version)
        stats = corrected.train(batch, acting_version)
        assert stats["truncated_fraction"] == 0.0
        if version == "current":
            assert stats["importance_weight"] == 1.0 and stats["behaviour_kl"] == 0.0
    for (name, a), b in zip(ppo2.model.state_dict().items(),
                            corrected.model.state_dict().values()):
        if version == "current" and mode == "decoupled":
            assert torch.equal(a, b), name
        else:
            torch.testing.assert_close(a, b, msg=name)


def test_recompute_values_uses_the_current_value_network():
    learner = PPOLearner(3, 2, num_epochs=1, mini_batch_size=32, recompute_values=True,
                         normalize_observations=False)
    batch = _batch()
    batch["value"][:] = 1000.0  # stale nonsense; recomputing must ignore it
    stats = learner.train(batch)
    assert abs(stats["value_loss"]) < 100


def test_c_bar_above_rho_bar_is_refused():
    with pytest.raises(ConfigError, match=r"PPOLearner\.c_bar=2 must not exceed"):
        PPOLearner(3, 2, rho_bar=1.0, c_bar=2)


def test_unknown_advantage_moments_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"PPOLearner\.advantage_moments"):
        PPOLearner(3, 2, advantage_moments="target")


def test_behaviour_statistics_normalize_the_batch_as_the_actor_did():
    """observation_stats="behaviour" (the default): the batch is normalized with
    the statistics published with the acting version, not the ones updated with
    the batch ("updated")."""
    learner = PPOLearner(3, 2, num_epochs=1, mini_batch_size=32)
    assert learner.observation_stats == "behaviour"
    learner.train(_batch(seed=1))  # statistics now describe batch 1
    from alf_async.algorithms.policy import NeuralPolicy

    policy = NeuralPolicy(3, 2)
    published = learner.weight_arrays()  # version 1, as an actor gets it
    policy.load_weights(published)
    batch = _batch(seed=2)
    batch["observation"] *= 5.0  # statistics would move a lot if updated first
    raw = batch["observation"]
    got = learner._batch_normalizer(raw, behaviour_version=1).normalize(torch.from_numpy(raw))
    np.testing.assert_array_equal(got.numpy(), policy._obs(raw.reshape(-1, 3)).numpy()
                                  .reshape(raw.shape))
    updated = PPOLearner(3, 2, num_epochs=1, mini_batch_size=32, observation_stats="updated")
    updated.train(_batch(seed=1))
    other = updated._batch_normalizer(raw, behaviour_version=1).normalize(torch.from_numpy(raw))
    assert not np.allclose(other.numpy(), got.numpy())

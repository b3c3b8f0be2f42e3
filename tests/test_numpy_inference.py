"""The actors' numpy inference (``networks.numpy_inference``) computes what the
torch model computes: the same values, deterministic actions and
log-probabilities (to float32 rounding) for every activation and action kind,
samples from the same distribution, and it steps aside (torch is used) where it
cannot copy the network."""

from __future__ import annotations

import gin
import numpy as np
import pytest
import torch

from alf_async.algorithms.normalizer import RunningNormalizer
from alf_async.algorithms.policy import NeuralPolicy
from alf_async.envs.spaces import ActionSpec, ObservationSpec
from alf_async.networks import ActorCritic
from alf_async.networks.numpy_inference import NumpyActorCritic
from alf_async.runtime.weight_store import pack_weights

OBS = 7
ACTION_SPECS = {
    "continuous": ActionSpec.continuous(3),
    "discrete": ActionSpec("discrete", 1, (5,), (0,)),
    "multi_discrete": ActionSpec("multi_discrete", 2, (3, 4), (0, 0)),
}


@pytest.fixture(autouse=True)
def _clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _weights(policy: NeuralPolicy, seed: int = 1) -> dict:
    """Published weights with non-trivial parameters and normalizer statistics."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.normal_(0.0, 0.4)
    normalizer = RunningNormalizer(OBS)
    normalizer.update(np.random.default_rng(seed).normal(2.0, 3.0, (200, OBS)))
    return pack_weights({"param": policy.model.state_dict(),
                         "normalizer": normalizer.state_arrays()})


def _pair(spec: ActionSpec, deterministic: bool = False):
    fast = NeuralPolicy(OBS, spec, seed=0, deterministic=deterministic)
    slow = NeuralPolicy(OBS, spec, seed=0, deterministic=deterministic, numpy_inference=False)
    weights = _weights(fast)
    fast.load_weights(weights)
    slow.load_weights(weights)
    assert fast._numpy is not None and slow._numpy is None
    return fast, slow


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu"])
@pytest.mark.parametrize("kind", sorted(ACTION_SPECS))
def test_numpy_inference_matches_the_torch_model(activation, kind):
    gin.bind_parameter("ActorNetwork.activation", activation)
    gin.bind_parameter("ValueNetwork.activation", activation)
    gin.bind_parameter("ActorNetwork.hidden_sizes", (16, 16))
    spec = ACTION_SPECS[kind]
    fast, slow = _pair(spec)
    # far outside the normalizer's range on some entries: clipping is exercised
    obs = (np.random.default_rng(2).standard_normal((9, OBS)) * 40.0).astype(np.float32)

    action, log_prob, value = fast.act(obs)
    assert action.shape == (9, spec.dim) and action.dtype == np.float32
    assert log_prob.shape == (9,) and log_prob.dtype == np.float32
    assert value.dtype == np.float32
    # the torch model's log-probability of the very actions numpy sampled
    with torch.no_grad():
        x = slow.normalizer.normalize(torch.from_numpy(obs))
        dist, want_value = slow.model.evaluate(x)
        want_log_prob = dist.log_prob(torch.from_numpy(action)).numpy()
    np.testing.assert_allclose(log_prob, want_log_prob, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(value, want_value.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fast.value(obs), slow.value(obs), rtol=1e-5, atol=1e-4)
    if spec.discrete:
        assert np.all(action == np.round(action))
        assert np.all((action >= 0) & (action < np.array(spec.nvec)))

    det_fast, det_slow = _pair(spec, deterministic=True)
    a_fast, lp_fast, _ = det_fast.act(obs)
    a_slow, lp_slow, _ = det_slow.act(obs)
    np.testing.assert_allclose(a_fast, a_slow, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(lp_fast, lp_slow, rtol=1e-5, atol=1e-4)


def test_continuous_samples_follow_the_normal():
    fast, slow = _pair(ACTION_SPECS["continuous"])
    obs = np.zeros((20000, OBS), np.float32)
    action, _, _ = fast.act(obs)
    with torch.no_grad():
        dist = slow.model.distribution(slow.normalizer.normalize(torch.from_numpy(obs[:1])))
    loc, scale = dist.normal.loc.numpy()[0], dist.normal.scale.numpy()[0]
    np.testing.assert_allclose(action.mean(0), loc, atol=4 * scale.max() / np.sqrt(20000))
    np.testing.assert_allclose(action.std(0), scale, rtol=0.03)


def test_categorical_samples_follow_the_probabilities():
    fast, slow = _pair(ACTION_SPECS["multi_discrete"])
    obs = np.full((30000, OBS), 1.5, np.float32)
    action, _, _ = fast.act(obs)
    with torch.no_grad():
        dist = slow.model.distribution(slow.normalizer.normalize(torch.from_numpy(obs[:1])))
    for d, n in enumerate((3, 4)):
        want = dist.log_probs[d].exp().numpy()[0]
        got = np.bincount(action[:, d].astype(int), minlength=n) / len(action)
        np.testing.assert_allclose(got, want, atol=0.015)


def test_samples_repeat_with_the_seed_and_reseed():
    fast, _ = _pair(ACTION_SPECS["continuous"])
    obs = np.ones((4, OBS), np.float32)
    first = fast.act(obs)[0]
    assert not np.array_equal(first, fast.act(obs)[0])
    fast.reseed(0)
    np.testing.assert_array_equal(fast.act(obs)[0], first)


def test_new_weights_replace_the_snapshot():
    fast, _ = _pair(ACTION_SPECS["continuous"], deterministic=True)
    obs = np.ones((3, OBS), np.float32)
    before = fast.act(obs)[0]
    other = NeuralPolicy(OBS, ACTION_SPECS["continuous"], deterministic=True)
    fast.load_weights(_weights(other, seed=5))
    after = fast.act(obs)[0]
    assert not np.allclose(before, after)
    other.load_weights(_weights(other, seed=5))
    other._numpy = None  # the torch model with the same weights
    np.testing.assert_allclose(after, other.act(obs)[0], rtol=1e-5, atol=1e-5)


def test_torch_is_used_where_numpy_cannot_copy_the_network():
    image = ObservationSpec((12, 12, 1), "uint8")
    assert NumpyActorCritic.of(ActorCritic(image, 2)) is None
    assert NumpyActorCritic.of(ActorCritic(OBS, 2, rnn="gru", rnn_size=8)) is None
    assert NumpyActorCritic.of(ActorCritic(OBS, 2)) is not None
    # a layer it does not know
    model = ActorCritic(OBS, 2)
    model.value.body[1] = torch.nn.Softplus()
    assert NumpyActorCritic.of(model) is None
    assert NeuralPolicy(OBS, 2, numpy_inference=False)._numpy is None
    gin.bind_parameter("NeuralPolicy.numpy_inference", False)
    assert NeuralPolicy(OBS, 2)._numpy is None


@pytest.mark.parametrize("exploration", ["gaussian", "state_dependent"])
def test_a_squashed_mean_is_tanh_of_the_output_layer_in_numpy_and_torch(exploration):
    gin.bind_parameter("ActorNetwork.squash_mean", True)
    gin.bind_parameter("ActorNetwork.exploration", exploration)
    spec = ACTION_SPECS["continuous"]
    obs = (np.random.default_rng(3).standard_normal((64, OBS)) * 40.0).astype(np.float32)
    det_fast, det_slow = _pair(spec, deterministic=True)
    mean, _, _ = det_fast.act(obs)
    np.testing.assert_allclose(mean, det_slow.act(obs)[0], rtol=1e-5, atol=1e-5)
    actor = det_slow.model.actor
    with torch.no_grad():
        x = det_slow.normalizer.normalize(torch.from_numpy(obs))
        raw = actor.mean(actor.body(x)).numpy()
    assert np.abs(raw).max() > 2.0  # the weights drive the layer past the box
    np.testing.assert_allclose(mean, np.tanh(raw), rtol=1e-5, atol=1e-5)
    assert np.abs(mean).max() < 1.0
    # sampled actions: their log-probabilities around the squashed mean agree
    fast, slow = _pair(spec)
    action, log_prob, _ = fast.act(obs)
    with torch.no_grad():
        dist, _ = slow.model.evaluate(slow.normalizer.normalize(torch.from_numpy(obs)))
        want = dist.log_prob(torch.from_numpy(action)).numpy()
    np.testing.assert_allclose(log_prob, want, rtol=1e-5, atol=1e-4)


def test_squash_mean_leaves_discrete_logits_alone():
    gin.bind_parameter("ActorNetwork.squash_mean", True)
    model = ActorCritic(OBS, ACTION_SPECS["discrete"])
    assert not model.actor.squash_mean
    gin.bind_parameter("ActorNetwork.squash_mean", "yes")
    with pytest.raises(ValueError, match="ActorNetwork.squash_mean"):
        ActorCritic(OBS, 2)

"""State-dependent exploration (gSDE, ``ActorNetwork.exploration``): the
distribution's density is that of the noise it samples, the noise matrix is
kept per env for ``sde_sample_interval`` steps, and actors hand policies the
indices of the envs they act for."""

from __future__ import annotations

import gin
import numpy as np
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.sde_draws import SdeDraws
from alf_async.networks import ActorNetwork
from alf_async.networks.distributions import StateDependentNormal
from alf_async.runtime.actor import Actor
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.settings import TrainerSettings
from alf_async.utils.validation import ConfigError
from scripted_policy import WeightFreePolicy

UNROLL = 24
NUM_ENVS = 4


@pytest.fixture
def gsde():
    """Bind state-dependent exploration with small ReLU networks; yields a
    function that sets the sample interval."""
    def bind(interval: int = 4) -> None:
        gin.parse_config("\n".join([
            "ActorNetwork.exploration = 'state_dependent'",
            "ActorNetwork.hidden_sizes = (8,)",
            "ActorNetwork.activation = 'relu'",
            "ActorNetwork.sde_initial_log_std = -1.0",
            f"ActorNetwork.sde_sample_interval = {interval}",
        ]))
    bind()
    yield bind
    gin.clear_config()


def test_kept_noise_matrices_sample_the_distribution_they_report():
    torch.manual_seed(0)
    net = ActorNetwork(5, 2, hidden_sizes=(16,), activation="relu",
                       exploration="state_dependent", sde_initial_log_std=-1.0)
    rows = 40000
    with torch.no_grad():
        dist = net(torch.randn(1, 5).expand(rows, 5))
        actions = dist.sample_with(torch.randn(rows, 16, 2))
    assert isinstance(dist, StateDependentNormal)
    scale, loc = dist.normal.scale[0], dist.normal.loc[0]
    # the noise of one state is Normal(0, scale^2) per action dimension
    np.testing.assert_allclose(actions.std(0), scale, rtol=0.03)
    np.testing.assert_allclose(actions.mean(0), loc, atol=0.03 * float(scale.max()))
    corr = np.corrcoef(actions.T.numpy())[0, 1]
    assert abs(corr) < 0.03, corr
    expected = torch.distributions.Normal(loc, scale).log_prob(actions[:5]).sum(-1)
    torch.testing.assert_close(dist.log_prob(actions)[:5], expected)


def test_the_exploration_scale_trains_the_noise_matrix_not_the_features():
    net = ActorNetwork(5, 3, hidden_sizes=(16,), activation="tanh",
                       exploration="state_dependent")
    dist = net(torch.randn(7, 5))
    dist.entropy().sum().backward()
    assert net.sde_log_std.grad is not None and net.sde_log_std.grad.abs().sum() > 0
    assert all(p.grad is None or not p.grad.any() for p in net.body.parameters())
    assert not hasattr(net, "log_std")
    assert net.action_std() == pytest.approx(np.exp(-2.0))


def test_a_bad_exploration_setting_is_refused_by_name():
    with pytest.raises(ConfigError, match="ActorNetwork.exploration"):
        ActorNetwork(5, 2, exploration="smooth")
    with pytest.raises(ConfigError, match="ActorNetwork.sde_sample_interval"):
        ActorNetwork(5, 2, exploration="state_dependent", sde_sample_interval=0)
    with pytest.raises(ValueError, match="sample interval"):
        SdeDraws((3, 2), interval=0)


@pytest.mark.parametrize("numpy_inference", [True, False])
def test_each_env_keeps_its_noise_matrix_for_the_sample_interval(gsde, numpy_inference):
    gsde(interval=3)
    policy = NeuralPolicy(5, 2, seed=3, numpy_inference=numpy_inference)
    assert policy.per_env_exploration
    assert (policy._numpy is not None) == numpy_inference
    obs = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    steps = []
    for _ in range(7):  # two splits, as an actor with env_splits = 2 calls it
        first = policy.act(obs[:2], env_ids=np.array([0, 2]))
        second = policy.act(obs[2:], env_ids=np.array([1, 3]))
        steps.append(np.concatenate([first[0], second[0]]))
        # the reported log-probability is the distribution's at that action
        dist = policy.model.distribution(torch.from_numpy(obs[:2]))
        np.testing.assert_allclose(first[1], dist.log_prob(torch.from_numpy(first[0])).detach(),
                                   rtol=1e-5)
    actions = np.stack(steps)  # [7, 4, 2]
    for start in (0, 3):
        np.testing.assert_array_equal(actions[start:start + 3],
                                      np.broadcast_to(actions[start], (3, 4, 2)))
    assert not np.allclose(actions[2], actions[3])
    assert not np.allclose(actions[5], actions[6])
    # a fresh generator and a reseeded one give the same noise
    again = NeuralPolicy(5, 2, seed=3, numpy_inference=numpy_inference)
    again.model.load_state_dict(policy.model.state_dict())
    again._snapshot()
    np.testing.assert_array_equal(again.act(obs[:2], env_ids=np.array([0, 2]))[0], actions[0, :2])
    policy.reseed(3)
    np.testing.assert_array_equal(policy.act(obs[:2], env_ids=np.array([0, 2]))[0],
                                  actions[0, :2])


def test_numpy_inference_explores_as_the_torch_model(gsde):
    """The same seed, weights and env ids give the same actions and
    log-probabilities with the numpy copy and the torch model."""
    fast = NeuralPolicy(5, 3, seed=7)
    slow = NeuralPolicy(5, 3, seed=7, numpy_inference=False)
    with torch.no_grad():
        for p in fast.model.parameters():
            p.normal_(0.0, 0.5)
    slow.model.load_state_dict(fast.model.state_dict())
    fast._snapshot()
    obs = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    for step in range(5):
        ids = np.array([0, 2, 4]) if step % 2 == 0 else np.array([1, 3, 5])
        rows = obs[ids]
        got, want = fast.act(rows, env_ids=ids), slow.act(rows, env_ids=ids)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # without env ids: samples of the same distribution (log-probs agree)
    action, log_prob, _ = fast.act(obs)
    with torch.no_grad():
        dist = slow.model.distribution(torch.from_numpy(obs))
        np.testing.assert_allclose(log_prob, dist.log_prob(torch.from_numpy(action)),
                                   rtol=1e-5, atol=1e-4)


def test_a_deterministic_policy_acts_with_the_mean(gsde):
    policy = NeuralPolicy(5, 2, seed=0, deterministic=True)
    assert not policy.per_env_exploration
    obs = np.ones((3, 5), np.float32)
    mean = policy.model.distribution(torch.from_numpy(obs)).mode().detach().numpy()
    np.testing.assert_allclose(policy.act(obs, env_ids=np.arange(3))[0], mean,
                               rtol=1e-5, atol=1e-6)


def test_gaussian_exploration_keeps_no_noise_matrices():
    policy = NeuralPolicy(5, 2, seed=0)
    assert not policy.per_env_exploration and policy._numpy is not None
    assert policy._sde is None
    policy.act(np.zeros((2, 5), np.float32), env_ids=np.arange(2))


class EnvIdPolicy(WeightFreePolicy):
    """Acts with each env's index as its action: shows which env ids the actor
    passed for which rows."""

    per_env_exploration = True

    def act(self, observation, env_ids):
        action = np.asarray(env_ids, np.float32)[:, None]
        zeros = np.zeros(len(observation), np.float32)
        return action, zeros, zeros

    def value(self, observation):
        return np.zeros(len(observation), np.float32)


def settings(workers: int, splits: int) -> TrainerSettings:
    return TrainerSettings(env_name="Pendulum-v1", num_envs=NUM_ENVS, num_env_workers=workers,
                           env_splits=splits, unroll_length=UNROLL, seed=5, num_iterations=1)


def unroll(actor: Actor):
    buffer = allocate_trajectory(UNROLL, NUM_ENVS, actor.env.observation_spec,
                                 actor.env.action_spec.dim)
    actor.unroll(buffer)
    return buffer


@pytest.mark.parametrize("workers,splits", [(0, 1), (2, 2)])
def test_the_actor_names_the_envs_each_policy_call_acts_for(workers, splits):
    actor = Actor(0, settings(workers, splits), EnvIdPolicy)
    try:
        batch = unroll(actor)
    finally:
        actor.close()
    # Pendulum's actions are clipped to [-2, 2] by the env, not in the batch
    np.testing.assert_array_equal(batch["action"][..., 0],
                                  np.broadcast_to(np.arange(NUM_ENVS), (UNROLL, NUM_ENVS)))


@pytest.mark.parametrize("interval,kept", [(UNROLL, True), (1, False)])
def test_an_actors_exploration_noise_is_linear_in_the_features_while_kept(
        gsde, interval, kept):
    """With the matrix kept over the whole unroll, each env's noise [T, A] is
    its features [T, F] times one matrix (least squares leaves no residual);
    redrawn every step, it is not."""
    gsde(interval=interval)
    actor = Actor(0, settings(2, 2), NeuralPolicy)
    try:
        batch = unroll(actor)
        model = actor.policy.model
    finally:
        actor.close()
    obs = torch.from_numpy(batch["observation"])  # [T, K, O], not normalized (no weights)
    with torch.no_grad():
        features = model.actor.body(obs).numpy()
        mean = model.actor.mean(model.actor.body(obs)).numpy()
    noise = batch["action"] - mean  # [T, K, A]
    for k in range(NUM_ENVS):
        solution, *_ = np.linalg.lstsq(features[:, k], noise[:, k], rcond=None)
        residual = np.abs(features[:, k] @ solution - noise[:, k]).max()
        assert (residual < 1e-4) == kept, (k, residual)

"""Discrete action spaces (Discrete, MultiDiscrete), flattened observation spaces,
and one clear refusal for spaces alf_async cannot train on."""

from __future__ import annotations

import math

import gin
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.envs.gym_env import env_spec, make_env
from alf_async.envs.spaces import ActionSpec, UnsupportedSpaceError, action_spec
from alf_async.networks.distributions import CategoricalDistribution
from alf_async.utils.validation import ConfigError


class _TinyEnv(gym.Env):
    """Observation and action spaces given by the test; records the last action."""

    def __init__(self, observation_space, action_space):
        self.observation_space, self.action_space = observation_space, action_space
        self.last_action = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        self.last_action = action
        return self.observation_space.sample(), 1.0, False, False, {}


def _register(env_id, observation_space, action_space):
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=_TinyEnv, max_episode_steps=10,
                     kwargs={"observation_space": observation_space,
                             "action_space": action_space})


def test_action_specs():
    box = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)
    assert action_spec(box) == ActionSpec("continuous", 3)
    assert action_spec(gym.spaces.Discrete(4, start=-1)) == ActionSpec(
        "discrete", 1, (4,), (-1,))
    assert action_spec(gym.spaces.MultiDiscrete([3, 5])) == ActionSpec(
        "multi_discrete", 2, (3, 5), (0, 0))
    with pytest.raises(UnsupportedSpaceError, match=r"action space Text\(.*supported: Box "
                                                    r"\(continuous, bounded\), Discrete"):
        action_spec(gym.spaces.Text(5))
    with pytest.raises(UnsupportedSpaceError, match="unbounded"):
        action_spec(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))


def test_stored_actions_become_the_env_actions():
    _register("AlfAsyncTestDiscrete-v0", gym.spaces.Box(-1, 1, (2,), np.float32),
              gym.spaces.Discrete(3, start=10))
    _register("AlfAsyncTestMulti-v0", gym.spaces.Box(-1, 1, (2,), np.float32),
              gym.spaces.MultiDiscrete([2, 4]))
    env = make_env("AlfAsyncTestDiscrete-v0")
    assert env.env_action(np.array([2.0], np.float32)) == 12
    assert env.env_action(np.array([7.0], np.float32)) == 12  # clipped to the last choice
    assert env.env_action(np.array([-3.0], np.float32)) == 10
    env.close()
    env = make_env("AlfAsyncTestMulti-v0")
    np.testing.assert_array_equal(env.env_action(np.array([1.0, 3.0], np.float32)), [1, 3])
    env.reset(seed=0)
    env.step(np.array([0.0, 2.0], np.float32))
    np.testing.assert_array_equal(env.env.unwrapped.last_action, [0, 2])
    env.close()


def test_dict_observations_are_flattened_by_gymnasium():
    space = gym.spaces.Dict({"position": gym.spaces.Box(-1, 1, (3,), np.float32),
                             "mode": gym.spaces.Discrete(4)})
    _register("AlfAsyncTestDictObs-v0", space, gym.spaces.Box(-1, 1, (1,), np.float32))
    env = make_env("AlfAsyncTestDictObs-v0")
    assert isinstance(env.env, gym.wrappers.FlattenObservation)
    assert env.observation_dim == 7  # 3 + one-hot of 4
    assert env.reset(seed=1).shape == (7,)
    env.close()


def test_categorical_log_prob_and_entropy_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(2.0), 0.0]])
    dist = CategoricalDistribution(logits, (2,))
    # probabilities: row 0 (1/4, 3/4), row 1 (2/3, 1/3)
    log_prob = dist.log_prob(torch.tensor([[1.0], [1.0]]))
    np.testing.assert_allclose(log_prob.numpy(), [math.log(0.75), math.log(1 / 3)], rtol=1e-6)
    want = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)),
            -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))]
    np.testing.assert_allclose(dist.entropy().numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(dist.mode().numpy(), [[1.0], [0.0]])
    # Two dimensions: log-probs and entropies add up.
    multi = CategoricalDistribution(torch.cat([logits, logits], -1), (2, 2))
    both = multi.log_prob(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    np.testing.assert_allclose(both.numpy(), [math.log(0.75) + math.log(0.25),
                                              2 * math.log(1 / 3)], rtol=1e-6)


def test_neural_policy_on_cartpole_acts_with_choice_indices():
    observation, spec, _ = env_spec("CartPole-v1")
    assert spec == ActionSpec("discrete", 1, (2,), (0,))
    learner = PPOLearner(observation, spec)
    policy = NeuralPolicy(observation, spec, seed=3)
    policy.load_weights(learner.weight_arrays())
    obs = np.random.default_rng(0).standard_normal((64, observation.dim)).astype(np.float32)
    action, log_prob, value = policy.act(obs)
    assert action.shape == (64, 1) and set(np.unique(action)) <= {0.0, 1.0}
    assert len(set(np.unique(action))) == 2  # a near-uniform first policy samples both
    np.testing.assert_allclose(log_prob, np.log(0.5), atol=0.05)
    greedy = NeuralPolicy(observation, spec, deterministic=True)
    greedy.load_weights(learner.weight_arrays())
    np.testing.assert_array_equal(greedy.act(obs)[0], greedy.act(obs)[0])


def test_ppo_step_on_a_discrete_batch_changes_the_policy():
    spec = ActionSpec("multi_discrete", 2, (3, 2), (0, 0))
    learner = PPOLearner(4, spec, num_epochs=2, mini_batch_size=32)
    rng = np.random.default_rng(0)
    T, K = 8, 8
    batch = {
        "observation": rng.standard_normal((T, K, 4)).astype(np.float32),
        "action": np.stack([rng.integers(0, 3, (T, K)), rng.integers(0, 2, (T, K))],
                           -1).astype(np.float32),
        "reward": rng.standard_normal((T, K)).astype(np.float32),
        "terminated": np.zeros((T, K), bool), "truncated": np.zeros((T, K), bool),
        "log_prob": np.full((T, K), math.log(1 / 6), np.float32),
        "value": np.zeros((T, K), np.float32),
        "truncation_value": np.zeros((T, K), np.float32),
        "bootstrap_value": np.zeros(K, np.float32),
    }
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    stats = learner.train(batch)
    assert stats["gradient_steps"] == 4 and "action_std" not in stats
    assert math.isfinite(stats["entropy"]) and stats["entropy"] > 0
    assert any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())


def test_unsupported_space_is_a_config_error(tmp_path):
    from alf_async.training.trainer import Trainer

    _register("AlfAsyncTestTextAction-v0", gym.spaces.Box(-1, 1, (2,), np.float32),
              gym.spaces.Text(5))
    with pytest.raises(ConfigError, match=r"action space Text\(.*which alf_async cannot "
                                          r"train on; supported:"):
        Trainer(root_dir=str(tmp_path / "run"), env_name="AlfAsyncTestTextAction-v0",
                num_iterations=1)
    assert not (tmp_path / "run").exists()
    gin.clear_config()


@pytest.mark.timeout(240)
def test_cartpole_return_improves(tmp_path):
    """A short in-process run of the shipped CartPole config (sync) more than
    doubles the return of the first iterations (a random policy scores ~22)."""
    import json

    from alf_async.config import parse_config
    from alf_async.training.trainer import Trainer

    parse_config(["ppo_cartpole.gin"], ["Trainer.num_env_steps=0",
                                        "Trainer.num_iterations=40",
                                        "MetricsRecorder.tensorboard=False"])
    try:
        Trainer(root_dir=str(tmp_path / "run")).train()
    finally:
        gin.clear_config()
    rows = [json.loads(l) for l in open(tmp_path / "run" / "metrics.jsonl")]
    returns = [r["episode_return"] for r in rows if r["episode_return"] is not None]
    assert returns[0] < 40, returns[:3]
    assert max(returns[-5:]) > 2 * returns[0] and max(returns[-5:]) > 100, returns[-5:]

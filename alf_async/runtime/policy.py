"""Policies as actors use them: numpy in, numpy out, CPU only.

An actor calls ``policy.act(obs)`` once per step of its batched env and
``policy.value(obs)`` for observations that ended an episode by truncation.
``load_weights`` takes the arrays published by the learner.

``NeuralPolicy`` is the learner's actor-critic plus observation normalizer.
``ScriptedPolicy`` is a deterministic, weight-free stand-in used to check that the
runtime transports trajectories faithfully.
"""

from __future__ import annotations

from typing import Dict, Mapping, Protocol, Tuple

import numpy as np
import torch

from alf_async.algorithms.ppo_learner import load_policy_weight_arrays
from alf_async.networks import ActorCritic
from alf_async.algorithms.normalizer import RunningNormalizer


class Policy(Protocol):
    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """observation [K, O] -> (action [K, A], log_prob [K], value [K])."""

    def value(self, observation: np.ndarray) -> np.ndarray:
        """observation [M, O] -> value [M]."""

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Take the learner's published arrays."""

    def reseed(self, seed: int) -> None:
        """Restart the policy's sampling randomness from ``seed``."""


class NeuralPolicy:
    """The actor-critic with the learner's normalizer, sampling on the CPU.

    Args:
        observation_dim, action_dim: O and A.
        seed: seeds the action-sampling generator.
        deterministic: act with the distribution's mean (for evaluation).
    """

    def __init__(self, observation_dim: int, action_dim: int, seed: int = 0,
                 deterministic: bool = False):
        self.model = ActorCritic(observation_dim, action_dim)
        self.model.eval()
        self.normalizer = RunningNormalizer(observation_dim)
        self.generator = torch.Generator().manual_seed(seed)
        self.deterministic = deterministic

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        load_policy_weight_arrays(self.model, self.normalizer, arrays)

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def _obs(self, observation: np.ndarray) -> torch.Tensor:
        return self.normalizer.normalize(torch.from_numpy(np.asarray(observation, np.float32)))

    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        action, log_prob, value = self.model.act(self._obs(observation), self.generator,
                                                 self.deterministic)
        return action.numpy(), log_prob.numpy(), value.numpy()

    def value(self, observation: np.ndarray) -> np.ndarray:
        return self.model.predict_value(self._obs(observation)).numpy()


class ScriptedPolicy:
    """Deterministic actions computed from the observation and a step counter.

    action[k] = 0.9 * sin(0.37 * step + sum(obs[k]) + k) for every action dim;
    log_prob = -step, value = sum(obs[k]). It ignores published weights but keeps
    the last ones it was given in ``last_weights``.
    """

    def __init__(self, observation_dim: int, action_dim: int, seed: int = 0):
        self.action_dim = action_dim
        self.step = 0
        self.last_weights: Dict[str, np.ndarray] = {}

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.last_weights = dict(arrays)

    def reseed(self, seed: int) -> None:
        self.step = 0

    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        observation = np.asarray(observation, np.float32)
        k = np.arange(observation.shape[0], dtype=np.float32)
        phase = 0.37 * self.step + observation.sum(-1) + k
        action = np.repeat((0.9 * np.sin(phase))[:, None], self.action_dim, axis=1)
        log_prob = np.full(observation.shape[0], -float(self.step), np.float32)
        self.step += 1
        return action.astype(np.float32), log_prob, self.value(observation)

    def value(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, np.float32).sum(-1)

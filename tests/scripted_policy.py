"""A deterministic, weight-free policy for the runtime's tests (not a test file).

It lets tests check that the runtime transports trajectories faithfully: the same
seeds give the same batches in-process and across processes.
"""

from __future__ import annotations

from typing import Dict, Mapping, Tuple

import numpy as np


class WeightFreePolicy:
    """The actor-facing methods a policy without weights or randomness needs:
    it ignores published weights and reseeds; subclasses give ``act`` and
    ``value``."""

    def __init__(self, observation, action_spec, seed: int = 0):
        pass

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        pass

    def reseed(self, seed: int) -> None:
        pass


class ScriptedPolicy:
    """Deterministic actions computed from the observation and a step counter.

    action[k] = 0.9 * sin(0.37 * step + sum(obs[k]) + k) for every action dim;
    log_prob = -step, value = sum(obs[k]). It ignores published weights but keeps
    the last ones it was given in ``last_weights``.
    """

    def __init__(self, observation, action_spec, seed: int = 0):
        self.action_dim = getattr(action_spec, "dim", action_spec)
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


class ObservationPolicy(ScriptedPolicy):
    """Deterministic actions that depend on the observation alone.

    action[k] = 0.9 * sin(1.7 * sum(obs[k])) for every action dim; log_prob =
    -sum(obs[k]). Unlike ``ScriptedPolicy`` (which uses the row index and a call
    counter) it gives every env the same action whichever rows it is called
    with, so it can compare runs that batch the envs differently (env_splits).
    """

    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        observation = np.asarray(observation, np.float32)
        total = observation.sum(-1)
        action = np.repeat((0.9 * np.sin(1.7 * total))[:, None], self.action_dim, axis=1)
        return action.astype(np.float32), -total, self.value(observation)


class RightMovingDotPolicy(WeightFreePolicy):
    """For image runs of ``AlfAsyncDotCentering-v0``: always moves the dot right
    (action 2); value = the dot's column. Checks that frames arrive as uint8."""

    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert observation.dtype == np.uint8, observation.dtype
        k = observation.shape[0]
        return (np.full((k, 1), 2.0, np.float32), np.zeros(k, np.float32),
                self.value(observation))

    def value(self, observation: np.ndarray) -> np.ndarray:
        """observation [M, H, W, 1] -> the dot's column [M]."""
        return np.argmax(observation.max(axis=(1, 3)), axis=1).astype(np.float32)

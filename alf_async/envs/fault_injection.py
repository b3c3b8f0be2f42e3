"""Envs that fail on purpose, for testing and benchmarking failure handling.

Importing this module registers, with gymnasium:

- ``AlfAsyncFaultyPendulum-v0``: InvertedPendulumBulletEnv-v0 whose ``step``
  raises ``InjectedEnvFault`` with probability ``fail_probability`` (default 0.01
  per step) drawn from the env's own seeded RNG, so failures are reproducible.
- ``AlfAsyncExitingPendulum-v0``: the same, but the failing step ends the whole
  process with ``os._exit(3)`` (an env-worker or actor dying without a word).
- ``AlfAsyncNaNPendulum-v0``: the same, but the failing step returns an
  observation whose first value is NaN (a numerically broken simulator).

Both accept ``fail_probability`` and ``base_id`` keyword arguments.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np


class InjectedEnvFault(RuntimeError):
    """Raised by the faulty env on purpose."""


class FaultInjectionEnv(gym.Wrapper):
    """Wraps a base env and fails ``step`` with a given probability.

    Args:
        base_id: the gymnasium id of the wrapped env.
        fail_probability: chance of failing at each step, in [0, 1].
        mode: "raise" (raise InjectedEnvFault), "exit" (os._exit(3)) or "nan"
            (return a NaN in the observation).
    """

    def __init__(self, base_id: str = "InvertedPendulumBulletEnv-v0",
                 fail_probability: float = 0.01, mode: str = "raise", **kwargs):
        import pybullet_envs_gymnasium  # noqa: F401

        super().__init__(gym.make(base_id, **kwargs).unwrapped)
        self.fail_probability = fail_probability
        self.mode = mode
        self._rng = np.random.default_rng(0)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed + 7)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self._rng.random() < self.fail_probability:
            if self.mode == "exit":
                os._exit(3)
            if self.mode == "nan":
                obs, reward, terminated, truncated, info = self.env.step(action)
                obs = np.array(obs, dtype=np.float32, copy=True)
                obs.reshape(-1)[0] = np.nan
                return obs, reward, terminated, truncated, info
            raise InjectedEnvFault("injected env fault (AlfAsync fault-injection env)")
        return self.env.step(action)


def _register() -> None:
    for env_id, mode in (("AlfAsyncFaultyPendulum-v0", "raise"),
                         ("AlfAsyncExitingPendulum-v0", "exit"),
                         ("AlfAsyncNaNPendulum-v0", "nan")):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=FaultInjectionEnv, max_episode_steps=1000,
                         kwargs={"mode": mode})


_register()

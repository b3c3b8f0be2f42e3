"""An env whose every instance holds 32 MiB of resident memory, for the
start-up memory estimate's tests (``memory_hungry_envs:AlfAsyncTestHungry-v0``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ENV_ID = "AlfAsyncTestHungry-v0"
BYTES_PER_ENV = 32 * 2 ** 20


class MemoryHungry(gym.Env):
    """A one-step bandit holding ``BYTES_PER_ENV`` of touched memory."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._ballast = np.ones(BYTES_PER_ENV, dtype=np.uint8)  # written: resident

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=MemoryHungry)

"""A user's own env module: importing it registers ``PointMass-v0`` with gymnasium.

This folder stands for a user's project outside alf_async: an env module and a gin
file (``point_mass.gin``) that trains on it. See docs/custom_envs.md.

``PointMass-v0``: a point in the plane pushed by a force; observation
[x, y, vx, vy] (float32), action [fx, fy] in [-1, 1], reward -distance to the
origin per step, 100 steps per episode (time limit, never terminated). A random
policy scores about -100; PPO with point_mass.gin gets above -10
within 60k env steps.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class PointMassEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, dt: float = 0.1):
        self.dt = dt
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._state = np.zeros(4, np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = np.concatenate([self.np_random.uniform(-1, 1, 2), np.zeros(2)])
        return self._state.astype(np.float32), {}

    def step(self, action):
        force = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        position, velocity = self._state[:2], self._state[2:]
        velocity = 0.9 * velocity + self.dt * force
        position = np.clip(position + self.dt * velocity, -2.0, 2.0)
        self._state = np.concatenate([position, velocity])
        reward = -float(np.linalg.norm(position))
        return self._state.astype(np.float32), reward, False, False, {}


if "PointMass-v0" not in gym.registry:
    gym.register(id="PointMass-v0", entry_point=PointMassEnv, max_episode_steps=100)

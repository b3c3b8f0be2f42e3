"""Tiny continuous-control envs for the off-policy tests (imported by the runs'
gin configs, so actor processes and env workers register them too).

``AlfAsyncPointMass-v0``: a point on a line, observation (x, v), action a force
in [-1, 1]; reward -x^2; 20-step episodes (truncated), terminated when |x| > 3.
``AlfAsyncSlowPointMass-v0``: the same, each step sleeping ``step_sleep_s``
(0.005 s): sampling far slower than training.
``AlfAsyncExitingPointMass-v0``: the same, but the process stepping it exits
(``os._exit(3)``) at its 100th step if the file named by the environment
variable ``ALF_ASYNC_TEST_EXIT_ONCE`` does not exist yet (it creates it first):
one actor death per test.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np


class PointMass(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, step_sleep_s: float = 0.0, render_mode=None, exit_once: bool = False):
        self.render_mode = render_mode
        self.exit_once = exit_once
        self.steps = 0
        self.observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.step_sleep_s = step_sleep_s
        self.state = np.zeros(2, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.state.copy(), {}

    def step(self, action):
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        self.steps += 1
        marker = os.environ.get("ALF_ASYNC_TEST_EXIT_ONCE")
        if self.exit_once and marker and self.steps == 100 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)
        x, v = self.state
        v = 0.9 * v + 0.1 * float(np.clip(action[0], -1, 1))
        x = x + v
        self.state = np.array([x, v], np.float32)
        return self.state.copy(), -x * x, bool(abs(x) > 3), False, {}

    def render(self):
        """A 16 x 32 frame with a bright column where the point is."""
        frame = np.zeros((16, 32, 3), np.uint8)
        frame[:, int(np.clip((self.state[0] + 3) / 6 * 31, 0, 31))] = 255
        return frame


for env_id, kwargs in (("AlfAsyncPointMass-v0", {}),
                       ("AlfAsyncSlowPointMass-v0", {"step_sleep_s": 0.01}),
                       ("AlfAsyncExitingPointMass-v0", {"exit_once": True})):
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=PointMass, max_episode_steps=20, kwargs=kwargs)

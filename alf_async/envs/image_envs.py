"""A small image env registered by the library: tests and examples of image
observations that train in seconds on a CPU.

``AlfAsyncDotCentering-v0``: the observation is a 9 x 9 grayscale frame (uint8,
(H, W, C) = (9, 9, 1)) showing one bright dot on a dark background. The dot
starts in a random column other than the middle one, in a random row; the
actions (Discrete(3)) move it one column left, keep it, or move it one column
right (clipped at the borders). Reward 1 for every step that ends with the dot
in the middle column, else 0; an episode lasts 16 steps. What to do can only be
read off the pixels. The best policy scores 12-15 (the dot is at most 4 columns
away), a uniformly random one about 3.

``AlfAsyncDotCenteringContinuous-v0``: the same with a continuous action in
[-1, 1] (Box, shape (1,)): below -1/3 moves the dot left, above 1/3 right,
between keeps it; for SAC, which needs continuous actions.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np

DOT_CENTERING_ID = "AlfAsyncDotCentering-v0"
DOT_CENTERING_CONTINUOUS_ID = "AlfAsyncDotCenteringContinuous-v0"
SIZE = 9
EPISODE_STEPS = 16


class DotCentering(gym.Env):
    """See the module doc."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, render_mode: Optional[str] = None, size: int = SIZE):
        self.size = size
        self.center = size // 2
        self.observation_space = gym.spaces.Box(0, 255, (size, size, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.render_mode = render_mode
        self._row = self._col = 0

    def _frame(self) -> np.ndarray:
        frame = np.zeros((self.size, self.size, 1), np.uint8)
        frame[self._row, self._col, 0] = 255
        return frame

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[np.ndarray, Dict]:
        super().reset(seed=seed)
        self._row = int(self.np_random.integers(self.size))
        offset = int(self.np_random.integers(1, self.center + 1))
        self._col = self.center + (offset if self.np_random.random() < 0.5 else -offset)
        return self._frame(), {}

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict]:
        move = int(action) - 1
        self._col = int(np.clip(self._col + move, 0, self.size - 1))
        reward = 1.0 if self._col == self.center else 0.0
        return self._frame(), reward, False, False, {}

    def render(self) -> np.ndarray:
        """The frame as an RGB image, 16 x enlarged."""
        return np.repeat(np.repeat(np.repeat(self._frame(), 3, axis=2), 16, axis=0), 16,
                         axis=1)


class ContinuousDotCentering(DotCentering):
    """DotCentering with a continuous action in [-1, 1] (see the module doc)."""

    def __init__(self, render_mode: Optional[str] = None, size: int = SIZE):
        super().__init__(render_mode, size)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict]:
        value = float(np.asarray(action, np.float64).reshape(-1)[0])
        return super().step(0 if value < -1 / 3 else 2 if value > 1 / 3 else 1)


def _register() -> None:
    for env_id, entry_point in ((DOT_CENTERING_ID, DotCentering),
                                (DOT_CENTERING_CONTINUOUS_ID, ContinuousDotCentering)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point,
                         max_episode_steps=EPISODE_STEPS)


_register()

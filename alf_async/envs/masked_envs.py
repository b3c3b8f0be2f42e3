"""Partially observed versions of shipped tasks, registered by the library:
the tests and examples of recurrent policies (``ActorCritic.rnn``).

``AlfAsyncMaskedCartPole-v1``: gymnasium's CartPole-v1 (500 steps, reward 1 a
step) whose observation keeps the cart position and the pole angle and drops
both velocities: [x, theta] float32. No single observation tells which way the
pole is falling, so a feed-forward policy cannot balance it for long, while a
policy with memory can infer the velocities from consecutive observations and
reach CartPole's full score (500). It renders like CartPole (``rgb_array``;
needs pygame, in the ``[render]`` extra).
"""

from __future__ import annotations

from typing import Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

MASKED_CARTPOLE_ID = "AlfAsyncMaskedCartPole-v1"
CARTPOLE_VISIBLE = (0, 2)  # cart position, pole angle (of x, x_dot, theta, theta_dot)


class KeepObservationEntries(gym.ObservationWrapper):
    """Keeps the entries ``indices`` of a flat Box observation, drops the rest.

    Args:
        env: an env with a 1-D Box observation space.
        indices: the entries kept, in this order.
    """

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        self.indices = np.asarray(indices, dtype=np.int64)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self.indices],
                                                space.high[self.indices],
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.indices]


def masked_cartpole(render_mode: Optional[str] = None) -> gym.Env:
    """CartPole observing [x, theta] only (see the module doc)."""
    return KeepObservationEntries(CartPoleEnv(render_mode=render_mode), CARTPOLE_VISIBLE)


def _register() -> None:
    if MASKED_CARTPOLE_ID not in gym.registry:
        gym.register(id=MASKED_CARTPOLE_ID, entry_point=masked_cartpole,
                     max_episode_steps=500, reward_threshold=475.0)


_register()

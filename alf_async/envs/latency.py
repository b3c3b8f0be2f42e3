"""An env whose steps wait instead of compute, for scaling benchmarks.

Importing this module registers ``AlfAsyncLatencyPendulum-v0`` with gymnasium:
InvertedPendulumBulletEnv-v0 whose every ``step`` also sleeps
``step_latency_s`` seconds (default 0.005). It stands for a simulator that is
slow to answer but cheap for this machine's CPU (a remote simulator, a robot, a
rendering server): actors on it are bound by waiting, so adding actors adds
throughput even beyond the cores of the machine, until the learner is the
bottleneck (bench/ray_scaling.py).
"""

from __future__ import annotations

import time

import gymnasium as gym

ENV_ID = "AlfAsyncLatencyPendulum-v0"


class StepLatency(gym.Wrapper):
    """Sleeps ``step_latency_s`` seconds in every ``step`` of the wrapped env.

    Args:
        base_id: the gymnasium id of the wrapped env.
        step_latency_s: seconds each step waits (>= 0).
    """

    def __init__(self, base_id: str = "InvertedPendulumBulletEnv-v0",
                 step_latency_s: float = 0.005, **kwargs):
        import pybullet_envs_gymnasium  # noqa: F401  (registers the base ids)

        if step_latency_s < 0:
            raise ValueError(f"step_latency_s must be >= 0, got {step_latency_s}")
        super().__init__(gym.make(base_id, **kwargs).unwrapped)
        self.step_latency_s = step_latency_s

    def step(self, action):
        time.sleep(self.step_latency_s)
        return self.env.step(action)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=StepLatency, max_episode_steps=1000)

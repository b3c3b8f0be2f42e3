"""Envs that fail on purpose, for testing and benchmarking failure handling.

Importing this module registers, with gymnasium:

- ``AlfAsyncFaultyPendulum-v0``: InvertedPendulumBulletEnv-v0 whose ``step``
  raises ``InjectedEnvFault`` with probability ``fail_probability`` (default 0.01
  per step) drawn from the env's own seeded RNG, so failures are reproducible.
- ``AlfAsyncExitingPendulum-v0``: the same, but the failing step ends the whole
  process with ``os._exit(3)`` (an env-worker or actor dying without a word).
- ``AlfAsyncNaNPendulum-v0``: the same, but the failing step returns an
  observation whose first value is NaN (a numerically broken simulator).
- ``AlfAsyncOnDemandFault/<base id>`` for each id of ``ON_DEMAND_BASE_IDS``
  (``AlfAsyncOnDemandFault/HalfCheetahBulletEnv-v0``, ...): the base env, whose
  ``step`` raises ``InjectedEnvFault`` when another process asks for it, by
  creating the file named by the environment variable ``FAULT_FILE_VARIABLE``
  (``ALF_ASYNC_ENV_FAULT_FILE``). The first step of any env that finds the
  file removes it and raises: one file, one failure, in whichever env process
  (actor or env worker) steps first (bench/soak.py).

The first three accept ``fail_probability`` and ``base_id`` keyword arguments.
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


FAULT_FILE_VARIABLE = "ALF_ASYNC_ENV_FAULT_FILE"
ON_DEMAND_NAMESPACE = "AlfAsyncOnDemandFault"
# Base envs that get an on-demand variant; every one has a 1000-step time limit.
ON_DEMAND_BASE_IDS = ("InvertedPendulumBulletEnv-v0", "HalfCheetahBulletEnv-v0",
                      "AntBulletEnv-v0", "HopperBulletEnv-v0", "Walker2DBulletEnv-v0",
                      "HumanoidBulletEnv-v0", "AlfAsyncLatencyPendulum-v0")
ON_DEMAND_MAX_EPISODE_STEPS = 1000


def on_demand_id(base_id: str) -> str:
    """The id of ``base_id``'s on-demand variant: 'AlfAsyncOnDemandFault/<base_id>'."""
    return f"{ON_DEMAND_NAMESPACE}/{base_id}"


class OnDemandFault(gym.Wrapper):
    """The base env; a ``step`` that finds the trigger file removes it and raises
    ``InjectedEnvFault`` instead of stepping.

    The trigger file is the path in the environment variable
    ``FAULT_FILE_VARIABLE`` when the env is made (unset: the env never fails).
    Removing the file is the test: one ``os.unlink`` per step (a few
    microseconds), and of several envs that try at once exactly one succeeds.

    Args:
        base_id: the gymnasium id of the wrapped env; made without gymnasium's
            standard wrappers (time limit, order and env checks), since this id
            has its own.
    """

    def __init__(self, base_id: str = "InvertedPendulumBulletEnv-v0", **kwargs):
        import pybullet_envs_gymnasium  # noqa: F401  (registers the PyBullet ids)
        import alf_async.envs.latency  # noqa: F401  (registers the latency pendulum)

        env = gym.make(base_id, disable_env_checker=True, **kwargs)
        while isinstance(env, (gym.wrappers.TimeLimit, gym.wrappers.OrderEnforcing)):
            env = env.env
        super().__init__(env)
        self.trigger_path = os.environ.get(FAULT_FILE_VARIABLE) or None

    def step(self, action):
        if self.trigger_path is not None:
            try:
                os.unlink(self.trigger_path)
            except FileNotFoundError:
                pass
            else:
                raise InjectedEnvFault(f"injected env fault on demand ({self.trigger_path})")
        return self.env.step(action)


def _register() -> None:
    for env_id, mode in (("AlfAsyncFaultyPendulum-v0", "raise"),
                         ("AlfAsyncExitingPendulum-v0", "exit"),
                         ("AlfAsyncNaNPendulum-v0", "nan")):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=FaultInjectionEnv, max_episode_steps=1000,
                         kwargs={"mode": mode})
    for base_id in ON_DEMAND_BASE_IDS:
        if on_demand_id(base_id) not in gym.registry:
            gym.register(id=on_demand_id(base_id), entry_point=OnDemandFault,
                         max_episode_steps=ON_DEMAND_MAX_EPISODE_STEPS,
                         kwargs={"base_id": base_id})


_register()

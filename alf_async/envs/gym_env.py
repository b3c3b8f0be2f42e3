"""Creating single gymnasium environments by id.

``make_env(env_name)`` returns a gymnasium env whose observations are flat float32
vectors and whose actions live in [-1, 1]^A (scaled affinely to the env's own
bounds). PyBullet ids (``HumanoidBulletEnv-v0``, ...) are registered by importing
``pybullet_envs_gymnasium`` on demand. Termination and time-limit truncation are
left exactly as gymnasium reports them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any, Dict, Optional, Tuple

import numpy as np

# Modules imported before an id lookup so that their env ids are registered.
_REGISTERING_MODULES = ("pybullet_envs_gymnasium", "alf_async.envs.fault_injection")


class UnknownEnvError(ValueError):
    """The env id is not registered with gymnasium."""


@contextlib.contextmanager
def quiet_stdout(fd: int = 1):
    """Silence C-level prints (pybullet writes 'argv[0]=' to stdout)."""
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _register_env_ids() -> None:
    try:  # pybullet prints its build time on stderr when first imported
        with quiet_stdout(2):
            importlib.import_module("pybullet")
    except ImportError:
        pass
    for module in _REGISTERING_MODULES:
        try:
            with quiet_stdout():
                importlib.import_module(module)
        except ImportError:
            pass


def import_env_modules(modules) -> None:
    """Import modules that register env ids (a user's ``my_envs``); raises
    ``UnknownEnvError`` naming the module if one cannot be imported."""
    for module in modules:
        try:
            with quiet_stdout():
                importlib.import_module(module)
        except Exception as e:  # noqa: BLE001  (ImportError or the module's own error)
            raise UnknownEnvError(
                f"module '{module}' cannot be imported ({type(e).__name__}: {e}); it must "
                "be importable from the working directory or PYTHONPATH") from None


def split_env_name(env_name: str) -> Tuple[Optional[str], str]:
    """'my_envs:MyEnv-v0' -> ('my_envs', 'MyEnv-v0'); 'MyEnv-v0' -> (None, 'MyEnv-v0').

    gymnasium's convention: the module before the colon registers the id.
    """
    module, colon, env_id = env_name.partition(":")
    return (module, env_id) if colon else (None, env_name)


def check_env_id(env_name: str) -> None:
    """Raise ``UnknownEnvError`` naming close matches if ``env_name`` is unknown.

    ``env_name`` may name the registering module first (``my_envs:MyEnv-v0``).
    """
    import gymnasium as gym

    _register_env_ids()
    module, env_name = split_env_name(env_name)
    if module:
        import_env_modules([module])
    if env_name in gym.registry:
        return
    import difflib

    close = difflib.get_close_matches(env_name, list(gym.registry.keys()), n=5)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    raise UnknownEnvError(
        f"Unknown environment id '{env_name}': it is not registered with gymnasium "
        f"(PyBullet ids such as HumanoidBulletEnv-v0 come from pybullet_envs_gymnasium)."
        f"{hint}")


class UnitActionWrapper:
    """Wraps a gymnasium env so that actions are given in [-1, 1]^A.

    Actions outside [-1, 1] are clipped before being mapped to the env's box.
    Observations are returned as flat float32 arrays.
    """

    def __init__(self, env: Any):
        import gymnasium as gym

        self.env = env
        space = env.action_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(
                f"env {env.spec.id if env.spec else env} has action space {space}; "
                "alf_async's PPO needs a continuous Box action space")
        self._low = space.low.astype(np.float64)
        self._high = space.high.astype(np.float64)
        if not (np.all(np.isfinite(self._low)) and np.all(np.isfinite(self._high))):
            raise ValueError(f"action space {space} must be bounded to map it to [-1, 1]")
        self.action_dim = int(np.prod(space.shape))
        self.observation_dim = int(np.prod(env.observation_space.shape))
        spec = getattr(env, "spec", None)
        self.max_episode_steps = getattr(spec, "max_episode_steps", None)

    def reset(self, seed: Optional[int] = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        return np.asarray(obs, dtype=np.float32).reshape(-1)

    def step(self, action: np.ndarray) -> Tuple[np.ndarray, float, bool, bool, Dict]:
        unit = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        scaled = self._low + (unit + 1.0) * 0.5 * (self._high - self._low)
        obs, reward, terminated, truncated, info = self.env.step(
            scaled.reshape(self.env.action_space.shape).astype(self.env.action_space.dtype))
        return (np.asarray(obs, dtype=np.float32).reshape(-1), float(reward),
                bool(terminated), bool(truncated), info)

    def render(self) -> np.ndarray:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def make_env(env_name: str, render_mode: Optional[str] = None,
             max_episode_steps: Optional[int] = None) -> UnitActionWrapper:
    """Create one env by gymnasium id, with actions in [-1, 1].

    Args:
        env_name: a gymnasium id, e.g. ``InvertedPendulumBulletEnv-v0``, or
            ``module:id`` to import the module that registers the id first.
        render_mode: passed to ``gym.make`` (``"rgb_array"`` for video).
        max_episode_steps: override the id's time limit (None keeps it).
    """
    import gymnasium as gym

    check_env_id(env_name)
    env_name = split_env_name(env_name)[1]
    kwargs = {}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    with quiet_stdout():
        env = gym.make(env_name, **kwargs)
    return UnitActionWrapper(env)


def env_dims(env_name: str) -> Tuple[int, int, Optional[int]]:
    """(observation_dim, action_dim, max_episode_steps) of an env id."""
    env = make_env(env_name)
    try:
        return env.observation_dim, env.action_dim, env.max_episode_steps
    finally:
        env.close()

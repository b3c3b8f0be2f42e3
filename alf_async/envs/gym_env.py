"""Creating single gymnasium environments by id.

``make_env(env_name)`` returns a gymnasium env whose observations are flat float32
vectors and whose actions are stored rows (``envs.spaces``): continuous actions in
[-1, 1]^A (scaled affinely to the env's own bounds), discrete ones as indices. PyBullet ids (``HumanoidBulletEnv-v0``, ...) are registered by importing
``pybullet_envs_gymnasium`` on demand. Termination and time-limit truncation are
left exactly as gymnasium reports them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any, Dict, Optional, Tuple

import numpy as np

from alf_async.envs import atari
from alf_async.envs.spaces import (DISCRETE, ActionSpec, EnvActions, ObservationSpec,
                                   action_spec, needs_flattening, observation_spec)

# Modules imported before an id lookup so that their env ids are registered.
_REGISTERING_MODULES = ("pybullet_envs_gymnasium", "alf_async.envs.fault_injection",
                        "alf_async.envs.image_envs", "alf_async.envs.masked_envs")


class UnknownEnvError(ValueError):
    """The env id is not registered with gymnasium."""


class EnvOptionError(ValueError):
    """An env cannot take an option asked of it (a time feature without a time limit)."""


class RenderModeError(EnvOptionError):
    """An env cannot render in the render mode asked of it (its metadata's
    ``render_modes`` leave the mode out, or its constructor takes no
    ``render_mode``)."""


def _declared_render_modes(env_name: str) -> Optional[list]:
    """The ``render_modes`` an env id's class declares in its metadata, or None
    if it declares none (gymnasium then passes any mode on to the constructor)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    spec = gym.spec(env_name)
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = load_env_creator(creator)
    metadata = getattr(creator, "metadata", None)
    if not isinstance(metadata, dict):  # a function, or a wrapper's property
        return None
    modes = metadata.get("render_modes")
    return list(modes) if modes is not None else None


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
    if atari.register_atari_ids() and env_name in gym.registry:
        return
    import difflib

    close = difflib.get_close_matches(env_name, list(gym.registry.keys()), n=5)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    if atari.looks_like_atari(env_name) and not atari.ale_installed():
        hint += f" Atari ids come from ale-py, which is not installed: {atari.ATARI_EXTRA}."
    raise UnknownEnvError(
        f"Unknown environment id '{env_name}': it is not registered with gymnasium "
        f"(PyBullet ids such as HumanoidBulletEnv-v0 come from pybullet_envs_gymnasium)."
        f"{hint}")


class EnvAdapter:
    """A gymnasium env as alf_async steps it: observations as the env's
    ``ObservationSpec`` stores them (a float32 vector [O], or an image in its own
    shape, uint8 kept) and actions given as stored rows (see ``envs.spaces``).

    Continuous actions come in [-1, 1]^A (clipped) and are mapped to the env's
    box; discrete actions come as choice indices (rounded and clipped to
    [0, n-1]) and are shifted by the space's ``start``. Non-Box observations are
    flattened by gymnasium's ``FlattenObservation``.
    """

    def __init__(self, env: Any):
        import gymnasium as gym

        name = f"env {env.spec.id if env.spec else env}"
        if needs_flattening(env.observation_space, name):
            env = gym.wrappers.FlattenObservation(env)
        self.env = env
        space = env.action_space
        self.action_spec = action_spec(space, name)
        self.action_dim = self.action_spec.dim
        self.env_actions = EnvActions(space, self.action_spec)
        self.observation_spec = observation_spec(env.observation_space)
        self._obs_dtype = np.dtype(self.observation_spec.dtype)
        self.observation_dim = self.observation_spec.dim
        spec = getattr(env, "spec", None)
        self.max_episode_steps = getattr(spec, "max_episode_steps", None)

    def _observation(self, obs: Any) -> np.ndarray:
        """The env's observation as stored: [O] float32, or the image's shape."""
        return np.asarray(obs, dtype=self._obs_dtype).reshape(self.observation_spec.shape)

    def reset(self, seed: Optional[int] = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        return self._observation(obs)

    def env_action(self, action: np.ndarray) -> Any:
        """A stored action row [dim] as the env's action (``EnvActions``; a
        Discrete space's index as an int)."""
        env_action = self.env_actions(action)
        return int(env_action) if self.action_spec.kind == DISCRETE else env_action

    def step(self, action: np.ndarray) -> Tuple[np.ndarray, float, bool, bool, Dict]:
        obs, reward, terminated, truncated, info = self.env.step(self.env_action(action))
        return (self._observation(obs), float(reward), bool(terminated), bool(truncated),
                info)

    def render(self) -> np.ndarray:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def make_env(env_name: str, render_mode: Optional[str] = None,
             max_episode_steps: Optional[int] = None,
             time_feature: bool = False, terminal_on_life_loss: bool = False) -> EnvAdapter:
    """Create one env by gymnasium id, adapted to alf_async (``EnvAdapter``).

    Args:
        env_name: a gymnasium id, e.g. ``InvertedPendulumBulletEnv-v0``, or
            ``module:id`` to import the module that registers the id first.
        render_mode: passed to ``gym.make`` (``"rgb_array"`` for video); None
            (the default) makes an env that does not render. An env that
            cannot render in this mode raises ``RenderModeError``.
        max_episode_steps: override the id's time limit (None keeps it); for
            an Atari game, env steps of 4 frames.
        time_feature: append t / time limit to the observation (gymnasium's
            ``TimeAwareObservation``); the env must have a time limit.
        terminal_on_life_loss: an Atari game's lost life ends the episode, not
            the game (``episodic_life.EpisodicLife``); Atari ids only.
    """
    import gymnasium as gym

    check_env_id(env_name)
    env_name = split_env_name(env_name)[1]
    kwargs = {}
    if render_mode is not None:
        modes = _declared_render_modes(env_name)
        if modes is not None and render_mode not in modes:
            raise RenderModeError(
                f"env {env_name} cannot render frames: its render_modes are {modes}, "
                f"without {render_mode!r}")
        kwargs["render_mode"] = render_mode
    is_atari = atari.is_atari(env_name)
    if max_episode_steps is not None and not is_atari:  # Atari's: after the frame skip
        kwargs["max_episode_steps"] = max_episode_steps
    if terminal_on_life_loss and not is_atari:
        raise EnvOptionError(f"Trainer.terminal_on_life_loss applies to Atari games (ale-py "
                             f"ids), and env {env_name} is not one: set it to False")
    if is_atari:
        kwargs.update(atari.atari_make_kwargs(env_name))
    # ALE prints its banner on stderr; other envs keep their stderr (warnings).
    quiet_stderr = quiet_stdout(2) if is_atari else contextlib.nullcontext()
    try:
        with quiet_stdout(), quiet_stderr:
            env = gym.make(env_name, **kwargs)
    except TypeError as e:
        if render_mode is None or "render_mode" not in str(e):
            raise
        raise RenderModeError(f"env {env_name} cannot render frames: its constructor "
                              f"takes no render_mode ({str(e).splitlines()[0]})") from None
    try:
        if is_atari:
            try:
                env = atari.wrap_atari(env, terminal_on_life_loss, max_episode_steps)
            except gym.error.DependencyNotInstalled:
                raise EnvOptionError(f"Atari preprocessing needs opencv, which is not "
                                     f"installed: {atari.ATARI_EXTRA}") from None
        if time_feature:
            if isinstance(env.observation_space, gym.spaces.Box) and observation_spec(
                    env.observation_space).is_image:
                raise EnvOptionError(
                    f"Trainer.time_feature appends to vector observations, and env "
                    f"{env_name} gives images "
                    f"({observation_spec(env.observation_space)}): set it to False")
            if getattr(env.spec, "max_episode_steps", None) is None:
                raise EnvOptionError(
                    f"Trainer.time_feature needs a time limit, and env {env_name} has "
                    f"none: set Trainer.max_episode_steps")
            env = gym.wrappers.TimeAwareObservation(env, normalize_time=True)
        return EnvAdapter(env)
    except BaseException:
        env.close()
        raise


def env_spec(env_name: str, max_episode_steps: Optional[int] = None,
             time_feature: bool = False, terminal_on_life_loss: bool = False
             ) -> Tuple[ObservationSpec, ActionSpec, Optional[int]]:
    """(ObservationSpec, ActionSpec, max_episode_steps) of an env id, made as
    ``make_env`` makes it with these options."""
    env = make_env(env_name, max_episode_steps=max_episode_steps, time_feature=time_feature,
                   terminal_on_life_loss=terminal_on_life_loss)
    try:
        return env.observation_spec, env.action_spec, env.max_episode_steps
    finally:
        env.close()


def env_dims(env_name: str) -> Tuple[int, int, Optional[int]]:
    """(observation_dim, action_dim, max_episode_steps) of an env id; action_dim is
    the width of a stored action row (``ActionSpec.dim``)."""
    observation, spec, limit = env_spec(env_name)
    return observation.dim, spec.dim, limit

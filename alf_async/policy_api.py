"""Acting with a trained policy from Python, as a Stable-Baselines3 user does.

    policy = alf_async.load("runs/cartpole")      # the newest checkpoint
    env = policy.make_env()                       # the env as the run made it
    observation, _ = env.reset(seed=0)
    action, state = policy.predict(observation)
    observation, reward, terminated, truncated, _ = env.step(action)

``load`` takes a run directory or a checkpoint file in its ``checkpoints/``
folder and returns a ``Policy``. ``Policy.predict`` takes observations as the
env gives them and returns actions as its ``step`` takes them (continuous
actions scaled to the env's bounds, discrete ones as the env's indices); the
checkpoint's observation normalizer is applied inside. A recurrent policy
(``ActorCritic.rnn``) carries a state that the caller passes back, with SB3's
``episode_start`` resets. ``Policy.export`` writes the deterministic policy as
a TorchScript or ONNX file (``playback.export``).

Shapes: B = batch, *O = ``observation_space.shape``, *A =
``action_space.shape`` (() for a Discrete space), S = the recurrent state's
floats per env (``state_size``; 0: a feed-forward policy).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple, Union

import numpy as np

from alf_async.envs.spaces import EnvActions
from alf_async.playback.player import LoadedRun, PolicyLoadError, load_run
from alf_async.runtime.policy import act_with_state

__all__ = ["Policy", "PolicyLoadError", "load"]

PathLike = Union[str, "os.PathLike[str]"]


def load(root_dir_or_checkpoint: PathLike, seed: int = 0) -> "Policy":
    """Load a trained policy on the CPU.

    Args:
        root_dir_or_checkpoint: a run directory (its newest loadable
            checkpoint is loaded) or a checkpoint file
            ``<run>/checkpoints/ckpt-<iteration>.pt``.
        seed: seeds the random streams of ``predict(..., deterministic=False)``.

    gin: the run's ``config.gin`` is parsed into gin's global config to build
    the networks, and the bindings that were there before the call are put
    back when it returns (also when it raises).

    Raises:
        PolicyLoadError: (a ``ValueError``) the path is neither, the run has no
            loadable checkpoint, or the checkpoint does not fit the run's
            config; the message names the file.
    """
    root_dir, checkpoint = _run_and_checkpoint(root_dir_or_checkpoint)
    return Policy(load_run(root_dir, checkpoint, seed))


def _run_and_checkpoint(path: PathLike) -> Tuple[str, Optional[str]]:
    """(run directory, checkpoint file or None for the newest) of ``load``'s argument."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        return path, None
    if os.path.isfile(path):
        folder = os.path.dirname(path)
        if os.path.basename(folder) != "checkpoints":
            raise PolicyLoadError(
                f"{path} is not a checkpoint of a run: give a run directory or a "
                "checkpoint file <run>/checkpoints/ckpt-<iteration>.pt")
        return os.path.dirname(folder), path
    raise PolicyLoadError(
        f"{path} does not exist: give a run directory (its newest checkpoint is "
        "loaded) or a checkpoint file <run>/checkpoints/ckpt-<iteration>.pt")


class Policy:
    """A trained policy, acting on observations as the run's env gives them.

    Made by ``load``. Attributes:

    - ``observation_space``, ``action_space``: the gymnasium spaces of the env
      that ``make_env`` makes (the run's env with the wrappers the run put
      on it: a time feature, Atari's preprocessing, the flattening of Dict or
      Discrete observations): what ``predict`` takes and returns for one
      observation.
    - ``state_size``: S, the floats of recurrent state per env (0:
      feed-forward); ``recurrent``: S > 0.
    - ``algorithm``: "ppo" or "sac"; ``env_name``: the run's env id;
      ``checkpoint``: the loaded checkpoint file.
    - ``eval_seed``: the reset seed of the first episode of each of the run's
      evaluations (``Trainer.eval_interval_env_steps``; episode i: + i), to
      play the same episodes.
    """

    def __init__(self, run: LoadedRun):
        self._run = run
        self.observation_space = run.observation_space
        self.action_space = run.action_space
        self.algorithm = run.algorithm
        self.env_name = run.run_env.env_name
        self.checkpoint = run.checkpoint
        self.eval_seed = run.eval_seed
        self.state_size = int(getattr(run.policy, "state_size", 0))
        self._env_actions = EnvActions(run.action_space, run.action_spec)

    @property
    def recurrent(self) -> bool:
        return self.state_size > 0

    def __repr__(self) -> str:
        kind = f"recurrent (S = {self.state_size})" if self.recurrent else "feed-forward"
        return (f"Policy({self.algorithm}, {self.env_name}, {kind}, observation_space="
                f"{self.observation_space}, action_space={self.action_space}, "
                f"checkpoint={self.checkpoint!r})")

    def initial_state(self, batch_size: Optional[int] = None) -> Optional[np.ndarray]:
        """The state an episode starts with: zeros [S] (``batch_size`` None)
        or [B, S] float32; None for a feed-forward policy."""
        if not self.recurrent:
            return None
        shape = (self.state_size,) if batch_size is None else (int(batch_size),
                                                               self.state_size)
        return np.zeros(shape, np.float32)

    def predict(self, observation: Any, state: Optional[np.ndarray] = None,
                episode_start: Optional[Any] = None, deterministic: bool = True
                ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """The action for one observation or for a batch of them.

        Args:
            observation: one observation [*O] or a batch [B, *O], as the env
                gives them (``observation_space``).
            state: a recurrent policy's state, as the previous call returned
                it ([S] for one observation, [B, S] for a batch); None: zeros,
                the start of an episode. A feed-forward policy takes None.
            episode_start: a recurrent policy's rows whose episode begins with
                this observation (a bool, or bools [B]): their state is reset
                to zeros first (Stable-Baselines3's semantics). Ignored by a
                feed-forward policy.
            deterministic: act with the mode of the action distribution (PPO's
                mean or most likely choice, SAC's tanh(mean)), as the run's
                evaluations and ``play`` do; False samples.

        Returns:
            (action, state): the action [*A] for one observation or [B, *A]
            for a batch, as ``env.step`` of ``make_env()``'s env takes it
            (continuous: the env's bounds and dtype; discrete: int64 indices
            of the env's space); the next state ([S] or [B, S] float32), or
            None for a feed-forward policy.

        Raises:
            ValueError: an observation, state or episode_start whose shape
                does not fit.
        """
        batch, single = self._observations(observation)
        rows = len(batch)
        policy = self._run.policy if deterministic else self._run.sampler
        if not self.recurrent:
            if state is not None:
                raise ValueError("this policy is feed-forward and keeps no state: pass "
                                 "state=None (predict returns None for it)")
            actions, next_state = act_with_state(policy, batch, None)
        else:
            states = self._states(state, rows, single)
            if episode_start is not None:
                starts = np.asarray(episode_start, dtype=bool).reshape(-1)
                if starts.shape != (rows,):
                    raise ValueError(f"episode_start has {starts.size} value(s) for "
                                     f"{rows} observation(s): give one bool per row")
                states[starts] = 0.0
            actions, next_state = act_with_state(policy, batch, states)
        env_actions = self._env_actions(actions)
        if single:
            return env_actions[0], None if next_state is None else next_state[0]
        return env_actions, next_state

    def _observations(self, observation: Any) -> Tuple[np.ndarray, bool]:
        """(observations [B, *stored shape] as the networks take them, whether
        ``observation`` was a single one)."""
        obs = np.asarray(observation)
        shape = tuple(self.observation_space.shape)
        if obs.shape == shape:
            single, obs = True, obs[None]
        elif obs.ndim == len(shape) + 1 and obs.shape[1:] == shape:
            single = False
        else:
            raise ValueError(
                f"observation of shape {obs.shape} does not fit the policy's observation "
                f"space {self.observation_space}: give one observation of shape {shape} "
                f"or a batch of shape (B, {', '.join(str(n) for n in shape)})")
        spec = self._run.observation_spec
        stored = obs.reshape((len(obs),) + tuple(spec.shape)).astype(spec.dtype, copy=False)
        return np.ascontiguousarray(stored), single

    def _states(self, state: Optional[np.ndarray], rows: int, single: bool) -> np.ndarray:
        """The states [B, S] (a copy) to act from."""
        if state is None:
            return np.zeros((rows, self.state_size), np.float32)
        states = np.array(state, dtype=np.float32, copy=True)
        want = ((self.state_size,), (1, self.state_size)) if single else (
            (rows, self.state_size),)
        if states.shape not in want:
            raise ValueError(f"state of shape {states.shape} does not fit: this policy's "
                             f"state is {' or '.join(str(w) for w in want)} (S = "
                             f"{self.state_size}) for {rows} observation(s); pass the "
                             "state predict returned, or None at an episode's start")
        return states.reshape(rows, self.state_size)

    def make_env(self, render_mode: Optional[str] = None) -> Any:
        """A new gymnasium env made as the run made its envs (its id, time
        limit, time feature, Atari preprocessing, observation flattening):
        the observations it gives fit ``predict`` and the actions ``predict``
        returns fit its ``step``. ``render_mode`` goes to ``gym.make``
        ("rgb_array", "human"). The caller closes it."""
        from alf_async.envs.gym_env import make_env

        run_env = self._run.run_env
        return make_env(run_env.env_name, render_mode=render_mode,
                        max_episode_steps=run_env.max_episode_steps,
                        time_feature=run_env.time_feature).env

    def export(self, path: PathLike, format: str = "torchscript") -> str:
        """Write the deterministic policy to ``path`` as "torchscript" or
        "onnx" (see ``playback.export`` for the file's inputs and outputs);
        returns the file's absolute path.

        Raises:
            ExportError: (a ``ValueError``) an unknown format, or ONNX without
                its packages (the message names the extra to install).
            OSError: the file cannot be written.
        """
        from alf_async.playback.export import export_policy

        return export_policy(self._run, os.fspath(path), format)

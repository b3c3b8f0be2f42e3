"""Loading a trained policy from a run directory and playing episodes with it.

``load_run`` rebuilds the learner from the run's ``config.gin`` and a
checkpoint and returns a ``LoadedRun``: the policy acting with the mode of its
action distribution (``NeuralPolicy`` for PPO, ``SACPolicy`` for SAC), a twin
that samples, and the env's spaces; ``load_policy`` is its deterministic
policy alone (the ``play`` command's). The Python API (``alf_async.load``,
``policy_api``) is built on ``load_run``.
``make_play_env`` makes the env as the run made it, rendering off-screen only
to record; ``run_episodes`` plays the policy on it, optionally recording frames
with a ``VideoWriter`` (playback.video). The ``play`` command
(alf_async.bin.play) is the command-line front of this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from alf_async.runtime.policy import act_with_state, start_states


class PlayError(ValueError):
    """A problem with the user's input, explained for the user."""


class PolicyLoadError(PlayError):
    """A run directory or checkpoint that cannot be loaded as a policy; the
    message names it and says why."""


@dataclass(frozen=True)
class RunEnv:
    """How a run made its envs: the id and the options that change what the
    policy sees (Trainer.env_name, max_episode_steps, time_feature)."""

    env_name: str
    max_episode_steps: Optional[int]
    time_feature: bool


@dataclass
class Episode:
    """One episode's result."""

    episode_return: float
    length: int


def find_checkpoint(root_dir: str, checkpoint: Optional[str]) -> Tuple[Dict[str, Any], str]:
    """(state, path) of the requested checkpoint, or of the newest one."""
    from alf_async.checkpoint import CheckpointError, Checkpointer, load_checkpoint_file

    directory = os.path.join(root_dir, "checkpoints")
    try:
        if checkpoint:
            path = checkpoint
            if not os.path.isfile(path) and os.path.isfile(os.path.join(directory, path)):
                path = os.path.join(directory, path)
            if not os.path.isfile(path):
                raise PolicyLoadError(f"checkpoint {checkpoint} does not exist")
            return load_checkpoint_file(path), path
        if not os.path.isdir(directory) or not Checkpointer(root_dir).list():
            raise PolicyLoadError(f"{root_dir} holds no checkpoint (looked in "
                                  f"{directory}); train first, or name a checkpoint file")
        found = Checkpointer(root_dir).load_latest()
        if found is None:
            raise PolicyLoadError(f"no loadable checkpoint in {directory}")
        return found
    except CheckpointError as e:
        raise PolicyLoadError(str(e)) from None


def trainer_setting(name: str) -> Any:
    """The value of ``Trainer.<name>`` in the parsed config (or its default)."""
    import gin

    from alf_async.settings import TrainerSettings

    try:
        return gin.query_parameter(f"Trainer.{name}")
    except ValueError:
        return TrainerSettings.__dataclass_fields__[name].default


@dataclass(frozen=True)
class LoadedRun:
    """A run's trained policy, loaded from one of its checkpoints.

    Attributes:
        policy: acts with the mode of the action distribution (PPO's mean or
            most likely choice, SAC's tanh(mean)): ``NeuralPolicy`` or
            ``SACPolicy`` with ``deterministic=True``.
        sampler: the same weights, sampling actions (``deterministic=False``).
        run_env: how the run made its envs.
        checkpoint: the checkpoint file's path.
        algorithm: "ppo" or "sac" (``Trainer.algorithm``).
        observation_spec, action_spec: the env's, as the networks take them
            (``envs.spaces``).
        observation_space, action_space: the gymnasium spaces of the env that
            ``make_play_env`` makes (its wrappers included), as a user's loop
            sees them.
        eval_seed: the reset seed of the first episode of each of the run's
            evaluations (episode i: + i; ``settings.eval_seed``).
    """

    policy: Any
    sampler: Any
    run_env: RunEnv
    checkpoint: str
    algorithm: str
    observation_spec: Any
    action_spec: Any
    observation_space: Any
    action_space: Any
    eval_seed: int


def load_run(root_dir: str, checkpoint: Optional[str] = None, seed: int = 0) -> LoadedRun:
    """Load a run's policy from ``checkpoint`` (a path or a file name in
    ``<root_dir>/checkpoints``; None: the newest loadable one) on the CPU.

    The run's ``config.gin`` is parsed into gin's global config to build the
    networks, and the bindings from before the call are put back when it
    returns (``utils.gin_scope.restored_gin_config``). One env is made and
    closed to read its spaces. ``seed`` seeds the sampler's random streams.
    Raises ``PolicyLoadError`` naming what cannot be loaded.
    """
    from alf_async.algorithms.policy import NeuralPolicy
    from alf_async.algorithms.sac_learner import SACLearner
    from alf_async.algorithms.sac_policy import SACPolicy
    from alf_async.settings import eval_seed
    from alf_async.utils.gin_scope import restored_gin_config

    if not os.path.isdir(root_dir):
        raise PolicyLoadError(f"run directory {root_dir} does not exist")
    config = os.path.join(root_dir, "config.gin")
    if not os.path.isfile(config):
        raise PolicyLoadError(f"{root_dir} holds no config.gin: is it a run directory?")
    state, path = find_checkpoint(root_dir, checkpoint)
    with restored_gin_config():
        learner, run_env, spaces = _build_learner(config)
        first_eval_seed = eval_seed(trainer_setting("seed"))
        try:
            learner.load_state_dict(state["learner"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise PolicyLoadError(f"checkpoint {path} does not fit the run's config "
                                  f"({type(e).__name__}: {str(e).splitlines()[0]})") from None
        sac = isinstance(learner, SACLearner)
        policy_class = SACPolicy if sac else NeuralPolicy
        weights = learner.weight_arrays()
        policies = []
        for deterministic in (True, False):
            policy = policy_class(spaces.observation_spec, spaces.action_spec, seed=seed,
                                  deterministic=deterministic)
            policy.load_weights(weights)
            policies.append(policy)
    return LoadedRun(policies[0], policies[1], run_env, path, "sac" if sac else "ppo",
                     spaces.observation_spec, spaces.action_spec,
                     spaces.env.observation_space, spaces.env.action_space, first_eval_seed)


def _build_learner(config: str) -> Tuple[Any, RunEnv, Any]:
    """(the learner, on the CPU, with initial weights; ``RunEnv``; the closed
    ``EnvAdapter`` of one env made as the run made it) of a run's config,
    parsed into gin's global config here."""
    import gin

    from alf_async.algorithms.ppo_learner import PPOLearner
    from alf_async.algorithms.sac_learner import SACLearner
    from alf_async.config import ConfigError, parse_config
    from alf_async.envs.gym_env import EnvOptionError, UnknownEnvError, make_env
    from alf_async.envs.spaces import UnsupportedSpaceError

    try:
        parse_config([config])
        sac = trainer_setting("algorithm") == "sac"
        gin.bind_parameter("SACLearner.device" if sac else "PPOLearner.device", "cpu")
        run_env = RunEnv(trainer_setting("env_name"), trainer_setting("max_episode_steps"),
                         trainer_setting("time_feature"))
        env = make_env(run_env.env_name, max_episode_steps=run_env.max_episode_steps,
                       time_feature=run_env.time_feature)
        env.close()
        learner = (SACLearner if sac else PPOLearner)(env.observation_spec, env.action_spec)
    except (ConfigError, UnknownEnvError, EnvOptionError, UnsupportedSpaceError) as e:
        raise PolicyLoadError(str(e)) from None
    return learner, run_env, env


def load_policy(root_dir: str, checkpoint: Optional[str]) -> Tuple[Any, RunEnv, str]:
    """(deterministic policy, RunEnv, checkpoint path) of a run (``load_run``)."""
    run = load_run(root_dir, checkpoint)
    return run.policy, run.run_env, run.checkpoint


def make_play_env(run_env: RunEnv, max_steps: Optional[int] = None,
                  record: bool = False) -> Any:
    """The env to play on (an ``EnvAdapter``), made as the run made it; it renders
    ``rgb_array`` frames only when ``record`` is true, so that evaluating an env
    that cannot render works. Recording an env that cannot render raises
    ``PlayError``: one that declares no ``rgb_array`` mode, one whose rendering
    needs a package that is not installed, or one whose frames are not images
    (checked on one reset and render before anything is written).

    With a time feature the env keeps the run's time limit (the policy sees
    t / limit) and ``max_steps`` only cuts episodes short; otherwise ``max_steps``
    replaces the time limit.
    """
    from alf_async.envs.gym_env import RenderModeError, make_env

    time_limit = run_env.max_episode_steps
    if not run_env.time_feature:
        time_limit = max_steps or time_limit
    if record:
        # pygame (classic-control rendering) draws on off-screen surfaces: SDL's
        # headless video driver spares it probing for a display (and a warning
        # on stderr when there is none).
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = make_env(run_env.env_name, render_mode="rgb_array" if record else None,
                       max_episode_steps=time_limit, time_feature=run_env.time_feature)
    except RenderModeError as e:
        raise PlayError(f"cannot record {run_env.env_name}: {e}; play it without "
                        "--record_file to evaluate the policy") from None
    if record:
        try:
            check_renders(env, run_env.env_name)
        except BaseException:
            env.close()
            raise
    return env


def check_renders(env: Any, env_name: str) -> None:
    """Raise ``PlayError`` unless ``env`` (made with ``render_mode="rgb_array"``)
    renders an [H, W, 3] image after a reset."""
    from gymnasium.error import DependencyNotInstalled

    from alf_async.envs.gym_env import quiet_stdout

    try:
        with quiet_stdout():  # pybullet prints when it first renders
            env.reset(seed=0)
            frame = env.render()
    except (DependencyNotInstalled, ImportError) as e:
        raise PlayError(f"cannot record {env_name}: rendering it needs a package that is "
                        f"not installed ({str(e).splitlines()[0]}); install it, or play "
                        "without --record_file to evaluate the policy") from None
    shape = getattr(frame, "shape", None)
    if shape is None or len(shape) != 3 or shape[2] < 3:
        got = "None" if frame is None else (f"shape {tuple(shape)}" if shape is not None
                                            else type(frame).__name__)
        raise PlayError(f"cannot record {env_name}: its render() gave {got}, not an "
                        "[H, W, 3] image; play it without --record_file to evaluate the "
                        "policy")


def _label(index: int, steps: int, total: float) -> str:
    return f"episode {index + 1}  step {steps}  return {total:.1f}"


def run_episodes(policy, env, num_episodes: int, seed: int = 0, writer=None,
                 overlay: bool = True, report=print,
                 max_steps: Optional[int] = None) -> List[Episode]:
    """Run ``num_episodes`` with ``policy`` on ``env``; frames go to ``writer``.
    An episode ends when the env ends it or after ``max_steps`` steps."""
    from alf_async.envs.gym_env import quiet_stdout

    episodes = []
    for index in range(num_episodes):
        with quiet_stdout():  # pybullet prints when it first renders
            observation = env.reset(seed=seed + index)
            frame = env.render() if writer is not None else None
        total, steps = 0.0, 0
        state = start_states(policy, 1)  # a recurrent policy's memory, zero at reset
        if writer is not None:
            writer.add(frame, _label(index, steps, total) if overlay else None)
        while True:
            action, state = act_with_state(policy, observation[None], state)
            observation, reward, terminated, truncated, _ = env.step(action[0])
            total += reward
            steps += 1
            if writer is not None:
                writer.add(env.render(), _label(index, steps, total) if overlay else None)
            if terminated or truncated or steps == max_steps:
                break
        episodes.append(Episode(total, steps))
        report(f"episode {index + 1}: return {total:.2f}, length {steps}")
    return episodes

"""Loading a trained policy from a run directory and playing episodes with it.

``load_policy`` rebuilds the learner from the run's ``config.gin`` and a
checkpoint and returns its deterministic (mean-action) policy (``NeuralPolicy``
for PPO, ``SACPolicy`` for SAC);
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
                raise PlayError(f"checkpoint {checkpoint} does not exist")
            return load_checkpoint_file(path), path
        if not os.path.isdir(directory) or not Checkpointer(root_dir).list():
            raise PlayError(f"{root_dir} holds no checkpoint (looked in {directory}); "
                            "train first, or give --checkpoint")
        found = Checkpointer(root_dir).load_latest()
        if found is None:
            raise PlayError(f"no loadable checkpoint in {directory}")
        return found
    except CheckpointError as e:
        raise PlayError(str(e)) from None


def trainer_setting(name: str) -> Any:
    """The value of ``Trainer.<name>`` in the parsed config (or its default)."""
    import gin

    from alf_async.settings import TrainerSettings

    try:
        return gin.query_parameter(f"Trainer.{name}")
    except ValueError:
        return TrainerSettings.__dataclass_fields__[name].default


def load_policy(root_dir: str, checkpoint: Optional[str]):
    """(policy, RunEnv, checkpoint path) of a run.

    The run's ``config.gin`` is parsed into gin's global config (with the
    learner's device bound to "cpu"), replacing whatever was parsed before and
    left bound afterwards: a program that loads a policy and then trains parses
    its own config again (``config.parse_config`` clears gin first).
    """
    import gin

    from alf_async.algorithms.policy import NeuralPolicy
    from alf_async.algorithms.ppo_learner import PPOLearner
    from alf_async.algorithms.sac_learner import SACLearner
    from alf_async.algorithms.sac_policy import SACPolicy
    from alf_async.config import ConfigError, parse_config
    from alf_async.envs.gym_env import EnvOptionError, UnknownEnvError, env_spec
    from alf_async.envs.spaces import UnsupportedSpaceError

    if not os.path.isdir(root_dir):
        raise PlayError(f"run directory {root_dir} does not exist")
    config = os.path.join(root_dir, "config.gin")
    if not os.path.isfile(config):
        raise PlayError(f"{root_dir} holds no config.gin: is it a run directory?")
    state, path = find_checkpoint(root_dir, checkpoint)
    try:
        parse_config([config])
        sac = trainer_setting("algorithm") == "sac"
        gin.bind_parameter("SACLearner.device" if sac else "PPOLearner.device", "cpu")
        env_name = trainer_setting("env_name")
        observation, action_spec, _ = env_spec(env_name, trainer_setting("max_episode_steps"),
                                               trainer_setting("time_feature"))
        learner = (SACLearner if sac else PPOLearner)(observation, action_spec)
    except (ConfigError, UnknownEnvError, EnvOptionError, UnsupportedSpaceError) as e:
        raise PlayError(str(e)) from None
    try:
        learner.load_state_dict(state["learner"])
    except (KeyError, RuntimeError, ValueError) as e:
        raise PlayError(f"checkpoint {path} does not fit the run's config "
                        f"({type(e).__name__}: {str(e).splitlines()[0]})") from None
    policy = (SACPolicy if sac else NeuralPolicy)(observation, action_spec,
                                                  deterministic=True)
    policy.load_weights(learner.weight_arrays())
    run_env = RunEnv(env_name, trainer_setting("max_episode_steps"),
                     trainer_setting("time_feature"))
    return policy, run_env, path


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

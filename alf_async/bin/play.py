"""Watch a trained policy: run episodes with the mean action and record a video.

    python -m alf_async.bin.play --root_dir=runs/demo --num_episodes=3 \\
        --record_file=runs/demo/play.gif

Loads the run's ``config.gin`` and a checkpoint (default: the newest in
``<root_dir>/checkpoints``; ``--checkpoint`` takes a path or a file name in that
directory), builds the policy with the checkpoint's observation normalizer and
acts deterministically (the mean of the action distribution) on one env rendered
off-screen. Prints each episode's return and length. ``--record_file`` writes
every frame of every episode (a first frame after each reset, then one per step)
to a .gif (always available) or .mp4 (needs imageio-ffmpeg); each frame is
labelled with the episode, step and return unless ``--nooverlay``.
``--max_steps`` caps the steps of each episode.

Exit status: 0 done; 2 bad input (no run directory, no checkpoint, unusable
checkpoint or video file name); 1 an unexpected failure; 130 Ctrl-C.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from absl import app, flags

FLAGS = flags.FLAGS
EXIT_BAD_INPUT = 2
EXIT_SIGINT = 130


def define_flags() -> None:
    """The command's flags (defined at start-up, not import)."""
    flags.DEFINE_string("root_dir", None, "the run directory")
    flags.DEFINE_string("checkpoint", None, "checkpoint file (default: the newest)")
    flags.DEFINE_integer("num_episodes", 1, "episodes to run")
    flags.DEFINE_string("record_file", None, "write a video (.gif or .mp4)")
    flags.DEFINE_integer("max_steps", None, "cap on the steps of each episode "
                         "(default: the env's time limit)")
    flags.DEFINE_float("fps", None, "video frames per second (default: the env's)")
    flags.DEFINE_integer("seed", 0, "seed of the first episode's reset (+1 per episode)")
    flags.DEFINE_bool("overlay", True, "label each video frame with episode, step "
                      "and return")


class PlayError(ValueError):
    """A problem with the user's input, explained for the user."""


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
    """(policy, env_name, max_episode_steps, checkpoint path) of a run."""
    import gin

    from alf_async.algorithms.ppo_learner import PPOLearner
    from alf_async.config import ConfigError, parse_config
    from alf_async.envs.gym_env import UnknownEnvError, env_dims
    from alf_async.algorithms.policy import NeuralPolicy

    if not os.path.isdir(root_dir):
        raise PlayError(f"run directory {root_dir} does not exist")
    config = os.path.join(root_dir, "config.gin")
    if not os.path.isfile(config):
        raise PlayError(f"{root_dir} holds no config.gin: is it a run directory?")
    state, path = find_checkpoint(root_dir, checkpoint)
    try:
        parse_config([config])
        gin.bind_parameter("PPOLearner.device", "cpu")
        env_name = trainer_setting("env_name")
        observation_dim, action_dim, _ = env_dims(env_name)
    except (ConfigError, UnknownEnvError) as e:
        raise PlayError(str(e)) from None
    learner = PPOLearner(observation_dim, action_dim)
    try:
        learner.load_state_dict(state["learner"])
    except (KeyError, RuntimeError, ValueError) as e:
        raise PlayError(f"checkpoint {path} does not fit the run's config "
                        f"({type(e).__name__}: {str(e).splitlines()[0]})") from None
    policy = NeuralPolicy(observation_dim, action_dim, deterministic=True)
    policy.load_weights(learner.weight_arrays())
    return policy, env_name, trainer_setting("max_episode_steps"), path


def _label(index: int, steps: int, total: float) -> str:
    return f"episode {index + 1}  step {steps}  return {total:.1f}"


def run_episodes(policy, env, num_episodes: int, seed: int = 0, writer=None,
                 overlay: bool = True, report=print) -> List[Episode]:
    """Run ``num_episodes`` with ``policy`` on ``env``; frames go to ``writer``."""
    from alf_async.envs.gym_env import quiet_stdout

    episodes = []
    for index in range(num_episodes):
        with quiet_stdout():  # pybullet prints when it first renders
            observation = env.reset(seed=seed + index)
            frame = env.render() if writer is not None else None
        total, steps = 0.0, 0
        if writer is not None:
            writer.add(frame, _label(index, steps, total) if overlay else None)
        while True:
            action, _, _ = policy.act(observation[None])
            observation, reward, terminated, truncated, _ = env.step(action[0])
            total += reward
            steps += 1
            if writer is not None:
                writer.add(env.render(), _label(index, steps, total) if overlay else None)
            if terminated or truncated:
                break
        episodes.append(Episode(total, steps))
        report(f"episode {index + 1}: return {total:.2f}, length {steps}")
    return episodes


def play(root_dir: str, checkpoint: Optional[str] = None, num_episodes: int = 1,
         record_file: Optional[str] = None, max_steps: Optional[int] = None,
         fps: Optional[float] = None, seed: int = 0, overlay: bool = True) -> int:
    """Run the episodes (and record them); returns the exit status."""
    from alf_async.envs.gym_env import make_env
    from alf_async.reporting.video import VideoError, VideoWriter, video_format

    try:
        if num_episodes < 1:
            raise PlayError(f"--num_episodes must be >= 1, got {num_episodes}")
        if max_steps is not None and max_steps < 1:
            raise PlayError(f"--max_steps must be >= 1, got {max_steps}")
        if record_file:
            video_format(record_file)
        policy, env_name, time_limit, path = load_policy(os.path.abspath(root_dir),
                                                         checkpoint)
    except (PlayError, VideoError) as e:
        print(f"alf_async.play: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"checkpoint: {path}; env: {env_name}; deterministic (mean) actions")
    env = make_env(env_name, render_mode="rgb_array",
                   max_episode_steps=max_steps or time_limit)
    writer = None
    try:
        if record_file:
            env_fps = (getattr(env.env, "metadata", {}) or {}).get("render_fps") or 30
            writer = VideoWriter(record_file, fps or env_fps)
        episodes = run_episodes(policy, env, num_episodes, seed, writer, overlay)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_SIGINT
    finally:
        if writer is not None:
            writer.close()
        env.close()
    mean = sum(e.episode_return for e in episodes) / len(episodes)
    print(f"mean return over {len(episodes)} episode(s): {mean:.2f}")
    if writer is not None:
        print(f"recorded {writer.frames} frames to {record_file}")
    return 0


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        print(f"alf_async.play: error: unexpected arguments: {' '.join(argv[1:])}",
              file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    if not FLAGS.root_dir:
        print("alf_async.play: error: --root_dir is required", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(play(FLAGS.root_dir, FLAGS.checkpoint, FLAGS.num_episodes, FLAGS.record_file,
                  FLAGS.max_steps, FLAGS.fps, FLAGS.seed, FLAGS.overlay))


def run_main() -> None:
    define_flags()
    app.run(main)


if __name__ == "__main__":
    run_main()

"""Watch a trained policy: run episodes with the mean action and record a video.

    python -m alf_async.bin.play --root_dir=runs/demo --num_episodes=3 \\
        --record_file=runs/demo/play.gif

Loads the run's ``config.gin`` and a checkpoint (default: the newest in
``<root_dir>/checkpoints``; ``--checkpoint`` takes a path or a file name in that
directory), builds the policy with the checkpoint's observation normalizer and
acts deterministically (the mean of the action distribution) on one env. Prints
each episode's return and length. ``--record_file`` renders the env off-screen
and writes every frame of every episode (a first frame after each reset, then
one per step) to a .gif (always available) or .mp4 (needs imageio-ffmpeg); each
frame is labelled with the episode, step and return unless ``--nooverlay``.
The video plays at the env's ``render_fps`` (Atari: 15 frames a second, one an
env step of 4 game frames, so it plays in real time) unless ``--fps`` says.
Without ``--record_file`` nothing is rendered, so an env that cannot render is
evaluated all the same. ``--max_steps`` caps the steps of each episode.

Exit status: 0 done; 2 bad input (no run directory, no checkpoint, unusable
checkpoint or video file name, ``--record_file`` for an env that cannot render);
1 an unexpected failure; 130 Ctrl-C.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from absl import flags

from alf_async.bin.common import ExitCode, run_command, user_error

FLAGS = flags.FLAGS


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


def play(root_dir: str, checkpoint: Optional[str] = None, num_episodes: int = 1,
         record_file: Optional[str] = None, max_steps: Optional[int] = None,
         fps: Optional[float] = None, seed: int = 0, overlay: bool = True) -> int:
    """Run the episodes (and record them); returns the exit status."""
    from alf_async.envs import atari
    from alf_async.playback.player import PlayError, load_policy, make_play_env, run_episodes
    from alf_async.playback.video import VideoError, VideoWriter, video_format

    try:
        if num_episodes < 1:
            raise PlayError(f"--num_episodes must be >= 1, got {num_episodes}")
        if max_steps is not None and max_steps < 1:
            raise PlayError(f"--max_steps must be >= 1, got {max_steps}")
        if record_file:
            video_format(record_file)
        policy, run_env, path = load_policy(os.path.abspath(root_dir), checkpoint)
        env = make_play_env(run_env, max_steps, record=bool(record_file))
    except (PlayError, VideoError) as e:
        return user_error(str(e), command="alf_async.play")
    print(f"checkpoint: {path}; env: {run_env.env_name}; deterministic (mean) actions")
    writer = None
    try:
        if record_file:
            env_fps = (atari.STEPS_PER_SECOND if atari.is_atari(run_env.env_name) else
                       (getattr(env.env, "metadata", {}) or {}).get("render_fps") or 30)
            writer = VideoWriter(record_file, fps or env_fps)
        episodes = run_episodes(policy, env, num_episodes, seed, writer, overlay,
                                max_steps=max_steps)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.SIGINT
    finally:
        if writer is not None:
            writer.close()
        env.close()
    returns = [e.episode_return for e in episodes]
    mean = sum(returns) / len(returns)
    std = (sum((r - mean) ** 2 for r in returns) / len(returns)) ** 0.5
    print(f"mean return over {len(episodes)} episode(s): {mean:.2f} (std {std:.2f})")
    if writer is not None:
        print(f"recorded {writer.frames} frames to {record_file}")
    return ExitCode.OK


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}",
                            command="alf_async.play"))
    if not FLAGS.root_dir:
        sys.exit(user_error("--root_dir is required", command="alf_async.play"))
    sys.exit(play(FLAGS.root_dir, FLAGS.checkpoint, FLAGS.num_episodes, FLAGS.record_file,
                  FLAGS.max_steps, FLAGS.fps, FLAGS.seed, FLAGS.overlay))


def run_main() -> None:
    define_flags()
    run_command(main)


if __name__ == "__main__":
    run_main()

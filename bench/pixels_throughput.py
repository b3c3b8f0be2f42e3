"""Throughput on Atari Pong: alf_async sync and async against Sample Factory and
Stable-Baselines3.

Back to back on this machine: alf_async's ``ppo_atari_pong.gin`` (N = 1) and
``async_ppo_atari_pong.gin`` (N = 2) for ``--iterations`` training iterations
each, then (with ``--sf_python``, Sample Factory's own virtualenv with ale-py)
Sample Factory 2.1.1 sync and async with its Atari example's settings
(``peers/sf_atari_ppo.py``, 2 workers x 4 envs), and (with ``--sb3_python``)
SB3's PPO with the rl-baselines3-zoo's Atari settings
(``peers/sb3_atari_ppo.py``), each for as many env steps as one alf_async run,
with the same number of envs (8). One env step is 4 frames for all three. The
peers' rates are env steps over their training time (start-up excluded), as
alf_async's steady-state rate is.

alf_async's figures come from the metrics rows after ``--warmup`` iterations
(``benchlib.summarize_timing``): env steps/s, T, U (the actor's unroll) and L
(the learner's training) per iteration, and L / T, the learner's share of an
iteration. ``shm_per_trajectory_mb`` is one trajectory's shared memory with the
frames as uint8 and, for comparison, as float32 (the layout before frames kept
their dtype).

Output: one JSON line {"bench": "pixels_throughput", "sync": {...}, "async":
{...}, "sf_sync", "sf_async", "sb3": {...}, "async_x_sf_async", "sync_x_sf_sync",
"async_x_sb3", "async_x_sync", "shm_per_trajectory_mb":
{"uint8", "float32"}, ...} and a markdown table on stderr.

Full size:  python -m bench.pixels_throughput --sb3_python /tmp/peers/sb3/bin/python \
                --sf_python /tmp/peers/sf/bin/python
Smoke run:  python -m bench.pixels_throughput --iterations 3 --warmup 1
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib, children

logger = logging.getLogger("bench")
PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers")
SB3_SCRIPT = os.path.join(PEERS, "sb3_atari_ppo.py")
SF_SCRIPT = os.path.join(PEERS, "sf_atari_ppo.py")
CONFIGS = {"sync": "ppo_atari_pong.gin", "async": "async_ppo_atari_pong.gin"}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=12, help="training iterations per run")
    p.add_argument("--warmup", type=int, default=2, help="iterations skipped")
    p.add_argument("--sb3_python", default=None,
                   help="python of SB3's virtualenv (without it SB3 is not run)")
    p.add_argument("--sf_python", default=None,
                   help="python of Sample Factory's virtualenv (without it SF is not run)")
    benchlib.add_common_train_args(p)
    return p.parse_args(argv)


def shm_per_trajectory_mb(gin_file: str, params: List[str]) -> Dict[str, float]:
    """One trajectory's bytes (MB) with uint8 frames and with float32 ones."""
    from alf_async.envs.gym_env import env_spec
    from alf_async.envs.spaces import ObservationSpec
    from alf_async.runtime.trajectory import trajectory_nbytes

    env = benchlib.config_value(gin_file, params, "Trainer.env_name")
    k = benchlib.config_value(gin_file, params, "Trainer.num_envs")
    t = benchlib.config_value(gin_file, params, "Trainer.unroll_length")
    frames, action, _ = env_spec(env)
    as_float = ObservationSpec(frames.shape, "float32")
    return {"uint8": trajectory_nbytes(t, k, frames, action.dim) / 1e6,
            "float32": trajectory_nbytes(t, k, as_float, action.dim) / 1e6}


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    params = [f"Trainer.num_iterations={args.iterations}", "Trainer.num_env_steps=0",
              *args.gin_param]
    result: Dict[str, Any] = {"bench": "pixels_throughput", "iterations": args.iterations,
                              "warmup": args.warmup}
    for mode, gin_file in CONFIGS.items():
        summary = benchlib.timing_run(gin_file, params, f"pong_{mode}", args.root_dir,
                                      args.keep, args.warmup, args.timeout_s)
        summary["learner_share"] = summary["L"] / summary["T"]
        result[mode] = summary
        logger.info("%s: %s", mode, summary)
    result["async_x_sync"] = result["async"]["env_steps_per_s"] / result["sync"]["env_steps_per_s"]
    num_envs = benchlib.config_value(CONFIGS["sync"], args.gin_param, "Trainer.num_envs")
    unroll = benchlib.config_value(CONFIGS["sync"], args.gin_param, "Trainer.unroll_length")
    steps = args.iterations * num_envs * unroll
    if args.sf_python:
        for mode, flag in (("sync", "0"), ("async", "1")):
            sf = children.run_peer_json([args.sf_python, SF_SCRIPT, "--steps", str(steps),
                                         "--async_rl", flag], timeout_s=args.timeout_s)
            result[f"sf_{mode}"] = sf
            result[f"{mode}_x_sf_{mode}"] = (result[mode]["env_steps_per_s"]
                                             / sf["env_steps_per_s"])
    if args.sb3_python:
        sb3 = children.run_peer_json([args.sb3_python, SB3_SCRIPT, "--env", "ALE/Pong-v5",
                                      "--steps", str(steps), "--num_envs", str(num_envs)],
                                     timeout_s=args.timeout_s)
        result["sb3"] = sb3
        result["async_x_sb3"] = result["async"]["env_steps_per_s"] / sb3["env_steps_per_s"]
        result["sync_x_sb3"] = result["sync"]["env_steps_per_s"] / sb3["env_steps_per_s"]
    result["shm_per_trajectory_mb"] = shm_per_trajectory_mb(CONFIGS["sync"], args.gin_param)
    lines = ["| run | env steps/s | T (s) | U (s) | L (s) | L / T |", "|---|---:|---:|---:|---:|---:|"]
    for mode in CONFIGS:
        r = result[mode]
        lines.append(f"| alf_async {mode} | {r['env_steps_per_s']:.0f} | {r['T']:.2f} | "
                     f"{r['U']:.2f} | {r['L']:.2f} | {r['learner_share']:.2f} |")
    for mode in ("sync", "async"):
        if f"sf_{mode}" in result:
            lines.append(f"| Sample Factory {mode} | {result[f'sf_{mode}']['env_steps_per_s']:.0f} "
                         f"| - | - | - | - |")
    if "sb3" in result:
        s = result["sb3"]
        lines.append(f"| SB3 (zoo settings) | {s['env_steps_per_s']:.0f} | - | - | - | "
                     f"{s['update_s'] / s['learn_s']:.2f} |")
    print("\n".join(lines), file=sys.stderr)
    benchlib.emit({**result, **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Env throughput: raw BatchedEnv steps/s versus an unroll with the policy in the loop.

What it measures, for one env id and K envs, for each number W of env-worker
processes (default W = 0, 1, 2):

- raw: env steps/s of ``BatchedEnv.step`` with uniform random actions drawn
  beforehand (the simulator plus the batching/transport of BatchedEnv, nothing
  else);
- policy: env steps/s of ``Actor.unroll`` with a ``NeuralPolicy`` (the network
  the gin config describes, default: the library's defaults) on the same K and W,
  i.e. what one training iteration's unroll achieves: batched CPU inference
  (torch on ``--torch_threads`` threads, 1 as in actor processes), env steps,
  values of truncated episodes and writing the [T, K] trajectory;
- ratio = policy / raw. Close to 1.0 means the policy and the trajectory
  bookkeeping cost little next to the simulator; the gap is the share of an
  unroll spent outside the envs. ``policy_inference_frac`` says how much of the
  unroll time went to inference (and bookkeeping).

Episodes end at different rates under random and policy actions, and resets
are costly (Humanoid under random actions falls after ~20 steps), so the ratio
can move by several percent either way from that alone: compare
``raw_episodes_per_1k_steps`` with ``policy_episodes_per_1k_steps``.

Both figures come from the same BatchedEnv (the actor's), measured alternately
``--repeats`` times; the median of each is reported. With W >= 1 the envs step
in other processes, so on a machine with few cores the numbers depend on what
else runs: look at ``load_avg_1m`` in the output.

Output: one JSON line, e.g.
{"bench": "env_throughput", "env": ..., "num_envs": 32, "results": [{"W": 0,
"raw_steps_per_s": ..., "policy_steps_per_s": ..., "ratio": ...}, ...], ...}

Full size:  python -m bench.env_throughput
Smoke run:  python -m bench.env_throughput --num_envs 4 --workers 0,1 --unroll_length 16 --repeats 1
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any, Dict, List


from bench import benchlib, raw_env

logger = logging.getLogger("bench")


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="HumanoidBulletEnv-v0", help="gymnasium id")
    p.add_argument("--num_envs", type=int, default=32, help="K")
    p.add_argument("--workers", default="0,1,2", help="comma-separated W values")
    p.add_argument("--unroll_length", type=int, default=128,
                   help="steps per policy unroll; the raw measurement uses as many "
                        "batched steps")
    p.add_argument("--repeats", type=int, default=3,
                   help="alternating raw/policy measurements per W (median reported)")
    p.add_argument("--warmup_steps", type=int, default=20,
                   help="untimed batched steps before measuring")
    p.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads for inference (actor processes use 1)")
    p.add_argument("--gin_file", action="append", default=[],
                   help="gin file configuring the networks (e.g. ppo_bullet_humanoid.gin)")
    p.add_argument("--gin_param", action="append", default=[], help="extra gin binding")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def measure_one_w(args: argparse.Namespace, num_workers: int) -> Dict[str, Any]:
    """Raw and policy-in-the-loop steps/s on one actor's BatchedEnv."""
    from alf_async.algorithms.policy import NeuralPolicy
    from alf_async.runtime.actor import Actor
    from alf_async.runtime.trajectory import allocate_trajectory
    from alf_async.settings import TrainerSettings

    config = TrainerSettings(env_name=args.env, num_envs=args.num_envs,
                             num_env_workers=num_workers, unroll_length=args.unroll_length,
                             seed=args.seed, num_iterations=1)
    t0 = time.perf_counter()
    actor = Actor(0, config, NeuralPolicy)
    startup_s = time.perf_counter() - t0
    try:
        env = actor.env
        buffer = allocate_trajectory(args.unroll_length, args.num_envs,
                                     env.observation_dim, env.action_dim)
        # Untimed: first touches of the buffer and torch's first calls.
        raw_env.raw_env_steps_per_s(env, 1, args.warmup_steps, args.seed)
        actor.unroll(buffer)
        raw, policy, inference_frac = [], [], []
        raw_episodes = policy_episodes = 0
        for r in range(args.repeats):
            # The raw steps move the envs on without updating the actor's current
            # observation; the next unroll's first action is then taken on a stale
            # observation, which changes nothing about the timing.
            m = raw_env.raw_env_steps_per_s(env, args.unroll_length, 0, args.seed + r)
            raw.append(m["steps_per_s"])
            raw_episodes += m["episodes"]
            info = actor.unroll(buffer)
            policy_episodes += len(info.episodes)
            policy.append(info.env_steps / info.unroll_s)
            inference_frac.append(1.0 - info.env_s / info.unroll_s)
            logger.info("W=%d repeat %d: raw %.0f steps/s, policy %.0f steps/s",
                        num_workers, r, raw[-1], policy[-1])
    finally:
        actor.close()
    raw_m, policy_m = benchlib.median(raw), benchlib.median(policy)
    steps = args.num_envs * args.unroll_length
    return {"W": num_workers, "raw_steps_per_s": raw_m, "policy_steps_per_s": policy_m,
            "ratio": policy_m / raw_m, "policy_inference_frac": benchlib.median(inference_frac),
            "raw_episodes_per_1k_steps": 1000.0 * raw_episodes / (steps * args.repeats),
            "policy_episodes_per_1k_steps": 1000.0 * policy_episodes / (steps * args.repeats),
            "raw_all": raw, "policy_all": policy, "startup_s": startup_s}


def main(argv: List[str] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.torch_threads)
    if args.gin_file or args.gin_param:
        from alf_async.config import parse_config

        parse_config(args.gin_file, args.gin_param)
    results = []
    for w in benchlib.parse_int_list(args.workers):
        if w > args.num_envs:
            logger.warning("skipping W=%d > K=%d", w, args.num_envs)
            continue
        results.append(measure_one_w(args, w))
    benchlib.emit({
        "bench": "env_throughput", "env": args.env, "num_envs": args.num_envs,
        "unroll_length": args.unroll_length, "repeats": args.repeats,
        "torch_threads": args.torch_threads, **benchlib.machine_info(),
        "results": results,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

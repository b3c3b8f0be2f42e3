"""Step a BatchedEnv with random actions and print its throughput and episodes.

    python -m alf_async.examples.batched_env_random --env HopperBulletEnv-v0 -K 8 -W 2

Shows the BatchedEnv API: reset() -> [K, O]; step(actions [K, A]) -> StepResult with
auto-reset; pop_finished_episodes() -> [(return, length)].
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from alf_async.envs.batched_env import BatchedEnv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="InvertedPendulumBulletEnv-v0")
    parser.add_argument("-K", "--num_envs", type=int, default=8)
    parser.add_argument("-W", "--num_workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    with BatchedEnv(args.env, args.num_envs, args.num_workers, seed=0) as env:
        obs = env.reset()
        print(f"{args.env}: observation {obs.shape}, action dim {env.action_dim}")
        start = time.perf_counter()
        for _ in range(args.steps):
            env.step(rng.uniform(-1, 1, (args.num_envs, env.action_dim)).astype(np.float32))
        elapsed = time.perf_counter() - start
        episodes = env.pop_finished_episodes()
    rate = args.steps * args.num_envs / elapsed
    print(f"{rate:.0f} env steps/s with K={args.num_envs}, W={args.num_workers}")
    if episodes:
        returns = [r for r, _ in episodes]
        print(f"{len(episodes)} episodes finished, mean return {np.mean(returns):.1f}")


if __name__ == "__main__":
    main()

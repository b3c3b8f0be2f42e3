"""Ray backend overhead: env steps/s of ``backend="ray"`` over ``backend="process"``.

The same config is trained with each backend, back to back on this machine
(never side by side), with N = 2 actors: the process backend passes
trajectories through shared memory and weights through a shared-memory store;
the Ray backend runs each actor as a Ray actor of a local Ray instance that the
run starts itself, trajectories come back as Ray objects and each weight version
is one object. Both runs skip ``--warmup`` iterations (start-up, the pipeline
filling) and report the mean T over the rest; the ratio of env steps/s
(ray / process) is the backend's overhead on one machine (target >= 0.9).

Envs (``--envs``): HalfCheetahBulletEnv-v0 (``ppo_bullet_half_cheetah.gin``)
and HumanoidBulletEnv-v0 (``ppo_bullet_humanoid.gin`` with K = 32 and
unroll_length 128, so that a run takes minutes).

Output: one JSON line {"bench": "ray_overhead", "envs": {env: {"process":
{timing}, "ray": {timing}, "ray_over_process": steps/s ratio}}, "cpu_count",
...}.

Full size:  python -m bench.ray_overhead
Smoke run:  python -m bench.ray_overhead --envs half_cheetah --iterations 4 --warmup 1 --gin_param Trainer.unroll_length=32
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Dict, List, Optional, Tuple

from bench import benchlib

logger = logging.getLogger("bench")

# name -> (gin file, bindings)
ENVS: Dict[str, Tuple[str, List[str]]] = {
    "half_cheetah": ("ppo_bullet_half_cheetah.gin", []),
    "humanoid": ("ppo_bullet_humanoid.gin", ["Trainer.num_envs=32", "Trainer.unroll_length=128",
                                             "PPOLearner.mini_batch_size=1024"]),
}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default=",".join(ENVS), help=f"comma-separated of {list(ENVS)}")
    p.add_argument("--num_actors", type=int, default=2)
    p.add_argument("--iterations", type=int, default=16)
    p.add_argument("--warmup", type=int, default=4)
    benchlib.add_common_train_args(p)
    args = p.parse_args(argv)
    args.envs = [e for e in args.envs.split(",") if e]
    unknown = [e for e in args.envs if e not in ENVS]
    if unknown:
        p.error(f"unknown env(s) {unknown}; known: {list(ENVS)}")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    results = {}
    for name in args.envs:
        gin_file, params = ENVS[name]
        runs = {}
        for backend in ("process", "ray"):
            runs[backend] = benchlib.timing_run(
                gin_file, [*params, f"Trainer.num_actors={args.num_actors}",
                           f"Trainer.backend='{backend}'", "Trainer.num_env_steps=0",
                           f"Trainer.num_iterations={args.iterations}", *args.gin_param],
                f"{name}_{backend}", args.root_dir, args.keep, args.warmup, args.timeout_s)
            logger.info("%s %s: %.0f env steps/s", name, backend,
                        runs[backend]["env_steps_per_s"])
        runs["ray_over_process"] = (runs["ray"]["env_steps_per_s"]
                                    / runs["process"]["env_steps_per_s"])
        results[name] = runs
    benchlib.emit({"bench": "ray_overhead", "num_actors": args.num_actors,
                   "iterations": args.iterations, "warmup": args.warmup, "envs": results,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

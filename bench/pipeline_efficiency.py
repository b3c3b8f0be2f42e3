"""Pipeline efficiency: how close asynchronous training gets to its ideal T.

With N actors, each unroll taking U seconds and each training iteration L
seconds, the learner can at best train back to back (T = L) and the actors can
at best keep up with one batch per (U + L) / N seconds each, so the ideal time
between iterations is

    T_ideal(N) = max(L, (U + L) / N)        (N = 1: T_ideal = U + L, synchronous)

This script runs the train command for each N in ``--num_actors`` (default 2,
then 1 for reference) on the same config, reads metrics.jsonl, skips the first
``--warmup`` iterations (start-up, and for N >= 2 the pipeline filling up) and
reports, per N, the means of U (actor_unroll_s), L (learner_train_s) and T, and

- efficiency = T_ideal(N) / T with that run's own U and L: 1.0 means the
  pipeline hides everything it can; lower means time lost to waiting, messages,
  weight loading or bookkeeping. Measured U and L include whatever slow-down the
  processes inflict on each other (cores shared), so this isolates scheduling of
  the pipeline from CPU contention;
- efficiency_vs_sync = T_ideal(N) computed with the N = 1 run's U and L, over T:
  the same but charging CPU contention to the pipeline too (only when N = 1 is
  among the runs);
- speedup_vs_sync = T(N = 1) / T(N).

Default config: ppo_bullet_humanoid.gin with unroll_length shortened to 128
(mini_batch_size capped at K * unroll_length), a budget of ``--iterations``.
On a machine with fewer cores than the processes (N actors x (1 + W) env
processes + the learner), U grows when actors run beside the learner: see
``cpu_count`` in the output.

Output: one JSON line {"bench": "pipeline_efficiency", "cpu_count": ...,
"runs": [{"N": 2, "U": ..., "L": ..., "T": ..., "T_ideal": ..., "efficiency": ...},
...]}.

Full size:  python -m bench.pipeline_efficiency
Smoke run:  python -m bench.pipeline_efficiency --num_envs 4 --num_env_workers 0 --unroll_length 32 --iterations 4 --warmup 1
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Dict, List, Optional


from bench import benchlib

logger = logging.getLogger("bench")


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gin_file", default="ppo_bullet_humanoid.gin")
    p.add_argument("--num_actors", default="2,1", help="comma-separated N values")
    p.add_argument("--num_envs", type=int, default=None, help="K (default: the config's)")
    p.add_argument("--num_env_workers", type=int, default=None,
                   help="W (default: the config's)")
    p.add_argument("--unroll_length", type=int, default=128)
    p.add_argument("--mini_batch_size", type=int, default=4096,
                   help="capped at K * unroll_length")
    p.add_argument("--iterations", type=int, default=12, help="training iterations per run")
    p.add_argument("--warmup", type=int, default=3, help="iterations skipped")
    benchlib.add_common_train_args(p)
    return p.parse_args(argv)


def run_one(args: argparse.Namespace, K: int, n: int) -> Dict[str, Any]:
    T_len = args.unroll_length
    params = [f"Trainer.num_envs={K}", f"Trainer.num_actors={n}",
              f"Trainer.unroll_length={T_len}", f"Trainer.num_iterations={args.iterations}",
              "Trainer.num_env_steps=0",
              f"PPOLearner.mini_batch_size={min(args.mini_batch_size, K * T_len)}"]
    if args.num_env_workers is not None:
        params.append(f"Trainer.num_env_workers={args.num_env_workers}")
    params += args.gin_param
    summary = benchlib.timing_run(args.gin_file, params, f"pipeline_N{n}_K{K}",
                                  args.root_dir, args.keep, args.warmup, args.timeout_s)
    U, L, T = summary["U"], summary["L"], summary["T"]
    ideal = max(L, (U + L) / n)
    summary.update({"N": n, "T_ideal": ideal, "efficiency": ideal / T})
    logger.info("N=%d: U %.2f s, L %.2f s, T %.2f s, ideal %.2f s -> efficiency %.3f",
                n, U, L, T, ideal, ideal / T)
    return summary


def main(argv: List[str] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    K = args.num_envs or benchlib.config_value(args.gin_file, args.gin_param, "Trainer.num_envs")
    runs = [run_one(args, K, n) for n in benchlib.parse_int_list(args.num_actors)]
    sync: Optional[Dict[str, Any]] = next((r for r in runs if r["N"] == 1), None)
    if sync is not None:
        for r in runs:
            ideal = max(sync["L"], (sync["U"] + sync["L"]) / r["N"])
            r["efficiency_vs_sync"] = ideal / r["T"]
            r["speedup_vs_sync"] = sync["T"] / r["T"]
    benchlib.emit({
        "bench": "pipeline_efficiency", "gin_file": args.gin_file, "num_envs": K,
        "unroll_length": args.unroll_length, "iterations": args.iterations,
        "warmup": args.warmup, **benchlib.machine_info(), "runs": runs,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

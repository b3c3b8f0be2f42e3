"""Humanoid EPS table: sync versus async throughput at K = 32, 48, 96.

Reproduces the shape of the design's reference table (ALF's async guide, PPO on
HumanoidBulletEnv-v0). For every K in ``--num_envs`` and N in ``--num_actors``
it runs the train command on ppo_bullet_humanoid.gin with

    Trainer.num_envs=K  Trainer.num_actors=N  Trainer.unroll_length=<--unroll_length>
    Trainer.num_iterations=<--iterations>  PPOLearner.mini_batch_size=min(4096, K * unroll_length)

(plus any ``--gin_param``), skips ``--warmup`` iterations and reports

- T: mean seconds between two training iterations;
- EPS = K / T (envs per second seen by the learner; independent of N);
- env steps/s = K * unroll_length / T;
- async/sync = EPS(N = 2) / EPS(N = 1) for each K (the same as T_sync / T_async).

The reference used unroll_length 512; the default here is 128 so that a run takes
minutes, not hours. T scales roughly with unroll_length (both the unroll and the
PPO epochs grow with it), so EPS at 128 is about 4x the EPS at 512 while the
async/sync ratio is comparable. ``unroll_length`` is in the JSON output; compare
only tables with the same value, on the same machine (``cpu_count``).

Output: one JSON line {"bench": "humanoid_eps", "unroll_length": ..., "rows":
[{"K": 32, "sync_T": ..., "sync_EPS": ..., "async_T": ..., "async_EPS": ...,
"async_over_sync": ...}, ...], "runs": [every run's timing summary]}, and a
markdown table on stderr.

Full size:  python -m bench.humanoid_eps
Smoke run:  python -m bench.humanoid_eps --num_envs 4,8 --unroll_length 16 --iterations 3 --warmup 1 --gin_param Trainer.num_env_workers=1
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Dict, List


from bench import benchlib

logger = logging.getLogger("bench")


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gin_file", default="ppo_bullet_humanoid.gin")
    p.add_argument("--num_envs", default="32,48,96", help="comma-separated K values")
    p.add_argument("--num_actors", default="1,2",
                   help="comma-separated N values (1 = sync; the ratio uses 1 and 2)")
    p.add_argument("--unroll_length", type=int, default=128,
                   help="steps per unroll (the reference table used 512)")
    p.add_argument("--mini_batch_size", type=int, default=4096,
                   help="capped at K * unroll_length")
    p.add_argument("--iterations", type=int, default=8, help="training iterations per run")
    p.add_argument("--warmup", type=int, default=2, help="iterations skipped")
    benchlib.add_common_train_args(p)
    return p.parse_args(argv)


def markdown_table(rows: List[Dict[str, Any]], unroll_length: int) -> str:
    def f(x: Any, digits: int) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    lines = [f"unroll_length = {unroll_length}", "",
             "| K  | sync T (s) | sync EPS | async T (s) | async EPS | async/sync |",
             "|----|-----------:|---------:|------------:|----------:|-----------:|"]
    for r in rows:
        lines.append(f"| {r['K']} | {f(r.get('sync_T'), 2)} | {f(r.get('sync_EPS'), 2)} | "
                     f"{f(r.get('async_T'), 2)} | {f(r.get('async_EPS'), 2)} | "
                     f"{f(r.get('async_over_sync'), 2)} |")
    return "\n".join(lines)


def main(argv: List[str] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    U = args.unroll_length
    runs: List[Dict[str, Any]] = []
    rows: List[Dict[str, Any]] = []
    for K in benchlib.parse_int_list(args.num_envs):
        row: Dict[str, Any] = {"K": K}
        for n in benchlib.parse_int_list(args.num_actors):
            params = [f"Trainer.num_envs={K}", f"Trainer.num_actors={n}",
                      f"Trainer.unroll_length={U}",
                      f"Trainer.num_iterations={args.iterations}", "Trainer.num_env_steps=0",
                      f"PPOLearner.mini_batch_size={min(args.mini_batch_size, K * U)}"]
            summary = benchlib.timing_run(args.gin_file, params + args.gin_param,
                                          f"eps_K{K}_N{n}", args.root_dir, args.keep,
                                          args.warmup, args.timeout_s)
            summary.update({"K": K, "N": n})
            runs.append(summary)
            logger.info("K=%d N=%d: T %.2f s, EPS %.2f, %.0f env steps/s", K, n,
                        summary["T"], summary["EPS"], summary["env_steps_per_s"])
            prefix = "sync" if n == 1 else ("async" if n == 2 else f"N{n}")
            row[f"{prefix}_T"] = summary["T"]
            row[f"{prefix}_EPS"] = summary["EPS"]
            row[f"{prefix}_env_steps_per_s"] = summary["env_steps_per_s"]
        if "sync_EPS" in row and "async_EPS" in row:
            row["async_over_sync"] = row["async_EPS"] / row["sync_EPS"]
        rows.append(row)
    print(markdown_table(rows, U), file=sys.stderr, flush=True)
    benchlib.emit({
        "bench": "humanoid_eps", "gin_file": args.gin_file, "unroll_length": U,
        "iterations": args.iterations, "warmup": args.warmup, **benchlib.machine_info(),
        "rows": rows, "runs": runs,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

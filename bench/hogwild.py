"""Hogwild: gradient throughput and learning with 1 vs 2 workers.

Runs, one after another on this machine:

- ``sac``: ``hogwild_sac_bullet_half_cheetah.gin`` (shared mode) with
  ``--workers`` (default 1,2) workers to ``--sac_steps`` env steps. Per run:
  gradient steps per second over the training phase (from the first row with a
  gradient step to the end, so the random-action warm-up is excluded), the
  achieved env steps per gradient step, and the mean return of the last 100
  episodes at each mark of ``--marks``.
- ``ppo``: ``hogwild_ppo_bullet_inverted_pendulum.gin`` (2 workers, synced)
  until ``--ppo_target`` mean return (the pendulum demo's score): env steps and
  training seconds to it.

Output: one JSON line {"bench": "hogwild", "sac": {workers: {...}},
"sac_speedup": g/s(2) / g/s(1), "ppo": {...}, ...}.

Full size: python -m bench.hogwild          (about 25 minutes on 2 cores)
Quick:     python -m bench.hogwild --sac_steps 12000 --marks 12000 \\
               --gin_param Replay.learning_starts=2000 --skip_ppo
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib

SAC_GIN = "hogwild_sac_bullet_half_cheetah.gin"
PPO_GIN = "hogwild_ppo_bullet_inverted_pendulum.gin"


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="1,2", help="SAC runs: numbers of workers")
    p.add_argument("--sac_steps", type=int, default=60000, help="env steps per SAC run")
    p.add_argument("--marks", default="30000,60000", help="env steps to report returns at")
    p.add_argument("--ppo_target", type=float, default=950.0,
                   help="mean return the PPO run must reach")
    p.add_argument("--ppo_steps", type=int, default=500000, help="PPO budget in env steps")
    p.add_argument("--skip_ppo", action="store_true")
    p.add_argument("--skip_sac", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    benchlib.add_common_train_args(p)
    return p.parse_args(argv)


def _run(gin: str, name: str, params: List[str], args: argparse.Namespace
         ) -> List[Dict[str, Any]]:
    run = benchlib.RunDir(args.root_dir, name, args.keep)
    try:
        status = benchlib.run_train([gin], params + list(args.gin_param), run.path,
                                    args.timeout_s)
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if status["returncode"] != 0 or not rows:
        raise SystemExit(f"the {name} run failed (exit {status['returncode']})")
    return rows


def sac_run(workers: int, marks: List[int], args: argparse.Namespace) -> Dict[str, Any]:
    rows = _run(SAC_GIN, f"hogwild_sac_{workers}", [
        f"Trainer.num_actors={workers}", f"Trainer.num_env_steps={args.sac_steps}",
        f"Trainer.seed={args.seed}", "Trainer.checkpoint_interval=1000000"], args)
    first = next((r for r in rows if (r.get("gradient_steps_total") or 0) > 0), None)
    last = rows[-1]
    grads = last["gradient_steps_total"] - (first["gradient_steps_total"] if first else 0)
    seconds = last["wall_time"] - (first["wall_time"] if first else 0)
    learning = last["env_steps"] - (first["env_steps"] if first else 0)
    return {
        "gradient_steps_per_s": grads / seconds if seconds > 0 else None,
        "env_steps_per_s": last["env_steps"] / last["wall_time"],
        "gradient_steps": last["gradient_steps_total"], "env_steps": last["env_steps"],
        "env_steps_per_gradient_step": learning / grads if grads else None,
        "return_at": {str(m): next((r.get("episode_return") for r in rows
                                    if r["env_steps"] >= m), None) for m in marks},
        "wall_s": last["wall_time"], "restarts": last.get("actor_restarts", 0)}


def ppo_run(args: argparse.Namespace) -> Dict[str, Any]:
    rows = _run(PPO_GIN, "hogwild_ppo", [f"Trainer.num_env_steps={args.ppo_steps}",
                                         f"Trainer.seed={args.seed}"], args)
    hit = next((r for r in rows if (r.get("episode_return") or -1e9) >= args.ppo_target),
               None)
    return {"target": args.ppo_target, "reached": hit is not None,
            "env_steps_to_target": hit["env_steps"] if hit else None,
            "seconds_to_target": hit["wall_time"] if hit else None,
            "final_return": rows[-1].get("episode_return"),
            "env_steps": rows[-1]["env_steps"], "wall_s": rows[-1]["wall_time"]}


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    marks = benchlib.parse_int_list(args.marks)
    sac = {} if args.skip_sac else {str(n): sac_run(n, marks, args)
                                    for n in benchlib.parse_int_list(args.workers)}
    speedup = None
    if "1" in sac and "2" in sac and sac["1"]["gradient_steps_per_s"]:
        speedup = sac["2"]["gradient_steps_per_s"] / sac["1"]["gradient_steps_per_s"]
    result: Dict[str, Any] = {"bench": "hogwild", "env": "HalfCheetahBulletEnv-v0",
                              "sac": sac, "sac_speedup_2_over_1": speedup,
                              "seed": args.seed}
    if not args.skip_ppo:
        result["ppo"] = ppo_run(args)
    benchlib.emit({**result, **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SAC: return at fixed env steps, sync vs async at the same ratio, against SB3.

Runs, one after another on this machine (never side by side):

- ``sync``: ``sac_bullet_half_cheetah.gin`` (N = 1, strict: the sync loop);
- ``async``: ``async_sac_bullet_half_cheetah.gin`` (N = 2, the same ratio);
- ``sb3`` (with ``--sb3_python``): Stable-Baselines3's SAC with the
  rl-baselines3-zoo hyperparameters (``bench/peers/sb3_sac.py``), run by the
  Python of SB3's own virtual environment (a benchmark-only dependency, never
  one of alf_async's; bench/peers/README.md makes the venv).

Per run and per mark in ``--marks`` (env steps, default 100000,300000): the
mean return of the last 100 finished episodes when the run first reached the
mark, and the training-loop seconds to it; the env steps and seconds at which
that mean return first reached ``--threshold`` (steps- and time-to-score; null
if never); for alf_async also the achieved env steps per gradient step and
gradient steps per second.

Output: one JSON line {"bench": "sac_learning", "marks": [...], "runs": {name:
{"return_at": {mark: R}, "wall_s_at": {mark: s}, "steps_to_threshold": n,
"wall_s_to_threshold": s, "ratio": r, "gradient_steps_per_s": g}},
"async_over_sync_wall": {mark: x}, "threshold": R, ...}.

Full size:  python -m bench.sac_learning --sb3_python /tmp/peers/sb3/bin/python
            (HalfCheetahBullet, 300k steps x 3 runs: several hours on 2 cores)
Smoke run:  python -m bench.sac_learning --marks 2000 --configs sync,async \\
                --gin_param Replay.learning_starts=500
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib, children
from bench.learning import first_reaching

GIN = {"sync": "sac_bullet_half_cheetah.gin", "async": "async_sac_bullet_half_cheetah.gin"}
SB3_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "sb3_sac.py")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--marks", default="100000,300000", help="env steps to report at")
    p.add_argument("--configs", default="sync,async", help="alf_async runs: sync, async")
    p.add_argument("--sb3_python", default=None,
                   help="python of a virtualenv with stable-baselines3 (adds the sb3 run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=1000.0,
                   help="score for steps- and time-to-score (mean return of the last 100 "
                        "episodes; a random policy scores about -1360)")
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=12 * 3600.0)
    return p.parse_args(argv)


def at_marks(rows: List[Dict[str, Any]], marks: List[int],
             threshold: Optional[float] = None) -> Dict[str, Any]:
    """Return and wall time at the first row reaching each mark, and (with a
    threshold) the env steps and wall time of the first row scoring it."""
    out: Dict[str, Any] = {"return_at": {}, "wall_s_at": {}}
    for mark in marks:
        row = next((r for r in rows if r["env_steps"] >= mark), None)
        out["return_at"][str(mark)] = None if row is None else row.get("episode_return")
        out["wall_s_at"][str(mark)] = None if row is None else row.get("wall_time")
    if threshold is not None:
        hit = first_reaching(rows, threshold)
        out["steps_to_threshold"] = None if hit is None else hit["env_steps"]
        out["wall_s_to_threshold"] = None if hit is None else hit.get("wall_time")
    return out


def run_alf(name: str, marks: List[int], args: argparse.Namespace) -> Dict[str, Any]:
    run = benchlib.RunDir(args.root_dir, f"sac_{name}", args.keep)
    params = [f"Trainer.num_env_steps={max(marks)}", f"Trainer.seed={args.seed}",
              *args.gin_param]
    try:
        status = benchlib.run_train([GIN[name]], params, run.path, args.timeout_s)
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if not rows:
        raise SystemExit(f"the {name} run wrote no metrics (exit {status['returncode']})")
    last = rows[-1]
    train_s = last["wall_time"]
    result = at_marks(rows, marks, args.threshold)
    result.update({"returncode": status["returncode"], "ratio": last.get("ratio_overall"),
                   "gradient_steps": last.get("gradient_steps_total"),
                   "gradient_steps_per_s": (last.get("gradient_steps_total") or 0) / train_s,
                   "env_steps_per_s": last["env_steps"] / train_s,
                   "learner_throttled_s": sum(r.get("learner_throttled_s", 0) for r in rows),
                   "actors_throttled_s": sum(r.get("actors_throttled_s", 0) for r in rows)})
    return result


def run_sb3(marks: List[int], args: argparse.Namespace) -> Dict[str, Any]:
    cmd = [args.sb3_python, SB3_SCRIPT, "--marks", ",".join(map(str, marks)),
           "--seed", str(args.seed), "--threshold", str(args.threshold)]
    return children.run_peer_json(cmd, timeout_s=args.timeout_s)


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    marks = benchlib.parse_int_list(args.marks)
    runs: Dict[str, Any] = {}
    for name in [c for c in args.configs.split(",") if c]:
        if name not in GIN:
            raise SystemExit(f"unknown config {name!r}; choose from {sorted(GIN)}")
        runs[name] = run_alf(name, marks, args)
    if args.sb3_python:
        runs["sb3"] = run_sb3(marks, args)
    ratio: Dict[str, Any] = {}
    if "sync" in runs and "async" in runs:
        for mark in map(str, marks):
            s, a = runs["sync"]["wall_s_at"].get(mark), runs["async"]["wall_s_at"].get(mark)
            ratio[mark] = a / s if s and a and math.isfinite(s) else None
    benchlib.emit({"bench": "sac_learning", "env": "HalfCheetahBulletEnv-v0", "marks": marks,
                   "threshold": args.threshold, "seed": args.seed, "runs": runs,
                   "async_over_sync_wall": ratio,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

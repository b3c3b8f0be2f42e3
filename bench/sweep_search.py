"""Grid against search: the same number of trials spent both ways.

Runs ``alf-sweep`` twice on one config with the same budget per trial:

- a grid over learning rate x epochs x (clip ratio, entropy coefficient)
  (12 points; 4 with ``--trials 4``);
- an Optuna search (TPE, median pruning unless ``--pruner`` says otherwise)
  of as many trials over ranges that hold the grid's values: ``loguniform``
  learning rate, ``int`` epochs, ``uniform`` clip ratio and entropy
  coefficient.

For each it reports the best objective found (the final value of the
objective's metric, ``eval_return`` when the config evaluates, else the mean
training return of the last 100 episodes; best over complete runs), the env
steps every run spent together (pruned trials count what they ran), the wall
time of the whole sweep, and the runs pruned. The target (issue 57): the
search finds as good a setting with at most half the env steps.

Output: one JSON line {"bench": "sweep_search", "grid": {...}, "optuna": {...},
"steps_ratio": optuna env steps / grid env steps, "best_gap": optuna best - grid best}.

Full size:  python -m bench.sweep_search --gin_file ppo_bullet_half_cheetah.gin --trials 12 --env_steps 300000 --max_parallel 2
            (HalfCheetah, 2 x 12 trials of 300k env steps: the grid about 19 minutes
            on 2 cores, the search less by what it prunes)
One side:   ... --sweeps optuna (the other side's figures from an earlier line of the
            same code, e.g. after a change to the search only)
Smoke run:  python -m bench.sweep_search --gin_file ppo_cartpole.gin --trials 4 --env_steps 4096
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

from bench import benchlib
from bench.children import REPO_ROOT

# grid values per trial count; the search's ranges hold them
GRIDS = {
    12: ["PPOLearner.learning_rate=[1e-4, 3e-4, 1e-3]", "PPOLearner.num_epochs=[5, 10]",
         "PPOLearner.clip_ratio,PPOLearner.entropy_coef=[(0.1, 0.0), (0.2, 0.01)]"],
    4: ["PPOLearner.learning_rate=[3e-4, 1e-3]", "PPOLearner.num_epochs=[5, 10]"],
}
SPACE = ["PPOLearner.learning_rate=loguniform(1e-4, 1e-3)", "PPOLearner.num_epochs=int(5, 10)",
         "PPOLearner.clip_ratio=uniform(0.1, 0.2)", "PPOLearner.entropy_coef=uniform(0.0, 0.01)"]


# alf-sweep flags the bench passes through when given: (name, type, what they
# are for); each one's default is the command's
FORWARDED_FLAGS = (
    ("halving_factor", int, "--pruner halving"),
    ("halving_brackets", int, "--pruner halving"),
    ("search_seed", int, "the sampler's seed"),
    ("prune_percentile", float, "--pruner percentile"),
    ("prune_after_env_steps", int, "the first judging; --pruner halving: the first rung"),
)


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gin_file", default="ppo_bullet_half_cheetah.gin")
    p.add_argument("--trials", type=int, default=12, choices=sorted(GRIDS),
                   help="trials of each sweep (the grid's size)")
    p.add_argument("--env_steps", type=int, default=300000, help="budget of each trial")
    p.add_argument("--max_parallel", type=int, default=2, help="trials at a time")
    p.add_argument("--pruner", default="median",
                   help="the search's pruner (alf-sweep --pruner): median, percentile, "
                        "successive_halving, halving or none")
    for name, kind, note in FORWARDED_FLAGS:
        p.add_argument(f"--{name}", type=kind, default=None,
                       help=f"alf-sweep --{name} ({note}; default: the command's)")
    p.add_argument("--sweeps", default="grid,optuna",
                   help="which sweeps to run: grid, optuna or both (comma-separated)")
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=48 * 3600.0)
    args = p.parse_args(argv)
    args.sweeps = [name for name in args.sweeps.replace(" ", "").split(",") if name]
    if not args.sweeps or set(args.sweeps) - {"grid", "optuna"}:
        p.error(f"--sweeps takes grid, optuna or both, got {args.sweeps}")
    return args


def run_sweep(args: argparse.Namespace, root: str, flags: List[str]) -> Dict[str, Any]:
    """Run one sweep; its best objective, env steps, wall time, states."""
    from alf_async.reporting.run_metrics import read_metrics
    from alf_async.sweep.objective import metric_curve, objective_value

    command = ([sys.executable, "-m", "alf_async.bin.sweep", f"--gin_file={args.gin_file}",
                f"--root_dir={root}", f"--max_parallel={args.max_parallel}",
                f"--gin_param=Trainer.num_env_steps={args.env_steps}"]
               + [f"--gin_param={p}" for p in args.gin_param] + flags)
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            timeout=args.timeout_s)
    wall = time.monotonic() - started
    with open(os.path.join(root, "summary.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    metric = "eval_return" if any(
        metric_curve(read_metrics(os.path.join(root, r["run"])), "eval_return")
        for r in rows) else "episode_return"
    best, steps, states = None, 0, {}
    for row in rows:
        steps += int(row["env_steps"] or 0)
        states[row["status"]] = states.get(row["status"], 0) + 1
        if row["status"] in ("done", "complete"):
            value = objective_value(metric_curve(read_metrics(os.path.join(root, row["run"])),
                                                 metric), "final")
            if value is not None and (best is None or value > best):
                best = value
    return {"exit_code": result.returncode, "metric": metric, "best": best,
            "env_steps": steps, "wall_s": wall, "runs": len(rows), "states": states}


def main(argv: List[str] = None) -> None:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    base = benchlib.RunDir(args.root_dir, "sweep_search", args.keep)
    flags = {"grid": [f"--sweep={s}" for s in GRIDS[args.trials]],
             "optuna": ["--search=optuna", f"--num_trials={args.trials}",
                        f"--pruner={args.pruner}"]
             + [f"--{name}={getattr(args, name)}" for name, _, _ in FORWARDED_FLAGS
                if getattr(args, name) is not None]
             + [f"--sweep={s}" for s in SPACE]}
    result: Dict[str, Any] = {"bench": "sweep_search", "gin_file": args.gin_file,
                              "pruner": args.pruner,
                              **{name: getattr(args, name) for name, _, _ in FORWARDED_FLAGS},
                              "trials": args.trials, "env_steps_per_trial": args.env_steps}
    try:
        for name in args.sweeps:
            result[name] = run_sweep(args, os.path.join(base.path, name), flags[name])
    finally:
        base.cleanup()
    grid, optuna = result.get("grid"), result.get("optuna")
    if grid and optuna and grid["env_steps"]:
        result["steps_ratio"] = optuna["env_steps"] / grid["env_steps"]
    if grid and optuna and grid["best"] is not None and optuna["best"] is not None:
        result["best_gap"] = optuna["best"] - grid["best"]
    result.update(benchlib.machine_info())
    benchlib.emit(result)


if __name__ == "__main__":
    main()

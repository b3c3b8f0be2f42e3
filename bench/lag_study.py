"""Lag-correction study: env steps and wall time to a score, sync vs async.

Trains HalfCheetahBulletEnv-v0 (the shipped ``ppo_bullet_half_cheetah.gin``, with
``Trainer.num_actors`` set for async) to a mean return of ``--threshold``
(default 1000, mean of the last 100 episodes) for every configuration of the
study and every seed, one run after another (never side by side: the wall times
are compared). Each run stops as soon as it reaches the threshold (SIGTERM:
final checkpoint, clean exit) or at ``--max_env_steps``.

Configurations (``--configs`` picks some by name, in this order; the async ones
are the sync file with ``Trainer.num_actors = N``, so every lag setting of a
configuration is the one it names, not the async file's):

- ``sync``: N = 1 (lag 0) with PPO2 (``lag_correction = "none"``, the
  baseline every "x sync" compares with);
- ``sync_decoupled``: N = 1 with the decoupled objective (without lag it is
  PPO2 since batches are normalized with the statistics they were acted with,
  the default; with ``observation_stats = "updated"``, the default of the
  study's recorded runs, it differed from PPO2 by the observation statistics
  the actor and the learner used: the clip was centred on the learner's own
  view of the batch);
- ``n2_none`` / ``n2_decoupled`` / ``n2_vtrace``: N = 2 with
  ``PPOLearner.lag_correction`` none (PPO2), decoupled, vtrace;
- ``n4_none`` / ``n4_decoupled`` / ``n4_vtrace``: the same with N = 4;
- ``n2_decoupled_recompute`` / ``n2_vtrace_recompute`` / ``n4_decoupled_recompute``
  / ``n4_vtrace_recompute``: with ``PPOLearner.recompute_values = True``;
- ``n2_vtrace_gae_recompute``: N = 2 with ``lag_correction = "vtrace_gae"`` and
  recomputed values;
- ``n2_lockstep``: N = 2 with ``Trainer.max_lag = 0`` (a batch one version old
  is dropped): everything async changes except the lag, the control that
  isolates lag. Its steps are the trained ones (dropped steps are reported
  beside them);
- ``sync_behaviour_stats`` / ``n2_none_behaviour_stats`` /
  ``n2_decoupled_behaviour_stats``: ``PPOLearner.observation_stats =
  "behaviour"`` (the batch normalized with the statistics its acting policy
  used; now the default, so these equal ``sync`` / ``n2_none`` /
  ``n2_decoupled``, which the study's recorded runs trained with "updated").

Every finished run is appended as one JSON line to ``--results`` (default
``lag_study.jsonl`` in the current directory); runs already there are skipped,
so an interrupted study resumes where it stopped. ``--table`` only reads the
results file and prints the markdown table.

Output: one JSON line {"bench": "lag_study", "threshold": ..., "configs": {name:
{"runs", "reached", "steps_median", "steps_min", "steps_max", "wall_s_median",
"wall_s_min", "wall_s_max", "steps_x_sync", "wall_x_sync"}}}; x_sync are ratios
of medians over the runs that reached the threshold (a run that did not reach
it counts as its budget when the medians are taken, and ``reached`` says how
many did).

Full study: python -m bench.lag_study                     (all configs, 3 seeds: ~2 h on 2 cores)
Core:       python -m bench.lag_study --configs sync,n2_none,n2_decoupled
Smoke run:  python -m bench.lag_study --configs sync,n2_decoupled --seeds 0 --max_env_steps 8192
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench import benchlib
from bench.learning import analyse, first_reaching

logger = logging.getLogger("bench")

SYNC_GIN = "ppo_bullet_half_cheetah.gin"

NONE = "PPOLearner.lag_correction='none'"  # PPO2 (explicit: the default is decoupled)
DECOUPLED = "PPOLearner.lag_correction='decoupled'"
VTRACE = "PPOLearner.lag_correction='vtrace'"
VTRACE_GAE = "PPOLearner.lag_correction='vtrace_gae'"
RECOMPUTE = "PPOLearner.recompute_values=True"
BEHAVIOUR_STATS = "PPOLearner.observation_stats='behaviour'"


def _async(num_actors: int, *params: str) -> Tuple[str, List[str]]:
    """The sync file with N actors and the given bindings (the async file also binds
    its own lag correction, which would leak into the configurations)."""
    return SYNC_GIN, [f"Trainer.num_actors={num_actors}", *params]


# name -> (gin file, bindings); the order is the order runs are made in.
CONFIGS: Dict[str, Tuple[str, List[str]]] = {
    "sync": (SYNC_GIN, [NONE]),
    "sync_decoupled": (SYNC_GIN, [DECOUPLED]),
    "n2_none": _async(2, NONE),
    "n2_decoupled": _async(2, DECOUPLED),
    "n2_vtrace": _async(2, VTRACE),
    "n4_none": _async(4, NONE),
    "n4_decoupled": _async(4, DECOUPLED),
    "n4_vtrace": _async(4, VTRACE),
    "n2_decoupled_recompute": _async(2, DECOUPLED, RECOMPUTE),
    "n2_vtrace_recompute": _async(2, VTRACE, RECOMPUTE),
    "n4_decoupled_recompute": _async(4, DECOUPLED, RECOMPUTE),
    "n4_vtrace_recompute": _async(4, VTRACE, RECOMPUTE),
    "n2_vtrace_gae_recompute": _async(2, VTRACE_GAE, RECOMPUTE),
    "n2_lockstep": _async(2, NONE, "Trainer.max_lag=0"),
    "sync_behaviour_stats": (SYNC_GIN, [NONE, BEHAVIOUR_STATS]),
    "n2_none_behaviour_stats": _async(2, NONE, BEHAVIOUR_STATS),
    "n2_decoupled_behaviour_stats": _async(2, DECOUPLED, BEHAVIOUR_STATS),
}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated configuration names (default: all)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    p.add_argument("--threshold", type=float, default=1000.0)
    p.add_argument("--max_env_steps", type=int, default=700_000,
                   help="budget of a run that does not reach the threshold")
    p.add_argument("--results", default="lag_study.jsonl",
                   help="JSON lines of finished runs (appended; runs already there are skipped)")
    p.add_argument("--table", action="store_true",
                   help="print the markdown table of --results and exit (nothing is run)")
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=3600.0)
    args = p.parse_args(argv)
    args.configs = [c for c in args.configs.replace(" ", "").split(",") if c]
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    args.seeds = benchlib.parse_int_list(args.seeds)
    return args


def one_run(name: str, seed: int, args: argparse.Namespace) -> Dict[str, Any]:
    """Train configuration ``name`` with ``seed`` to the threshold or the budget."""
    gin_file, params = CONFIGS[name]
    params = [*params, f"Trainer.seed={seed}", f"Trainer.num_env_steps={args.max_env_steps}",
              *args.gin_param]
    run = benchlib.RunDir(args.root_dir, f"lag_{name}_s{seed}", args.keep)
    try:
        status = benchlib.run_train(
            [gin_file], params, run.path, args.timeout_s,
            stop_when=lambda rows: first_reaching(rows, args.threshold) is not None)
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if not rows:
        raise RuntimeError(f"{name} seed {seed} wrote no metrics (exit {status['returncode']})")
    result = {"config": name, "seed": seed, "gin_file": gin_file, "gin_params": params,
              "returncode": status["returncode"], "process_wall_s": status["wall_s"]}
    result.update(analyse(rows, args.threshold, args.max_env_steps))
    hit = first_reaching(rows, args.threshold)
    last = hit or rows[-1]
    result["dropped_env_steps"] = last.get("dropped_env_steps", 0)
    result["mean_lag"] = benchlib.mean(r.get("lag") for r in rows)
    result["env_steps_per_s"] = (last["env_steps"] / last["wall_time"]
                                 if last.get("wall_time") else None)
    result["clip_fraction"] = benchlib.mean(r.get("clip_fraction") for r in rows)
    result["approx_kl"] = benchlib.mean(r.get("approx_kl") for r in rows)
    result.update(benchlib.machine_info())
    return result


def summarize(results: Sequence[Dict[str, Any]], threshold: float) -> Dict[str, Dict[str, Any]]:
    """Per configuration: medians and ranges of steps and seconds to the threshold."""
    summary: Dict[str, Dict[str, Any]] = {}
    for name in CONFIGS:
        runs = [r for r in results if r["config"] == name and r.get("threshold") == threshold]
        if not runs:
            continue
        # A run that never reached the threshold counts as its whole budget.
        steps = [r["steps_to_threshold"] if r["pass"] else r["total_env_steps"] for r in runs]
        walls = [r["wall_s_to_threshold"] if r["pass"] else r["total_wall_s"] for r in runs]
        summary[name] = {
            "runs": len(runs), "reached": sum(bool(r["pass"]) for r in runs),
            "seeds": [r["seed"] for r in runs],
            "steps": steps, "wall_s": walls,
            "steps_median": benchlib.median(steps), "steps_min": min(steps),
            "steps_max": max(steps),
            "wall_s_median": benchlib.median(walls), "wall_s_min": min(walls),
            "wall_s_max": max(walls),
            "env_steps_per_s": benchlib.median(r.get("env_steps_per_s") for r in runs),
            "clip_fraction": benchlib.mean(r.get("clip_fraction") for r in runs),
            "approx_kl": benchlib.mean(r.get("approx_kl") for r in runs),
            "mean_lag": benchlib.mean(r.get("mean_lag") for r in runs),
        }
    sync = summary.get("sync")
    for entry in summary.values():
        entry["steps_x_sync"] = entry["steps_median"] / sync["steps_median"] if sync else None
        entry["wall_x_sync"] = entry["wall_s_median"] / sync["wall_s_median"] if sync else None
    return summary


def markdown_table(summary: Dict[str, Dict[str, Any]]) -> str:
    """Median [min - max] of steps and seconds to the threshold, x sync."""
    lines = ["| configuration | reached | env steps to target: median [min - max] | x sync "
             "| seconds to target: median [min - max] | x sync | env steps/s | clip frac. | KL |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, e in summary.items():
        def ratio(v):
            return f"{v:.2f}" if v is not None else "-"
        lines.append(
            f"| {name} | {e['reached']}/{e['runs']} "
            f"| {e['steps_median']:,.0f} [{e['steps_min']:,} - {e['steps_max']:,}] "
            f"| {ratio(e['steps_x_sync'])} "
            f"| {e['wall_s_median']:.0f} [{e['wall_s_min']:.0f} - {e['wall_s_max']:.0f}] "
            f"| {ratio(e['wall_x_sync'])} | {e['env_steps_per_s']:.0f} "
            f"| {e['clip_fraction']:.3f} | {e['approx_kl']:.4f} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    if not args.table:
        for name in args.configs:
            for seed in args.seeds:
                done = benchlib.read_jsonl(args.results)
                if any(r["config"] == name and r["seed"] == seed
                       and r.get("threshold") == args.threshold
                       and r.get("max_env_steps_budget") == args.max_env_steps for r in done):
                    logger.info("%s seed %d: already in %s", name, seed, args.results)
                    continue
                result = one_run(name, seed, args)
                result["max_env_steps_budget"] = args.max_env_steps
                logger.info("%s seed %d: %s", name, seed,
                            f"{result['steps_to_threshold']} env steps, "
                            f"{result['wall_s_to_threshold']:.0f} s"
                            if result["pass"] else "not reached")
                with open(args.results, "a", encoding="utf-8") as f:
                    f.write(json.dumps(result) + "\n")
    summary = summarize(benchlib.read_jsonl(args.results), args.threshold)
    print(markdown_table(summary), file=sys.stderr)
    benchlib.emit({"bench": "lag_study", "threshold": args.threshold,
                   "results": os.path.abspath(args.results), "configs": summary,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

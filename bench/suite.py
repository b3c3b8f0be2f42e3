"""The PyBullet suite against the rl-baselines3-zoo's PPO table, sync and async.

Trains HalfCheetah, Ant, Hopper and Walker2D (the shipped ``ppo_bullet_<env>.gin``
and ``async_ppo_bullet_<env>.gin``) for ``--max_env_steps`` (the zoo's 2M) with
deterministic evaluation every ``--eval_interval`` env steps
(``Trainer.eval_interval_env_steps``, ``--eval_episodes`` episodes each), seed
by seed (seed-major: every env and mode of seed 0 before seed 1, so that a
study cut short still has whole seeds), one run at a time (wall times are
compared).

Resumable across sessions: each run lives in ``--root_dir/<env>_<mode>_s<seed>``
and is resumed from its newest checkpoint when the bench runs again (the train
command's own resume); a finished run is appended to ``--results`` and skipped
afterwards. Run again with a larger ``--max_env_steps`` (the same ``--root_dir``),
a finished run trains on from its last checkpoint to the new budget (the budget
is a setting a resume may change) and a second row is appended; the report
counts each run once, by its longest row (``suite_report.distinct_runs``).
Wall times are the runs' training wall time (``wall_time`` of the metrics,
summed over resumes, start-up excluded).

Envs alone (``--envs_alone_steps``, 0 turns it off): just before a run trains,
its env's envs step alone (random actions, no policy, no learner:
``raw_env.RawSteppers``) in the layouts of both modes, N * K envs over N *
max(W, 1) processes with W resolved as the trainer resolves "auto" on this
machine, sync's and async's interleaved ``--envs_alone_repeats`` times; the
medians (env steps/s) go into the run's results line. Async's envs may be
slower than sync's (on 2 cores a sync run gets W = 2 env workers for its 16
envs, an async one W = 0: each actor steps its own 16), so the report sets
async's time to a threshold against what its steps ratio times the envs' time
ratio of the same sitting allows ("of allowed"). A run resumed over several
sittings carries the measurement of its last one.

The report (bench/suite_report.py: markdown tables on stderr, figures with
``--plot_dir``; ``--table`` only reads ``--results``): per env, eval return at
1M and 2M env steps and the env steps and time to each threshold for sync and
async; async over sync per seed; the seed-to-seed spread of each config and,
beside it, the spread of each async run from the sync run of its seed.

Output: one JSON line {"bench": "suite", "results": ..., "envs": {env: {mode:
{...}}}, "seed_ratios": {env: {seed: {threshold: [steps ratio, time ratio] or
[steps ratio, time ratio, of allowed] (where both runs of the seed carry the
envs-alone rates) or "async only" / "sync only" / null}}}, "seed_spread": {env:
{mode: {threshold: {"max": largest env-step ratio between two seeds, "pairs":
..., "above_1.3": ..., "missed": ordered pairs whose first run never got there
while the second did, "of": ordered pairs}}}}, "same_seed_spread": {env:
{threshold: the same keys, for async's runs over the sync run of their seed}},
"envs_time_ratios": {env: {seed: async's envs' time over sync's for the same
env steps, stepping alone}}, "pooled_settings": {env: {mode: {binding: {value:
[seeds]}}}} (only where one env and mode pools runs of different settings or
rows without settings), "figures": [...]}. The same four keys "envs",
"seed_ratios", "seed_spread" and "same_seed_spread" prefixed "training_" read
the thresholds on the training return (the mean of the last 100 training
episodes) instead of the deterministic evaluations; the policy's action std
and entropy along each run are in its results line ("policy_width") and in the
report's width table. A results line (one finished run) carries, besides its
curves and figures, "envs_alone_steps_per_s" {"sync": env steps/s, "async":
env steps/s}, "envs_alone_samples" (each repeat's steps/s), "envs_alone_layout"
{mode: {"num_envs": N * K, "processes": N * max(W, 1)}} and "envs_alone_steps"
(batched steps per measurement), unless the measurement was off, and
"learning_bindings" (``benchlib.learning_bindings``: the run's config.gin less
the seed and what a resume may change; since 2026-12-06, filled in for older
rows by ``--reanalyse`` where the run directory is still there): the report
warns when one env and mode pools runs of different settings.

Full study: python -m bench.suite --root_dir runs/suite            (~3 h a seed on 2 cores)
One env:    python -m bench.suite --root_dir runs/suite --envs hopper --seeds 0
Report:     python -m bench.suite --table --results docs/suite/results.jsonl --plot_dir docs/suite
            (--reanalyse --root_dir runs/suite: figures read again from the runs)
            (the runs of the configs as shipped; --results A.jsonl,B.jsonl reads several)
Smoke run:  python -m bench.suite --root_dir /tmp/suite --envs hopper --seeds 0 \\
                --max_env_steps 8192 --eval_interval 4096 --eval_episodes 2 \\
                --results /tmp/suite.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

from alf_async.reporting.run_metrics import return_curve
from alf_async.sampling_choice import choose_sampling
from alf_async.utils.process import usable_cores
from bench import benchlib, children
from bench.raw_env import RawSteppers
from bench.suite_report import (CHECKPOINTS, MODES, WIDTH_CHECKPOINTS, ZOO_PPO_SCORES,
                                distinct_runs, eval_at, first_at_or_above, report,
                                threshold_scores)

logger = logging.getLogger("bench")
# batched steps each envs-alone stepper takes before its timed ones (process
# start-up, first resets and PyBullet's first steps stay out of the rates)
ENVS_ALONE_WARMUP_STEPS = 10


def gin_file(env: str, mode: str) -> str:
    """The shipped gin file of ``env`` in ``mode`` (sync or async)."""
    return f"{'async_' if mode == 'async' else ''}ppo_bullet_{env}.gin"


def envs_alone_layout(env: str, mode: str, gin_params: Sequence[str]) -> Dict[str, int]:
    """How a ``mode`` run of ``env`` (its gin file plus ``gin_params``) lays
    out its envs on this machine: {"num_envs": N * K, "processes": N *
    max(W, 1)}, with K = Trainer.num_envs, N = Trainer.num_actors and W =
    Trainer.num_env_workers as ``choose_sampling`` resolves "auto" for this
    process's usable cores (each actor steps its K envs in its W env workers,
    or itself when W = 0)."""
    config = gin_file(env, mode)
    k, n, w, s = (benchlib.config_value(config, gin_params, f"Trainer.{name}") for name in
                  ("num_envs", "num_actors", "num_env_workers", "env_splits"))
    choice = choose_sampling(w, s, cores=usable_cores(), num_actors=n, num_envs=k)
    return {"num_envs": n * k, "processes": n * max(choice.num_env_workers, 1)}


def measure_envs_alone(env: str, gin_params: Sequence[str], num_steps: int, repeats: int,
                       seed: int = 0) -> Dict[str, Any]:
    """Env steps/s of sync's and async's envs stepping alone (random actions,
    no policy, no learner), each in its run's layout (``envs_alone_layout``),
    measured back to back: ``RawSteppers`` for both layouts, started once, then
    ``num_steps`` batched steps (every env steps ``num_steps`` times) of sync's,
    then of async's, ``repeats`` times; each mode's rate is the median of its
    repeats (env steps per second of wall time).

    Returns the keys a result row carries: "envs_alone_steps_per_s" {mode:
    steps/s}, "envs_alone_samples" {mode: [steps/s of each repeat]},
    "envs_alone_layout" {mode: {"num_envs", "processes"}} and
    "envs_alone_steps" (``num_steps``)."""
    env_id = ZOO_PPO_SCORES[env][0]
    layouts = {mode: envs_alone_layout(env, mode, gin_params) for mode in MODES}
    samples: Dict[str, List[float]] = {mode: [] for mode in MODES}
    steppers: Dict[str, RawSteppers] = {}
    try:
        for mode in MODES:
            steppers[mode] = RawSteppers(env_id, layouts[mode]["num_envs"],
                                         layouts[mode]["processes"], seed)
        for stepper in steppers.values():
            stepper.step(ENVS_ALONE_WARMUP_STEPS)
        logger.info("%s envs alone: measuring %d batched steps x %d repeat(s) per mode",
                    env, num_steps, repeats)
        for _ in range(repeats):
            for mode in MODES:
                env_steps, seconds = steppers[mode].step(num_steps)
                samples[mode].append(env_steps / seconds)
    finally:
        for stepper in steppers.values():
            stepper.close()
    rates = {mode: benchlib.median(samples[mode]) for mode in MODES}
    logger.info("%s envs alone: sync %.0f env steps/s (%s), async %.0f (%s): async's envs "
                "take %.2fx sync's time", env, rates["sync"], layouts["sync"], rates["async"],
                layouts["async"], rates["sync"] / rates["async"])
    return {"envs_alone_steps_per_s": rates, "envs_alone_samples": samples,
            "envs_alone_layout": layouts, "envs_alone_steps": num_steps}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default=",".join(ZOO_PPO_SCORES),
                   help="comma-separated envs: " + ", ".join(ZOO_PPO_SCORES))
    p.add_argument("--modes", default=",".join(MODES), help="sync, async or both")
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    p.add_argument("--max_env_steps", type=int, default=2_000_000)
    p.add_argument("--eval_interval", type=int, default=50_000,
                   help="Trainer.eval_interval_env_steps (divides 1M and 2M)")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--results", default="suite.jsonl",
                   help="JSON lines of finished runs (appended; runs already there are "
                        "skipped); with --table, several comma-separated files are read "
                        "as one")
    p.add_argument("--table", action="store_true",
                   help="report --results and exit (nothing is run)")
    p.add_argument("--reanalyse", action="store_true",
                   help="read each result's figures again from its run directory under "
                        "--root_dir, where it is still there (results written by an older "
                        "bench lack the training-return curve and the policy width)")
    p.add_argument("--plot_dir", default=None, help="write suite_<env>.png figures here")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra binding for every run (repeatable)")
    p.add_argument("--root_dir", default="runs/suite",
                   help="where the runs live (kept: a later session resumes them)")
    p.add_argument("--timeout_s", type=float, default=None,
                   help="stop a run after this many seconds (it resumes next time)")
    p.add_argument("--envs_alone_steps", type=int, default=256,
                   help="before each run trains, its env's sync and async envs step alone "
                        "(random actions, each in its run's layout) this many batched steps "
                        "per measurement, for the result row's envs_alone_steps_per_s; "
                        "0: not measured")
    p.add_argument("--envs_alone_repeats", type=int, default=3,
                   help="envs-alone measurements per mode, sync and async interleaved "
                        "(each mode's rate is their median)")
    args = p.parse_args(argv)
    if args.envs_alone_steps < 0 or args.envs_alone_repeats < 1:
        p.error("--envs_alone_steps takes >= 0 and --envs_alone_repeats >= 1")
    args.envs = [e for e in args.envs.replace(" ", "").split(",") if e]
    args.modes = [m for m in args.modes.replace(" ", "").split(",") if m]
    unknown = [e for e in args.envs if e not in ZOO_PPO_SCORES] + [
        m for m in args.modes if m not in MODES]
    if unknown:
        p.error(f"unknown env(s) or mode(s) {unknown}; envs: {', '.join(ZOO_PPO_SCORES)}; "
                f"modes: {', '.join(MODES)}")
    args.seeds = benchlib.parse_int_list(args.seeds)
    args.results_files = [f for f in args.results.split(",") if f]
    if len(args.results_files) != 1 and not args.table:
        p.error("--results takes one file when runs are made (several only with --table)")
    return args


def analyse_run(env: str, mode: str, seed: int, run_dir: str) -> Dict[str, Any]:
    """The figures of one finished run, from its eval.jsonl and metrics.jsonl."""
    evals = benchlib.read_jsonl(os.path.join(run_dir, "eval.jsonl"))
    rows = benchlib.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    _, zoo = ZOO_PPO_SCORES[env]
    result: Dict[str, Any] = {"env": env, "mode": mode, "seed": seed, "zoo_score": zoo,
                              "evaluations": [[e["env_steps"], e["wall_time"],
                                               e["eval_return"]] for e in evals]}
    for name, score in threshold_scores(zoo):
        hit = first_at_or_above(result["evaluations"], score)
        result[f"steps_to_{name}"] = hit[0] if hit else None
        result[f"wall_s_to_{name}"] = hit[1] if hit else None
    for steps in CHECKPOINTS:
        result[f"eval_at_{steps // 1_000_000}M"] = eval_at(evals, steps)
    # the console's training return (mean of the last 100 episodes) per row
    result["training"] = [list(point) for point in return_curve(rows)]
    result["policy_width"] = [
        [steps, row.get("action_std"), row.get("entropy")]
        for steps, row in ((steps, next((r for r in rows if r["env_steps"] >= steps), None))
                           for steps in WIDTH_CHECKPOINTS) if row is not None]
    last = rows[-1] if rows else {}
    result["total_env_steps"] = last.get("env_steps")
    result["total_wall_s"] = last.get("wall_time")
    result["env_steps_per_s"] = (last["env_steps"] / last["wall_time"]
                                 if last.get("wall_time") else None)
    result["final_eval_return"] = evals[-1]["eval_return"] if evals else None
    # what the run learned with, beyond its gin file's name (the file may change)
    result["learning_bindings"] = benchlib.learning_bindings(run_dir)
    return result


def reanalysed(result: Dict[str, Any], root_dir: str) -> Dict[str, Any]:
    """``result`` with its figures read again from its run directory
    ``root_dir/<env>_<mode>_s<seed>`` (unchanged if that is gone)."""
    run_dir = os.path.join(os.path.abspath(root_dir),
                           f"{result['env']}_{result['mode']}_s{result['seed']}")
    if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        return result
    return {**result, **analyse_run(result["env"], result["mode"], result["seed"], run_dir)}


def one_run(env: str, mode: str, seed: int, args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """Train (or resume) one run to its budget; its figures, or None if it was
    stopped before the end (timeout, failure: the next session resumes it)."""
    run_dir = os.path.join(os.path.abspath(args.root_dir), f"{env}_{mode}_s{seed}")
    params = [f"Trainer.seed={seed}", f"Trainer.num_env_steps={args.max_env_steps}",
              f"Trainer.eval_interval_env_steps={args.eval_interval}",
              f"Trainer.eval_episodes={args.eval_episodes}", *args.gin_param]
    # The gin file only for a new run: a resumed one reads its saved config.gin.
    files = [] if os.path.isfile(os.path.join(run_dir, "config.gin")) else [gin_file(env, mode)]
    before = benchlib.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    envs_alone: Dict[str, Any] = {}
    if args.envs_alone_steps > 0 and not (before and
                                          before[-1]["env_steps"] >= args.max_env_steps):
        # only when the run trains in this sitting: the envs' speed beside its wall time
        envs_alone = measure_envs_alone(env, params, args.envs_alone_steps,
                                        args.envs_alone_repeats, seed)
    status = benchlib.run_train(files, params, run_dir, args.timeout_s)
    rows = benchlib.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    if status["returncode"] != 0 or not rows or rows[-1]["env_steps"] < args.max_env_steps:
        logger.warning("%s %s seed %d stopped before its budget (exit %s); run the bench "
                       "again to resume it", env, mode, seed, status["returncode"])
        return None
    result = analyse_run(env, mode, seed, run_dir)
    result.update(gin_file=gin_file(env, mode), gin_params=params,
                  max_env_steps=args.max_env_steps, eval_interval=args.eval_interval,
                  eval_episodes=args.eval_episodes, **envs_alone, **benchlib.machine_info())
    return result


def run_or_skip(env: str, mode: str, seed: int, args: argparse.Namespace) -> None:
    """Train one run to ``args.max_env_steps`` and append its result to
    ``args.results``, unless a result of the same budget is there already."""
    done = benchlib.read_jsonl(args.results)
    if any(r["env"] == env and r["mode"] == mode and r["seed"] == seed
           and r.get("max_env_steps") == args.max_env_steps for r in done):
        logger.info("%s %s seed %d: already in %s", env, mode, seed, args.results)
        return
    result = one_run(env, mode, seed, args)
    if result is not None:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    if not args.table:
        # SIGTERM (a paused bench) raises here, so the envs-alone measurement's
        # processes are closed as on Ctrl-C, not left to find their pipes broken.
        with children.sigterm_raises():
            for seed in args.seeds:
                for env in args.envs:
                    for mode in args.modes:
                        run_or_skip(env, mode, seed, args)
    results = distinct_runs([row for path in args.results_files
                             for row in benchlib.read_jsonl(path)])
    if args.reanalyse:
        results = [reanalysed(row, args.root_dir) for row in results]
    benchlib.emit({"bench": "suite",
                   "results": ",".join(os.path.abspath(f) for f in args.results_files),
                   **report(results, args.plot_dir), **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

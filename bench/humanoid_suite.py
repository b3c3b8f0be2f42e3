"""ALF's humanoid study, sync against async, toward ALF's 2k training score,
with ALF's published table beside ours.

Trains the shipped pair on HumanoidBulletEnv-v0 (ALF's humanoid settings: K =
96 envs per actor, unroll length 512): ``ppo_bullet_humanoid.gin`` (sync, N = 1)
and ``async_ppo_bullet_humanoid.gin`` (async, N = 2), seed by seed (seed-major:
both modes of seed 0 before seed 1, so that a study cut short has whole seeds),
one run at a time (wall times are compared).

The score is ALF's "training score": the mean return of the last 100 training
episodes, each metrics row's ``episode_return`` (the console's ``return``),
averaged over the last ``--score_rows`` rows (default 5: one row's return
swings by hundreds from row to row; bench/humanoid_report.py says why). A run
ends when that first reaches ``--stop_score`` (default 2000): the bench, which
reads the run's metrics.jsonl every ``--poll_s`` seconds while it trains, sends
the trainer SIGTERM, the library's clean stop (a final checkpoint, exit 143);
or at its budget ``--max_env_steps`` (default 50M env steps, the shipped files'
budget). The play command then evaluates the final checkpoint
(``--eval_episodes`` episodes with the mean action, ``alf-play --num_episodes``)
and the run is appended to ``--results``.

Resumable across sessions, like bench/suite.py: each run lives in
``--root_dir/humanoid_<mode>_s<seed>`` and is resumed from its newest checkpoint
(the train command's own resume from the saved config.gin) when the bench runs
again; a finished run in ``--results`` is skipped. ``--timeout_s`` bounds one
invocation (seconds): the run training then is stopped the same clean way and
resumed next time, and no other run starts. Wall times are the training loop's
(metrics ``wall_time``: summed over resumes, start-up excluded).

The report (bench/humanoid_report.py: markdown tables on stderr, a figure with
``--plot_dir``; ``--table`` trains nothing): ALF's rows (sync and async K = 32,
sync and async K = 96, sync K = 192: env steps and time to 2000, T, EPS) beside
ours; per run, env steps and training time to training returns 500, 1000,
1500 and 2000, T and EPS = K / T (means over the steady rows of each session),
env steps/s, the final training return and the eval return; async over sync
per seed. Runs not finished (not in ``--results``) are read from their run
directories under ``--root_dir`` and reported as in progress, with their env
steps and the thresholds reached so far.

Output: one JSON line {"bench": "humanoid_suite", "results", "root_dir",
"stop_score", "max_env_steps", "alf": [ALF's rows], "runs": [per run: mode,
seed, in_progress, steps_to_<t>, wall_s_to_<t>, T, EPS, env_steps_per_s,
total_env_steps, eval_return, ...], "mode_medians", "seed_ratios": {seed:
{threshold: [steps ratio, time ratio] or "async only" / "sync only" / null}},
"figures": [...]}.

Full study: python -m bench.humanoid_suite --root_dir runs/humanoid --seeds 0 --timeout_s 14400
            (sessions of 4 h, each resuming where the last stopped; at most about
            2000 env steps/s on 2 cores, the raw rate of their humanoid envs, so
            30-50M env steps take 4-7 h a run or more)
Report:     python -m bench.humanoid_suite --table --root_dir runs/humanoid \\
                --results humanoid_suite.jsonl --plot_dir runs/humanoid
Smoke run:  python -m bench.humanoid_suite --root_dir /tmp/humanoid --seeds 0 \\
                --max_env_steps 2048 --stop_score -1000 --eval_episodes 2 --poll_s 1 \\
                --results /tmp/humanoid.jsonl --gin_param Trainer.num_envs=4 \\
                --gin_param Trainer.unroll_length=32 --gin_param PPOLearner.mini_batch_size=64 \\
                --gin_param PPOLearner.num_epochs=1 --gin_param Trainer.num_env_workers=0 \\
                --gin_param Trainer.env_splits=1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from alf_async.reporting.run_metrics import finite
from bench import benchlib
from bench.humanoid_report import (ENV_ID, MODES, SCORE_ROWS, report, run_figures,
                                   score_curve)

logger = logging.getLogger("bench")
RUN_NAME = re.compile(r"^humanoid_(sync|async)_s(\d+)$")


def gin_file(mode: str) -> str:
    return f"{'async_' if mode == 'async' else ''}ppo_bullet_humanoid.gin"


def run_dir(root_dir: str, mode: str, seed: int) -> str:
    return os.path.join(os.path.abspath(root_dir), f"humanoid_{mode}_s{seed}")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help="sync, async or both")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument("--max_env_steps", type=int, default=50_000_000,
                   help="a run's budget in env steps (Trainer.num_env_steps; default 50M, "
                        "the shipped files' budget)")
    p.add_argument("--stop_score", type=float, default=2000.0,
                   help="stop a run when its training score (the training return, mean of "
                        "the last 100 episodes, averaged over --score_rows rows) first "
                        "reaches this (default 2000, ALF's 2k score)")
    p.add_argument("--score_rows", type=int, default=SCORE_ROWS,
                   help=f"metrics rows the training score averages (default {SCORE_ROWS}; "
                        "1: the last row's return alone)")
    p.add_argument("--eval_episodes", type=int, default=10,
                   help="episodes of the final evaluation (the play command; default 10)")
    p.add_argument("--results", default="humanoid_suite.jsonl",
                   help="JSON lines of finished runs (appended; runs already there are "
                        "skipped)")
    p.add_argument("--table", action="store_true",
                   help="report --results and the runs in progress under --root_dir, "
                        "and exit (nothing is trained)")
    p.add_argument("--plot_dir", default=None, help="write humanoid_suite.png here")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra binding for every run (repeatable)")
    p.add_argument("--root_dir", default="runs/humanoid",
                   help="where the runs live (kept: a later session resumes them)")
    p.add_argument("--timeout_s", type=float, default=None,
                   help="stop training after this many seconds of this invocation (the "
                        "run resumes next time; no other run starts; default: no limit)")
    p.add_argument("--poll_s", type=float, default=10.0,
                   help="seconds between two looks at a training run's metrics.jsonl "
                        "(default 10)")
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.replace(" ", "").split(",") if m]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode(s) {unknown}; modes: {', '.join(MODES)}")
    args.seeds = benchlib.parse_int_list(args.seeds)
    if args.eval_episodes < 1:
        p.error("--eval_episodes must be >= 1")
    if args.score_rows < 1:
        p.error(f"--score_rows must be >= 1, got {args.score_rows}")
    return args


def reached(rows: Sequence[Any], score: float, score_rows: int = 1) -> bool:
    """Whether the training score (``score_curve`` of the rows' returns over
    ``score_rows`` rows) is >= ``score`` at some row."""
    curve = [(0, 0.0, value) for value in (finite(r.get("episode_return")) for r in rows)
             if value is not None]
    return any(point[2] >= score for point in score_curve(curve, score_rows))


def finished_by(rows: Sequence[Any], args: argparse.Namespace) -> Optional[str]:
    """"score" (``--stop_score`` reached), "budget" (``--max_env_steps``
    reached) or None (the run goes on)."""
    if reached(rows, args.stop_score, args.score_rows):
        return "score"
    if rows and int(rows[-1]["env_steps"]) >= args.max_env_steps:
        return "budget"
    return None


def run_params(seed: int, args: argparse.Namespace) -> List[str]:
    return [f"Trainer.seed={seed}", f"Trainer.num_env_steps={args.max_env_steps}",
            *args.gin_param]


def evaluation(path: str, rows: Sequence[Any], episodes: int) -> Dict[str, Any]:
    """The play command on the run's newest checkpoint: eval_return (mean),
    eval_return_std, eval_returns, eval_lengths, eval_checkpoint, and
    eval_env_steps (of the weights evaluated); eval_error where it failed."""
    try:
        played = benchlib.play_run(path, episodes)
    except RuntimeError as e:
        logger.warning("%s", e)
        return {"eval_return": None, "eval_error": str(e)}
    name = os.path.basename(played["checkpoint"] or "")
    match = re.match(r"ckpt-(\d+)\.pt$", name)
    at = next((r for r in rows if match and int(r["iteration"]) == int(match.group(1))), None)
    return {"eval_return": played["eval_return"], "eval_return_std": played["eval_return_std"],
            "eval_returns": played["returns"], "eval_lengths": played["lengths"],
            "eval_checkpoint": name, "eval_env_steps": int(at["env_steps"]) if at else None}


def one_run(mode: str, seed: int, args: argparse.Namespace, deadline: Optional[float]
            ) -> Optional[Dict[str, Any]]:
    """Train (or resume) one run to its score or budget, then evaluate it; its
    result line, or None if it stopped before (the time of this invocation
    was spent, or the trainer failed: the next session resumes it)."""
    path = run_dir(args.root_dir, mode, seed)
    metrics = os.path.join(path, "metrics.jsonl")
    rows = benchlib.read_metrics(metrics)
    trainer_exit = None
    if finished_by(rows, args) is None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        # The gin file only for a new run: a resumed one reads its saved config.gin.
        files = [] if os.path.isfile(os.path.join(path, "config.gin")) else [gin_file(mode)]
        status = benchlib.run_train(files, run_params(seed, args), path, timeout_s=left,
                                    stop_when=lambda rows: reached(rows, args.stop_score,
                                                                   args.score_rows),
                                    poll_s=args.poll_s)
        trainer_exit = status["returncode"]
        rows = benchlib.read_metrics(metrics)
        if finished_by(rows, args) is None:
            logger.warning("%s seed %d stopped at %d env steps, before its score or budget "
                           "(exit %s); run the bench again to resume it", mode, seed,
                           int(rows[-1]["env_steps"]) if rows else 0, trainer_exit)
            return None
    stopped_by = finished_by(rows, args)
    logger.info("%s seed %d: finished (%s); evaluating its final checkpoint", mode, seed,
                stopped_by)
    return {"env": ENV_ID, "mode": mode, "seed": seed, "in_progress": False,
            "stopped_by": stopped_by, "trainer_exit": trainer_exit,
            "gin_file": gin_file(mode), "gin_params": run_params(seed, args),
            "max_env_steps": args.max_env_steps, "stop_score": args.stop_score,
            "eval_episodes": args.eval_episodes,
            **run_figures(rows, score_rows=args.score_rows),
            **evaluation(path, rows, args.eval_episodes), **benchlib.machine_info()}


def is_done(results: Sequence[Dict[str, Any]], mode: str, seed: int,
            args: argparse.Namespace) -> bool:
    """Whether ``results`` holds this run with this budget and stop score (over
    as many rows)."""
    return any(r["mode"] == mode and r["seed"] == seed
               and r.get("max_env_steps") == args.max_env_steps
               and r.get("stop_score") == args.stop_score
               and r.get("score_rows", 1) == args.score_rows for r in results)


def in_progress(root_dir: str, finished: Sequence[Dict[str, Any]],
                score_rows: int = SCORE_ROWS) -> List[Dict[str, Any]]:
    """The runs under ``root_dir`` with metrics but no line in ``finished``,
    read as they stand (their score over ``score_rows`` rows)."""
    done = {(r["mode"], r["seed"]) for r in finished}
    runs = []
    root = os.path.abspath(root_dir)
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        match = RUN_NAME.match(name)
        if not match or (match.group(1), int(match.group(2))) in done:
            continue
        rows = benchlib.read_metrics(os.path.join(root, name, "metrics.jsonl"))
        if rows:
            runs.append({"env": ENV_ID, "mode": match.group(1), "seed": int(match.group(2)),
                         "in_progress": True, **run_figures(rows, score_rows=score_rows)})
    return runs


def ordered(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Seed-major, sync before async."""
    return sorted(runs, key=lambda r: (r["seed"], MODES.index(r["mode"]),
                                       bool(r.get("in_progress"))))


def train_all(args: argparse.Namespace) -> None:
    """Train, seed-major, every run of ``--seeds`` x ``--modes`` not yet in
    ``--results``, appending each finished one; returns when all are done or
    (``--timeout_s``) this invocation's time is spent."""
    deadline = None if args.timeout_s is None else time.monotonic() + args.timeout_s
    for seed in args.seeds:
        for mode in args.modes:
            if is_done(benchlib.read_jsonl(args.results), mode, seed, args):
                logger.info("%s seed %d: already in %s", mode, seed, args.results)
                continue
            result = one_run(mode, seed, args, deadline)
            if result is not None:
                with open(args.results, "a", encoding="utf-8") as f:
                    f.write(json.dumps(result) + "\n")
            elif deadline is not None and time.monotonic() >= deadline:
                logger.info("--timeout_s spent: the other runs wait for the next session")
                return


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    if not args.table:
        train_all(args)
    finished = benchlib.read_jsonl(args.results)
    runs = ordered(finished + in_progress(args.root_dir, finished, args.score_rows))
    benchlib.emit({"bench": "humanoid_suite", "env": ENV_ID,
                   "results": os.path.abspath(args.results),
                   "root_dir": os.path.abspath(args.root_dir), "stop_score": args.stop_score,
                   "score_rows": args.score_rows, "max_env_steps": args.max_env_steps, **report(runs, args.plot_dir),
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

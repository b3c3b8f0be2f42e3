"""The report of bench/humanoid_suite.py: what a humanoid run's metrics say
about it, ALF's published table beside ours, async over sync per seed, and
figures (no training here).

The score is ALF's "training score": the mean return of the last 100
training episodes, each metrics row's ``episode_return`` (the console's
``return``), averaged over the last ``score_rows`` rows (default SCORE_ROWS;
``score_curve``). The average is needed because one row's window of 100
episodes spans only one or two rows here (30-90 humanoid episodes end in each
row, one actor's 96 x 512 env steps, at 14-23M env steps) and the episodes of
an actor's envs run in step (every env is reset together when a run starts or
resumes), so their 1000-step time limits fall in bursts and consecutive rows
swing by several hundred (755, 1616, 727 within four iterations at 14.6-14.9M
env steps): a single row crossing a threshold marks a swing, not a level.
Per run: the env steps and training wall time (metrics ``wall_time``: seconds
of the training loop, summed over resumes, start-up excluded) to the first
row whose score is at or above each of THRESHOLDS; T (mean seconds
between two training iterations) and EPS = K / T over the steady rows of each
session (``benchlib.steady_rows_per_session``, then
``benchlib.summarize_timing``), as ALF defines them; env steps/s overall
(env steps over training wall time).

ALF's numbers (HorizonRobotics/alf, docs/notes/async_training.rst, "Asynchronous
training guide": PPO2 on HumanoidBulletEnv, one learner, N = 1 sync and N = 2
async actors of K envs, unroll length 512; time and env steps to a training
score of 2000, EPS = K / T): ALF_ROWS below. ALF's T is stated for K = 32 and
96 only; its env steps/s is not stated (the table derives it: env steps over
time to 2000).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from alf_async.reporting.run_metrics import finite, return_curve
from alf_async.utils.formatting import format_count, format_duration
from bench import benchlib
from bench.suite_report import first_at_or_above, ratio_cell, threshold_ratio

ENV_ID = "HumanoidBulletEnv-v0"
MODES = ("sync", "async")
THRESHOLDS = (500, 1000, 1500, 2000)  # training returns reported
ALF_SCORE = 2000  # ALF's "2k training score"


@dataclass(frozen=True)
class AlfRow:
    """One configuration of ALF's async guide: env steps and wall seconds to
    a training score of 2000, EPS (envs/s) and T (s; None where not stated)."""

    mode: str
    num_envs: int
    steps_to_2000: float
    wall_s_to_2000: float
    EPS: float
    T: Optional[float]

    @property
    def label(self) -> str:
        return f"ALF {self.mode} K={self.num_envs}"


ALF_ROWS = (
    AlfRow("sync", 32, 33e6, 5 * 3600 + 40 * 60, 3.2, 10.0),
    AlfRow("async", 32, 40e6, 4 * 3600 + 20 * 60, 5.3, 6.0),
    AlfRow("sync", 96, 29e6, 3 * 3600 + 20 * 60, 4.8, 20.0),
    AlfRow("async", 96, 46e6, 1 * 3600 + 40 * 60, 14.8, 6.5),
    AlfRow("sync", 192, 45e6, 3 * 3600 + 30 * 60, 7.0, None),
)


#: Metrics rows a run's training score averages by default: about 250k env
#: steps and 1,000 episodes of the shipped humanoid pair.
SCORE_ROWS = 5


def score_curve(curve: Sequence[Sequence[float]], score_rows: int) -> List[List[float]]:
    """[env steps, wall s, score] per point of ``curve`` ([env steps, wall s,
    training return] per metrics row with a return): the mean training return
    of this point and the ``score_rows - 1`` points before it (of every point
    so far, at the start)."""
    if score_rows < 1:
        raise ValueError(f"score_rows must be >= 1, got {score_rows}")
    scores = []
    for i, (steps, wall, _) in enumerate(curve):
        window = curve[max(0, i - score_rows + 1):i + 1]
        scores.append([steps, wall, sum(p[2] for p in window) / len(window)])
    return scores


def run_figures(rows: Sequence[Any], warmup: Optional[int] = None,
                score_rows: int = SCORE_ROWS) -> Dict[str, Any]:
    """The figures of one run (finished or not) from its metrics rows
    (``benchlib.read_metrics``); ``warmup``: iterations left out of T and EPS
    at the start of each session (default: the run's N); ``score_rows``: rows
    the training score averages (``score_curve``).

    Keys: training ([env steps, wall s, training return] per row with a
    return), score (the same with the score), score_rows, steps_to_<t> and
    wall_s_to_<t> per threshold of the score (None where not reached), T (s),
    EPS (envs/s), steady_env_steps_per_s, lag_mean, steady_iterations,
    env_steps_per_s (overall), total_env_steps, total_wall_s, iterations,
    sessions (starts and resumes), num_envs, num_actors, unroll_length,
    final_return and best_return (of single rows), final_score.
    """
    if not rows:
        return {"training": [], "score": [], "score_rows": score_rows, "total_env_steps": 0,
                "total_wall_s": 0.0, "iterations": 0,
                **{f"{kind}_to_{t}": None for t in THRESHOLDS for kind in ("steps", "wall_s")}}
    last = rows[-1]
    curve = [list(point) for point in return_curve(rows)]
    scores = score_curve(curve, score_rows)
    figures: Dict[str, Any] = {"training": curve, "score": scores, "score_rows": score_rows}
    for t in THRESHOLDS:
        hit = first_at_or_above(scores, t)
        figures[f"steps_to_{t}"] = hit[0] if hit else None
        figures[f"wall_s_to_{t}"] = hit[1] if hit else None
    warmup = int(last["num_actors"]) if warmup is None else warmup
    timing = benchlib.summarize_timing(benchlib.steady_rows_per_session(list(rows), warmup))
    wall = float(last["wall_time"])
    figures.update(
        T=timing["T"], EPS=timing["EPS"], steady_env_steps_per_s=timing["env_steps_per_s"],
        lag_mean=timing["lag_mean"], steady_iterations=timing["iterations_used"],
        env_steps_per_s=int(last["env_steps"]) / wall if wall > 0 else None,
        total_env_steps=int(last["env_steps"]), total_wall_s=wall,
        iterations=int(last["iteration"]),
        sessions=sum(1 for r in rows if finite(r.get("startup_s")) is not None),
        num_envs=int(last["num_envs"]), num_actors=int(last["num_actors"]),
        unroll_length=int(last["unroll_length"]),
        final_return=curve[-1][2] if curve else None,
        best_return=max(p[2] for p in curve) if curve else None,
        final_score=scores[-1][2] if scores else None)
    return figures


def _scores(run: Dict[str, Any]) -> List[List[float]]:
    """A run's score curve; its training-return curve for a result line
    written before the score existed (a score over one row)."""
    return run.get("score") or run["training"]


def seed_ratios(runs: Sequence[Dict[str, Any]]) -> Dict[int, Dict[str, Union[None, str, tuple]]]:
    """seed -> threshold -> (async / sync env steps, async / sync training
    seconds) to it, for the seeds with a run in both modes (finished or not);
    "async only" / "sync only" where one run has not got there (yet), None
    where neither has (``suite_report.threshold_ratio``)."""
    by_run = {(r["mode"], r["seed"]): r for r in runs}
    ratios: Dict[int, Dict[str, Union[None, str, tuple]]] = {}
    for seed in sorted({seed for _, seed in by_run}):
        if ("sync", seed) in by_run and ("async", seed) in by_run:
            sync, async_ = by_run[("sync", seed)], by_run[("async", seed)]
            ratios[seed] = {str(t): threshold_ratio(_scores(sync), _scores(async_), t)
                            for t in THRESHOLDS}
    return ratios


def status(run: Dict[str, Any]) -> str:
    """"in progress, 12.30M env steps", "score 2000 at 31.20M" or "budget 50.00M"."""
    steps = format_count(run.get("total_env_steps") or 0)
    if run.get("in_progress"):
        return f"in progress, {steps} env steps"
    if run.get("stopped_by") == "score":
        return f"stopped at score {run['stop_score']:g}, {steps} env steps"
    return f"budget, {steps} env steps"


def _steps(steps: Optional[float]) -> str:
    return "-" if steps is None else format_count(steps)


def _reach(steps: Optional[float], wall_s: Optional[float]) -> str:
    return "-" if steps is None else f"{format_count(steps)}, {format_duration(wall_s)}"


def _num(value: Optional[float], fmt: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, fmt)


def _run_label(run: Dict[str, Any]) -> str:
    return f"{run['mode']} seed {run['seed']}"


def mode_medians(runs: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """mode -> medians over its runs (of two or more): env steps and wall
    seconds to 2000 over the runs that got there (``reached_2000`` of
    ``runs``), T, EPS and env steps/s over all of them."""
    medians: Dict[str, Dict[str, Any]] = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode and r.get("total_env_steps")]
        if len(mine) < 2:
            continue
        reached = [r for r in mine if r.get(f"steps_to_{ALF_SCORE}") is not None]
        medians[mode] = {
            "runs": len(mine), f"reached_{ALF_SCORE}": len(reached),
            "num_envs": mine[0].get("num_envs"),
            f"steps_to_{ALF_SCORE}": (benchlib.median(r[f"steps_to_{ALF_SCORE}"]
                                                      for r in reached) if reached else None),
            f"wall_s_to_{ALF_SCORE}": (benchlib.median(r[f"wall_s_to_{ALF_SCORE}"]
                                                       for r in reached) if reached else None),
            **{key: benchlib.median(r.get(key) for r in mine)
               for key in ("T", "EPS", "env_steps_per_s")}}
    return medians


def alf_table(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown: ALF's rows, then ours (each run, and the median of each mode
    run with two seeds or more): env steps and time to 2000, T, EPS, env
    steps/s."""
    lines = [f"### {ENV_ID}: ALF's async guide beside alf_async (training score: mean "
             "return of the last 100 training episodes)", "",
             f"| run | K | N | env steps to {ALF_SCORE} | time to {ALF_SCORE} | T (s) | EPS | "
             "env steps/s | status |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for a in ALF_ROWS:
        lines.append(f"| {a.label} | {a.num_envs} | {1 if a.mode == 'sync' else 2} | "
                     f"{format_count(a.steps_to_2000)} | {format_duration(a.wall_s_to_2000)} | "
                     f"{_num(a.T, '.1f')} | {a.EPS:.1f} | "
                     f"{a.steps_to_2000 / a.wall_s_to_2000:.0f} (derived) | published |")
    for r in runs:
        lines.append(
            f"| ours {_run_label(r)} | {r.get('num_envs', '-')} | {r.get('num_actors', '-')} | "
            f"{_steps(r.get(f'steps_to_{ALF_SCORE}'))} | "
            f"{format_duration(r.get(f'wall_s_to_{ALF_SCORE}'))} | {_num(r.get('T'), '.1f')} | "
            f"{_num(r.get('EPS'), '.1f')} | {_num(r.get('env_steps_per_s'), '.0f')} | "
            f"{status(r)} |")
    for mode, m in mode_medians(runs).items():
        lines.append(
            f"| ours {mode}, median of {m['runs']} | {m['num_envs']} | "
            f"{1 if mode == 'sync' else 2} | "
            f"{_steps(m[f'steps_to_{ALF_SCORE}'])} "
            f"({m[f'reached_{ALF_SCORE}']}/{m['runs']}) | "
            f"{format_duration(m[f'wall_s_to_{ALF_SCORE}'])} | {_num(m['T'], '.1f')} | "
            f"{_num(m['EPS'], '.1f')} | {_num(m['env_steps_per_s'], '.0f')} | |")
    lines += ["", "Time: ALF's as published; ours the training loop's wall time (start-up "
              "excluded, summed over resumes). T and EPS: ours the mean over steady rows "
              "(the first N iterations of each session left out), EPS = K / T. Env steps/s: "
              "ALF's derived from its env steps and time to 2000, ours over the whole run. "
              "The shipped configs are ALF's K=96 pair."]
    return "\n".join(lines)


def threshold_table(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown: one row per run, env steps and training time to each
    threshold, final training return and deterministic eval return."""
    lines = [f"### {ENV_ID}: env steps and training time to each training return", "",
             "| run | " + " | ".join(f"to {t}" for t in THRESHOLDS)
             + " | training return | eval return | status |",
             "|---|" + "---:|" * (len(THRESHOLDS) + 2) + "---|"]
    for r in runs:
        evaluated = ("-" if r.get("eval_return") is None else
                     f"{r['eval_return']:.0f} +- {r['eval_return_std']:.0f} "
                     f"({len(r.get('eval_returns') or [])} ep.)")
        lines.append(f"| {_run_label(r)} | " + " | ".join(
            _reach(r.get(f"steps_to_{t}"), r.get(f"wall_s_to_{t}")) for t in THRESHOLDS)
            + f" | {_num(r.get('final_return'), '.0f')} | {evaluated} | {status(r)} |")
    rows = sorted({r.get("score_rows", 1) for r in runs})
    lines += ["", "To X: env steps and training time at the first row whose training score "
              "(the training return, the mean of the last 100 episodes, averaged over the last "
              f"{'/'.join(map(str, rows))} metrics rows) is >= X; -: not (yet) reached. Training "
              "return: the last row's. Eval: the play command's mean action on the final "
              "checkpoint, mean +- std over episodes."]
    return "\n".join(lines)


def ratio_table(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown: per seed run in both modes, async over sync env steps and
    time to each threshold."""
    ratios = seed_ratios(runs)
    if not ratios:
        return ""
    unfinished = {r["seed"] for r in runs if r.get("in_progress")}
    lines = [f"### {ENV_ID}: async / sync per seed", "",
             "| seed | " + " | ".join(f"to {t}" for t in THRESHOLDS) + " |",
             "|---|" + "---:|" * len(THRESHOLDS)]
    for seed, cells in ratios.items():
        label = f"{seed} (in progress)" if seed in unfinished else str(seed)
        lines.append(f"| {label} | " + " | ".join(ratio_cell(cells[str(t)])
                                                 for t in THRESHOLDS) + " |")
    lines += ["", "Async's env steps and training time to each training return over sync's, "
              "same seed; \"async only\" / \"sync only\": the other run has not got there "
              "(yet); -: neither has."]
    return "\n".join(lines)


def plot(runs: Sequence[Dict[str, Any]], plot_dir: str) -> List[str]:
    """humanoid_suite.png: training return (thin) and training score (thick)
    against env steps and against training wall time, one colour per run,
    ALF's points at 2000 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(plot_dir, exist_ok=True)
    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        points, scores = r["training"], _scores(r)
        style = "-" if r["mode"] == "sync" else "--"
        label = _run_label(r) + (" (in progress)" if r.get("in_progress") else "")
        for axis, x, scale in ((by_steps, 0, 1e6), (by_time, 1, 3600)):
            line, = axis.plot([p[x] / scale for p in points], [p[2] for p in points], style,
                              linewidth=0.5, alpha=0.5)
            axis.plot([p[x] / scale for p in scores], [p[2] for p in scores], style,
                      color=line.get_color(), linewidth=1.5, label=label)
    for a in ALF_ROWS:
        marker = "o" if a.mode == "sync" else "^"
        by_steps.plot([a.steps_to_2000 / 1e6], [ALF_SCORE], marker, label=a.label)
        by_time.plot([a.wall_s_to_2000 / 3600], [ALF_SCORE], marker, label=a.label)
    for axis, xlabel in ((by_steps, "env steps (M)"), (by_time, "training wall time (h)")):
        axis.axhline(ALF_SCORE, color="grey", linestyle=":")
        axis.set_xlabel(xlabel)
        axis.set_ylabel("training return (last 100 episodes); score")
        axis.grid(alpha=0.3)
    by_steps.legend(fontsize=7)
    fig.suptitle(f"{ENV_ID}: alf_async against ALF's async guide")
    fig.tight_layout()
    path = os.path.join(plot_dir, "humanoid_suite.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def report(runs: Sequence[Dict[str, Any]], plot_dir: Optional[str] = None) -> Dict[str, Any]:
    """Print the tables to stderr (and draw the figure into ``plot_dir``);
    returns the figures for the bench's JSON line: "alf" (ALF's rows), "runs"
    (each run's figures without its curve), "mode_medians", "seed_ratios",
    "figures"."""
    for table in (alf_table(runs), threshold_table(runs), ratio_table(runs)):
        if table:
            print(table + "\n", file=sys.stderr)
    return {"alf": [{**asdict(a), "label": a.label} for a in ALF_ROWS],
            "runs": [{k: v for k, v in r.items() if k not in ("training", "score")}
                     for r in runs],
            "mode_medians": mode_medians(runs),
            "seed_ratios": {str(seed): cells for seed, cells in seed_ratios(runs).items()},
            "figures": plot(runs, plot_dir) if plot_dir else []}

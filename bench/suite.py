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
afterwards. Wall times are the runs' training wall time (``wall_time`` of the
metrics, summed over resumes, start-up excluded).

The report, per env (a markdown table on stderr; ``--table`` only reads
``--results``): the zoo's published score; for sync and async, the deterministic
eval return at 1M and at 2M env steps (mean and [min - max] over seeds), the
env steps and the wall time to an eval return of 1000, of 2000 and of the
zoo's score (and to 90% of it), as medians over the seeds that got there
("k/n" says how many did), and env steps/s; then, per env and per seed run in
both modes, async's env steps and time to each threshold over sync's (the lag
targets are stated per seed). ``--plot_dir`` also draws eval return against env
steps and against wall time, one figure per env.

The zoo's numbers (DLR-RM/rl-baselines3-zoo, benchmark.md, PPO, 2M env steps,
deterministic evaluation): ZOO_PPO_SCORES below.

Output: one JSON line {"bench": "suite", "results": ..., "envs": {env: {mode:
{...}}}, "seed_ratios": {env: {seed: {threshold: [steps ratio, time ratio] or
"async only" / "sync only" / null}}}}.

Full study: python -m bench.suite --root_dir runs/suite            (~3 h a seed on 2 cores)
One env:    python -m bench.suite --root_dir runs/suite --envs hopper --seeds 0
Report:     python -m bench.suite --table --plot_dir docs/suite
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
from typing import Any, Dict, List, Optional, Sequence, Union

from bench import benchlib

logger = logging.getLogger("bench")

# env key -> (gymnasium id, the zoo's published PPO score at 2M env steps)
ZOO_PPO_SCORES: Dict[str, tuple] = {
    "half_cheetah": ("HalfCheetahBulletEnv-v0", 2925.0),
    "ant": ("AntBulletEnv-v0", 2866.0),
    "hopper": ("HopperBulletEnv-v0", 2575.0),
    "walker2d": ("Walker2DBulletEnv-v0", 2110.0),
}
MODES = ("sync", "async")
CHECKPOINTS = (1_000_000, 2_000_000)  # env steps the eval return is reported at
FIXED_THRESHOLDS = (1000, 1500, 2000, 2500)  # eval returns reported beside the zoo's


def gin_file(env: str, mode: str) -> str:
    return f"{'async_' if mode == 'async' else ''}ppo_bullet_{env}.gin"


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
                   help="JSON lines of finished runs (appended; runs already there are skipped)")
    p.add_argument("--table", action="store_true",
                   help="report --results and exit (nothing is run)")
    p.add_argument("--plot_dir", default=None, help="write suite_<env>.png figures here")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra binding for every run (repeatable)")
    p.add_argument("--root_dir", default="runs/suite",
                   help="where the runs live (kept: a later session resumes them)")
    p.add_argument("--timeout_s", type=float, default=None,
                   help="stop a run after this many seconds (it resumes next time)")
    args = p.parse_args(argv)
    args.envs = [e for e in args.envs.replace(" ", "").split(",") if e]
    args.modes = [m for m in args.modes.replace(" ", "").split(",") if m]
    unknown = [e for e in args.envs if e not in ZOO_PPO_SCORES] + [
        m for m in args.modes if m not in MODES]
    if unknown:
        p.error(f"unknown env(s) or mode(s) {unknown}; envs: {', '.join(ZOO_PPO_SCORES)}; "
                f"modes: {', '.join(MODES)}")
    args.seeds = benchlib.parse_int_list(args.seeds)
    return args


def first_at_or_above(points: Sequence[Sequence[float]], score: float
                      ) -> Optional[Sequence[float]]:
    """The first evaluation [env steps, wall s, eval return] whose return is
    >= ``score``."""
    return next((p for p in points if p[2] >= score), None)


def eval_at(evals: Sequence[Dict[str, Any]], env_steps: int) -> Optional[float]:
    """The eval return of the weights at ``env_steps``: the first evaluation at
    or after it (evaluations fall on the first iteration past each multiple of
    the interval, and at the end of the budget); None if the run stopped
    earlier."""
    hit = next((e for e in evals if e["env_steps"] >= env_steps), None)
    return None if hit is None else hit["eval_return"]


def threshold_scores(zoo: float) -> List[tuple]:
    """(name, eval return) of the thresholds reported: the fixed ones, the
    zoo's score and 90% of it."""
    return [(str(t), float(t)) for t in FIXED_THRESHOLDS] + [("zoo", zoo), ("zoo90", 0.9 * zoo)]


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
    last = rows[-1] if rows else {}
    result["total_env_steps"] = last.get("env_steps")
    result["total_wall_s"] = last.get("wall_time")
    result["env_steps_per_s"] = (last["env_steps"] / last["wall_time"]
                                 if last.get("wall_time") else None)
    result["final_eval_return"] = evals[-1]["eval_return"] if evals else None
    return result


def one_run(env: str, mode: str, seed: int, args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """Train (or resume) one run to its budget; its figures, or None if it was
    stopped before the end (timeout, failure: the next session resumes it)."""
    run_dir = os.path.join(os.path.abspath(args.root_dir), f"{env}_{mode}_s{seed}")
    params = [f"Trainer.seed={seed}", f"Trainer.num_env_steps={args.max_env_steps}",
              f"Trainer.eval_interval_env_steps={args.eval_interval}",
              f"Trainer.eval_episodes={args.eval_episodes}", *args.gin_param]
    # The gin file only for a new run: a resumed one reads its saved config.gin.
    files = [] if os.path.isfile(os.path.join(run_dir, "config.gin")) else [gin_file(env, mode)]
    status = benchlib.run_train(files, params, run_dir, args.timeout_s)
    rows = benchlib.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    if status["returncode"] != 0 or not rows or rows[-1]["env_steps"] < args.max_env_steps:
        logger.warning("%s %s seed %d stopped before its budget (exit %s); run the bench "
                       "again to resume it", env, mode, seed, status["returncode"])
        return None
    result = analyse_run(env, mode, seed, run_dir)
    result.update(gin_file=gin_file(env, mode), gin_params=params,
                  max_env_steps=args.max_env_steps, eval_interval=args.eval_interval,
                  eval_episodes=args.eval_episodes, **benchlib.machine_info())
    return result


def summarize(results: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """env -> mode -> medians, ranges and reach counts over the seeds."""
    summary: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for env in ZOO_PPO_SCORES:
        for mode in MODES:
            runs = [r for r in results if r["env"] == env and r["mode"] == mode]
            if not runs:
                continue
            entry: Dict[str, Any] = {"runs": len(runs), "seeds": [r["seed"] for r in runs]}
            for key in ("eval_at_1M", "eval_at_2M"):
                values = [r[key] for r in runs if r.get(key) is not None]
                entry[key] = benchlib.mean(values) if values else None
                entry[key + "_range"] = [min(values), max(values)] if values else None
            for name, score in threshold_scores(ZOO_PPO_SCORES[env][1]):
                # from each run's evaluations [env steps, wall s, return], so
                # that results written before a threshold was added count too
                hits = [first_at_or_above(r["evaluations"], score) for r in runs]
                steps = [h[0] for h in hits if h is not None]
                walls = [h[1] for h in hits if h is not None]
                entry[f"reached_{name}"] = len(steps)
                entry[f"steps_to_{name}"] = benchlib.median(steps) if steps else None
                entry[f"wall_s_to_{name}"] = benchlib.median(walls) if walls else None
            entry["env_steps_per_s"] = benchlib.median(
                r["env_steps_per_s"] for r in runs if r.get("env_steps_per_s"))
            summary.setdefault(env, {})[mode] = entry
    return summary


def _score(value: Optional[float], spread: Optional[List[float]] = None) -> str:
    if value is None:
        return "-"
    if spread is None or spread[0] == spread[1]:
        return f"{value:.0f}"
    return f"{value:.0f} [{spread[0]:.0f} - {spread[1]:.0f}]"


def _reach(entry: Dict[str, Any], name: str) -> str:
    steps, wall = entry[f"steps_to_{name}"], entry[f"wall_s_to_{name}"]
    if steps is None:
        return f"- (0/{entry['runs']})"
    return f"{steps / 1e6:.2f}M, {wall / 60:.0f} min ({entry[f'reached_{name}']}/{entry['runs']})"


def _ratio(num: Optional[float], den: Optional[float]) -> str:
    return "-" if num is None or den is None or not den else f"{num / den:.2f}"


def markdown_tables(summary: Dict[str, Dict[str, Dict[str, Any]]]) -> str:
    """One table per env: rows sync / async, and async / sync where both have
    the figure."""
    out = []
    for env, modes in summary.items():
        env_id, zoo = ZOO_PPO_SCORES[env]
        names = [name for name, _ in threshold_scores(zoo)]
        labels = [f"to {t}" for t in FIXED_THRESHOLDS] + [f"to {zoo:.0f} (zoo)",
                                                          f"to {0.9 * zoo:.0f} (90%)"]
        out += [f"### {env_id} (zoo PPO: {zoo:.0f})", "",
                "| mode | eval at 1M | eval at 2M | " + " | ".join(labels) + " | env steps/s |",
                "|---|---:|---:|" + "---:|" * len(labels) + "---:|"]
        for mode, e in modes.items():
            out.append(f"| {mode} | {_score(e['eval_at_1M'], e['eval_at_1M_range'])} "
                       f"| {_score(e['eval_at_2M'], e['eval_at_2M_range'])} | "
                       + " | ".join(_reach(e, n) for n in names)
                       + f" | {e['env_steps_per_s']:.0f} |")
        if "sync" in modes and "async" in modes:
            s, a = modes["sync"], modes["async"]
            cells = [f"{_ratio(a[f'steps_to_{n}'], s[f'steps_to_{n}'])} steps, "
                     f"{_ratio(a[f'wall_s_to_{n}'], s[f'wall_s_to_{n}'])} time" for n in names]
            out.append(f"| async / sync | {_ratio(a['eval_at_1M'], s['eval_at_1M'])} "
                       f"| {_ratio(a['eval_at_2M'], s['eval_at_2M'])} | " + " | ".join(cells)
                       + f" | {_ratio(a['env_steps_per_s'], s['env_steps_per_s'])} |")
        out.append("")
    out.append("Eval: mean over seeds [min - max]; to X: median env steps (M) and training "
               "minutes over the seeds that got there (k/n seeds); async / sync: ratios of "
               "those medians.")
    return "\n".join(out)


def seed_ratios(results: Sequence[Dict[str, Any]]
                ) -> Dict[str, Dict[int, Dict[str, Union[None, str, tuple]]]]:
    """env -> seed -> threshold name -> (async / sync env steps, async / sync
    training seconds) to that threshold, for the seeds run in both modes;
    "async only" or "sync only" where one run never reached it, None where
    neither did. The lag targets (async within 1.15x sync's steps, no seed
    above 1.3x) are read per seed from this."""
    ratios: Dict[str, Dict[int, Dict[str, Union[None, str, tuple]]]] = {}
    for env in ZOO_PPO_SCORES:
        by_mode = {(r["mode"], r["seed"]): r for r in results if r["env"] == env}
        for seed in sorted({seed for mode, seed in by_mode}):
            if ("sync", seed) not in by_mode or ("async", seed) not in by_mode:
                continue
            sync, async_ = by_mode[("sync", seed)], by_mode[("async", seed)]
            cells: Dict[str, Union[None, str, tuple]] = {}
            for name, score in threshold_scores(ZOO_PPO_SCORES[env][1]):
                s = first_at_or_above(sync["evaluations"], score)
                a = first_at_or_above(async_["evaluations"], score)
                if s is None or a is None:
                    cells[name] = (None if s is None and a is None
                                   else "async only" if s is None else "sync only")
                else:
                    cells[name] = (a[0] / s[0], a[1] / s[1])
            ratios.setdefault(env, {})[seed] = cells
    return ratios


def _seed_cell(cell: Union[None, str, tuple]) -> str:
    if cell is None or isinstance(cell, str):
        return cell or "-"
    return f"{cell[0]:.2f} steps, {cell[1]:.2f} time"


def seed_ratio_tables(results: Sequence[Dict[str, Any]]) -> str:
    """Markdown: per env, one row per seed run in both modes, async / sync
    env steps and time to each threshold."""
    out = []
    for env, seeds in seed_ratios(results).items():
        env_id, zoo = ZOO_PPO_SCORES[env]
        names = [name for name, _ in threshold_scores(zoo)]
        labels = [str(t) for t in FIXED_THRESHOLDS] + [f"{zoo:.0f} (zoo)", f"{0.9 * zoo:.0f} (90%)"]
        out += [f"### {env_id}: async / sync per seed", "",
                "| seed | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
        for seed, cells in seeds.items():
            out.append(f"| {seed} | " + " | ".join(
                _seed_cell(cells[n]) for n in names) + " |")
        out.append("")
    if out:
        out.append("Per seed: env steps and training time to the first evaluation at or above "
                   "each return, async's over sync's; \"async only\" / \"sync only\": the "
                   "other run never got there; -: neither did.")
    return "\n".join(out)


def plot(results: Sequence[Dict[str, Any]], plot_dir: str) -> List[str]:
    """suite_<env>.png: eval return against env steps and against wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(plot_dir, exist_ok=True)
    written = []
    for env, (env_id, zoo) in ZOO_PPO_SCORES.items():
        runs = [r for r in results if r["env"] == env]
        if not runs:
            continue
        fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4))
        for r in runs:
            points = r["evaluations"]
            style = "-" if r["mode"] == "sync" else "--"
            label = f"{r['mode']} seed {r['seed']}"
            by_steps.plot([p[0] / 1e6 for p in points], [p[2] for p in points], style,
                          label=label)
            by_time.plot([p[1] / 60 for p in points], [p[2] for p in points], style,
                         label=label)
        for axis, xlabel in ((by_steps, "env steps (M)"), (by_time, "training wall time (min)")):
            axis.axhline(zoo, color="grey", linestyle=":", label="zoo PPO at 2M")
            axis.set_xlabel(xlabel)
            axis.set_ylabel("deterministic eval return")
            axis.grid(alpha=0.3)
        by_steps.legend(fontsize=7)
        fig.suptitle(env_id)
        fig.tight_layout()
        path = os.path.join(plot_dir, f"suite_{env}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    if not args.table:
        for seed in args.seeds:
            for env in args.envs:
                for mode in args.modes:
                    done = benchlib.read_jsonl(args.results)
                    if any(r["env"] == env and r["mode"] == mode and r["seed"] == seed
                           and r.get("max_env_steps") == args.max_env_steps for r in done):
                        logger.info("%s %s seed %d: already in %s", env, mode, seed,
                                    args.results)
                        continue
                    result = one_run(env, mode, seed, args)
                    if result is not None:
                        with open(args.results, "a", encoding="utf-8") as f:
                            f.write(json.dumps(result) + "\n")
    results = benchlib.read_jsonl(args.results)
    summary = summarize(results)
    print(markdown_tables(summary), file=sys.stderr)
    print(seed_ratio_tables(results), file=sys.stderr)
    figures = plot(results, args.plot_dir) if args.plot_dir else []
    ratios = {env: {str(seed): cells for seed, cells in seeds.items()}
              for env, seeds in seed_ratios(results).items()}
    benchlib.emit({"bench": "suite", "results": os.path.abspath(args.results),
                   "envs": summary, "seed_ratios": ratios, "figures": figures,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

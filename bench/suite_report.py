"""The report of bench/suite.py: tables and figures from its results (one JSON
line per finished run; no training here).

Per env: the zoo's published PPO score; for sync and async, the deterministic
eval return at 1M and 2M env steps (mean and [min - max] over seeds), the env
steps and training time to each threshold (1000, 1500, 2000, 2500, the zoo's
score and 90% of it) as medians over the seeds that got there, and as
Kaplan-Meier medians over every seed's run (``censored_steps.km_median``: a
run that never got there counts as not there yet up to the env steps it
trained; with one budget, as slower than any run that did. The first kind
favours the mode whose slow seeds never arrive, since only its fast ones are
counted), with the one-sided permutation p that async's runs need more env
steps than sync's (``mode_shift``, Gehan's scores); per seed run in
both modes, async's env steps and time to each threshold over sync's (issue
24's lag targets are stated per seed), and where both runs of the seed measured
their envs stepping alone before training (``envs_alone_steps_per_s``), a third
figure: async's time "of allowed", its time ratio over (its steps ratio x the
envs-alone time ratio: async's envs' time for the same env steps over sync's),
whose bound is <= ALLOWED_LIMIT; and the seed-to-seed spread of one
config (each run against every other seed's run of the same env and mode),
the ratio a per-seed target has to be read against. The thresholds are read
twice: on the deterministic evaluations (``evaluations``) and on the training
return a user watches on the console (``training``: the mean return of the
last 100 training episodes, each metrics row's ``episode_return``). The width
of the policy (``policy_width``: action std and entropy at WIDTH_CHECKPOINTS)
is tabled per run. Figures: eval return against env steps and against
training time, one per env. Two warnings close the tables: runs from several
CPU models (``machines_note``) and one env and mode pooling runs trained with
different settings (``settings_note``, from each row's ``learning_bindings``:
a gin file's name stays while its bindings change).

The zoo's numbers (DLR-RM/rl-baselines3-zoo, benchmark.md, PPO, 2M env steps,
deterministic evaluation of the final agent over 150k env steps):
ZOO_PPO_SCORES below.
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from bench import benchlib
from bench.censored_steps import Reach, km_median, permutation_test

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
# the curves a threshold is read on: key of a result -> what its returns are
CURVES = {"evaluations": "deterministic eval return",
          "training": "training return (mean of the last 100 episodes)"}
WIDTH_CHECKPOINTS = (250_000, 500_000, 1_000_000, 1_500_000, 2_000_000)  # env steps


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


def reach(result: Dict[str, Any], curve: str, score: float) -> Reach:
    """``result``'s env steps to ``score`` on ``curve``, or censored at the
    env steps it trained (``total_env_steps``, else its curve's last point)."""
    hit = first_at_or_above(result[curve], score)
    if hit is not None:
        return Reach(float(hit[0]), True)
    points = result[curve]
    stopped = result.get("total_env_steps") or (points[-1][0] if points else 0)
    return Reach(float(stopped), False)


BUDGET_PARAM = "Trainer.num_env_steps="  # the gin param a resume to a larger budget changes


def _same_run_settings(row: Dict[str, Any]) -> tuple:
    """What two rows of one run share whatever budget each was written at."""
    params = tuple(p for p in row.get("gin_params", ()) if not p.startswith(BUDGET_PARAM))
    return (row.get("env"), row.get("mode"), row.get("seed"), row.get("gin_file"), params,
            row.get("eval_interval"), row.get("eval_episodes"), row.get("cpu_model"))


def _extends(longer: Dict[str, Any], shorter: Dict[str, Any]) -> bool:
    """Whether ``longer`` is ``shorter``'s run trained on to a larger budget:
    the same settings but the budget, and each of ``shorter``'s curves the
    start of ``longer``'s, point for point (env steps, wall s, return; a
    resumed run keeps the points it logged, so two separate runs of one seed,
    whose wall times differ, never match)."""
    if _same_run_settings(longer) != _same_run_settings(shorter):
        return False
    if (longer.get("total_env_steps") or 0) <= (shorter.get("total_env_steps") or 0):
        return False
    for curve in CURVES:
        short, long_ = shorter.get(curve) or [], longer.get(curve) or []
        if len(short) > len(long_) or [list(p) for p in long_[:len(short)]] != [
                list(p) for p in short]:
            return False
    return True


def distinct_runs(results: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``results`` with each run once: a row that another row of the same run
    extends (``bench/suite.py`` run again with a larger ``--max_env_steps``
    resumes the run and appends a second row, in the same results file or
    another) is dropped for the longest, whichever comes first, so that a
    seed is not counted twice in a median, a mean or a permutation test.
    Order kept otherwise."""
    return [row for row in results
            if not any(other is not row and _extends(other, row) for other in results)]


def threshold_scores(zoo: float) -> List[tuple]:
    """(name, eval return) of the thresholds reported: the fixed ones, the
    zoo's score and 90% of it."""
    return [(str(t), float(t)) for t in FIXED_THRESHOLDS] + [("zoo", zoo), ("zoo90", 0.9 * zoo)]


def threshold_table_head(env: str, title: str, first_column: str) -> tuple:
    """(threshold names, the markdown lines that open a per-seed table of
    ``env``: its heading and header rows, one column per threshold)."""
    env_id, zoo = ZOO_PPO_SCORES[env]
    names = [name for name, _ in threshold_scores(zoo)]
    labels = [str(t) for t in FIXED_THRESHOLDS] + [f"{zoo:.0f} (zoo)", f"{0.9 * zoo:.0f} (90%)"]
    return names, [f"### {env_id}: {title}", "", f"| {first_column} | " + " | ".join(labels)
                   + " |", "|---|" + "---:|" * len(labels)]


def summarize(results: Sequence[Dict[str, Any]], curve: str = "evaluations"
              ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """env -> mode -> medians, ranges and reach counts over the seeds, the
    thresholds read on ``curve`` (a key of CURVES; runs without it are left
    out of the thresholds)."""
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
                # from each run's curve [env steps, wall s, return], so
                # that results written before a threshold was added count too
                hits = [first_at_or_above(r[curve], score) for r in runs if curve in r]
                steps = [h[0] for h in hits if h is not None]
                walls = [h[1] for h in hits if h is not None]
                entry[f"reached_{name}"] = len(steps)
                entry[f"steps_to_{name}"] = benchlib.median(steps) if steps else None
                entry[f"wall_s_to_{name}"] = benchlib.median(walls) if walls else None
                entry[f"every_run_steps_to_{name}"] = km_median(
                    [reach(r, curve, score) for r in runs if curve in r])
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


def _every_run_ratio(async_steps: Optional[float], sync_steps: Optional[float],
                     shift: Optional[Dict[str, Any]] = None) -> str:
    """A cell of the every-run row: async / sync of the Kaplan-Meier medians
    over every run, with the two medians in M env steps, and where ``shift``
    (a ``permutation_test``) is given, the p that async is slower."""
    def m(steps: Optional[float]) -> str:
        return "beyond" if steps is None else f"{steps / 1e6:.2f}M"
    if async_steps is None or sync_steps is None:
        ratio = "-" if async_steps is None and sync_steps is None else (
            "async only" if sync_steps is None else "sync only")
    else:
        ratio = f"{async_steps / sync_steps:.2f}"
    p = "" if shift is None else f", p {shift['p_slower']:.3f}"
    return f"{ratio} ({m(async_steps)} / {m(sync_steps)}{p})"


def group_shift(candidate: Sequence[Dict[str, Any]], reference: Sequence[Dict[str, Any]],
                curve: str, zoo: float) -> Dict[str, Dict[str, Any]]:
    """threshold name -> ``candidate``'s runs against ``reference``'s on
    ``curve`` (runs that never got there censored at their budget): both
    groups' Kaplan-Meier medians, their ratio, how many runs got there, and
    ``permutation_test``'s U, pairs, ``p_slower`` and ``p_faster``.
    Thresholds nobody reached are left out."""
    cells: Dict[str, Dict[str, Any]] = {}
    for name, score in threshold_scores(zoo):
        a = [reach(r, curve, score) for r in candidate]
        b = [reach(r, curve, score) for r in reference]
        if not any(x.reached for x in a + b):
            continue
        ma, mb = km_median(a), km_median(b)
        cells[name] = {
            "candidate_median": ma, "reference_median": mb,
            "ratio_of_medians": None if ma is None or mb is None else round(ma / mb, 3),
            "candidate_reached": sum(x.reached for x in a),
            "reference_reached": sum(x.reached for x in b),
            **permutation_test(a, b)}
    return cells


def mode_shift(results: Sequence[Dict[str, Any]], curve: str = "evaluations"
               ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """env -> threshold name -> ``group_shift`` of async's runs against
    sync's (every seed of each mode): ``p_slower`` says async's runs sit
    above sync's more consistently than one config's seeds do. Envs with runs
    of one mode only are left out."""
    shifts: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for env, (_, zoo) in ZOO_PPO_SCORES.items():
        groups = {mode: [r for r in results
                         if r["env"] == env and r["mode"] == mode and curve in r]
                  for mode in MODES}
        if groups["sync"] and groups["async"]:
            cells = group_shift(groups["async"], groups["sync"], curve, zoo)
            if cells:
                shifts[env] = cells
    return shifts


def markdown_tables(summary: Dict[str, Dict[str, Dict[str, Any]]],
                    curve: str = "evaluations",
                    shifts: Optional[Dict[str, Dict[str, Dict[str, Any]]]] = None) -> str:
    """One table per env: rows sync / async, and async / sync where both have
    the figure (with ``shifts``, ``mode_shift``'s p in the every-run row);
    thresholds on ``curve``."""
    out = []
    for env, modes in summary.items():
        env_id, zoo = ZOO_PPO_SCORES[env]
        names = [name for name, _ in threshold_scores(zoo)]
        labels = [f"to {t}" for t in FIXED_THRESHOLDS] + [f"to {zoo:.0f} (zoo)",
                                                          f"to {0.9 * zoo:.0f} (90%)"]
        out += [f"### {env_id} (zoo PPO: {zoo:.0f}), thresholds on the {CURVES[curve]}", "",
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
            env_shifts = (shifts or {}).get(env, {})
            out.append("| async / sync, every run | | | " + " | ".join(
                _every_run_ratio(a[f"every_run_steps_to_{n}"], s[f"every_run_steps_to_{n}"],
                                 env_shifts.get(n))
                for n in names) + " | |")
        out.append("")
    out.append("Eval: mean over seeds [min - max]; to X: median env steps (M) and training "
               "minutes over the seeds that got there (k/n seeds); async / sync: ratios of "
               "those medians. Every run: the Kaplan-Meier median env steps over all seeds of "
               "each mode, a run that never got there counted as not there yet up to its "
               "budget (with one budget: as the slowest; \"beyond\": the median lies past "
               "every arrival), their ratio, and p: the one-sided permutation p (Gehan's "
               "scores) that async's runs need more env steps than sync's.")
    return "\n".join(out)


ALLOWED_LIMIT = 1.1  # the bound on async's time to a threshold "of allowed"


def seed_pairs(results: Sequence[Dict[str, Any]], env: str, curve: str = "evaluations"
               ) -> Iterator[Tuple[int, Dict[str, Any], Dict[str, Any]]]:
    """(seed, sync result, async result) of ``env`` for each seed run in both
    modes with ``curve``, by seed."""
    by_mode = {(r["mode"], r["seed"]): r for r in results if r["env"] == env and curve in r}
    for seed in sorted({seed for mode, seed in by_mode}):
        if ("sync", seed) in by_mode and ("async", seed) in by_mode:
            yield seed, by_mode[("sync", seed)], by_mode[("async", seed)]


def envs_time_ratio(sync: Dict[str, Any], async_: Dict[str, Any]) -> Optional[float]:
    """The time async's envs take to make a given number of env steps stepping
    alone over the time sync's envs take (each in its run's layout, measured
    just before the run trained: ``envs_alone_steps_per_s``), the mean over the
    two runs of a seed of (sync's rate / async's rate); None unless both runs
    carry the measurement."""
    rates = [row.get("envs_alone_steps_per_s") for row in (sync, async_)]
    if any(r is None for r in rates):
        return None
    return benchlib.mean(r["sync"] / r["async"] for r in rates)


def envs_time_ratios(results: Sequence[Dict[str, Any]], curve: str = "evaluations"
                     ) -> Dict[str, Dict[int, float]]:
    """env -> seed -> ``envs_time_ratio`` of the seed's two runs, for the
    seeds run in both modes whose runs both carry the envs-alone rates."""
    ratios: Dict[str, Dict[int, float]] = {}
    for env in ZOO_PPO_SCORES:
        for seed, sync, async_ in seed_pairs(results, env, curve):
            ratio = envs_time_ratio(sync, async_)
            if ratio is not None:
                ratios.setdefault(env, {})[seed] = ratio
    return ratios


def seed_ratios(results: Sequence[Dict[str, Any]], curve: str = "evaluations"
                ) -> Dict[str, Dict[int, Dict[str, Union[None, str, tuple]]]]:
    """env -> seed -> threshold name -> (async / sync env steps, async / sync
    training seconds) to that threshold, for the seeds run in both modes, with
    a third figure, async's time "of allowed" (``threshold_ratio``), where
    both runs carry the envs-alone rates; "async only" or "sync only" where
    one run never reached it, None where neither did. The lag targets (async
    within 1.15x sync's steps, no seed above 1.3x) are read per seed from
    this."""
    ratios: Dict[str, Dict[int, Dict[str, Union[None, str, tuple]]]] = {}
    for env in ZOO_PPO_SCORES:
        for seed, sync, async_ in seed_pairs(results, env, curve):
            envs_ratio = envs_time_ratio(sync, async_)
            ratios.setdefault(env, {})[seed] = {
                name: threshold_ratio(sync[curve], async_[curve], score, envs_ratio)
                for name, score in threshold_scores(ZOO_PPO_SCORES[env][1])}
    return ratios


def threshold_ratio(sync: Sequence[Sequence[float]], async_: Sequence[Sequence[float]],
                    score: float, envs_ratio: Optional[float] = None
                    ) -> Union[None, str, tuple]:
    """(async / sync env steps, async / sync seconds) to the first point
    [env steps, wall s, return] of each curve at or above ``score``; "async
    only" or "sync only" where one curve never got there, None where neither
    did. Given ``envs_ratio`` (``envs_time_ratio``: async's envs' time over
    sync's for the same env steps, stepping alone), a third figure, async's
    time "of allowed": the time ratio over (the steps ratio x
    ``envs_ratio``), the time async would take if only its envs' speed and its
    env steps differed from sync's (issue bound: <= ALLOWED_LIMIT)."""
    s, a = first_at_or_above(sync, score), first_at_or_above(async_, score)
    if s is None or a is None:
        return None if s is None and a is None else "async only" if s is None else "sync only"
    steps, time = a[0] / s[0], a[1] / s[1]
    if envs_ratio is None:
        return (steps, time)
    return (steps, time, time / (steps * envs_ratio))


def ratio_cell(cell: Union[None, str, tuple]) -> str:
    """A ``threshold_ratio`` as a table cell."""
    if cell is None or isinstance(cell, str):
        return cell or "-"
    text = f"{cell[0]:.2f} steps, {cell[1]:.2f} time"
    return text if len(cell) == 2 else f"{text}, {cell[2]:.2f} of allowed"


def seed_ratio_tables(results: Sequence[Dict[str, Any]], curve: str = "evaluations") -> str:
    """Markdown: per env, one row per seed run in both modes, async / sync
    env steps and time to each threshold of ``curve`` (and async's time "of
    allowed" where both runs measured their envs alone, with a line giving
    each seed's envs-alone time ratio under the table)."""
    out = []
    envs_ratios = envs_time_ratios(results, curve)
    for env, seeds in seed_ratios(results, curve).items():
        names, head = threshold_table_head(env, f"async / sync per seed, {CURVES[curve]}",
                                           "seed")
        out += head
        for seed, cells in seeds.items():
            out.append(f"| {seed} | " + " | ".join(
                ratio_cell(cells[n]) for n in names) + " |")
        out.append("")
        if env in envs_ratios:
            out += ["Envs alone, async's time over sync's for the same env steps: " + ", ".join(
                f"seed {seed} {ratio:.2f}" for seed, ratio in envs_ratios[env].items()), ""]
    if out:
        out.append("Per seed: env steps and training time to the first point (evaluation or "
                   "metrics row) at or above "
                   "each return, async's over sync's; \"async only\" / \"sync only\": the "
                   "other run never got there; -: neither did.")
    if envs_ratios:
        out.append(f"Of allowed: async's time ratio over its steps ratio times the envs-alone "
                   f"time ratio of the same sitting (the time async's envs take to make the "
                   f"same env steps as sync's, each stepping alone with random actions in "
                   f"its run's layout), so 1.00 is async taking just the time its envs' "
                   f"speed and its env steps account for; the issue's bound is <= "
                   f"{ALLOWED_LIMIT}.")
    return "\n".join(out)


SPREAD_LIMIT = 1.3  # the per-seed bound of issue 24's lag target


def _spread_cell(ratios: Sequence[float], missed: int, of: int) -> Dict[str, Any]:
    """One threshold's spread: the largest of ``ratios`` (env steps of one
    run over another's, both runs having got there), how many there are and
    how many exceed SPREAD_LIMIT, and ``missed`` of ``of``: the comparisons in
    which the first run never got there while the second did."""
    return {"max": max(ratios) if ratios else None, "pairs": len(ratios),
            f"above_{SPREAD_LIMIT}": sum(r > SPREAD_LIMIT for r in ratios),
            "missed": missed, "of": of}


def seed_spread(results: Sequence[Dict[str, Any]], curve: str = "evaluations"
                ) -> Dict[str, Dict[str, Dict[str, Dict[str, Any]]]]:
    """env -> mode -> threshold name -> the seed-to-seed spread of one config
    (``_spread_cell``): over every ordered pair (a, b) of its seeds that both
    reached the threshold, the env steps of a's run over b's; and over every
    ordered pair, how many have a missing it while b reached it. A run
    compared with another seed of the same config is what a per-seed async /
    sync ratio (``same_seed_spread``) is read against: async costs nothing
    when its runs are no more spread from their sync twins than sync's runs
    are from each other. Configs with fewer than two seeds are left out."""
    spread: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]] = {}
    for env, (_, zoo) in ZOO_PPO_SCORES.items():
        for mode in MODES:
            runs = [r for r in results
                    if r["env"] == env and r["mode"] == mode and curve in r]
            if len(runs) < 2:
                continue
            cells: Dict[str, Dict[str, Any]] = {}
            for name, score in threshold_scores(zoo):
                hits = [first_at_or_above(r[curve], score) for r in runs]
                steps = [hit[0] for hit in hits if hit is not None]
                ratios = [a / b for a, b in itertools.permutations(steps, 2)]
                missed = (len(runs) - len(steps)) * len(steps)
                cells[name] = _spread_cell(ratios, missed, len(runs) * (len(runs) - 1))
            spread.setdefault(env, {})[mode] = cells
    return spread


def same_seed_spread(results: Sequence[Dict[str, Any]], curve: str = "evaluations"
                     ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """env -> threshold name -> the spread (``_spread_cell``) of async's runs
    from the sync run of their seed: over the seeds run in both modes, async's
    env steps over sync's where both got there, and how many async runs
    missed a threshold their sync twin reached. The issue's bound reads it
    against sync's row of ``seed_spread``."""
    spread: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for env, (_, zoo) in ZOO_PPO_SCORES.items():
        pairs = list(seed_pairs(results, env, curve))
        if not pairs:
            continue
        cells: Dict[str, Dict[str, Any]] = {}
        for name, score in threshold_scores(zoo):
            ratios, missed = [], 0
            for _, sync, async_ in pairs:
                cell = threshold_ratio(sync[curve], async_[curve], score)
                if isinstance(cell, tuple):
                    ratios.append(cell[0])
                missed += cell == "sync only"
            cells[name] = _spread_cell(ratios, missed, len(pairs))
        spread[env] = cells
    return spread


def _spread_text(cell: Dict[str, Any]) -> str:
    """A ``_spread_cell`` as a table cell."""
    largest = "-" if cell["max"] is None else (
        f"{cell['max']:.2f} ({cell[f'above_{SPREAD_LIMIT}']}/{cell['pairs']} above "
        f"{SPREAD_LIMIT})")
    return f"{largest}; missed {cell['missed']}/{cell['of']}"


def seed_spread_tables(results: Sequence[Dict[str, Any]], curve: str = "evaluations") -> str:
    """Markdown: per env, for each mode the largest seed-to-seed env-step
    ratio to each threshold of ``curve``, how many ordered pairs of seeds
    exceed SPREAD_LIMIT and how many missed it; then the same for async's runs
    against the sync run of their own seed."""
    out = []
    spread, same_seed = seed_spread(results, curve), same_seed_spread(results, curve)
    for env in ZOO_PPO_SCORES:
        modes = spread.get(env, {})
        if not modes and env not in same_seed:
            continue
        names, head = threshold_table_head(
            env, f"seed against seed, {CURVES[curve]}", "runs (seeds)")
        out += head
        for mode, cells in modes.items():
            seeds = sorted(r["seed"] for r in results
                           if r["env"] == env and r["mode"] == mode and curve in r)
            out.append(f"| {mode} against another seed ({', '.join(map(str, seeds))}) | "
                       + " | ".join(_spread_text(cells[n]) for n in names) + " |")
        if env in same_seed:
            seeds = [seed for seed, _, _ in seed_pairs(results, env, curve)]
            out.append(f"| async against sync, same seed ({', '.join(map(str, seeds))}) | "
                       + " | ".join(_spread_text(same_seed[env][n]) for n in names) + " |")
        out.append("")
    if out:
        out.append("Against another seed: each run's env steps to a threshold over another "
                   "seed's run of the same env and mode, the largest over ordered pairs of "
                   f"seeds that both got there and how many pairs are above {SPREAD_LIMIT}x; "
                   "missed: the ordered pairs whose first run never got there while the "
                   "second did. Async against sync, same seed: the same for each async run "
                   "over the sync run of its seed (missed: async never got there, sync "
                   "did). The issue's bound: that row no more spread than sync's against "
                   "another seed.")
    return "\n".join(out)


def width_table(results: Sequence[Dict[str, Any]]) -> str:
    """Markdown: per env, one row per run with the policy's action std and
    entropy at WIDTH_CHECKPOINTS (runs analysed before the width was kept are
    left out)."""
    out = []
    for env, (env_id, _) in ZOO_PPO_SCORES.items():
        runs = sorted((r for r in results if r["env"] == env and r.get("policy_width")),
                      key=lambda r: (r["seed"], MODES.index(r["mode"])))
        if not runs:
            continue
        labels = [f"{steps / 1e6:g}M" for steps in WIDTH_CHECKPOINTS]
        out += [f"### {env_id}: action std / entropy", "",
                "| run | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
        for r in runs:
            cells = {steps: (std, entropy) for steps, std, entropy in r["policy_width"]}
            out.append(f"| {r['mode']} seed {r['seed']} | " + " | ".join(
                "-" if cells.get(steps) is None else
                f"{cells[steps][0]:.3f} / {cells[steps][1]:.2f}" for steps in WIDTH_CHECKPOINTS)
                + " |")
        out.append("")
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


def machines_note(results: Sequence[Dict[str, Any]]) -> str:
    """A warning when the runs come from more than one CPU model (``cpu_model``,
    recorded since 2026-12-01): the float kernels differ between models, so a
    seeded sync run made on one is another sample than the same seed's on the
    other, and an async / sync pair of a seed split over two models is not
    back to back. Empty when all known models agree."""
    models = sorted({r["cpu_model"] for r in results if r.get("cpu_model")})
    if len(models) < 2:
        return ""
    split = [f"{env} seed {seed}"
             for env in sorted({r["env"] for r in results})
             for seed, sync, async_ in seed_pairs(results, env)
             if sync.get("cpu_model") and async_.get("cpu_model")
             and sync["cpu_model"] != async_["cpu_model"]]
    return (f"The runs come from {len(models)} CPU models ({'; '.join(models)}): a seeded "
            f"sync run repeats itself bit for bit only on one model. Sync and async "
            f"on different models: {', '.join(split) if split else 'none'}.")


UNRECORDED = "(no settings recorded)"
NOT_BOUND = "(not bound)"  # a binding a run's config leaves to its default


def pooled_settings(results: Sequence[Dict[str, Any]]
                    ) -> Dict[str, Dict[str, Dict[str, Dict[str, List[int]]]]]:
    """env -> mode -> binding -> its value text -> the seeds run with it, for
    each binding whose value differs between the runs of one env and mode
    (``learning_bindings``: what a run learned with; "(not bound)" where a run's
    config leaves it to the default). Only envs and modes that pool runs of
    different settings appear; rows without ``learning_bindings`` (written
    before 2026-12-06) are listed under the binding UNRECORDED when other rows
    of their env and mode have it."""
    out: Dict[str, Dict[str, Dict[str, Dict[str, List[int]]]]] = {}
    for env in sorted({r["env"] for r in results}):
        for mode in MODES:
            runs = [r for r in results if r["env"] == env and r["mode"] == mode]
            known = [r for r in runs if "learning_bindings" in r]
            if not known:
                continue
            differing: Dict[str, Dict[str, List[int]]] = {}
            for name in sorted({name for r in known for name in r["learning_bindings"]}):
                seeds_by_value: Dict[str, List[int]] = {}
                for r in known:
                    value = r["learning_bindings"].get(name, NOT_BOUND)
                    seeds_by_value.setdefault(value, []).append(r["seed"])
                if len(seeds_by_value) > 1:
                    differing[name] = {value: sorted(seeds_by_value[value])
                                       for value in sorted(seeds_by_value)}
            unknown = sorted(r["seed"] for r in runs if "learning_bindings" not in r)
            if unknown:
                differing[UNRECORDED] = {"": unknown}
            if differing:
                out.setdefault(env, {})[mode] = differing
    return out


def settings_note(results: Sequence[Dict[str, Any]]) -> str:
    """A warning per env and mode whose runs were trained with different
    settings (``pooled_settings``): the tables above pool them; or, where the
    only difference is rows that record no settings, that they cannot be
    checked. Empty when each env and mode's runs agree."""
    lines = []
    for env, modes in pooled_settings(results).items():
        for mode, differing in modes.items():
            parts = []
            for name, values in differing.items():
                if name == UNRECORDED:
                    seeds = values[""]
                    parts.append(f"{_seeds_text(seeds)} "
                                 f"record{'' if len(seeds) > 1 else 's'} no settings")
                else:
                    parts.append(f"{name} " + ", ".join(
                        f"{value} ({_seeds_text(seeds)})"
                        for value, seeds in values.items()))
            if set(differing) == {UNRECORDED}:  # nothing known to differ
                lines.append(f"{env} {mode}: {parts[0]}: not checked against the "
                             f"other runs' settings.")
            else:
                lines.append(f"{env} {mode} pools runs of different settings: "
                             + "; ".join(parts) + ".")
    return "\n".join(lines)


def _seeds_text(seeds: Sequence[int]) -> str:
    """'seed 3' or 'seeds 0, 2'."""
    return f"seed{'s' if len(seeds) > 1 else ''} " + ", ".join(map(str, seeds))


def report(results: Sequence[Dict[str, Any]], plot_dir: Optional[str] = None
           ) -> Dict[str, Any]:
    """Print the tables to stderr (and draw the figures into ``plot_dir``);
    returns the figures for the bench's JSON line."""
    figures: Dict[str, Any] = {}
    for curve in CURVES:
        summary, shifts = summarize(results, curve), mode_shift(results, curve)
        for table in (markdown_tables(summary, curve, shifts),
                      seed_ratio_tables(results, curve),
                      seed_spread_tables(results, curve)):
            print(table, file=sys.stderr)
        ratios = {env: {str(seed): cells for seed, cells in seeds.items()}
                  for env, seeds in seed_ratios(results, curve).items()}
        prefix = "" if curve == "evaluations" else "training_"
        figures.update({f"{prefix}envs": summary, f"{prefix}seed_ratios": ratios,
                        f"{prefix}mode_shift": shifts,
                        f"{prefix}seed_spread": seed_spread(results, curve),
                        f"{prefix}same_seed_spread": same_seed_spread(results, curve)})
    figures["envs_time_ratios"] = {env: {str(seed): ratio for seed, ratio in seeds.items()}
                                   for env, seeds in envs_time_ratios(results).items()}
    print(width_table(results), file=sys.stderr)
    for note in (machines_note(results), settings_note(results)):
        if note:
            print(note, file=sys.stderr)
    figures["pooled_settings"] = pooled_settings(results)
    figures["cpu_models"] = sorted({r["cpu_model"] for r in results if r.get("cpu_model")})
    figures["figures"] = plot(results, plot_dir) if plot_dir else []
    return figures

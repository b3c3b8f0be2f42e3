"""Run a grid or a search of trainings and tabulate them.

Grid (the product of the ``--sweep`` lists)::

    python -m alf_async.bin.sweep --gin_file=ppo_bullet_inverted_pendulum.gin \\
        --sweep='Trainer.num_envs=[8, 16]' \\
        --sweep='Trainer.num_actors,:mode=[(1, sync), (2, async)]' \\
        --root_dir=runs/sweep [--gin_param=...] [--max_parallel=2] [--return_threshold=900]

Search (Optuna; ``pip install -e ".[sweep]"``)::

    python -m alf_async.bin.sweep --gin_file=ppo_cartpole.gin --root_dir=runs/search \\
        --search=optuna --num_trials=20 --max_parallel=2 --pruner=median \\
        --sweep='PPOLearner.learning_rate=loguniform(1e-5, 1e-2)' \\
        --sweep='PPOLearner.num_epochs=int(2, 10)'

    (--pruner=halving: every trial to a rung, the best 1/--halving_factor on to
    the next, resumed from where they paused; docs/sweeps.md)

Sweep syntax (``--sweep``, repeatable; docs/sweeps.md):

- ``NAME=[v1, v2, ...]``: a gin binding and its values (gin source text).
- ``NAME1,NAME2=[(a1, b1), (a2, b2)]``: tied bindings that vary together.
- a name starting with ``:`` is a label: not passed to gin, it names the run.
- in a search only: ``uniform(a, b)``, ``loguniform(a, b)``, ``int(a, b)``,
  ``choice(v1, v2, ...)``; a list is a choice.

Each run is a ``python -m alf_async.bin.train`` process writing to
``<root_dir>/<run name>`` (a grid: e.g. ``num_envs=8,mode=sync``; a search:
``trial_0003``), on this machine or, with ``--backend=ray``, on a node of a Ray
cluster. Running the same command again skips finished runs and resumes
unfinished ones (a search: its study, ``study.db``). At the end the summary
(``summary.csv``, ``summary.md``) is written and printed; a search also
prints the best trial's bindings, writes them to ``best.gin`` and draws
``search.png``.

Exit status: 0 every run done (a search: complete or pruned); 1 some run
failed or was killed; 2 bad input; 130 stopped by Ctrl-C; 143 stopped by
SIGTERM. Ctrl-C stops the running trainings cleanly (each writes a final
checkpoint); Ctrl-C twice kills them.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence

from absl import flags

from alf_async.bin.common import ExitCode, run_command, define_run_flags
from alf_async.bin.common import user_error as _user_error
from alf_async.sweep.choices import PRUNERS, SAMPLERS
from alf_async.sweep.objective import OBJECTIVES

FLAGS = flags.FLAGS
METRICS = ("auto", "eval_return", "episode_return")
BACKENDS = ("local", "ray")
OPTUNA_REQUIREMENT = "optuna>=4"


@dataclass(frozen=True)
class SearchOptions:
    """A search's flags (see ``define_flags``, whose defaults these are);
    ``search`` None means a grid."""

    search: Optional[str] = None
    num_trials: Optional[int] = None
    objective: str = "final"
    metric: str = "auto"
    pruner: str = "median"
    prune_after_trials: int = 2
    # None: a third of a trial's budget (halving: the budget / halving_factor)
    prune_after_env_steps: Optional[int] = None
    seed: int = 0
    prune_percentile: float = 25.0
    halving_factor: int = 4
    halving_brackets: int = 1


def define_flags() -> None:
    """The command's flags (defined at start-up, not import, to allow importing
    several commands in one process)."""
    define_run_flags()
    flags.DEFINE_multi_string("sweep", None, "a swept binding, e.g. "
                              "'Trainer.num_envs=[32, 64]' or, in a search, "
                              "'PPOLearner.learning_rate=loguniform(1e-5, 1e-3)' (repeatable)")
    flags.DEFINE_string("root_dir", None, "the sweep directory")
    flags.DEFINE_bool("dry_run", False, "print the runs and their commands, run nothing")
    flags.DEFINE_string("search", None, "search instead of a grid: 'optuna' (TPE) or "
                        "'random'")
    flags.DEFINE_integer("num_trials", None, "a search's number of trials")
    flags.DEFINE_string("objective", SearchOptions.objective,
                        "a search's objective, maximised: 'final' "
                        "(the metric's last value) or 'auc' (its mean over env steps)")
    flags.DEFINE_string("objective_metric", SearchOptions.metric,
                        "the metric: 'eval_return', "
                        "'episode_return' (mean of the last 100 training episodes) or "
                        "'auto' (eval_return when the runs evaluate)")
    flags.DEFINE_string("pruner", SearchOptions.pruner, "stop trials that lag: 'median', "
                        "'percentile' (see --prune_percentile), 'successive_halving' "
                        "(asynchronous), 'halving' (synchronous: every trial to a rung, "
                        "the best 1/--halving_factor go on) or 'none'")
    flags.DEFINE_float("prune_percentile", SearchOptions.prune_percentile,
                       "--pruner=percentile: a trial goes on only while it is in the top "
                       "this many percent of the complete trials at the same env steps "
                       "(50 is the median pruner; smaller prunes more)")
    flags.DEFINE_integer("halving_factor", SearchOptions.halving_factor,
                         "--pruner=halving: 1 / the share of a rung's trials that go on, "
                         "and the factor between the env steps of two rungs")
    flags.DEFINE_integer("halving_brackets", SearchOptions.halving_brackets,
                         "--pruner=halving: split the trials into this many successive "
                         "halvings; each bracket's trials are drawn once the one before "
                         "has finished, so that TPE (--search=optuna) learns from it")
    flags.DEFINE_integer("prune_after_trials", SearchOptions.prune_after_trials,
                         "complete trials before pruning starts")
    flags.DEFINE_integer("prune_after_env_steps", SearchOptions.prune_after_env_steps,
                         "env steps a trial runs before it can be pruned (default: a "
                         "third of its budget, Trainer.num_env_steps: early returns are "
                         "mostly noise); --pruner=halving: its first rung (default: the "
                         "budget / --halving_factor)")
    flags.DEFINE_integer("search_seed", SearchOptions.seed, "seeds the search's sampler")
    flags.DEFINE_string("backend", "local", "where runs run: 'local' (this machine) or "
                        "'ray' (a Ray cluster)")
    flags.DEFINE_string("address", None, "--backend=ray: the cluster ('auto', "
                        "'host:port', 'ray://host:port'); unset: a local Ray instance")
    flags.DEFINE_bool("shared_dir", None, "--backend=ray: the sweep directory is at the "
                      "same path on every node (a shared file system), so runs write there; "
                      "otherwise each run works in a node-local copy brought back when it "
                      "ends (default: shared for a local instance only)")


def user_error(message: str) -> int:
    return _user_error(message, command="alf_async.sweep")


@dataclass(frozen=True)
class PlacementOptions:
    """Where runs run (see ``define_flags``)."""

    backend: str = "local"
    address: Optional[str] = None
    shared_dir: Optional[bool] = None
    max_parallel_given: bool = True


def _check_options(search: SearchOptions, placement: PlacementOptions,
                   sweeps: Sequence[str]) -> Optional[str]:
    """The first bad flag value, as an error message (None: all good)."""
    from alf_async.sweep.space import is_distribution

    for flag, value, allowed in (("--objective", search.objective, OBJECTIVES),
                                 ("--objective_metric", search.metric, METRICS),
                                 ("--pruner", search.pruner, PRUNERS),
                                 ("--backend", placement.backend, BACKENDS)):
        if value not in allowed:
            return f"{flag} must be one of {', '.join(allowed)}, got {value!r}"
    if placement.backend == "ray":
        from alf_async.ray_settings import RAY_REQUIREMENT, ray_installed

        if not ray_installed():
            return ("--backend=ray needs Ray, which is not installed; install it with "
                    f"pip install -e \".[ray]\" or pip install \"{RAY_REQUIREMENT}\"")
    elif placement.address or placement.shared_dir is not None:
        return "--address and --shared_dir place runs on a Ray cluster: add --backend=ray"
    if search.search is None:
        for text in sweeps:
            if is_distribution(text):
                return (f"--sweep={text!r} draws from a distribution, which only a search "
                        "does: add --search=optuna (or random) and --num_trials")
        if search.num_trials is not None:
            return "--num_trials is for a search: add --search=optuna (or random)"
        return None
    if search.search not in SAMPLERS:
        return f"--search must be one of {', '.join(SAMPLERS)}, got {search.search!r}"
    if search.num_trials is None or search.num_trials < 1:
        return f"--search needs --num_trials >= 1, got {search.num_trials}"
    if not sweeps:
        return "--search needs at least one --sweep to search over"
    if search.prune_after_trials < 0 or (search.prune_after_env_steps or 0) < 0:
        return "--prune_after_trials and --prune_after_env_steps must be >= 0"
    if search.pruner == "percentile" and not 0 < search.prune_percentile < 100:
        return f"--prune_percentile must be in (0, 100), got {search.prune_percentile}"
    if search.pruner == "halving" and search.halving_factor < 2:
        return f"--halving_factor must be >= 2, got {search.halving_factor}"
    if search.pruner == "halving" and not 1 <= search.halving_brackets <= search.num_trials:
        return (f"--halving_brackets must be between 1 and --num_trials "
                f"({search.num_trials}), got {search.halving_brackets}")
    if importlib.util.find_spec("optuna") is None:
        return ("--search needs Optuna, which is not installed; install it with "
                f"pip install -e \".[sweep]\" or pip install \"{OPTUNA_REQUIREMENT}\"")
    return None


def _pruning_after(search: SearchOptions, env_steps: int,
                   rungs: Optional[Sequence[int]] = None) -> str:
    """When the pruner may act, for the sweep's first line."""
    if search.pruner == "none":
        return ""
    if rungs:
        brackets = (f" in {search.halving_brackets} brackets drawn one after the other"
                    if search.halving_brackets > 1 else "")
        return (f" (rungs at {', '.join(str(r) for r in rungs)} env steps; the best "
                f"1/{search.halving_factor} of each rung go on{brackets})")
    top = f" top {search.prune_percentile:g}%" if search.pruner == "percentile" else ""
    return (f"{top} (from {env_steps} env steps of a trial and {search.prune_after_trials} "
            "complete trial(s) on)")


def _launcher(placement: PlacementOptions):
    if placement.backend == "local":
        return None
    from alf_async.sweep.ray_launch import RayLauncher

    shared = placement.shared_dir
    if shared is None:
        shared = placement.address is None
    return RayLauncher(placement.address, shared)


def sweep(root_dir: str, gin_files: Sequence[str], sweeps: Sequence[str],
          gin_params: Sequence[str] = (), max_parallel: int = 1,
          return_threshold: Optional[float] = None, warmup: Optional[int] = None,
          stop_timeout_s: float = 60.0, dry_run: bool = False,
          search: SearchOptions = SearchOptions(),
          placement: PlacementOptions = PlacementOptions()) -> int:
    """Run the sweep and print its summary; returns the exit status."""
    from alf_async.config import ConfigError, find_gin_file
    from alf_async.sweep.grid import SweepSyntaxError, parse_sweep, run_specs
    from alf_async.reporting.machine import describe_machine
    from alf_async.reporting.run_metrics import MACHINE_FILE, SWEEP_FILE
    from alf_async.sweep.runner import SweepLockedError, SweepRunner
    from alf_async.utils.files import write_json

    if not gin_files:
        return user_error("--gin_file is required")
    if max_parallel < 1:
        return user_error(f"--max_parallel must be >= 1, got {max_parallel}")
    problem = _check_options(search, placement, sweeps)
    if problem:
        return user_error(problem)
    try:
        gin_paths = [find_gin_file(f) for f in gin_files]
        if search.search:
            from alf_async.sweep.space import parse_space
            from alf_async.sweep.trial_config import (check_space, default_objective_metric,
                                                      default_prune_after_env_steps)

            dimensions = parse_space(sweeps)
            check_space(dimensions, gin_paths, gin_params)
            metric = (default_objective_metric(gin_paths, gin_params)
                      if search.metric == "auto" else search.metric)
            prune_after_env_steps = (
                default_prune_after_env_steps(gin_paths, gin_params)
                if search.prune_after_env_steps is None else search.prune_after_env_steps)
            rungs = (_halving_rungs(search, dimensions, gin_paths, gin_params)
                     if search.pruner == "halving" else None)
        else:
            specs = run_specs([parse_sweep(s) for s in sweeps])
    except (ConfigError, SweepSyntaxError) as e:
        return user_error(str(e))
    if dry_run:
        if search.search:
            print(f"{search.search} search, {search.num_trials} trial(s), objective "
                  f"{search.objective} {metric}, pruner {search.pruner}"
                  f"{_pruning_after(search, prune_after_env_steps, rungs)}")
            for dimension in dimensions:
                print(f"  {dimension.describe()}")
        else:
            runner = SweepRunner(root_dir, gin_paths, specs, gin_params)
            for spec in specs:
                print(f"{spec.name}: {' '.join(runner.command(spec))}")
        return 0
    from alf_async.runtime.actor_pool import ActorStartupError

    try:
        launcher = _launcher(placement)
    except ActorStartupError as e:  # it names the instance or --address already
        return user_error(str(e))
    except Exception as e:  # Ray's connection errors have no common base
        return user_error(f"could not start or reach Ray"
                          f"{' at ' + placement.address if placement.address else ''}: {e}")
    resources = None
    if launcher is not None:
        from alf_async.sweep.trial_config import trial_resources

        resources = trial_resources
        if not placement.max_parallel_given:
            per_trial = trial_resources(gin_paths, gin_params).cpus
            max_parallel = max(1, int(launcher.total_cpus // per_trial))
    common = dict(gin_params=gin_params, max_parallel=max_parallel,
                  stop_timeout_s=stop_timeout_s, launcher=launcher, resources=resources)
    if search.search:
        from alf_async.sweep.search import SearchRunner, SearchSettings

        settings = SearchSettings(search.search, search.num_trials, search.objective, metric,
                                  search.pruner, search.prune_after_trials,
                                  prune_after_env_steps, search.seed,
                                  search.prune_percentile)
        if rungs:
            from alf_async.sweep.halving import HalvingSearchRunner

            runner = HalvingSearchRunner(root_dir, gin_paths, dimensions, settings,
                                         rungs=rungs, factor=search.halving_factor,
                                         brackets=search.halving_brackets, **common)
        else:
            runner = SearchRunner(root_dir, gin_paths, dimensions, settings, **common)
        what = (f"{search.search} search of {search.num_trials} trial(s), objective "
                f"{search.objective} {metric}, pruner {search.pruner}"
                f"{_pruning_after(search, prune_after_env_steps, rungs)}")
    else:
        runner = SweepRunner(root_dir, gin_paths, specs, **common)
        what = f"{len(specs)} run(s)"
    os.makedirs(runner.root_dir, exist_ok=True)
    write_json(os.path.join(runner.root_dir, SWEEP_FILE), {
        "gin_files": gin_paths, "sweeps": list(sweeps), "gin_params": list(gin_params),
        "search": search.__dict__ if search.search else None,
        "runs": [] if search.search else [s.name for s in specs]})
    write_json(os.path.join(runner.root_dir, MACHINE_FILE), describe_machine())
    where = launcher.description if launcher else "this machine"
    print(f"[sweep] {what} in {runner.root_dir}, {max_parallel} at a time on {where}",
          file=sys.stderr, flush=True)
    refused: tuple = (SweepLockedError,)
    if search.search:
        from alf_async.sweep.search import StudyMismatchError

        refused += (StudyMismatchError,)
    try:
        outcomes = runner.run()
    except refused as e:
        return user_error(str(e))
    if search.search:
        report_search(runner, outcomes, warmup, return_threshold)
    else:
        report_grid(runner, outcomes, warmup, return_threshold)
    if runner.stop_signal is not None:
        return ExitCode.SIGINT if runner.stop_signal == signal.SIGINT else ExitCode.SIGTERM
    good = ("done", "complete", "pruned")
    return 0 if all(o.status in good for o in outcomes) else 1


def _halving_rungs(search: SearchOptions, dimensions, gin_paths: Sequence[str],
                   gin_params: Sequence[str]) -> List[int]:
    """--pruner=halving's rungs, the first at --prune_after_env_steps or, by
    default, the budget / --halving_factor (two rungs: every trial to a
    factor-th of its budget, the best factor-th of them to the end);
    ``ConfigError`` where the trials have no fixed env-step budget to end at."""
    from alf_async.config import ConfigError
    from alf_async.sweep.halving import halving_rungs
    from alf_async.sweep.trial_config import trial_budget_env_steps

    for dimension in dimensions:
        if "Trainer.num_env_steps" in dimension.names:
            raise ConfigError(f"--sweep={dimension.text!r}: --pruner=halving needs one "
                              "budget for every trial (its last rung); do not search "
                              "Trainer.num_env_steps")
    budget = trial_budget_env_steps(gin_paths, gin_params)
    if budget <= 0:
        raise ConfigError("--pruner=halving needs Trainer.num_env_steps (the trials' "
                          "budget, its last rung); the configuration sets none")
    first_env_steps = (budget // search.halving_factor if search.prune_after_env_steps is None
                       else search.prune_after_env_steps)
    try:
        return halving_rungs(first_env_steps, search.halving_factor, budget)
    except ValueError as e:
        raise ConfigError(f"--pruner=halving: {e} (--prune_after_env_steps sets the first "
                          "rung)") from None


def report_grid(runner, outcomes, warmup, threshold) -> None:
    """Write and print a grid's summary."""
    from alf_async.sweep import summary as sweep_summary

    rows = sweep_summary.collect_rows(outcomes, warmup, threshold)
    csv_path, md_path = sweep_summary.write_summary(runner.root_dir, rows, threshold)
    print(sweep_summary.summary_markdown(rows, threshold))
    print(f"summary: {md_path} and {csv_path}", file=sys.stderr)


def report_search(runner, outcomes, warmup, threshold) -> None:
    """Write and print a search's summary, best trial (best.gin) and figure."""
    from alf_async.reporting.run_metrics import read_metrics
    from alf_async.sweep import summary as sweep_summary
    from alf_async.sweep.objective import metric_curve
    from alf_async.sweep.plot import SEARCH_PLOT, plot_search
    from alf_async.utils.files import write_text

    settings = runner.settings
    described = f"{settings.objective} {settings.metric}"
    rows = sweep_summary.collect_rows(outcomes, warmup, threshold, runner.objectives)
    csv_path, md_path = sweep_summary.write_summary(runner.root_dir, rows, threshold,
                                                    described)
    print(sweep_summary.summary_markdown(rows, threshold, described))
    print(f"summary: {md_path} and {csv_path}", file=sys.stderr)
    names = [o.spec.name for o in outcomes]
    plot_path = plot_search(
        names, {o.spec.name: o.status for o in outcomes}, runner.objectives,
        {o.spec.name: metric_curve(read_metrics(o.run_dir), settings.metric)
         for o in outcomes},
        settings.metric, settings.objective, os.path.join(runner.root_dir, SEARCH_PLOT))
    print(f"figure: {plot_path}", file=sys.stderr)
    best = runner.best()
    if best is None:
        print("no trial is complete yet: no best trial", file=sys.stderr)
        return
    value = runner.objectives[best.spec.name]
    gin_path = os.path.join(runner.root_dir, "best.gin")
    write_text(gin_path, sweep_summary.best_gin_text(best.spec, value, described))
    print(f"\nbest trial: {best.spec.name} ({described} {value:.4g}); its bindings "
          f"(also in {gin_path}):\n{sweep_summary.gin_param_flags(best.spec)}")


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}"))
    if not FLAGS.root_dir:
        sys.exit(user_error("--root_dir is required"))
    search = SearchOptions(FLAGS.search, FLAGS.num_trials, FLAGS.objective,
                           FLAGS.objective_metric, FLAGS.pruner, FLAGS.prune_after_trials,
                           FLAGS.prune_after_env_steps, FLAGS.search_seed,
                           FLAGS.prune_percentile, FLAGS.halving_factor,
                           FLAGS.halving_brackets)
    placement = PlacementOptions(FLAGS.backend, FLAGS.address, FLAGS.shared_dir,
                                 FLAGS["max_parallel"].present)
    sys.exit(sweep(FLAGS.root_dir, FLAGS.gin_file or [], FLAGS.sweep or [],
                   FLAGS.gin_param or [], FLAGS.max_parallel, FLAGS.return_threshold,
                   FLAGS.warmup_iterations, FLAGS.stop_timeout_s, FLAGS.dry_run,
                   search, placement))


def run_main() -> None:
    define_flags()
    run_command(main)


if __name__ == "__main__":
    run_main()

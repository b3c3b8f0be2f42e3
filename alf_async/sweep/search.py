"""A search: trials drawn one at a time by an Optuna study, pruned as they train.

``alf-sweep --search optuna|random --num_trials N`` asks the study for a trial,
runs it as a normal run directory ``<root_dir>/trial_<number>`` (the train
command, started and stopped as a grid's runs are: ``runner.SweepRunner``),
feeds the study the objective so far at every metrics row (``objective.py``;
step = env steps) and, when the pruner says so, stops the trial with SIGTERM:
it writes its final checkpoint and is marked pruned. A trial that ends with
exit 0 is told its objective (complete); one that fails, or ends without a
single value of the metric, is marked failed.

The study lives in ``<root_dir>/study.db`` (SQLite, Optuna's RDB storage:
``optuna-dashboard sqlite:///<root_dir>/study.db`` shows it). Running the
command again resumes it: complete, pruned and failed trials stay as they are;
a trial left running by an interrupted sweep (Ctrl-C, SIGTERM, a killed sweep)
keeps its number and parameters and resumes from its last checkpoint; new
trials are drawn until the study holds N trials. So no trial is lost or run
twice.

Samplers: ``optuna`` is Optuna's TPE over all the dimensions together
(multivariate): the first third of the study's trials (at least one, at most
10, Optuna's own default) are drawn at random, then each from the trials so
far (Optuna's default of 10 random trials would leave a search of 12 or 20
trials mostly random); ``random`` draws every trial
independently. Each invocation seeds its sampler from ``seed`` and the number
of trials already in the study, so a resumed study does not draw its first
trials again. Pruners: ``median`` (Optuna's MedianPruner: stop a trial whose
best objective so far is below the median of the complete trials at the same
env steps), ``percentile`` (the same test against the ``prune_percentile``-th
best percentile: 25 keeps only trials in the top quarter), and
``successive_halving`` (asynchronous successive halving, with env steps as the
resource); each acts only after ``prune_after_trials``
trials are complete and once a trial has ``prune_after_env_steps`` env steps.
``halving`` (synchronous successive halving: every trial paused at a rung
until all have reached it) is ``halving.HalvingSearchRunner``.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import optuna
from optuna.trial import Trial, TrialState

from alf_async.reporting.run_metrics import parse_metrics_lines, read_metrics
from alf_async.sweep.grid import RunSpec
from alf_async.sweep.objective import Curve, metric_curve, objective_value
from alf_async.sweep.runner import ActiveRun, RunOutcome, SweepRunner
from alf_async.sweep.space import Dimension, optuna_distribution, trial_params

STUDY_FILE = "study.db"
STUDY_NAME = "alf_sweep"
# Where the study keeps what the sweep needs to resume it.
RUN_NAME_ATTR = "run_dir"
OBJECTIVE_ATTR = "objective_at_stop"


@dataclass(frozen=True)
class SearchSettings:
    """How the search draws, judges and prunes trials (``alf-sweep`` flags).

    Args:
        sampler: "optuna" (TPE) or "random".
        num_trials: trials the study holds when the search is done.
        objective: "final" or "auc" (``objective.py``).
        metric: the metrics key the objective reads (``eval_return`` or
            ``episode_return``).
        pruner: "median", "percentile", "successive_halving", "halving" or "none".
        prune_after_trials: complete trials before the pruner acts.
        prune_after_env_steps: env steps a trial runs before it can be pruned.
        seed: seeds the sampler.
        prune_percentile: the "percentile" pruner's P in (0, 100): a trial goes
            on only while its best objective so far is in the top P percent of
            the complete trials' objectives at the same env steps.
    """

    sampler: str
    num_trials: int
    objective: str
    metric: str
    pruner: str
    prune_after_trials: int
    prune_after_env_steps: int
    seed: int
    prune_percentile: float = 25.0


def trial_name(number: int) -> str:
    """A trial's run directory name."""
    return f"trial_{number:04d}"


def study_storage(root_dir: str) -> str:
    """The study's Optuna storage URL (an SQLite file in the sweep directory)."""
    return "sqlite:///" + os.path.join(os.path.abspath(root_dir), STUDY_FILE)


class StudyMismatchError(ValueError):
    """The sweep directory holds a study of another search space or objective."""


def open_study(root_dir: str, settings: SearchSettings, dimensions: Sequence[Dimension]):
    """Create or load the sweep directory's study; ``StudyMismatchError`` if it
    was made for another space, objective or metric."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(study_storage(root_dir))
    existing = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    pruner = _pruner(settings)
    # the sampler is seeded below, once the number of trials is known
    study = optuna.create_study(storage=storage, study_name=STUDY_NAME,
                                direction="maximize", pruner=pruner,
                                load_if_exists=True)
    identity = {"space": [d.text for d in dimensions], "objective": settings.objective,
                "metric": settings.metric}
    if STUDY_NAME in existing:
        saved = {k: study.user_attrs.get(k) for k in identity}
        if saved != identity:
            raise StudyMismatchError(
                f"{os.path.join(root_dir, STUDY_FILE)} holds a study of another search "
                f"({saved}); this command searches {identity}: use another --root_dir, "
                "or the same --sweep and --objective as before")
    else:
        for key, value in identity.items():
            study.set_user_attr(key, value)
    seed = settings.seed + len(study.trials)
    study.sampler = (optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=random_trials(settings.num_trials), multivariate=True)
        if settings.sampler == "optuna" else optuna.samplers.RandomSampler(seed=seed))
    return study


def random_trials(num_trials: int) -> int:
    """How many of a TPE study's first trials are drawn at random."""
    return max(1, min(10, num_trials // 3))


def _pruner(settings: SearchSettings):
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_after_trials,
                                           n_warmup_steps=settings.prune_after_env_steps)
    if settings.pruner == "percentile":
        return optuna.pruners.PercentilePruner(settings.prune_percentile,
                                               n_startup_trials=settings.prune_after_trials,
                                               n_warmup_steps=settings.prune_after_env_steps)
    if settings.pruner == "successive_halving":
        return WarmedPruner(optuna.pruners.SuccessiveHalvingPruner(),
                            settings.prune_after_trials, settings.prune_after_env_steps)
    # "none", and "halving", whose trials the sweep itself stops at each rung
    return optuna.pruners.NopPruner()


class WarmedPruner(optuna.pruners.BasePruner):
    """``inner``, acting only after ``trials`` complete trials and once a trial
    has ``env_steps`` env steps (successive halving has no such settings)."""

    def __init__(self, inner: "optuna.pruners.BasePruner", trials: int, env_steps: int):
        self.inner, self.trials, self.env_steps = inner, trials, env_steps

    def prune(self, study, trial) -> bool:
        step = trial.last_step
        if step is None or step < self.env_steps:
            return False
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return len(complete) >= self.trials and self.inner.prune(study, trial)


class SearchRunner(SweepRunner):
    """Runs a search's trials (see the module docstring), ``max_parallel`` at a time.

    Args (beyond ``SweepRunner``'s; its ``specs`` are not used):
        dimensions: the search space (``space.parse_space``).
        settings: how trials are drawn, judged and pruned.
    """

    def __init__(self, root_dir: str, gin_files: Sequence[str],
                 dimensions: Sequence[Dimension], settings: SearchSettings, **kwargs):
        super().__init__(root_dir, gin_files, [], **kwargs)
        self.dimensions = list(dimensions)
        self.settings = settings
        self.study = None
        self._trials: Dict[str, object] = {}  # run name -> optuna Trial
        self._rows: Dict[str, List[str]] = {}
        self._reported: Dict[str, int] = {}  # run name -> last step reported
        self.objectives: Dict[str, Optional[float]] = {}

    # -- the study --------------------------------------------------------------
    def _spec(self, frozen) -> RunSpec:
        return RunSpec(trial_name(frozen.number), trial_params(self.dimensions, frozen.params))

    def _prepare(self) -> None:
        self.study = open_study(self.root_dir, self.settings, self.dimensions)
        for frozen in sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number):
            spec = self._spec(frozen)
            run_dir = self.run_dir(spec)
            self._load_trial(spec, frozen)
            if frozen.state in (TrialState.RUNNING, TrialState.WAITING):
                # left running by an interrupted sweep: resume it (same number and params)
                self._trials[spec.name] = Trial(self.study, frozen._trial_id)
                self._reported[spec.name] = max(frozen.intermediate_values, default=-1)
                self._resume_running(spec, run_dir)
                continue
            status = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned"}.get(
                frozen.state, "failed")
            self.outcomes[spec.name] = RunOutcome(spec, run_dir, status, skipped=True)
            self.objectives[spec.name] = (frozen.value if frozen.state == TrialState.COMPLETE
                                          else frozen.user_attrs.get(OBJECTIVE_ATTR))
            self.log(f"[sweep] {spec.name}: {status} earlier, skipped")

    def _load_trial(self, spec: RunSpec, frozen) -> None:
        """What the sweep keeps of a trial found in the study (a halving
        search: its rung values)."""

    def _resume_running(self, spec: RunSpec, run_dir: str) -> None:
        """A trial the study holds as running: queue it to resume."""
        self.outcomes[spec.name] = RunOutcome(spec, run_dir, "pending")
        self._queue.append(spec)

    def _total(self) -> int:
        return len(self._queue) + max(0, self.settings.num_trials - len(self.study.trials))

    def _more_to_come(self) -> bool:
        return bool(self._queue) or len(self.study.trials) < self.settings.num_trials

    def _next_spec(self) -> Optional[RunSpec]:
        if self._queue:
            return self._queue.popleft()
        if len(self.study.trials) >= self.settings.num_trials:
            return None
        trial = self.study.ask({d.key: optuna_distribution(d) for d in self.dimensions})
        spec = RunSpec(trial_name(trial.number), trial_params(self.dimensions, trial.params))
        trial.set_user_attr(RUN_NAME_ATTR, spec.name)
        self._trials[spec.name] = trial
        self._reported[spec.name] = -1
        self.outcomes[spec.name] = RunOutcome(spec, self.run_dir(spec), "pending")
        return spec

    # -- feeding the pruner -----------------------------------------------------------
    def _on_started(self, spec: RunSpec) -> None:
        self._rows[spec.name] = []  # a new process reads its metrics file from the start

    def _curve(self, active: ActiveRun, rows: str) -> Optional[Curve]:
        """The trial's (env steps, metric) so far with ``rows`` added, each new
        point reported to the study; None once the sweep is stopping it."""
        name = active.spec.name
        lines = self._rows.setdefault(name, [])
        lines.extend(rows.splitlines())
        if active.stop_reason:
            return None
        curve = metric_curve(parse_metrics_lines(lines), self.settings.metric)
        trial = self._trials[name]
        for i, (steps, _) in enumerate(curve):
            if steps > self._reported[name]:
                trial.report(objective_value(curve[:i + 1], self.settings.objective), steps)
                self._reported[name] = steps
        return curve

    def _on_metrics(self, active: ActiveRun, rows: str) -> None:
        name = active.spec.name
        reported_before = self._reported[name]
        curve = self._curve(active, rows)
        if curve is None:
            return
        trial = self._trials[name]
        if self._reported[name] > reported_before and trial.should_prune():
            value = objective_value(curve, self.settings.objective)
            active.stop_reason = (f"pruned at {self._reported[name]} env steps, "
                                  f"{self.settings.objective} {self.settings.metric} "
                                  f"{value:.1f}")
            trial.set_user_attr(OBJECTIVE_ATTR, value)
            self.log(f"[sweep] {name}: {active.stop_reason}; stopping it (final checkpoint)")
            active.process.send_signal(signal.SIGTERM)

    def _on_finished(self, outcome: RunOutcome, active: ActiveRun) -> None:
        name = outcome.spec.name
        trial = self._trials[name]
        value = objective_value(metric_curve(read_metrics(outcome.run_dir),
                                             self.settings.metric), self.settings.objective)
        self.objectives[name] = value
        if active.stop_reason:
            self.study.tell(trial, state=TrialState.PRUNED)
            return
        if self.stop_signal is not None and outcome.status != "done":
            # stopped (or disturbed while starting) by the sweep's own stop
            self.log(f"[sweep] {name}: stays running in the study; the next run of this "
                     "command resumes it")
            return
        if outcome.status == "done" and value is not None:
            outcome.status = "complete"
            self.study.tell(trial, value)
            self.log(f"[sweep] {name}: {self.settings.objective} {self.settings.metric} "
                     f"{value:.2f}")
            return
        if outcome.status == "done":
            self.log(f"[sweep] {name}: no {self.settings.metric} in its metrics (no "
                     "episode ended / no evaluation); marked failed")
        outcome.status = "failed"
        self.study.tell(trial, state=TrialState.FAIL)

    def best(self) -> Optional[RunOutcome]:
        """The complete trial with the best objective (None if none)."""
        complete = [o for o in self.outcomes.values() if o.status == "complete"
                    and self.objectives.get(o.spec.name) is not None]
        return max(complete, key=lambda o: self.objectives[o.spec.name], default=None)

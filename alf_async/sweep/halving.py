"""A search pruned by synchronous successive halving (``--pruner halving``).

Every trial of the study trains to the first rung (``--prune_after_env_steps``
env steps, by default the budget / the factor) and is paused there: the
sweep starts it with the rung as its budget (``Trainer.num_env_steps``), so
that the train command stops at the rung by itself with a final checkpoint.
When every trial has reached the rung, they are ranked by the objective of
their curve so far; the best ``1 / factor`` of them (at least one) resume from
their checkpoints to the next rung (the rung's env steps times ``factor``; a
larger budget is a change a resumed run allows), the others are pruned. The last
rung is the trials' budget (``Trainer.num_env_steps``): the trials that reach
it train to the end and complete. With 12 trials of 300k env steps and
factor 4, the first rung is at 75k, and the 3 best there go on to 300k:
1.575M env steps, 0.44 of the 3.6M the 12 trials cost unpruned.

This is Hyperband's inner loop (Li et al., 2018), synchronous, so that every
trial of a rung is judged against the same set, unlike the asynchronous
``successive_halving`` pruner, which judges a trial against those that reached
the rung before it and so keeps most of the first ones. A trial is never run
twice: the promoted ones go on from where they stopped. As every trial of a
bracket is drawn before any is judged, the sampler has no results to learn
from within one bracket: with one bracket, ``optuna`` (TPE) draws as
``random`` does.

With ``brackets`` > 1 the study's trials are split by number into that
many successive halvings, and a bracket's trials are drawn only once the
bracket before it has finished: TPE then draws them from the earlier
brackets' results (pruned trials count with their value at the rung where
they stopped), the model-based Hyperband of BOHB (Falkner et al., 2018),
run one bracket at a time.

Resuming after an interrupted sweep: each trial's values at the rungs it has
reached are kept in the study (a user attribute of the trial), and which
trials go on at each rung is worked out from them again, so the sweep picks up
at the rung it was at: a paused trial waits for its rung, one that was stopped
on its way to a rung resumes from its last checkpoint.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

from optuna.trial import TrialState

from alf_async.reporting.run_metrics import read_metrics
from alf_async.sweep.grid import RunSpec
from alf_async.sweep.objective import metric_curve, objective_value
from alf_async.sweep.runner import STATUS_FILE, ActiveRun, RunOutcome
from alf_async.sweep.search import OBJECTIVE_ATTR, SearchRunner
from alf_async.utils.files import read_json, write_json

RUNG_VALUES_ATTR = "rung_values"  # {"0": objective at rung 0, ...}
# Statuses of a trial that the halving can start (again).
STARTABLE = ("pending", "paused")
# Statuses of a trial that takes no further part.
OUT = ("failed", "killed")


def halving_rungs(first_env_steps: int, factor: int, budget_env_steps: int) -> List[int]:
    """The env steps of each rung: ``first_env_steps`` times ``factor`` to the
    power 0, 1, ... while below the budget, then the budget itself.

    >>> halving_rungs(100000, 4, 300000)
    [100000, 300000]
    """
    if factor < 2:
        raise ValueError(f"the halving factor must be >= 2, got {factor}")
    if not 0 < first_env_steps < budget_env_steps:
        raise ValueError(f"the first rung ({first_env_steps} env steps) must be above 0 "
                         f"and below the trials' budget ({budget_env_steps})")
    rungs, steps = [], first_env_steps
    while steps < budget_env_steps:
        rungs.append(steps)
        steps *= factor
    return rungs + [budget_env_steps]


class HalvingSearchRunner(SearchRunner):
    """A ``SearchRunner`` whose trials are stopped and resumed rung by rung (see
    the module docstring).

    Args (beyond ``SearchRunner``'s):
        rungs: env steps of each rung, the last the trials' budget
            (``halving_rungs``).
        factor: 1 / the share of a rung's trials that go on to the next.
        brackets: the study's trials split, by number, into this many
            successive halvings; a bracket's trials are drawn when the one
            before it has finished, so that the sampler (TPE) learns from it.
    """

    def __init__(self, *args, rungs: Sequence[int], factor: int, brackets: int = 1,
                 **kwargs):
        super().__init__(*args, **kwargs)
        if len(rungs) < 2:
            raise ValueError(f"halving needs at least two rungs, got {list(rungs)}")
        if brackets < 1:
            raise ValueError(f"halving needs at least one bracket, got {brackets}")
        self.rungs = list(rungs)
        self.factor = factor
        self.brackets = brackets
        self._rung_values: Dict[str, Dict[int, float]] = {}
        self._numbers: Dict[str, int] = {}  # trial name -> its number in the study

    # -- the study --------------------------------------------------------------
    def _load_trial(self, spec: RunSpec, frozen) -> None:
        saved = frozen.user_attrs.get(RUNG_VALUES_ATTR) or {}
        self._rung_values[spec.name] = {int(k): float(v) for k, v in saved.items()}
        self._numbers[spec.name] = frozen.number

    def _resume_running(self, spec: RunSpec, run_dir: str) -> None:
        # the plan decides whether it trains on now or waits for its rung
        self.outcomes[spec.name] = RunOutcome(spec, run_dir, "paused")

    def _next_spec(self) -> Optional[RunSpec]:
        if self._queue:
            return self._queue.popleft()
        todo, drawing = self._plan()
        if drawing:
            spec = super()._next_spec()  # draws the bracket's next trial
            self._rung_values.setdefault(spec.name, {})
            self._numbers[spec.name] = self._trials[spec.name].number
            return spec
        self._queue.extend(self.outcomes[name].spec for name in todo
                           if self.outcomes[name].status in STARTABLE)
        return self._queue.popleft() if self._queue else None

    def _more_to_come(self) -> bool:
        if self._queue:
            return True
        todo, drawing = self._plan()
        return drawing or any(self.outcomes[name].status in STARTABLE for name in todo)

    def _bracket_size(self) -> int:
        return -(-self.settings.num_trials // self.brackets)

    def _plan(self) -> Tuple[List[str], bool]:
        """(the trials of the first bracket not finished still to reach its
        current rung, none when every bracket has; whether that bracket still
        draws trials). A bracket's trials are drawn once the brackets before it
        have finished, so that the sampler draws them from those results."""
        size = self._bracket_size()
        for bracket in range(-(-self.settings.num_trials // size)):
            names = [name for name in self.outcomes if self._numbers[name] // size == bracket]
            drawing = len(names) < min(size, self.settings.num_trials - bracket * size)
            todo = self._bracket_plan(names, judge=not drawing)
            if todo or drawing:
                return todo, drawing
        return [], False

    def _bracket_plan(self, names: Sequence[str], judge: bool) -> List[str]:
        """The trials of one bracket still to reach its current rung. Works the
        rungs out from the values recorded so far, pruning the trials that a
        finished rung leaves out (once each); nothing is judged unless
        ``judge`` (every trial of the bracket drawn)."""
        taking_part = [name for name in names if self.outcomes[name].status not in OUT]
        for rung in range(len(self.rungs) - 1):
            # a trial that has reached the rung counts once its process has stopped
            missing = [name for name in taking_part
                       if rung not in self._rung_values.get(name, {})
                       or self.outcomes[name].status == "running"]
            if missing or not judge:
                return missing
            ranked = sorted(taking_part, key=lambda name: -self._rung_values[name][rung])
            keep = max(1, len(ranked) // self.factor)
            for name in ranked[keep:]:
                self._prune(name, rung, keep, len(ranked))
            taking_part = [name for name in ranked[:keep]
                           if self.outcomes[name].status != "pruned"]
        return [name for name in taking_part
                if self.outcomes[name].status not in ("complete", "done")]

    def _prune(self, name: str, rung: int, keep: int, of: int) -> None:
        outcome = self.outcomes[name]
        if outcome.status in ("pruned", "complete", "running"):
            return  # (a trial that went on from a rung is never judged there again)
        value = self._rung_values[name][rung]
        outcome.status = "pruned"
        self.objectives[name] = value
        trial = self._trials[name]
        trial.set_user_attr(OBJECTIVE_ATTR, value)
        self.study.tell(trial, state=TrialState.PRUNED)
        path = os.path.join(outcome.run_dir, STATUS_FILE)
        record = read_json(path) or {}
        record["status"] = "pruned"
        write_json(path, record)
        self.log(f"[sweep] {name}: pruned at rung {rung} ({self.rungs[rung]} env steps): "
                 f"{self.settings.objective} {self.settings.metric} {value:.1f}, not in "
                 f"the best {keep} of {of}")

    # -- training trials to a rung ---------------------------------------------------
    def _target(self, name: str) -> int:
        """The rung a trial trains to next: the first it has no value for."""
        values = self._rung_values.get(name, {})
        return next((rung for rung in range(len(self.rungs) - 1) if rung not in values),
                    len(self.rungs) - 1)

    def arguments(self, spec: RunSpec) -> List[str]:
        # the train command stops at the rung by itself, with a final checkpoint;
        # resuming with a larger budget is an allowed change (config_changes.py)
        return super().arguments(spec) + [
            f"--gin_param=Trainer.num_env_steps={self.rungs[self._target(spec.name)]}"]

    def _on_metrics(self, active: ActiveRun, rows: str) -> None:
        self._curve(active, rows)  # the study sees each trial's curve as it trains

    def _on_finished(self, outcome: RunOutcome, active: ActiveRun) -> None:
        name = outcome.spec.name
        rung = self._target(name)
        if outcome.status != "done" or rung == len(self.rungs) - 1:
            super()._on_finished(outcome, active)
            return
        value = objective_value(metric_curve(read_metrics(outcome.run_dir),
                                             self.settings.metric), self.settings.objective)
        if value is None:
            super()._on_finished(outcome, active)  # no value of the metric: failed
            return
        values = self._rung_values[name]
        values[rung] = value
        self._trials[name].set_user_attr(
            RUNG_VALUES_ATTR, {str(k): v for k, v in sorted(values.items())})
        self.objectives[name] = value
        outcome.status = "paused"
        self._record(outcome, outcome.elapsed_s or 0.0)
        self.log(f"[sweep] {name}: reached rung {rung} ({self.rungs[rung]} env steps) with "
                 f"{self.settings.objective} {self.settings.metric} {value:.1f}; paused "
                 "until every trial has reached it")

"""The seam between a run's life cycle and the way it trains.

The life cycle (``training.trainer.Trainer``) owns what every run has: run
directory, counters, checkpoints, metrics, signals, cleanup. A ``TrainingLoop``
owns one way of turning env steps into learner updates. The life cycle calls it:

    loop.restore(state, counters)        # only when resuming from a checkpoint
    loop.start(run)                      # children started, ready to train
    loop.run(run)                        # until run.budget_reached()
    loop.stop(run)                       # from a finally: the state to checkpoint
    ... final checkpoint (loop.checkpoint_state()) ...
    loop.close()                         # from a finally: no child, no block left

A loop reaches the run only through ``RunContext``, never the life cycle's
modules (tests/test_layers.py checks this).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, Mapping, Optional, Protocol

from alf_async.iteration_record import NAN, IterationRecord
from alf_async.kl_watch import KLWatch
from alf_async.metrics import MetricsRecorder
from alf_async.settings import TrainerSettings
from alf_async.signals import GracefulStop

if TYPE_CHECKING:
    from alf_async.training.evaluation import Evaluation


@dataclass
class RunContext:
    """The run as a loop sees it. counters: "iteration", "env_steps", "episodes",
    "wall_time" (s), advanced by the loop, saved by the life cycle. signals:
    ``signals.stopping = True`` makes a signal kill at once. gin_config: for
    child processes. save_checkpoint: writes one now, returns its path.
    startup_s: launch until the loop was ready (set by its ``start``).
    evaluation: the run's periodic evaluation (None without), told of every
    row."""

    settings: TrainerSettings
    root_dir: str
    counters: Dict[str, float]
    metrics: MetricsRecorder
    signals: GracefulStop
    gin_config: str
    resumed: bool
    save_checkpoint: Callable[[], str]
    evaluation: Optional["Evaluation"] = None
    startup_s: float = NAN
    _first_iteration: int = 0
    _clock_start: float = 0.0
    _wall_at_start: float = 0.0
    # Warns when the policy moves too far per iteration, several in a row
    # (``kl_watch``; gin's ``KLWatch.*``).
    _kl_watch: KLWatch = field(default_factory=KLWatch)

    def budget_reached(self) -> bool:
        """Whether the iteration or env-step budget is reached."""
        return self.settings.budget_reached(self.counters["iteration"],
                                            self.counters["env_steps"])

    def progress(self) -> float:
        """The share of the budget used so far, 0..1 (``TrainerSettings.progress``)."""
        return self.settings.progress(int(self.counters["iteration"]),
                                      int(self.counters["env_steps"]))

    def start_clock(self) -> None:
        """Training starts now: ``wall_time`` counts from here (plus earlier runs),
        and the next iteration's row carries ``startup_s``."""
        self._clock_start = time.monotonic()
        self._wall_at_start = float(self.counters["wall_time"])
        self._first_iteration = int(self.counters["iteration"]) + 1

    def update_wall_time(self, now: float) -> None:
        """Set ``counters["wall_time"]`` for the monotonic time ``now``."""
        self.counters["wall_time"] = self._wall_at_start + (now - self._clock_start)

    def record(self, T: float, env_steps: int, **fields: Any) -> IterationRecord:
        """Record a metrics row of the current counters (file, TensorBoard) and
        return it. T: seconds since the previous row; env_steps: this row's;
        ``fields``: the rest of the ``IterationRecord``."""
        s, c = self.settings, self.counters
        iteration = int(c["iteration"])
        if self.evaluation is not None:
            self.evaluation.collect(self.metrics)  # results that arrived go in this row
        record = self.metrics.record(IterationRecord(
            iteration=iteration, env_steps=int(c["env_steps"]), episodes=int(c["episodes"]),
            wall_time=c["wall_time"], num_envs=s.num_envs, num_actors=s.num_actors,
            unroll_length=s.unroll_length, T=T, EPS=s.num_envs / T if T > 0 else NAN,
            env_steps_per_s=env_steps / T if T > 0 else NAN,
            startup_s=self.startup_s if iteration == self._first_iteration else NAN,
            **fields))
        if self.evaluation is not None:
            self.evaluation.after_iteration(c, self.metrics)
        warning = self._kl_watch.observe(iteration, record.learner)
        if warning:
            logging.getLogger("alf_async").warning("%s", warning)
        return record

    def console(self, record: IterationRecord, force: bool = False) -> None:
        """The progress line (every few seconds, or now with ``force``)."""
        self.metrics.console(record, self.settings.num_env_steps,
                             self.settings.num_iterations, force=force)

    def iteration(self) -> ContextManager[None]:
        """A block no signal interrupts (``GracefulStop.iteration``)."""
        return self.signals.iteration()


class TrainingLoop(Protocol):
    """One way of training, driven by the life cycle in the order of the module
    docstring. ``learner`` (PPOLearner, SACLearner): the checkpoint's ``learner``
    block (``state_dict``, ``load_state_dict``, ``all_finite``)."""

    learner: Any

    def restore(self, state: Mapping[str, Any], counters: Mapping[str, float]) -> None:
        """Take the loop's checkpoint blocks (learner and counters restored)."""

    def checkpoint_state(self) -> ContextManager[Dict[str, Any]]:
        """Yields the loop's checkpoint blocks; the learner is consistent inside."""

    def updates(self) -> int:
        """Learner updates so far (no final checkpoint if the newest has as many)."""

    def start(self, run: RunContext) -> None:
        """Start the loop's children and resources; return when ready to train."""

    def run(self, run: RunContext) -> None:
        """Train until ``run.budget_reached()``; raise on a failure."""

    def stop(self, run: RunContext) -> None:
        """Bring the loop to a state worth checkpointing (every path)."""

    def close(self) -> None:
        """End every child process, release every resource; safe to call twice."""


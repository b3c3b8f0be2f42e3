"""The Hogwild loop: N worker processes training one set of shared networks.

``Trainer.runtime = "hogwild"`` (docs/hogwild.md). The learner's networks are
shared (``hogwild.shared_state.GlobalState``); N workers (``hogwild.workers``),
each with its own K envs, learner step and optimizer, train them. The loop only
listens: each ``WorkerProgress`` is one iteration (a metrics row). It grants an
iteration only where the budget still needs one (those in flight counted), so a
run ends exactly on ``Trainer.num_iterations`` and within one batch of
``Trainer.num_env_steps``. A checkpoint holds the global networks and every
worker's optimizer state (asked for, or the last known); a dead or silent worker
(``Trainer.actor_timeout_s``) is restarted from them, up to
``Trainer.max_actor_restarts`` times. Resumed SAC workers refill empty buffers.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from typing import Any, Deque, Dict, Iterator, Mapping, Optional, Set

from alf_async.hogwild import messages
from alf_async.hogwild.shared_state import GlobalState
from alf_async.hogwild.worker import from_bytes
from alf_async.hogwild.workers import WorkerGroup
from alf_async.env_failure_log import EnvFailureReporter
from alf_async.iteration_record import NAN, IterationRecord
from alf_async.runtime.actor_pool import check_restart_allowed, last_line
from alf_async.settings import HogwildSettings, ReplaySettings, TrainerSettings
from alf_async.training.loop import RunContext
from alf_async.utils.process import describe_exit, seconds_since_process_start
from alf_async.utils.validation import ConfigError

logger = logging.getLogger("alf_async")
LOCK_FILE = "hogwild.lock"  # the sync lock's file in the run directory, during a run


class HogwildLoop:
    """Trains PPO or SAC with N = ``Trainer.num_actors`` Hogwild workers (a
    ``TrainingLoop``) on the networks of ``learner``; ``replay``: SAC's settings
    (None for PPO), a buffer of ``Replay.capacity`` per worker."""

    def __init__(self, settings: TrainerSettings, learner: Any, hogwild: HogwildSettings,
                 replay: Optional[ReplaySettings]):
        self.settings, self.learner = settings, learner
        self.hogwild, self.replay_settings = hogwild, replay
        self.global_state: Optional[GlobalState] = None
        self.workers: Optional[WorkerGroup] = None
        self.worker_states: Dict[int, Dict[str, Any]] = {}  # w -> local_state()
        self.worker_totals: Dict[int, Dict[str, float]] = {
            w: {"env_steps": 0, "gradient_steps": 0} for w in range(settings.num_actors)}
        self.gradient_steps_total = self.restarts = self.env_failures = 0
        self.failure_log = EnvFailureReporter()  # the log lines of env failures
        self._returns: Dict[int, Deque[float]] = {
            w: collections.deque(maxlen=100) for w in range(settings.num_actors)}
        self._run: Optional[RunContext] = None
        self._lock_path: Optional[str] = None
        self._awaiting_states: Optional[Set[int]] = None
        self._states_asked_at = self._last_end = 0.0
        self._busy: Set[int] = set()  # workers running a granted iteration
        self._granting = self._checkpoint_postponed = self._completed = False
        self._record_now: Optional[IterationRecord] = None

    def updates(self) -> int:
        return self.gradient_steps_total

    # -- checkpoints ----------------------------------------------------------
    @contextlib.contextmanager
    def checkpoint_state(self) -> Iterator[Dict[str, Any]]:
        """The global networks and normalizer, read under the sync lock (a
        "synced" push is never half in), as a complete learner (worker 0's
        optimizer, the run's update counts: ``play`` sees a trained learner);
        every worker's own state under ``hogwild``."""
        learner = self.learner
        if 0 in self.worker_states:
            learner.load_local_state(self.worker_states[0])
        if self.settings.off_policy:
            learner.gradient_steps = self.gradient_steps_total
        elif self._run is not None:
            learner.iteration = int(self._run.counters["iteration"])
        state = {"hogwild": {
            "mode": self.hogwild.mode,
            "workers": {str(w): s for w, s in self.worker_states.items()},
            "worker_totals": {str(w): dict(t) for w, t in self.worker_totals.items()},
            "gradient_steps_total": self.gradient_steps_total}}
        if self.global_state is None:
            yield state
            return
        with self.global_state.locked():
            self.global_state.load_normalizer_into(learner)
            yield state

    def restore(self, state: Mapping[str, Any], counters: Mapping[str, float]) -> None:
        saved = state.get("hogwild")
        if saved is None:
            raise ConfigError("the run directory's checkpoint was written by the "
                              "actor/learner runtime; a Hogwild run cannot resume it "
                              "(use a new --root_dir)")
        if saved.get("mode") != self.hogwild.mode:
            logger.info("Hogwild.mode changed since the checkpoint: %s -> %s",
                        saved.get("mode"), self.hogwild.mode)
        self.worker_states = {int(w): v for w, v in saved.get("workers", {}).items()
                              if int(w) < self.settings.num_actors}
        for w, totals in saved.get("worker_totals", {}).items():
            if int(w) in self.worker_totals:
                self.worker_totals[int(w)] = {k: float(v) for k, v in totals.items()}
        self.gradient_steps_total = int(saved.get("gradient_steps_total", 0))
        if self.settings.off_policy:
            logger.info("Hogwild SAC workers resume with empty replay buffers: each "
                        "collects its share of Replay.learning_starts=%d steps again "
                        "before training", self.replay_settings.learning_starts)

    # -- start and end ----------------------------------------------------------
    def start(self, run: RunContext) -> None:
        s, self._run = self.settings, run
        self._lock_path = os.path.join(run.root_dir, LOCK_FILE)
        self.global_state = GlobalState.share(self.learner, self._lock_path)
        self.workers = WorkerGroup(s, self.replay_settings, self.hogwild, self.global_state,
                                   run.gin_config)
        logger.info("starting %d Hogwild worker(s) (%s mode) x %d envs, %d env workers "
                    "and %d env split(s) each, unroll_length %d%s", s.num_actors,
                    self.hogwild.mode, s.num_envs, s.num_env_workers, s.env_splits,
                    s.unroll_length,
                    ", resumed" if run.resumed else "")
        for w in range(s.num_actors):
            self.workers.spawn(w, 0, int(run.counters["iteration"]),
                               self.worker_states.get(w))
        self.workers.wait_until_ready()
        run.startup_s = seconds_since_process_start()
        logger.info("start-up took %.1f s (launch of this process until every worker was "
                    "ready)", run.startup_s)

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
        if self.global_state is not None:
            self.global_state.close()
            self.global_state = None
        if self._lock_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lock_path)

    # -- the loop -------------------------------------------------------------
    def run(self, run: RunContext) -> None:
        run.start_clock()
        self._last_end = time.monotonic()
        self._granting = True
        for w in list(self.workers.handles):
            self._grant(w)
        while not run.budget_reached():
            self._poll(run, timeout=1.0)
            self._check_workers(run)
        self._completed = True

    def _poll(self, run: RunContext, timeout: float) -> None:
        """Handle every message that arrives within ``timeout`` seconds."""
        for w in self.workers.readable(timeout=timeout):
            with run.iteration():  # a signal never cuts a message (or a checkpoint) in two
                message = self.workers.read(w)
                if message is not None and not isinstance(message, messages.WorkerFailed):
                    self._handle(run, w, message)
            if isinstance(message, messages.WorkerFailed):  # restarting may take a while:
                self._restart(  # signals are not held back meanwhile
                    w, f"Hogwild worker {w} failed:\n{message.traceback}",
                    fatal=message.env_error and self.settings.fatal_env_errors)
            elif message is None:  # the process is gone
                process = self.workers.handles[w].process
                process.join(2.0)
                self._restart(w, f"Hogwild worker {w} (pid {process.pid}) died "
                                 f"({describe_exit(process.exitcode)})")

    def _handle(self, run: RunContext, w: int, message: Any) -> None:
        if isinstance(message, messages.WorkerProgress):
            self._on_progress(run, message)
            if run.counters["iteration"] % self.settings.checkpoint_interval == 0:
                self._ask_for_states()
        elif isinstance(message, messages.WorkerState):
            self.worker_states[w] = from_bytes(message.state)
            if self._awaiting_states is not None:
                self._awaiting_states.discard(w)
                self._maybe_checkpoint()

    def _grant(self, w: int) -> None:
        """Let worker ``w`` run one more iteration if the budget needs it (the
        batches in flight counted): the run ends exactly on an iteration budget
        and within one batch of an env-step budget."""
        s, c = self.settings, self._run.counters
        busy = len(self._busy)
        granted = (int(c["iteration"]) + busy, int(c["env_steps"]) + busy * s.steps_per_batch)
        if not self._granting or w in self._busy or s.budget_reached(*granted):
            return
        if not self.workers.send(w, messages.RunIteration(s.progress(*granted))):
            return  # gone (or not ready): _check_workers restarts it
        self._busy.add(w)
        self.workers.handles[w].last_message = time.monotonic()  # silence counts from now

    def _on_progress(self, run: RunContext, p: messages.WorkerProgress) -> None:
        s, c = self.settings, run.counters
        c["iteration"] += 1
        c["env_steps"] += p.env_steps
        c["episodes"] += len(p.episodes)
        self._busy.discard(p.worker_id)
        self._grant(p.worker_id)  # before the bookkeeping: the worker goes on at once
        self.gradient_steps_total += p.gradient_steps
        totals = self.worker_totals[p.worker_id]
        totals["env_steps"] += p.env_steps
        totals["gradient_steps"] += p.gradient_steps
        self._returns[p.worker_id].extend(float(r) for r, _ in p.episodes)
        end = time.monotonic()
        run.update_wall_time(end)
        T, self._last_end = end - self._last_end, end
        for env_index, details in p.env_failures:
            self.env_failures += 1
            self.failure_log.report(f"Hogwild worker {p.worker_id}", env_index, details,
                                    s.env_name)
        self.failure_log.tick()
        run.metrics.add_episodes(p.episodes)
        worker_return = self._returns[p.worker_id]
        learner = dict(p.stats)
        learner.update({
            "gradient_steps": float(p.gradient_steps),
            "gradient_steps_total": float(self.gradient_steps_total),
            "gradient_steps_per_s": self.gradient_steps_total / max(c["wall_time"], 1e-9),
            "worker_env_steps": totals["env_steps"],
            "worker_gradient_steps": totals["gradient_steps"],
            "worker_return": (sum(worker_return) / len(worker_return) if worker_return
                              else NAN),
            "syncs": float(p.syncs)})
        self._record_now = run.record(
            T, p.env_steps, learner_train_s=p.train_s,
            learner_wait_s=0.0, actor_id=p.worker_id, actor_unroll_s=p.unroll_s,
            actor_wait_s=0.0, actor_inference_s=p.inference_s, actor_env_s=p.env_s,
            queue_length=0, behaviour_version=0, behaviour_digest=0, lag=0,
            episodes_finished=len(p.episodes), actor_restarts=self.restarts,
            env_failures=self.env_failures, learner=learner)
        run.metrics.add_worker_scalars(p.worker_id, {
            "return": learner["worker_return"], "env_steps": totals["env_steps"],
            "gradient_steps": totals["gradient_steps"]}, int(c["env_steps"]))
        run.console(self._record_now)

    # -- checkpoints: every worker's optimizer state first ----------------------
    def _ask_for_states(self) -> None:
        """Ask every ready worker for its optimizer state; the checkpoint is
        written when all have answered (or after ``Hogwild.sync_timeout_s``)."""
        if self._awaiting_states is not None:
            self._checkpoint_postponed = True  # asked again when the pending one is written
            return
        self._awaiting_states = {w for w in self.workers.pids
                                 if self.workers.send(w, messages.SendState())}
        self._states_asked_at = time.monotonic()
        self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        if self._awaiting_states is None:
            return
        late = time.monotonic() - self._states_asked_at > self.hogwild.sync_timeout_s
        if self._awaiting_states and not late:
            return
        if self._awaiting_states:
            logger.warning("Hogwild workers %s did not send their optimizer state within "
                           "%.0f s; the checkpoint keeps their previous one",
                           sorted(self._awaiting_states), self.hogwild.sync_timeout_s)
        self._awaiting_states = None
        self._run.save_checkpoint()
        if self._checkpoint_postponed:
            self._checkpoint_postponed = False
            self._ask_for_states()

    # -- faults ---------------------------------------------------------------
    def _check_workers(self, run: RunContext) -> None:
        for w, failure in self.workers.failed(self._busy, self.settings.actor_timeout_s):
            self._restart(w, failure)
        if self._awaiting_states is not None:
            with run.iteration():
                self._maybe_checkpoint()
        for w in list(self.workers.handles):
            self._grant(w)

    def _restart(self, w: int, failure: str, fatal: bool = False) -> None:
        check_restart_allowed(failure, fatal, self.restarts,
                              self.settings.max_actor_restarts)
        logger.warning("%s\nrestarting it from the global networks (restart %d of %d)",
                       last_line(failure) if "Traceback" in failure else failure,
                       self.restarts + 1, self.settings.max_actor_restarts)
        logger.debug("%s", failure)
        if self._awaiting_states is not None:
            self._awaiting_states.discard(w)
        self._busy.discard(w)  # its batch is lost; the new worker gets a new grant
        self.restarts += 1
        self.workers.replace(w, int(self._run.counters["iteration"]),
                             self.worker_states.get(w))
        self._grant(w)

    # -- stopping -------------------------------------------------------------
    def stop(self, run: RunContext) -> None:
        """Tell every worker to stop; take their last progress and final states
        (for up to ``Hogwild.sync_timeout_s``)."""
        self._awaiting_states = None
        self._granting = False
        run.signals.stopping = True  # a signal now kills everything at once
        if self.workers is not None:
            pending = {w for w in self.workers.alive()
                       if self.workers.send(w, messages.StopWorker())}
            self.workers.drain(pending, self.hogwild.sync_timeout_s,
                               lambda w, message: self._take_last(run, w, message))
        self.failure_log.flush()  # the failures held back since the last summary
        if self._record_now is not None and self._completed:
            run.console(self._record_now, force=True)

    def _take_last(self, run: RunContext, w: int, message: Any) -> bool:
        """Handle a message while stopping; True when it is worker ``w``'s last."""
        if isinstance(message, messages.WorkerProgress):
            with run.iteration():
                self._on_progress(run, message)
        elif isinstance(message, messages.WorkerState):
            self.worker_states[w] = from_bytes(message.state)
            return bool(message.final)
        return isinstance(message, messages.WorkerFailed)

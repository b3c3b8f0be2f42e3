"""The Hogwild trainer: N worker processes training one set of shared networks.

``Trainer.runtime = "hogwild"`` (see docs/hogwild.md). The trainer's own
learner holds the global networks in shared memory (``GlobalState``); it
starts N worker processes (``hogwild.worker``), each with its own K envs,
learner step and optimizer, and only listens: every ``WorkerProgress`` is one
iteration (a metrics row: the counters, the worker's time split, its learner
statistics, per-worker totals). A worker runs an iteration only when the
trainer grants it one, and the trainer grants only the batches the budget still
needs (those in flight counted), so the run ends exactly on
``Trainer.num_iterations`` and within one batch of ``Trainer.num_env_steps``
(env steps summed over the workers).

Same run directory, checkpoints, metrics, TensorBoard, signal handling and
fault guarantees as the actor/learner runtime: a checkpoint holds the global
networks (``learner``) and each worker's optimizer state (asked for at the
checkpoint, or its last known one); a worker that dies or stays silent for
``Trainer.actor_timeout_s`` is restarted from the global networks and its last
saved optimizer state, up to ``Trainer.max_actor_restarts`` times; Ctrl-C and
SIGTERM stop the workers (each sends its final optimizer state) and write a
final checkpoint. A resumed run starts SAC workers with empty replay buffers
(each refills its share of ``Replay.learning_starts`` before training).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Deque, Dict, List, Optional

import gin

from alf_async.algorithms.sac_learner import SACLearner
from alf_async.hogwild import messages
from alf_async.hogwild.shared_state import GlobalState
from alf_async.hogwild.worker import WorkerLaunch, from_bytes, to_bytes, worker_process_main
from alf_async.metrics import NAN, IterationRecord, MetricsRecorder
from alf_async.resources import check_replay_memory
from alf_async.runtime.actor_pool import (ActorPoolError, ActorStartupError,
                                          check_restart_allowed, last_line)
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import HogwildSettings, ReplaySettings, TrainerSettings
from alf_async.signals import GracefulStop, kill_children_now
from alf_async.trainer import Trainer
from alf_async.utils.process import (describe_exit, mp_context, seconds_since_process_start,
                                     stop_processes)
from alf_async.utils.shared_memory import sweep_stale_blocks
from alf_async.utils.validation import ConfigError

logger = logging.getLogger("alf_async")
STARTUP_TIMEOUT_S = 300.0
LOCK_FILE = "hogwild.lock"  # the sync lock's file in the run directory, during a run


@dataclass
class _WorkerHandle:
    process: Any
    conn: Any
    generation: int
    ready: bool = False
    pid: int = 0
    env_worker_pids: List[int] = field(default_factory=list)
    last_message: float = 0.0


class HogwildTrainer(Trainer):
    """Trains PPO or SAC with N Hogwild workers sharing one set of networks.

    Args:
        root_dir, settings, **overrides: as for ``Trainer`` (``num_actors`` is N,
            the number of workers).
        policy_factory: not used (workers act with the algorithm's policy).
        replay: SAC's buffer and ratio settings (default: gin's ``Replay.*``);
            each worker has its own buffer of ``Replay.capacity``.
        hogwild: the sharing settings (default: gin's ``Hogwild.*``).
    """

    def __init__(self, root_dir: str, settings: Optional[TrainerSettings] = None,
                 policy_factory: Optional[PolicyFactory] = None,
                 replay: Optional[ReplaySettings] = None,
                 hogwild: Optional[HogwildSettings] = None, **overrides: Any):
        self.hogwild = hogwild or HogwildSettings()
        super().__init__(root_dir, settings, policy_factory, **overrides)
        s = self.settings
        self.replay_settings = None
        if s.off_policy:
            self.replay_settings = replay or ReplaySettings()
            check_replay_memory(self.replay_settings, self.observation_dim, self.action_dim,
                                num_buffers=s.num_actors)
        self.global_state: Optional[GlobalState] = None
        self.workers: Dict[int, _WorkerHandle] = {}
        self.worker_states: Dict[int, Dict[str, Any]] = {}  # w -> local_state()
        self.worker_totals: Dict[int, Dict[str, float]] = {
            w: {"env_steps": 0, "gradient_steps": 0} for w in range(s.num_actors)}
        self.gradient_steps_total = 0
        self.restarts = 0
        self._returns: Dict[int, Deque[float]] = {
            w: collections.deque(maxlen=100) for w in range(s.num_actors)}
        self._awaiting_states: Optional[set] = None
        self._states_asked_at = 0.0
        self._busy: set = set()  # workers running a granted iteration
        self._granting = False
        self._checkpoint_postponed = False

    # -- what differs from the actor/learner Trainer ----------------------------
    def _make_learner(self) -> Any:
        if self.settings.off_policy:
            return SACLearner(self.observation_dim, self.action_spec, seed=self.settings.seed)
        return super()._make_learner()  # PPO, its batch size checked

    def _build_optimizer(self) -> None:
        pass

    def save_checkpoint(self, metrics: MetricsRecorder) -> str:
        """The global networks (read under the sync lock, so a "synced" push is
        never half in; "shared" workers may still be stepping them) with the
        global normalizer statistics, as the ``learner`` block of a complete
        learner: worker 0's optimizer and the run's update counts (so that
        ``play`` and anything reading the block sees a trained learner), plus
        every worker's own state under ``hogwild``."""
        learner = self.learner
        if 0 in self.worker_states:
            learner.load_local_state(self.worker_states[0])
        if self.settings.off_policy:
            learner.gradient_steps = self.gradient_steps_total
        else:
            learner.iteration = int(self.counters["iteration"])
        if self.global_state is None:
            return super().save_checkpoint(metrics)
        with self.global_state.locked():
            self.global_state.load_normalizer_into(learner)
            return super().save_checkpoint(metrics)

    def _extra_checkpoint_state(self) -> Dict[str, Any]:
        return {"hogwild": {
            "mode": self.hogwild.mode,
            "workers": {str(w): state for w, state in self.worker_states.items()},
            "worker_totals": {str(w): dict(t) for w, t in self.worker_totals.items()},
            "gradient_steps_total": self.gradient_steps_total}}

    def _restore_extra_state(self, state: Dict[str, Any]) -> None:
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
                        "before training", self.replay_settings.learning_starts if self.replay_settings
                        else 0)

    @property
    def worker_pids(self) -> Dict[int, int]:
        """Worker id -> pid of its running process (ready workers)."""
        return {w: h.pid for w, h in self.workers.items() if h.ready}

    # -- the run --------------------------------------------------------------
    def train(self) -> Dict[str, float]:
        """Run until the budget is reached; returns the final counters (see
        ``Trainer.train`` for what is raised when)."""
        begun = self._begin_run()
        if begun is None:
            return dict(self.counters)
        metrics, resumed = begun
        s = self.settings
        lock_path = os.path.join(self.root_dir, LOCK_FILE)
        self.global_state = GlobalState.share(self.learner, lock_path)
        try:
            with GracefulStop(kill_children_now) as stop:
                try:
                    logger.info("starting %d Hogwild worker(s) (%s mode) x %d envs, %d env "
                                "workers each, unroll_length %d%s", s.num_actors,
                                self.hogwild.mode, s.num_envs, s.num_env_workers,
                                s.unroll_length, ", resumed" if resumed else "")
                    for w in range(s.num_actors):
                        self._spawn(w, 0)
                    self._wait_until_ready()
                    self.startup_s = seconds_since_process_start()
                    logger.info("start-up took %.1f s (launch of this process until every "
                                "worker was ready)", self.startup_s)
                    self._loop(metrics, stop)
                finally:
                    stop.stopping = True
                    self._close_workers()
                    self.global_state.close()
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock_path)
                    sweep_stale_blocks()
        finally:
            metrics.close()
        return dict(self.counters)

    def _spawn(self, w: int, generation: int) -> None:
        s = self.settings
        local = self.worker_states.get(w)
        launch = WorkerLaunch(
            worker_id=w, generation=generation, epoch=int(self.counters["iteration"]),
            settings=s, replay=self.replay_settings, hogwild=self.hogwild,
            gin_config=gin.config_str(), state=self.global_state,
            local_state=None if local is None else to_bytes(local),
            parent_pid=os.getpid())
        ctx = mp_context()
        parent_conn, child_conn = ctx.Pipe()
        process = ctx.Process(target=worker_process_main, args=(launch, child_conn),
                              name=f"alf_async-hogwild-{w}", daemon=False)
        process.start()
        child_conn.close()
        self.workers[w] = _WorkerHandle(process, parent_conn, generation,
                                        last_message=time.monotonic())

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(h.ready for h in self.workers.values()):
            for w, h in list(self.workers.items()):
                if h.ready:
                    continue
                if h.conn.poll(0.05):
                    try:
                        message = h.conn.recv()
                    except (EOFError, OSError):
                        h.process.join(2.0)
                        raise ActorStartupError(
                            f"Hogwild worker {w} died during start-up "
                            f"({describe_exit(h.process.exitcode)})") from None
                    if isinstance(message, messages.WorkerReady):
                        h.ready, h.pid = True, message.pid
                        h.env_worker_pids = list(message.env_worker_pids)
                        h.last_message = time.monotonic()
                        continue
                    if isinstance(message, messages.WorkerFailed):
                        raise ActorStartupError(f"Hogwild worker {w} failed to start: "
                                                f"{last_line(message.traceback)}")
                if not h.process.is_alive() and not h.conn.poll():
                    raise ActorStartupError(f"Hogwild worker {w} died during start-up "
                                            f"({describe_exit(h.process.exitcode)})")
            if time.monotonic() > deadline:
                raise ActorStartupError(f"Hogwild workers not ready after "
                                        f"{STARTUP_TIMEOUT_S:.0f} s")

    def _loop(self, metrics: MetricsRecorder, stop: GracefulStop) -> None:
        s, c = self.settings, self.counters
        self._start = self._last_end = time.monotonic()
        self._wall_at_start = c["wall_time"]
        self._first_iteration = int(c["iteration"]) + 1
        self._record_now: Optional[IterationRecord] = None
        completed = False
        self._granting = True
        for w in self.workers:
            self._grant(w)
        try:
            while not self._budget_reached():
                self._poll(metrics, stop, timeout=1.0)
                self._check_workers(metrics, stop)
            completed = True
        finally:
            self._stop_workers(metrics, stop)
            if self._record_now is not None and completed:
                metrics.console(self._record_now, s.num_env_steps, s.num_iterations,
                                force=True)
            self._final_checkpoint(metrics, completed)

    def _poll(self, metrics: MetricsRecorder, stop: GracefulStop, timeout: float) -> None:
        """Handle every message that arrives within ``timeout`` seconds."""
        by_conn = {h.conn: w for w, h in self.workers.items() if h.ready}
        for conn in wait(list(by_conn), timeout=timeout):
            w = by_conn[conn]
            with stop.iteration():  # a signal never cuts a message (or a checkpoint) in two
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None:
                    self.workers[w].last_message = time.monotonic()
                    if not isinstance(message, messages.WorkerFailed):
                        self._handle(w, message, metrics)
            if isinstance(message, messages.WorkerFailed):  # restarting may take a while:
                self._restart(  # signals are not held back meanwhile
                    w, f"Hogwild worker {w} failed:\n{message.traceback}",
                    fatal=message.env_error and self.settings.fatal_env_errors)
            elif message is None:  # the process is gone
                process = self.workers[w].process
                process.join(2.0)
                self._restart(w, f"Hogwild worker {w} (pid {process.pid}) died "
                                 f"({describe_exit(process.exitcode)})")

    def _handle(self, w: int, message: Any, metrics: MetricsRecorder) -> None:
        if isinstance(message, messages.WorkerProgress):
            self._on_progress(message, metrics)
            if self.counters["iteration"] % self.settings.checkpoint_interval == 0:
                self._ask_for_states(metrics)
        elif isinstance(message, messages.WorkerState):
            self.worker_states[w] = from_bytes(message.state)
            if self._awaiting_states is not None:
                self._awaiting_states.discard(w)
                self._maybe_checkpoint(metrics)

    def _grant(self, w: int) -> None:
        """Let worker ``w`` run one more iteration if the budget needs it (the
        batches in flight counted): the run ends exactly on an iteration budget
        and within one batch of an env-step budget."""
        s, c, h = self.settings, self.counters, self.workers.get(w)
        if (not self._granting or h is None or not h.ready or w in self._busy
                or s.budget_reached(int(c["iteration"]) + len(self._busy),
                                    int(c["env_steps"]) + len(self._busy) * s.steps_per_batch)):
            return
        try:
            h.conn.send(messages.RunIteration())
        except (OSError, ValueError):
            return  # gone: _check_workers restarts it
        self._busy.add(w)
        h.last_message = time.monotonic()  # the silence that counts starts now

    def _on_progress(self, p: messages.WorkerProgress, metrics: MetricsRecorder) -> None:
        s, c = self.settings, self.counters
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
        c["wall_time"] = self._wall_at_start + (end - self._start)
        T = end - self._last_end
        self._last_end = end
        for env_index, details in p.env_failures:
            self.env_failures += 1
            logger.warning("env %d of Hogwild worker %d (%s) failed and was recreated; its "
                           "episode was dropped: %s", env_index, p.worker_id, s.env_name,
                           last_line(details))
        metrics.add_episodes(p.episodes)
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
        record = IterationRecord(
            iteration=int(c["iteration"]), env_steps=int(c["env_steps"]),
            episodes=int(c["episodes"]), wall_time=c["wall_time"], num_envs=s.num_envs,
            num_actors=s.num_actors, unroll_length=s.unroll_length, T=T,
            EPS=s.num_envs / T if T > 0 else NAN,
            env_steps_per_s=p.env_steps / T if T > 0 else NAN, learner_train_s=p.train_s,
            learner_wait_s=0.0, actor_id=p.worker_id, actor_unroll_s=p.unroll_s,
            actor_wait_s=0.0, actor_inference_s=p.inference_s, actor_env_s=p.env_s,
            queue_length=0, behaviour_version=0, behaviour_digest=0, lag=0,
            episodes_finished=len(p.episodes), actor_restarts=self.restarts,
            env_failures=self.env_failures,
            startup_s=self.startup_s if c["iteration"] == self._first_iteration else NAN,
            learner=learner)
        self._record_now = metrics.record(record)
        metrics.add_worker_scalars(p.worker_id, {
            "return": learner["worker_return"], "env_steps": totals["env_steps"],
            "gradient_steps": totals["gradient_steps"]}, int(c["env_steps"]))
        metrics.console(self._record_now, s.num_env_steps, s.num_iterations)

    # -- checkpoints ----------------------------------------------------------
    def _ask_for_states(self, metrics: MetricsRecorder) -> None:
        """Ask every ready worker for its optimizer state; the checkpoint is
        written when all have answered (or after ``Hogwild.sync_timeout_s``)."""
        if self._awaiting_states is not None:
            self._checkpoint_postponed = True  # asked again when the pending one is written
            return
        self._awaiting_states = set()
        for w, h in self.workers.items():
            if h.ready:
                try:
                    h.conn.send(messages.SendState())
                    self._awaiting_states.add(w)
                except (OSError, ValueError):
                    pass
        self._states_asked_at = time.monotonic()
        self._maybe_checkpoint(metrics)

    def _maybe_checkpoint(self, metrics: MetricsRecorder, force: bool = False) -> None:
        if self._awaiting_states is None:
            return
        late = time.monotonic() - self._states_asked_at > self.hogwild.sync_timeout_s
        if self._awaiting_states and not (late or force):
            return
        if self._awaiting_states:
            logger.warning("Hogwild workers %s did not send their optimizer state within "
                           "%.0f s; the checkpoint keeps their previous one",
                           sorted(self._awaiting_states), self.hogwild.sync_timeout_s)
        self._awaiting_states = None
        self.save_checkpoint(metrics)
        if self._checkpoint_postponed:
            self._checkpoint_postponed = False
            self._ask_for_states(metrics)

    # -- faults ---------------------------------------------------------------
    def _check_workers(self, metrics: MetricsRecorder, stop: GracefulStop) -> None:
        timeout = self.settings.actor_timeout_s
        now = time.monotonic()
        for w, h in list(self.workers.items()):
            if h.conn.poll():
                continue  # _poll reads what it said first (or its end)
            if not h.process.is_alive():
                self._restart(w, f"Hogwild worker {w} (pid {h.process.pid}) died "
                                 f"({describe_exit(h.process.exitcode)})")
            elif w in self._busy and timeout and now - h.last_message > timeout:
                self._restart(w, f"Hogwild worker {w} (pid {h.pid}) sent nothing for "
                                 f"{now - h.last_message:.0f} s (Trainer.actor_timeout_s="
                                 f"{timeout:g}): taken as hung")
        if self._awaiting_states is not None:
            with stop.iteration():
                self._maybe_checkpoint(metrics)
        for w in list(self.workers):
            self._grant(w)

    def _restart(self, w: int, failure: str, fatal: bool = False) -> None:
        check_restart_allowed(failure, fatal, self.restarts,
                              self.settings.max_actor_restarts)
        logger.warning("%s\nrestarting it from the global networks (restart %d of %d)",
                       last_line(failure) if "Traceback" in failure else failure,
                       self.restarts + 1, self.settings.max_actor_restarts)
        logger.debug("%s", failure)
        old = self.workers[w]  # tracked until stopped: _close_workers sees it if interrupted
        stop_processes([old.process], grace_s=2.0)
        old.conn.close()
        del self.workers[w]
        sweep_stale_blocks()  # the dead worker's replay buffer
        if self._awaiting_states is not None:
            self._awaiting_states.discard(w)
        self._busy.discard(w)  # its batch is lost; the new worker gets a new grant
        self.restarts += 1
        self._spawn(w, old.generation + 1)
        handle = self.workers[w]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not handle.ready:
            if handle.conn.poll(0.1):
                try:
                    message = handle.conn.recv()
                except (EOFError, OSError):
                    handle.process.join(2.0)
                    raise ActorPoolError(f"Hogwild worker {w} died while restarting "
                                         f"({describe_exit(handle.process.exitcode)})") from None
                if isinstance(message, messages.WorkerReady):
                    handle.ready, handle.pid = True, message.pid
                    handle.env_worker_pids = list(message.env_worker_pids)
                    handle.last_message = time.monotonic()
                elif isinstance(message, messages.WorkerFailed):
                    raise ActorPoolError(f"Hogwild worker {w} failed to restart: "
                                         f"{last_line(message.traceback)}")
            elif not handle.process.is_alive() or time.monotonic() > deadline:
                raise ActorPoolError(f"Hogwild worker {w} failed to restart "
                                     f"({describe_exit(handle.process.exitcode)})")
        self._grant(w)

    # -- stopping -------------------------------------------------------------
    def _stop_workers(self, metrics: MetricsRecorder, stop: GracefulStop) -> None:
        """Tell every worker to stop; take their last progress and final states
        (for up to ``Hogwild.sync_timeout_s``)."""
        self._awaiting_states = None
        self._granting = False
        stop.stopping = True  # a signal now kills everything at once
        pending = set()
        for w, h in self.workers.items():
            if h.ready and h.process.is_alive():
                try:
                    h.conn.send(messages.StopWorker())
                    pending.add(w)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + self.hogwild.sync_timeout_s
        while pending and time.monotonic() < deadline:
            conns = {self.workers[w].conn: w for w in pending}
            for conn in wait(list(conns), timeout=0.5):
                w = conns[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    pending.discard(w)
                    continue
                if isinstance(message, messages.WorkerProgress):
                    with stop.iteration():
                        self._on_progress(message, metrics)
                elif isinstance(message, messages.WorkerState):
                    self.worker_states[w] = from_bytes(message.state)
                    if message.final:
                        pending.discard(w)
                elif isinstance(message, messages.WorkerFailed):
                    pending.discard(w)
            pending = {w for w in pending if self.workers[w].process.is_alive()
                       or self.workers[w].conn.poll()}

    def _close_workers(self) -> None:
        stop_processes([h.process for h in self.workers.values()], grace_s=5.0)
        for h in self.workers.values():
            try:
                h.conn.close()
            except OSError:
                pass
        self.workers = {}

"""The Trainer: owns a run, its actor pool, its learner and its run directory.

Build (settings, env spaces, resource checks, learner), restore the newest
checkpoint, start the actor pool, then loop: take the next actor batch (oldest
version first, lag <= N - 1), train on it, publish the new weights, release the
slot, record one ``IterationRecord``; checkpoint every ``checkpoint_interval``
iterations and at the end. N = 1 with one slot per actor is exactly synchronous.
The run directory holds config.gin, operative_config.gin, metrics.jsonl,
tensorboard/, checkpoints/ and log.txt. Every child process is ended on every
path (normal end, exception, Ctrl-C, SIGTERM, a second Ctrl-C kills at once).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, Dict, Optional, Tuple

import gin
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import NonFiniteError, PPOLearner
from alf_async.checkpoint import Checkpointer
from alf_async.envs.gym_env import EnvOptionError, UnknownEnvError, env_spec
from alf_async.envs.spaces import UnsupportedSpaceError
from alf_async.metrics import NAN, IterationRecord, MetricsRecorder, log_env_failures
from alf_async.resources import check_resources
from alf_async.runtime.actor_pool import ActorPool, ActorPoolError, make_actor_pool
from alf_async.runtime.messages import BatchReady
from alf_async.runtime.policy import PolicyFactory
from alf_async.runtime.weight_store import weights_digest
from alf_async.settings import TrainerSettings
from alf_async.signals import GracefulStop, TerminationRequested, kill_children_now
from alf_async.utils.process import seconds_since_process_start
from alf_async.utils.shared_memory import sweep_stale_blocks
from alf_async.utils.validation import ConfigError

logger = logging.getLogger("alf_async")
CHECKPOINT_FORMAT = 2


class Trainer:
    """Trains PPO2 from N actors of K envs each.

    Args:
        root_dir: the run directory (created if missing; resumed if it has
            checkpoints).
        settings: the run's settings (default: ``TrainerSettings()``, filled by
            gin's ``Trainer.*`` bindings).
        policy_factory: builds the actors' policy (default: the learner's
            ``NeuralPolicy``; tests of the runtime pass scripted policies).
        **overrides: settings fields to override, e.g. ``num_actors=2``.
    """

    def __init__(self, root_dir: str, settings: Optional[TrainerSettings] = None,
                 policy_factory: Optional[PolicyFactory] = None, **overrides: Any):
        if settings is None:
            settings = TrainerSettings(**overrides)  # gin fills the other fields
        elif overrides:
            settings = settings.replace(**overrides)
        self.settings = s = settings
        try:
            self.observation_dim, self.action_spec, _ = env_spec(
                s.env_name, s.max_episode_steps, s.time_feature)
        except (UnknownEnvError, EnvOptionError, UnsupportedSpaceError) as e:
            raise ConfigError(str(e)) from None
        except Exception as e:  # noqa: BLE001  (the env's own constructor failed)
            raise ConfigError(f"the env {s.env_name!r} cannot be created: "
                              f"{type(e).__name__}: {e}") from None
        self.action_dim = self.action_spec.dim
        check_resources(s, self.observation_dim, self.action_dim)
        if s.learner_num_threads:
            torch.set_num_threads(s.learner_num_threads)
        self.learner = self._make_learner()
        self.root_dir = os.path.abspath(root_dir)
        os.makedirs(self.root_dir, exist_ok=True)
        self.checkpointer = Checkpointer(self.root_dir)
        self.policy_factory = policy_factory or self._default_policy_factory()
        self.counters: Dict[str, float] = {"iteration": 0, "env_steps": 0, "episodes": 0,
                                           "wall_time": 0.0}
        self.published_digests: Dict[int, int] = {}
        self.pool: Optional[ActorPool] = None
        self.env_failures = 0
        self.dropped_stale = {"batches": 0, "env_steps": 0}  # by max_lag
        self.last_checkpoint: Optional[str] = None
        self.last_checkpoint_iteration = -1
        self._episode_window: Dict[str, list] = {}
        self.startup_s = NAN  # set when the actors are ready
        self._first_iteration = 1
        self._bytes_moved_before = 0  # the pool's bytes_moved at the previous record

    # -- what an algorithm changes (OffPolicyTrainer overrides these) ----------
    def _make_learner(self) -> Any:
        s = self.settings
        if s.off_policy:
            raise ConfigError(f"Trainer.algorithm={s.algorithm!r} is trained by "
                              "OffPolicyTrainer: build the run's trainer with "
                              "alf_async.trainers.make_trainer (as the train command does)")
        learner = PPOLearner(self.observation_dim, self.action_spec, seed=s.seed)
        try:
            learner.check_batch_size(s.unroll_length, s.num_envs)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return learner

    def _default_policy_factory(self) -> PolicyFactory:
        return NeuralPolicy

    def _build_optimizer(self) -> None:
        """Build the learner's optimizer (run in a thread while actors start)."""
        self.learner.optimizer  # noqa: B018 - the property builds it

    def _extra_checkpoint_state(self) -> Dict[str, Any]:
        return {}

    def _restore_extra_state(self, state: Dict[str, Any]) -> None:
        pass

    def _open_run_resources(self) -> None:
        """Allocate what the run needs beside the pool (before it starts)."""

    def _close_run_resources(self) -> None:
        """Release what ``_open_run_resources`` allocated (on every path)."""

    def _weights_version(self) -> int:
        """The version number of the weights published now."""
        return int(self.counters["iteration"])

    # -- checkpoints ----------------------------------------------------------
    def save_checkpoint(self, metrics: MetricsRecorder) -> str:
        if not self.learner.all_finite():
            raise NonFiniteError(f"the learner's weights or statistics are not finite at "
                                 f"iteration {int(self.counters['iteration'])}; no "
                                 "checkpoint was written")
        state = {"learner": self.learner.state_dict(), "counters": dict(self.counters),
                 "torch_rng": torch.get_rng_state(), "settings": self.settings.as_dict(),
                 "episode_window": metrics.episode_window(), "format": CHECKPOINT_FORMAT,
                 **self._extra_checkpoint_state()}
        iteration = int(self.counters["iteration"])
        self.last_checkpoint = self.checkpointer.save(state, iteration)
        self.last_checkpoint_iteration = iteration
        logger.info("checkpoint written: %s", self.last_checkpoint)
        return self.last_checkpoint

    def _restore(self) -> bool:
        self.checkpointer.remove_temporary_files()
        found = self.checkpointer.load_latest()
        if found is None:
            return False
        state, path = found
        self.learner.load_state_dict(state["learner"])
        self.counters.update({k: (float(v) if k == "wall_time" else int(v))
                              for k, v in state["counters"].items()})
        torch.set_rng_state(state["torch_rng"])
        self._episode_window = state.get("episode_window", {})
        self._restore_extra_state(state)
        changed = self.settings.changes_since(state.get("settings", {}))
        if changed:
            logger.info("settings changed since the checkpoint: %s", changed)
        self.last_checkpoint, self.last_checkpoint_iteration = path, int(
            self.counters["iteration"])
        logger.info("resumed from %s at iteration %d, %d env steps", path,
                    self.counters["iteration"], self.counters["env_steps"])
        return True

    # -- the run --------------------------------------------------------------
    def _budget_reached(self) -> bool:
        return self.settings.budget_reached(self.counters["iteration"],
                                            self.counters["env_steps"])

    def _publish(self) -> None:
        arrays = self.learner.weight_arrays()
        version = self._weights_version()
        self.pool.publish_weights(arrays, version)
        self.published_digests[version] = weights_digest(arrays)

    def _begin_run(self) -> Optional[Tuple[MetricsRecorder, bool]]:
        """Sweep stale shared memory and restore the newest checkpoint; None if
        the budget is already reached, else (the run's metrics recorder,
        whether it resumed)."""
        sweep_stale_blocks()
        resumed = self._restore()
        if self._budget_reached():
            logger.info("budget already reached (%d iterations, %d env steps)",
                        self.counters["iteration"], self.counters["env_steps"])
            return None
        # Also without a checkpoint: rows of a killed run that never wrote one are
        # dropped, so that counters in the metrics file never go backward.
        metrics = MetricsRecorder(self.root_dir, resume_from=(
            int(self.counters["iteration"]), int(self.counters["env_steps"])))
        metrics.load_episode_window(self._episode_window)
        return metrics, resumed

    def train(self) -> Dict[str, float]:
        """Run until the budget is reached; returns the final counters.

        Raises KeyboardInterrupt / TerminationRequested after a final checkpoint
        when interrupted; any other exception after stopping every child.
        """
        begun = self._begin_run()
        if begun is None:
            return dict(self.counters)
        metrics, resumed = begun
        s = self.settings
        try:
            with GracefulStop(kill_children_now) as stop:
                try:
                    self._open_run_resources()
                    self.pool = make_actor_pool(
                        s, self.policy_factory, self.learner.weight_arrays(),
                        self.observation_dim, self.action_dim, gin.config_str(),
                        epoch=int(self.counters["iteration"]))
                    self._publish()
                    logger.info("starting %d actor(s) x %d envs (%s backend, %d env workers "
                                "each), unroll_length %d%s", s.num_actors, s.num_envs,
                                s.backend, s.num_env_workers, s.unroll_length,
                                ", resumed" if resumed else "")
                    # The learner's optimizer is built (~1 s of imports) while
                    # the actors start.
                    optimizer_ready = threading.Thread(
                        target=self._build_optimizer, daemon=True,
                        name="alf_async-build-optimizer")
                    optimizer_ready.start()
                    self.pool.start()
                    optimizer_ready.join()
                    self.startup_s = seconds_since_process_start()
                    logger.info("start-up took %.1f s (launch of this process until every "
                                "actor was ready to unroll)", self.startup_s)
                    self._loop(metrics, stop)
                finally:
                    stop.stopping = True  # a signal now kills everything at once
                    try:
                        if self.pool is not None:
                            self.pool.close()
                    finally:
                        self._close_run_resources()
                    sweep_stale_blocks()
        finally:
            metrics.close()
        return dict(self.counters)

    def _loop(self, metrics: MetricsRecorder, stop: GracefulStop) -> None:
        s, c = self.settings, self.counters
        start = last_end = time.monotonic()
        wall_at_start = c["wall_time"]
        self._first_iteration = int(c["iteration"]) + 1  # startup_s goes on its row
        record, completed = None, False
        try:
            while not self._budget_reached():
                wait_start = time.monotonic()
                message, batch = self.pool.next_batch()
                if self._too_stale(message):
                    continue
                with stop.iteration():
                    train_start = time.monotonic()
                    version = int(c["iteration"])
                    stats = self.learner.train(batch, message.version)
                    c["iteration"] += 1
                    self._publish()
                    checkpoint_now = c["iteration"] % s.checkpoint_interval == 0
                    # Actors reseed at checkpoints so that resuming replays exactly.
                    reseed = checkpoint_now and s.reseed_at_checkpoints
                    self.pool.release(message, int(c["iteration"]) if reseed else None)
                    end = time.monotonic()
                    c["env_steps"] += message.unroll.env_steps
                    c["episodes"] += len(message.unroll.episodes)
                    c["wall_time"] = wall_at_start + (end - start)
                    self.env_failures += log_env_failures(message, s.env_name)
                    metrics.add_episodes(message.unroll.episodes)
                    record = metrics.record(self._record(
                        message, stats, version, end - last_end, train_start - wait_start,
                        end - train_start))
                    metrics.console(record, s.num_env_steps, s.num_iterations)
                    last_end = end
                    if checkpoint_now:
                        self.save_checkpoint(metrics)
            completed = True
            if record is not None:
                metrics.console(record, s.num_env_steps, s.num_iterations, force=True)
        finally:
            self._final_checkpoint(metrics, completed)

    def _final_checkpoint(self, metrics: MetricsRecorder, completed: bool) -> None:
        """Write the last checkpoint when the loop ends (from its ``finally``).

        The learner state is consistent between iterations, so a final
        checkpoint is valid after a normal end, an interrupt or an actor
        failure; after a learner error it would hold a half-trained model.
        """
        c = self.counters
        exc = sys.exc_info()[1]
        learner_failed = exc is not None and not isinstance(
            exc, (KeyboardInterrupt, TerminationRequested, ActorPoolError))
        if ((completed or not learner_failed) and c["iteration"] > 0
                and int(c["iteration"]) != self.last_checkpoint_iteration):
            try:
                self.save_checkpoint(metrics)
            except (OSError, NonFiniteError) as e:
                if exc is None:
                    raise
                logger.error("the final checkpoint could not be written: %s", e)

    def _too_stale(self, message: BatchReady) -> bool:
        """Drop (release untrained) a batch older than ``max_lag`` versions."""
        lag = int(self.counters["iteration"]) - message.version
        if self.settings.max_lag is None or lag <= self.settings.max_lag:
            return False
        self.pool.release(message)
        self.dropped_stale["batches"] += 1
        self.dropped_stale["env_steps"] += message.unroll.env_steps
        return True

    def _record(self, message: BatchReady, stats: Dict[str, float], version: int,
                T: float, learner_wait_s: float, learner_train_s: float) -> IterationRecord:
        s, c, u = self.settings, self.counters, message.unroll
        pool = self.pool.stats()
        bytes_moved = pool.bytes_moved - self._bytes_moved_before
        self._bytes_moved_before = pool.bytes_moved
        return IterationRecord(
            iteration=int(c["iteration"]), env_steps=int(c["env_steps"]),
            episodes=int(c["episodes"]), wall_time=c["wall_time"], num_envs=s.num_envs,
            num_actors=s.num_actors, unroll_length=s.unroll_length, T=T,
            EPS=s.num_envs / T, env_steps_per_s=u.env_steps / T,
            learner_train_s=learner_train_s, learner_wait_s=learner_wait_s,
            actor_id=message.actor_id, actor_unroll_s=u.unroll_s,
            actor_wait_s=message.wait_s, actor_inference_s=u.inference_s,
            actor_env_s=u.env_s, queue_length=pool.queue_length,
            behaviour_version=message.version, behaviour_digest=message.weights_digest,
            lag=version - message.version, episodes_finished=len(u.episodes),
            actor_restarts=pool.restarts, env_failures=self.env_failures,
            dropped_batches=pool.dropped_batches + self.dropped_stale["batches"],
            dropped_env_steps=self.dropped_stale["env_steps"],
            startup_s=self.startup_s if c["iteration"] == self._first_iteration else NAN,
            actor_node=pool.actor_nodes.get(message.actor_id, ""), bytes_moved=bytes_moved,
            learner=dict(stats))

"""The Trainer: one run's life cycle, whatever the way of training.

A run is assembled from parts (``training.parts``): the learner of
``Trainer.algorithm`` and the loop of ``Trainer.runtime`` (actor batches trained
once, a replay buffer, Hogwild workers). The Trainer drives any loop the same way:

1. settings checked, the env's spaces read, memory and /dev/shm checked, the
   learner and the loop built (all before a file is written or a process starts);
2. stale shared memory swept, the newest checkpoint restored (counters, learner,
   RNG, episode window, the loop's own blocks), done if the budget is reached;
3. under Ctrl-C / SIGTERM handling (``signals.GracefulStop``): the loop starts its
   children and trains until the budget is reached, writing periodic
   checkpoints through ``RunContext.save_checkpoint``;
4. on every path: the loop stops, a final checkpoint is written (not after a
   learner failure), every child ends and every shared-memory block is released.

The run directory holds config.gin, operative_config.gin, metrics.jsonl,
tensorboard/, checkpoints/ and log.txt.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Dict, Optional

import gin
import torch

from alf_async.algorithms.guarded_step import NonFiniteError
from alf_async.checkpoint import CHECKPOINT_FORMAT, CheckpointError, Checkpointer
from alf_async.metrics import MetricsRecorder
from alf_async.runtime.actor_pool import ActorPoolError
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import HogwildSettings, ReplaySettings, TrainerSettings
from alf_async.signals import GracefulStop, TerminationRequested, kill_children_now
from alf_async.training.evaluation import Evaluation
from alf_async.training.loop import RunContext
from alf_async.training.parts import build_parts
from alf_async.utils.run_lock import RunLock
from alf_async.utils.shared_memory import sweep_stale_blocks

logger = logging.getLogger("alf_async")


def _first_mismatch(error: Exception) -> str:
    """The first detail line of a ``load_state_dict`` error (a size mismatch or
    a missing key), or the message itself."""
    lines = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
    return lines[0] if lines else str(error)


class Trainer:
    """Trains the run configured by ``settings`` in ``root_dir``.

    Args:
        root_dir: the run directory (created if missing; resumed if it has
            checkpoints).
        settings: the run's settings (default: ``TrainerSettings()``, filled by
            gin's ``Trainer.*`` bindings).
        policy_factory: builds the actors' policy (default: the algorithm's;
            tests of the runtime pass scripted policies; Hogwild ignores it).
        replay: SAC's buffer and ratio settings (default: gin's ``Replay.*``).
        hogwild: Hogwild's sharing settings (default: gin's ``Hogwild.*``).
        run_lock: the run directory's lock (``utils.run_lock``), already held by
            the caller (the train command takes it before reading the run's
            config); None: ``train()`` takes it itself and releases it at the end.
        **overrides: settings fields to override, e.g. ``num_actors=2``.
    """

    def __init__(self, root_dir: str, settings: Optional[TrainerSettings] = None,
                 policy_factory: Optional[PolicyFactory] = None,
                 replay: Optional[ReplaySettings] = None,
                 hogwild: Optional[HogwildSettings] = None,
                 run_lock: Optional[RunLock] = None, **overrides: Any):
        if settings is None:
            settings = TrainerSettings(**overrides)  # gin fills the other fields
        elif overrides:
            settings = settings.replace(**overrides)
        parts = build_parts(settings, policy_factory, replay, hogwild)
        self.settings = settings = parts.settings
        self.learner, self.loop = parts.learner, parts.loop
        self.replay_settings = parts.replay
        self.observation_spec, self.action_spec = parts.observation, parts.action_spec
        self.memory = parts.memory
        self.root_dir = os.path.abspath(root_dir)
        self._run_lock = run_lock
        os.makedirs(self.root_dir, exist_ok=True)
        self.checkpointer = Checkpointer(self.root_dir)
        self.counters: Dict[str, float] = {"iteration": 0, "env_steps": 0, "episodes": 0,
                                           "wall_time": 0.0}
        self.last_checkpoint: Optional[str] = None
        self.last_checkpoint_iteration = -1
        self._checkpointed = (-1, -1)  # (iteration, learner updates) of the newest checkpoint
        self._episode_window: Dict[str, list] = {}
        self._metrics: Optional[MetricsRecorder] = None

    # -- checkpoints ----------------------------------------------------------
    def save_checkpoint(self) -> str:
        """Write a checkpoint now (atomically); returns its path."""
        iteration = int(self.counters["iteration"])
        with self.loop.checkpoint_state() as loop_state:
            if not self.learner.all_finite():
                raise NonFiniteError(f"the learner's weights or statistics are not finite "
                                     f"at iteration {iteration}; no checkpoint was written")
            state = {"learner": self.learner.state_dict(), "counters": dict(self.counters),
                     "torch_rng": torch.get_rng_state(), "settings": self.settings.as_dict(),
                     "episode_window": self._metrics.episode_window(),
                     "format": CHECKPOINT_FORMAT, **loop_state}
            self.last_checkpoint = self.checkpointer.save(state, iteration)
        self.last_checkpoint_iteration = iteration
        self._checkpointed = (iteration, self.loop.updates())
        logger.info("checkpoint written: %s", self.last_checkpoint)
        return self.last_checkpoint

    def _restore(self) -> bool:
        self.checkpointer.remove_temporary_files()
        found = self.checkpointer.load_latest()
        if found is None:
            return False
        state, path = found
        try:
            self.learner.load_state_dict(state["learner"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise CheckpointError(
                f"checkpoint {path} does not fit this run's networks "
                f"({type(e).__name__}: {str(e).splitlines()[0].rstrip(':')}; e.g. "
                f"{_first_mismatch(e)}): the network settings (ActorNetwork.*, "
                f"ValueNetwork.*, ImageEncoder.*) or the env's observations differ from "
                f"the run that wrote it. Resume with that run's config (--root_dir "
                f"alone), or train in a new --root_dir") from None
        self.counters.update({k: (float(v) if k == "wall_time" else int(v))
                              for k, v in state["counters"].items()})
        torch.set_rng_state(state["torch_rng"])
        self._episode_window = state.get("episode_window", {})
        self.loop.restore(state, self.counters)
        changed = self.settings.changes_since(state.get("settings", {}))
        if changed:
            logger.info("settings changed since the checkpoint: %s", changed)
        self.last_checkpoint, self.last_checkpoint_iteration = path, int(
            self.counters["iteration"])
        self._checkpointed = (self.last_checkpoint_iteration, self.loop.updates())
        logger.info("resumed from %s at iteration %d, %d env steps", path,
                    self.counters["iteration"], self.counters["env_steps"])
        return True

    def _final_checkpoint(self, completed: bool) -> None:
        """Write the last checkpoint when training ends (from a ``finally``):
        valid after a normal end, an interrupt or an actor failure (the learner is
        consistent between iterations), not after a learner error."""
        exc = sys.exc_info()[1]
        learner_failed = exc is not None and not isinstance(
            exc, (KeyboardInterrupt, TerminationRequested, ActorPoolError))
        now = (int(self.counters["iteration"]), self.loop.updates())
        if (completed or not learner_failed) and now[0] > 0 and now != self._checkpointed:
            try:
                self.save_checkpoint()
            except (OSError, NonFiniteError) as e:
                if exc is None:
                    raise
                logger.error("the final checkpoint could not be written: %s", e)

    # -- the run --------------------------------------------------------------
    def train(self) -> Dict[str, float]:
        """Run until the budget is reached; returns the final counters.

        Raises KeyboardInterrupt / TerminationRequested after a final checkpoint
        when interrupted; ``RunLockedError`` (before anything is read) when
        another process trains in the same run directory; any other exception
        after stopping every child.
        """
        if self._run_lock is not None and self._run_lock.held:
            return self._train_in_locked_dir()
        with RunLock(self.root_dir) as lock:
            if lock.takeover_note():
                logger.warning("%s", lock.takeover_note())
            return self._train_in_locked_dir()

    def _train_in_locked_dir(self) -> Dict[str, float]:
        sweep_stale_blocks()
        if getattr(self.settings, "sampling_reason", ""):
            logger.info("sampling: %s", self.settings.sampling_reason)
        precision = getattr(self.learner, "precision", None)
        if precision is not None:
            logger.info("precision: %s", precision.reason)
        logger.info("estimated memory of the run: %s", self.memory.describe())
        resumed = self._restore()
        if self.settings.budget_reached(self.counters["iteration"],
                                        self.counters["env_steps"]):
            logger.info("budget already reached (%d iterations, %d env steps)",
                        self.counters["iteration"], self.counters["env_steps"])
            return dict(self.counters)
        # Also without a checkpoint: rows of a killed run that never wrote one are
        # dropped, so that counters in the metrics file never go backward.
        self._metrics = metrics = MetricsRecorder(self.root_dir, resume_from=(
            int(self.counters["iteration"]), int(self.counters["env_steps"])))
        metrics.load_episode_window(self._episode_window)
        evaluation = None
        try:
            with GracefulStop(kill_children_now) as stop:
                gin_config = gin.config_str()
                if self.settings.eval_interval_env_steps:
                    evaluation = Evaluation(self.settings, self.observation_spec,
                                            self.action_spec, self.learner.weight_arrays,
                                            gin_config)
                run = RunContext(self.settings, self.root_dir, self.counters, metrics, stop,
                                 gin_config, resumed, self.save_checkpoint, evaluation)
                try:
                    self._train(run)
                finally:
                    stop.stopping = True  # a signal now kills everything at once
                    try:
                        self.loop.close()
                    finally:
                        if evaluation is not None:
                            evaluation.close()
                    sweep_stale_blocks()
        finally:
            metrics.close()
        return dict(self.counters)

    def _train(self, run: RunContext) -> None:
        if run.evaluation is not None:  # builds its envs while the loop starts
            run.evaluation.start(int(self.counters["env_steps"]))
        with run.signals.unwrapping_stops():  # a signal met inside Ray's C code
            self.loop.start(run)
        completed = False
        try:
            with run.signals.unwrapping_stops():
                self.loop.run(run)
            completed = True
            if run.evaluation is not None:
                run.evaluation.finish(self.counters, run.metrics)
        finally:
            try:
                self.loop.stop(run)
            finally:
                self._final_checkpoint(completed)

"""The Trainer: owns a run, its actors, its learner and its run directory.

One training iteration = take the next actor batch (oldest version first, see
``ProcessActorPool.next_batch``), train PPO on it, bump the version, publish
weights, release the actor's slot, record metrics.
With N = 1 actor and one slot per actor this is exactly synchronous training; with
N >= 2 actors unroll while the learner trains (asynchronous, lag <= N - 1).

Run directory layout (``root_dir``):

- ``config.gin``: the gin bindings of the run (resuming reads it);
- ``operative_config.gin``: the bindings actually used, with defaults;
- ``metrics.jsonl``: one JSON object per training iteration;
- ``tensorboard/``: TensorBoard event files;
- ``checkpoints/ckpt-<iteration>.pt``: the last few checkpoints;
- ``log.txt``: the log.

Every child process the trainer starts is ended on every path: normal end,
exception, Ctrl-C (final checkpoint, exit 130), SIGTERM (final checkpoint, exit
143), a second Ctrl-C (immediate kill of all children).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from typing import Any, Callable, Dict, Optional

import gin
import numpy as np
import psutil
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.checkpoint import Checkpointer
from alf_async.config import ConfigError
from alf_async.envs.gym_env import UnknownEnvError, env_dims
from alf_async.metrics import MetricsRecorder
from alf_async.runtime.actor import ActorConfig
from alf_async.runtime.actor_pool import InProcessActorPool, ProcessActorPool
from alf_async.utils.shared_memory import shm_directory, sweep_stale_blocks
from alf_async.runtime.trajectory import trajectory_nbytes
from alf_async.runtime.weight_store import WeightStore, weights_digest

logger = logging.getLogger("alf_async")

BACKENDS = ("process", "inprocess")
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class TerminationRequested(Exception):
    """SIGTERM was received; the run stops with a final checkpoint."""


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"Trainer.{name} must be an integer >= 1, got {value!r}")


def _integer(name: str, value: Any, low: Optional[int] = None) -> None:
    if (not isinstance(value, (int, np.integer)) or isinstance(value, bool)
            or (low is not None and value < low)):
        bound = f" >= {low}" if low is not None else ""
        raise ConfigError(f"Trainer.{name} must be an integer{bound}, got {value!r}")


@gin.configurable
class Trainer:
    """Trains PPO2 from N actors of K envs each.

    Args:
        root_dir: the run directory (created if missing; resumed if it has
            checkpoints).
        env_name: gymnasium id, e.g. ``HumanoidBulletEnv-v0``.
        num_envs: K, envs per actor. EPS = K / T.
        num_env_workers: W, env-worker processes per actor (0: envs step inside
            the actor process).
        num_actors: N actor processes. 1 = synchronous, >= 2 = asynchronous.
        unroll_length: steps per env per trajectory.
        slots_per_actor: trajectories an actor may have in flight; 1 (default)
            makes each actor wait for the learner to train on its batch.
        num_env_steps: budget in env steps (0 = no limit; one budget must be set).
        num_iterations: budget in training iterations (0 = no limit).
        seed: seeds the learner, the actors' sampling and the envs.
        backend: "process" (actor processes) or "inprocess" (N = 1 only; the
            actor runs in the trainer's process).
        checkpoint_interval: iterations between checkpoints (a final one is
            always written).
        reseed_at_checkpoints: at each periodic checkpoint the actor just
            released reseeds its envs and sampling from (seed, actor, iteration)
            and resets its envs (running episodes are dropped). A synchronous run
            resumed from such a checkpoint then repeats the uninterrupted run
            exactly. False keeps episodes running across checkpoints.
        max_actor_restarts: actor failures tolerated before the run stops.
        actor_timeout_s: an actor silent (no batch, no heartbeat) for this many
            seconds is taken as hung, killed and restarted (0: never).
        fatal_env_errors: an env that raises (or an env worker that dies) stops
            the run instead of being recreated with its episode dropped.
        max_episode_steps: override of the env's time limit (None keeps it).
        max_trajectory_memory_gb: refuse configurations whose trajectory slots
            (N * slots_per_actor * one trajectory) would need more shared memory.
        learner_num_threads: torch CPU threads of the learner (0 keeps torch's
            default, one per core). The default 1 suits the small MLPs of PPO and
            leaves the cores to the actors: with several threads on a machine
            whose cores are busy with actors, intra-op threads wait on each other
            (measured here: 15x slower training on 2 busy cores). Raise it for
            large networks trained on the CPU of a machine with spare cores.
        policy_factory: for tests of the runtime: builds the actors' policy
            (default: the learner's actor-critic).
    """

    def __init__(self, root_dir: str, env_name: str = "InvertedPendulumBulletEnv-v0",
                 num_envs: int = 8, num_env_workers: int = 0, num_actors: int = 1,
                 unroll_length: int = 128, slots_per_actor: int = 1,
                 num_env_steps: int = 0, num_iterations: int = 0, seed: int = 0,
                 backend: str = "process", checkpoint_interval: int = 20,
                 reseed_at_checkpoints: bool = True,
                 max_actor_restarts: int = 3, actor_timeout_s: float = 120.0,
                 fatal_env_errors: bool = False,
                 max_episode_steps: Optional[int] = None,
                 max_trajectory_memory_gb: float = 8.0, learner_num_threads: int = 1,
                 policy_factory: Optional[Callable] = None):
        for name in ("num_envs", "num_actors", "unroll_length", "slots_per_actor",
                     "checkpoint_interval"):
            _positive(name, locals()[name])
        for name, low in (("num_env_steps", 0), ("num_iterations", 0), ("seed", None),
                          ("max_actor_restarts", 0), ("learner_num_threads", 0)):
            _integer(name, locals()[name], low)
        if max_episode_steps is not None:
            _positive("max_episode_steps", max_episode_steps)
        if not isinstance(fatal_env_errors, (bool, np.bool_)):
            raise ConfigError(f"Trainer.fatal_env_errors must be True or False, "
                              f"got {fatal_env_errors!r}")
        if (not isinstance(actor_timeout_s, (int, float, np.number))
                or isinstance(actor_timeout_s, bool) or actor_timeout_s < 0):
            raise ConfigError(f"Trainer.actor_timeout_s must be a number >= 0, "
                              f"got {actor_timeout_s!r}")
        if (not isinstance(max_trajectory_memory_gb, (int, float, np.number))
                or isinstance(max_trajectory_memory_gb, bool) or max_trajectory_memory_gb <= 0):
            raise ConfigError(f"Trainer.max_trajectory_memory_gb must be a number > 0, "
                              f"got {max_trajectory_memory_gb!r}")
        if not isinstance(num_env_workers, int) or not 0 <= num_env_workers <= num_envs:
            raise ConfigError(f"Trainer.num_env_workers must be an integer in "
                              f"[0, num_envs={num_envs}], got {num_env_workers!r}")
        if num_env_steps < 0 or num_iterations < 0 or not (num_env_steps or num_iterations):
            raise ConfigError(
                "Set a budget: Trainer.num_env_steps and/or Trainer.num_iterations must be "
                f"> 0 (got num_env_steps={num_env_steps}, num_iterations={num_iterations})")
        if backend not in BACKENDS:
            raise ConfigError(f"Trainer.backend must be one of {BACKENDS}, got '{backend}'")
        if backend == "inprocess" and num_actors != 1:
            raise ConfigError("Trainer.backend='inprocess' runs one actor; set "
                              f"Trainer.num_actors=1 (got {num_actors}) or use 'process'")
        if max_actor_restarts < 0:
            raise ConfigError(f"Trainer.max_actor_restarts must be >= 0, got {max_actor_restarts}")
        try:
            observation_dim, action_dim, _ = env_dims(env_name)
        except UnknownEnvError as e:
            raise ConfigError(str(e)) from None
        one_batch = trajectory_nbytes(unroll_length, num_envs, observation_dim, action_dim)
        need = one_batch * num_actors * slots_per_actor
        if need > max_trajectory_memory_gb * 2 ** 30:
            raise ConfigError(
                f"The trajectory slots would need {need / 2 ** 30:.1f} GiB of shared memory "
                f"(num_actors={num_actors} x slots_per_actor={slots_per_actor} x "
                f"unroll_length={unroll_length} x num_envs={num_envs} x obs {observation_dim}"
                f"), over Trainer.max_trajectory_memory_gb={max_trajectory_memory_gb}; "
                "shorten unroll_length or use fewer envs")
        free = shutil.disk_usage(shm_directory()).free
        if need * 1.05 > free:
            raise ConfigError(
                f"The trajectory slots would need {need / 2 ** 30:.2f} GiB of shared memory "
                f"but {shm_directory()} has {free / 2 ** 30:.2f} GiB free; shorten "
                "unroll_length, use fewer envs or actors, or enlarge /dev/shm")
        # The learner works on float32 copies of one batch (normalized
        # observations, advantages, returns): count three batches for it.
        available = psutil.virtual_memory().available
        if need + 3 * one_batch > available:
            raise ConfigError(
                f"The run would need about {(need + 3 * one_batch) / 2 ** 30:.1f} GiB of "
                f"memory (trajectory slots plus the learner's copies of one batch of "
                f"unroll_length={unroll_length} x num_envs={num_envs}) but "
                f"{available / 2 ** 30:.1f} GiB is available; shorten unroll_length or "
                "use fewer envs or actors")
        self.root_dir = os.path.abspath(root_dir)
        self.env_name = env_name
        self.num_envs = num_envs
        self.num_env_workers = num_env_workers
        self.num_actors = num_actors
        self.unroll_length = unroll_length
        self.slots_per_actor = slots_per_actor
        self.num_env_steps = num_env_steps
        self.num_iterations = num_iterations
        self.seed = seed
        self.backend = backend
        self.checkpoint_interval = checkpoint_interval
        if not isinstance(reseed_at_checkpoints, bool):
            raise ConfigError(f"Trainer.reseed_at_checkpoints must be True or False, "
                              f"got {reseed_at_checkpoints!r}")
        self.reseed_at_checkpoints = reseed_at_checkpoints
        self.max_actor_restarts = max_actor_restarts
        self.actor_timeout_s = float(actor_timeout_s)
        self.fatal_env_errors = bool(fatal_env_errors)
        self.max_episode_steps = max_episode_steps
        self.policy_factory = policy_factory
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        if learner_num_threads < 0:
            raise ConfigError(f"Trainer.learner_num_threads must be >= 0, got {learner_num_threads}")
        if learner_num_threads:
            torch.set_num_threads(learner_num_threads)
        self.learner = PPOLearner(observation_dim, action_dim, seed=seed)
        try:
            self.learner.check_batch_size(unroll_length, num_envs)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        os.makedirs(self.root_dir, exist_ok=True)
        self.checkpointer = Checkpointer(self.root_dir)
        self.counters: Dict[str, float] = {"iteration": 0, "env_steps": 0, "episodes": 0,
                                           "wall_time": 0.0}
        self.published_digests: Dict[int, int] = {}
        self.pool = None
        self.store: Optional[WeightStore] = None
        self.env_failures = 0
        self._interrupts = 0
        self._stopping = False
        self._in_iteration = False
        self._deferred_stop: Optional[BaseException] = None

    # -- checkpoints ----------------------------------------------------------
    def _state(self) -> Dict[str, Any]:
        return {"learner": self.learner.state_dict(),
                "counters": dict(self.counters),
                "torch_rng": torch.get_rng_state(),
                "format": 1}

    def save_checkpoint(self) -> str:
        path = self.checkpointer.save(self._state(), int(self.counters["iteration"]))
        logger.info("checkpoint written: %s", path)
        return path

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
        logger.info("resumed from %s at iteration %d, %d env steps", path,
                    self.counters["iteration"], self.counters["env_steps"])
        return True

    # -- signals --------------------------------------------------------------
    def _on_signal(self, signum, frame):
        """SIGINT/SIGTERM: stop after the current iteration with a checkpoint;
        a second signal while stopping kills every child at once."""
        if signum == signal.SIGINT:
            self._interrupts += 1
        if self._stopping or self._interrupts >= 2:
            self._kill_everything_now()
            os._exit(EXIT_SIGINT if signum == signal.SIGINT else EXIT_SIGTERM)
        stop = KeyboardInterrupt() if signum == signal.SIGINT else TerminationRequested()
        if self._in_iteration:
            # Never interrupt a training iteration half-way: the final checkpoint
            # must hold a consistent learner state.
            self._deferred_stop = stop
            return
        raise stop

    def _kill_everything_now(self) -> None:
        """Second Ctrl-C: SIGKILL every child and remove shared memory at once."""
        import psutil

        me = psutil.Process()
        children = me.children(recursive=True)
        for child in children:
            try:
                child.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(children, timeout=5)
        if self.pool is not None:
            try:
                self.pool.slots.close()
            except Exception:
                pass
        if self.store is not None:
            self.store.close()
        sweep_stale_blocks()
        print("[alf_async] second interrupt: children killed, exiting now", flush=True)

    # -- the loop -------------------------------------------------------------
    def _budget_reached(self) -> bool:
        c = self.counters
        return bool((self.num_env_steps and c["env_steps"] >= self.num_env_steps)
                    or (self.num_iterations and c["iteration"] >= self.num_iterations))

    def _make_pool(self):
        config = ActorConfig(
            env_name=self.env_name, num_envs=self.num_envs,
            num_env_workers=self.num_env_workers, unroll_length=self.unroll_length,
            seed=self.seed, num_actors=self.num_actors,
            max_episode_steps=self.max_episode_steps,
            fatal_env_errors=self.fatal_env_errors,
            policy_factory=self.policy_factory, gin_config=gin.config_str())
        epoch = int(self.counters["iteration"])
        if self.backend == "inprocess":
            return InProcessActorPool(config, self.store, self.observation_dim,
                                      self.action_dim, epoch=epoch)
        return ProcessActorPool(config, self.num_actors, self.slots_per_actor, self.store,
                                self.observation_dim, self.action_dim,
                                max_restarts=self.max_actor_restarts, epoch=epoch,
                                actor_timeout_s=self.actor_timeout_s)

    def _publish(self) -> None:
        arrays = self.learner.weight_arrays()
        version = int(self.counters["iteration"])
        self.store.publish(arrays, version)
        self.published_digests[version] = weights_digest(arrays)

    def train(self) -> Dict[str, float]:
        """Run until the budget is reached; returns the final counters.

        Raises KeyboardInterrupt / TerminationRequested after a final checkpoint
        when interrupted; any other exception after stopping every child.
        """
        sweep_stale_blocks()
        resumed = self._restore()
        if self._budget_reached():
            logger.info("budget already reached (%d iterations, %d env steps)",
                        self.counters["iteration"], self.counters["env_steps"])
            return dict(self.counters)
        previous_sigterm = signal.signal(signal.SIGTERM, self._on_signal)
        previous_sigint = signal.signal(signal.SIGINT, self._on_signal)
        # Also without a checkpoint: rows of a killed run that never wrote one are
        # dropped, so that counters in the metrics file never go backward.
        metrics = MetricsRecorder(self.root_dir, resume_from=(
            int(self.counters["iteration"]), int(self.counters["env_steps"])))
        try:
            self.store = WeightStore.create(self.learner.weight_arrays())
            self._publish()
            self.pool = self._make_pool()
            logger.info("starting %d actor(s) x %d envs (%s backend, %d env workers "
                        "each), unroll_length %d%s", self.num_actors, self.num_envs,
                        self.backend, self.num_env_workers, self.unroll_length,
                        ", resumed" if resumed else "")
            self.pool.start()
            self._loop(metrics)
        finally:
            # Every path: stop the children, release shared memory.
            self._stopping = True
            try:
                if self.pool is not None:
                    self.pool.close()
                if self.store is not None:
                    self.store.close()
                sweep_stale_blocks()
            finally:
                metrics.close()
                signal.signal(signal.SIGTERM, previous_sigterm)
                signal.signal(signal.SIGINT, previous_sigint)
        self._stopping = False
        return dict(self.counters)

    def _loop(self, metrics: MetricsRecorder) -> None:
        c = self.counters
        start = time.monotonic()
        wall_at_start = c["wall_time"]
        last_end = start
        completed_ok = False
        record = None
        try:
            while not self._budget_reached():
                wait_start = time.monotonic()
                message, batch = self.pool.next_batch()
                self._in_iteration = True
                train_start = time.monotonic()
                version = int(c["iteration"])
                stats = self.learner.train(batch)
                c["iteration"] += 1
                self._publish()
                checkpoint_now = c["iteration"] % self.checkpoint_interval == 0
                # Actors reseed at checkpoints so that resuming replays exactly.
                reseed = checkpoint_now and self.reseed_at_checkpoints
                self.pool.release(message, int(c["iteration"]) if reseed else None)
                end = time.monotonic()
                self._report_env_failures(message)
                c["env_steps"] += message.env_steps
                c["episodes"] += len(message.episodes)
                c["wall_time"] = wall_at_start + (end - start)
                T = end - last_end
                last_end = end
                metrics.add_episodes(message.episodes)
                record = {
                    "iteration": int(c["iteration"]), "env_steps": int(c["env_steps"]),
                    "episodes": int(c["episodes"]), "wall_time": c["wall_time"],
                    "num_envs": self.num_envs, "num_actors": self.num_actors,
                    "unroll_length": self.unroll_length,
                    "T": T, "EPS": self.num_envs / T,
                    "env_steps_per_s": message.env_steps / T,
                    "learner_train_s": end - train_start,
                    "learner_wait_s": train_start - wait_start,
                    "actor_id": message.actor_id, "actor_unroll_s": message.unroll_s,
                    "actor_wait_s": message.wait_s,
                    "actor_inference_s": message.inference_s,
                    "actor_env_s": message.env_s,
                    "queue_length": self.pool.queue_length(),
                    "behaviour_version": message.version,
                    "behaviour_digest": message.weights_digest,
                    "lag": version - message.version,
                    "episodes_finished": len(message.episodes),
                    "actor_restarts": self.pool.restarts,
                    "env_failures": self.env_failures,
                }
                record.update(stats)
                record = metrics.record(record)
                metrics.console(record, self.num_env_steps, self.num_iterations)
                if checkpoint_now:
                    self.save_checkpoint()
                self._in_iteration = False
                if self._deferred_stop is not None:
                    raise self._deferred_stop
            completed_ok = True
            if record:
                metrics.console(record, self.num_env_steps, self.num_iterations, force=True)
        finally:
            self._in_iteration = False
            # The learner state is consistent between iterations, so a final
            # checkpoint is valid after a normal end, an interrupt or an actor
            # failure; after a learner error it would hold a half-trained model.
            import sys

            exc = sys.exc_info()[1]
            learner_failed = exc is not None and not isinstance(
                exc, (KeyboardInterrupt, TerminationRequested)) and not _is_actor_failure(exc)
            if ((completed_ok or not learner_failed) and c["iteration"] > 0
                    and c["iteration"] % self.checkpoint_interval != 0):
                self.save_checkpoint()


    def _report_env_failures(self, message) -> None:
        for env_index, details in message.env_failures:
            self.env_failures += 1
            last = details.strip().splitlines()[-1] if details.strip() else "?"
            logger.warning("env %d of actor %d (%s) failed and was recreated; its episode "
                           "was dropped: %s", env_index, message.actor_id, self.env_name, last)
            logger.debug("env failure traceback:\n%s", details)


def _is_actor_failure(exc: BaseException) -> bool:
    from alf_async.runtime.actor_pool import ActorPoolError

    return isinstance(exc, ActorPoolError)

"""``ProcessActorPool``: N actor processes feeding one learner (the default pool).

Each actor owns ``slots_per_actor`` trajectory slots of one shared-memory block
and reads the weights from one shared-memory ``WeightStore``; its pipe to the
learner carries only the small typed messages of ``runtime.messages``. The learner
waits on all pipes and on the processes' sentinels at once, so a dead actor is
noticed as soon as it dies; a busy actor sends heartbeats, so a hung one is
noticed after ``actor_timeout_s``. Failed actors are restarted with fresh envs up
to ``max_actor_restarts`` times in total; after that ``ActorPoolError`` is raised.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from alf_async.envs.spaces import ObservationSpec
from alf_async.runtime import messages
from alf_async.runtime.actor_process import ActorLaunch, actor_process_main
from alf_async.runtime.actor_pool import (ActorPoolError, ActorStartupError, PoolStats,
                                         check_restart_allowed, last_line, wait_for_batch)
from alf_async.runtime.policy import PolicyFactory
from alf_async.runtime.scheduler import LagScheduler
from alf_async.runtime.trajectory import TrajectorySlots
from alf_async.runtime.weight_store import WeightStore
from alf_async.settings import TrainerSettings
from alf_async.utils.process import (describe_exit, start_child, stop_processes,
                                     torch_child_context)
from alf_async.utils.shared_memory import sweep_stale_blocks

logger = logging.getLogger("alf_async")


@dataclass
class _ActorHandle:
    actor_id: int
    generation: int
    process: object
    conn: object
    ready: bool = False
    last_heard: float = 0.0
    unroll_steps: int = 0  # env steps into its current unroll (newest heartbeat)
    env_worker_pids: Tuple[int, ...] = field(default_factory=tuple)


class ProcessActorPool:
    """The ``ActorPool`` of ``Trainer.backend = "process"``.

    Args:
        settings: the run's settings (N, K, W, slots_per_actor, fault knobs).
        policy_factory: builds each actor's policy (in the actor process).
        example_weights: arrays shaped like the weights to publish.
        observation, action_dim: the env's ObservationSpec (an int O: a float32 vector) and A.
        gin_config: bindings each actor process parses (network sizes).
        epoch: iteration the run starts from (seeds the actors).
        startup_timeout_s: time an actor may take to become ready.
        state_size: S of the actors' recurrent policy (0: feed-forward).
    """

    def __init__(self, settings: TrainerSettings, policy_factory: PolicyFactory,
                 example_weights: Mapping[str, np.ndarray], observation: ObservationSpec,
                 action_dim: int, gin_config: str = "", epoch: int = 0,
                 startup_timeout_s: float = 120.0, state_size: int = 0):
        self.settings = settings
        self.policy_factory = policy_factory
        self.gin_config = gin_config
        self.epoch = epoch
        self.startup_timeout_s = startup_timeout_s
        self.restarts = 0
        self.dropped_batches = 0
        self._ctx = torch_child_context()
        self._handles: Dict[int, _ActorHandle] = {}
        self._scheduler = LagScheduler(settings.num_actors, settings.slots_per_actor,
                                       enforce_lag=not settings.off_policy)
        self.store = WeightStore.create(example_weights)
        try:
            self.slots = TrajectorySlots.create(
                settings.num_actors * settings.slots_per_actor, settings.unroll_length,
                settings.num_envs, observation, action_dim,
                next_observation=settings.off_policy, state_size=state_size)
        except BaseException:
            self.store.close()
            raise

    # -- life cycle ---------------------------------------------------------
    def publish_weights(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        self.store.publish(arrays, version)

    def _slot_indices(self, actor_id: int) -> List[int]:
        first = actor_id * self.settings.slots_per_actor
        return list(range(first, first + self.settings.slots_per_actor))

    def _spawn(self, actor_id: int, generation: int) -> None:
        launch = ActorLaunch(actor_id, generation, self.epoch, self.settings,
                             pickle.dumps(self.policy_factory), self.gin_config, self.slots.name,
                             self.slots.specs, self._slot_indices(actor_id),
                             self.store.name, self.store.specs, os.getpid())
        parent_conn, child_conn = self._ctx.Pipe()
        process = start_child(self._ctx, actor_process_main, (launch, child_conn),
                              name=f"alf_async-actor-{actor_id}")
        child_conn.close()
        for slot in launch.slot_indices:
            self._scheduler.handed_out(slot, self.store.version)
        self._handles[actor_id] = _ActorHandle(actor_id, generation, process, parent_conn,
                                               last_heard=time.monotonic())

    def start(self) -> None:
        """Start all actors and wait until each has built its envs."""
        for actor_id in range(self.settings.num_actors):
            self._spawn(actor_id, 0)
        deadline = time.monotonic() + self.startup_timeout_s
        while not all(h.ready for h in self._handles.values()):
            if time.monotonic() > deadline:
                late = [h.actor_id for h in self._handles.values() if not h.ready]
                raise ActorPoolError(f"actors {late} did not start within "
                                     f"{self.startup_timeout_s:.0f} s")
            self._poll(1.0)

    @property
    def pids(self) -> List[int]:
        """Pids of the actor processes and of their env workers."""
        pids = []
        for h in self._handles.values():
            if h.process.pid is not None:
                pids.append(h.process.pid)
            pids.extend(h.env_worker_pids)
        return pids

    def close(self) -> None:
        """Stop every actor (and so its env workers) and release shared memory.

        An actor reads messages only between unrolls, so each is also sent
        SIGTERM at once: one in the middle of an unroll (whose batch nobody will
        train on) leaves it through its SIGTERM handler, which stops its env
        workers and releases its shared memory, instead of finishing the unroll
        first (up to an unroll's time at the end of every async run)."""
        processes = [h.process for h in self._handles.values()]
        for h in self._handles.values():
            try:
                h.conn.send(messages.StopActor())
            except (OSError, ValueError):
                pass
        for process in processes:
            if process.pid is not None and process.is_alive():
                process.terminate()
        stop_processes(processes, grace_s=5.0)
        for h in self._handles.values():
            h.conn.close()
        self._handles = {}
        self.slots.close()
        self.store.close()

    # -- failures -------------------------------------------------------------
    def restart_actor(self, actor_id: int, reason: str, fatal: bool = False) -> None:
        """Stop actor ``actor_id``, drop its pending batches, start a fresh one."""
        handle = self._handles[actor_id]
        if not handle.ready:
            stop_processes([handle.process], grace_s=3.0)
            handle.conn.close()
            raise ActorStartupError(f"actor {actor_id} could not start: {last_line(reason)}")
        message = f"actor {actor_id} (pid {handle.process.pid}) failed: {reason}"
        logger.error(message)
        # Its pending batches live in slots the restarted actor will reuse.
        self.dropped_batches += self._scheduler.drop_actor(actor_id)
        stop_processes([handle.process], grace_s=3.0)
        handle.conn.close()
        # A killed actor could not unlink its blocks (its env workers' step
        # buffers); they would stay in /dev/shm until the run ends.
        sweep_stale_blocks()
        check_restart_allowed(message, fatal, self.restarts, self.settings.max_actor_restarts)
        self.restarts += 1
        logger.warning("restarting actor %d with fresh envs (restart %d of %d)", actor_id,
                       self.restarts, self.settings.max_actor_restarts)
        self._spawn(actor_id, handle.generation + 1)

    def _check_hung_actors(self) -> None:
        timeout = self.settings.actor_timeout_s
        if not timeout:
            return
        now = time.monotonic()
        for handle in list(self._handles.values()):
            # Before ActorReady the start-up timeout applies instead.
            if handle.ready and now - handle.last_heard > timeout:
                self.restart_actor(handle.actor_id, f"no message or heartbeat for "
                                                    f"{now - handle.last_heard:.0f} s (hung); killed")

    # -- messages -------------------------------------------------------------
    def _handle_message(self, handle: _ActorHandle, message) -> None:
        if message.generation != handle.generation:
            return  # from a replaced actor
        handle.last_heard = time.monotonic()
        if isinstance(message, messages.BatchReady):
            self._scheduler.arrived(message)
            handle.unroll_steps = 0
        elif isinstance(message, messages.Heartbeat):
            handle.unroll_steps = message.unroll_steps
        elif isinstance(message, messages.ActorReady):
            handle.ready = True
            handle.env_worker_pids = tuple(message.env_worker_pids)
        elif isinstance(message, messages.ActorFailed):
            where = (f" (env index {message.env_index})"
                     if message.env_index is not None else "")
            self.restart_actor(handle.actor_id, f"exception{where}:\n{message.error}",
                               fatal=self.settings.fatal_env_errors
                               and message.env_index is not None)

    def _drain(self, handle: _ActorHandle) -> None:
        while handle.conn.poll():
            self._handle_message(handle, handle.conn.recv())
            if self._handles.get(handle.actor_id) is not handle:
                return  # restarted while handling

    def _poll(self, timeout: float) -> None:
        by_conn = {h.conn: h for h in self._handles.values()}
        by_sentinel = {h.process.sentinel: h for h in self._handles.values()}
        dead = []
        for obj in wait(list(by_conn) + list(by_sentinel), timeout):
            if obj in by_conn:
                try:
                    self._drain(by_conn[obj])
                except (EOFError, OSError):
                    dead.append(by_conn[obj])
            else:
                dead.append(by_sentinel[obj])
        for handle in dead:
            if self._handles.get(handle.actor_id) is not handle:
                continue
            handle.process.join(1.0)
            if handle.process.is_alive():
                continue
            try:  # a final message (ActorFailed) may still be in the pipe
                self._drain(handle)
            except (EOFError, OSError):
                pass
            if self._handles.get(handle.actor_id) is handle:
                self.restart_actor(handle.actor_id, f"process died with "
                                                    f"{describe_exit(handle.process.exitcode)}")
        self._check_hung_actors()

    def next_batch(self, timeout: Optional[float] = None
                   ) -> Optional[Tuple[messages.BatchReady, Dict[str, np.ndarray]]]:
        """Wait until the scheduler picks a batch; returns its message and slot
        views, or None if none is ready within ``timeout`` seconds (None: wait)."""
        def take():
            message = self._scheduler.next(self.store.version)
            return None if message is None else (message, self.slots.slot(message.slot))

        return wait_for_batch(take, self._poll, timeout)

    def release(self, message: messages.BatchReady, reseed_epoch: Optional[int] = None) -> None:
        """Give the slot of a trained batch back to its actor.

        With ``reseed_epoch`` the actor reseeds and resets its envs before its
        next unroll; restarted actors are seeded from it too.
        """
        if reseed_epoch is not None:
            self.epoch = reseed_epoch
        handle = self._handles.get(message.actor_id)
        if handle is None or handle.generation != message.generation:
            return
        self._scheduler.handed_out(message.slot, self.store.version)
        try:
            handle.conn.send(messages.ReleaseSlot(message.slot, reseed_epoch))
        except (OSError, ValueError):
            pass  # _poll reports the dead actor

    def stats(self) -> PoolStats:
        return PoolStats(len(self._scheduler), self.restarts, self.dropped_batches,
                         unroll_steps={a: h.unroll_steps for a, h in self._handles.items()})

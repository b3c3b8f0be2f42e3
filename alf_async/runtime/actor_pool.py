"""Actor pools: where the learner gets its trajectory batches from.

``ProcessActorPool`` (the default backend) runs N actor processes. Each actor owns
``slots_per_actor`` trajectory slots in one shared-memory block; it talks to the
learner over its own pipe, which carries only small messages (runtime.messages).
The learner waits on all pipes and on the processes' sentinels at once, so a dead
actor is noticed as soon as it dies. Failed actors are restarted with fresh envs up
to ``max_restarts`` times in total; after that ``ActorPoolError`` is raised.

``InProcessActorPool`` runs one ``Actor`` inside the learner's process (N = 1):
the reference path, useful for debugging and for checking the process path.

Both offer the same interface: ``start()``, ``next_batch()``, ``release()``,
``close()``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Dict, List, Optional, Tuple

import numpy as np

from alf_async.runtime import messages
from alf_async.runtime.actor import Actor, ActorConfig, actor_process_main
from alf_async.runtime.trajectory import TrajectorySlots, allocate_trajectory
from alf_async.runtime.weight_store import WeightStore
from alf_async.utils.process import describe_exit, mp_context, stop_processes

logger = logging.getLogger("alf_async")


class ActorPoolError(RuntimeError):
    """Actors failed more often than the restart budget allows."""


@dataclass
class _ActorHandle:
    actor_id: int
    generation: int
    process: object
    conn: object
    ready: bool = False
    last_heard: float = 0.0
    pid: Optional[int] = None
    env_worker_pids: Tuple[int, ...] = ()


class ProcessActorPool:
    """N actor processes feeding one learner.

    Args:
        config: what each actor runs.
        num_actors: N >= 1.
        slots_per_actor: trajectories an actor may have in flight (1 = wait for
            the learner after each unroll: synchronous for N = 1, lag <= N - 1).
        weight_store: the learner's store (weights must be published before the
            actors' first unroll).
        observation_dim, action_dim: O and A.
        max_restarts: actor failures tolerated over the whole run.
        startup_timeout_s: time an actor may take to become ready.
        epoch: iteration the run starts from (seeds the actors; see ActorConfig).
        actor_timeout_s: an actor that sends nothing (not even a heartbeat) for
            this long is taken as hung: it is killed and restarted like a dead
            one (0 disables the check).
    """

    def __init__(self, config: ActorConfig, num_actors: int, slots_per_actor: int,
                 weight_store: WeightStore, observation_dim: int, action_dim: int,
                 max_restarts: int = 3, startup_timeout_s: float = 120.0,
                 epoch: int = 0, actor_timeout_s: float = 120.0):
        self.config = config
        self.actor_timeout_s = actor_timeout_s
        self.epoch = epoch
        self.num_actors = num_actors
        self.slots_per_actor = slots_per_actor
        self.weight_store = weight_store
        self.max_restarts = max_restarts
        self.startup_timeout_s = startup_timeout_s
        self.restarts = 0
        self.failures: List[str] = []
        self._ctx = mp_context()
        self._handles: Dict[int, _ActorHandle] = {}
        self._pending: List[messages.BatchReady] = []
        # slot -> the oldest version its unroll under way can act with (the
        # version published when the slot was handed to the actor).
        self._unrolling: Dict[int, int] = {}
        self.slots = TrajectorySlots.create(num_actors * slots_per_actor,
                                            config.unroll_length, config.num_envs,
                                            observation_dim, action_dim)

    # -- life cycle ---------------------------------------------------------
    def _slot_indices(self, actor_id: int) -> List[int]:
        first = actor_id * self.slots_per_actor
        return list(range(first, first + self.slots_per_actor))

    def _spawn(self, actor_id: int, generation: int) -> None:
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(
            target=actor_process_main, name=f"alf_async-actor-{actor_id}", daemon=False,
            args=(actor_id, self.epoch, generation, self.config, child_conn, self.slots.name,
                  self.slots.specs, self._slot_indices(actor_id), self.weight_store.name,
                  self.weight_store.specs, os.getpid()))
        process.start()
        child_conn.close()
        for slot in self._slot_indices(actor_id):
            self._unrolling[slot] = self.weight_store.version
        self._handles[actor_id] = _ActorHandle(actor_id, generation, process, parent_conn,
                                               last_heard=time.monotonic())

    def start(self) -> None:
        """Start all actors and wait until each has built its envs."""
        for actor_id in range(self.num_actors):
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
        """Stop every actor (and so its env workers) and release shared memory."""
        for h in self._handles.values():
            try:
                h.conn.send((messages.STOP, None))
            except (OSError, ValueError):
                pass
        stop_processes([h.process for h in self._handles.values()], grace_s=5.0)
        for h in self._handles.values():
            h.conn.close()
        self._handles = {}
        self.slots.close()

    # -- messages -------------------------------------------------------------
    def _on_failure(self, handle: _ActorHandle, description: str,
                    fatal: bool = False) -> None:
        message = f"actor {handle.actor_id} (pid {handle.process.pid}) failed: {description}"
        self.failures.append(message)
        logger.error(message)
        # Its pending batches live in slots the restarted actor will reuse.
        self._pending = [m for m in self._pending if m.actor_id != handle.actor_id]
        stop_processes([handle.process], grace_s=3.0)
        handle.conn.close()
        if fatal:
            raise ActorPoolError(f"{message}\nenv errors are fatal (Trainer.fatal_env_errors"
                                 "=True); stopping the run")
        if self.restarts >= self.max_restarts:
            raise ActorPoolError(
                f"{message}\nno restart left (max_actor_restarts={self.max_restarts}); "
                "stopping the run")
        self.restarts += 1
        logger.warning("restarting actor %d with fresh envs (restart %d of %d)",
                       handle.actor_id, self.restarts, self.max_restarts)
        self._spawn(handle.actor_id, handle.generation + 1)

    def _handle_message(self, handle: _ActorHandle, message) -> None:
        if getattr(message, "generation", handle.generation) != handle.generation:
            return
        handle.last_heard = time.monotonic()
        if isinstance(message, messages.BatchReady):
            self._unrolling.pop(message.slot, None)
            self._pending.append(message)
        elif isinstance(message, messages.ActorReady):
            handle.ready = True
            handle.pid = message.pid
            handle.env_worker_pids = tuple(message.env_worker_pids)
        elif isinstance(message, messages.ActorFailed):
            where = (f" (env index {message.env_index})"
                     if message.env_index is not None else "")
            self._on_failure(handle, f"exception{where}:\n{message.error}",
                             fatal=self.config.fatal_env_errors and message.env_index is not None)

    def _poll(self, timeout: float) -> None:
        by_conn = {h.conn: h for h in self._handles.values()}
        by_sentinel = {h.process.sentinel: h for h in self._handles.values()}
        ready = wait(list(by_conn) + list(by_sentinel), timeout)
        dead = []
        for obj in ready:
            if obj in by_conn:
                handle = by_conn[obj]
                try:
                    while handle.conn.poll():
                        self._handle_message(handle, handle.conn.recv())
                        if self._handles.get(handle.actor_id) is not handle:
                            break  # restarted while handling
                except (EOFError, OSError):
                    dead.append(handle)
            else:
                dead.append(by_sentinel[obj])
        for handle in dead:
            if self._handles.get(handle.actor_id) is not handle:
                continue
            handle.process.join(1.0)
            if handle.process.is_alive():
                continue
            # A final message (ActorFailed) may still be in the pipe.
            try:
                while handle.conn.poll():
                    self._handle_message(handle, handle.conn.recv())
            except (EOFError, OSError):
                pass
            if self._handles.get(handle.actor_id) is handle:
                self._on_failure(handle, f"process died with "
                                         f"{describe_exit(handle.process.exitcode)}")
        self._check_hung_actors()

    def _check_hung_actors(self) -> None:
        if not self.actor_timeout_s:
            return
        now = time.monotonic()
        for handle in list(self._handles.values()):
            # Before ActorReady the start-up timeout applies instead.
            if handle.ready and now - handle.last_heard > self.actor_timeout_s:
                self._on_failure(handle, f"no message or heartbeat for "
                                         f"{now - handle.last_heard:.0f} s (hung); killed")

    def next_batch(self) -> Tuple[messages.BatchReady, Dict[str, np.ndarray]]:
        """Block until a batch is ready; returns its message and slot views.

        Batches are handed out in the order the actors finished them. With one
        slot per actor, lag <= N - 1 is kept even when an actor is late: a batch
        acted by version v must be trained at version v + N - 1 at the latest;
        the oldest pending batch goes first, and only if every other batch
        (pending, or still being unrolled) can still meet its deadline, one per
        iteration, afterwards; otherwise the learner waits for the late actor.
        """
        while True:
            index = self._next_index()
            if index is not None:
                break
            self._poll(1.0)
        message = self._pending.pop(index)
        return message, self.slots.slot(message.slot)

    def _next_index(self) -> Optional[int]:
        if not self._pending:
            return None
        order = sorted(range(len(self._pending)), key=lambda i: self._pending[i].sent_at)
        if self.slots_per_actor != 1:
            return order[0]
        first = min(order, key=lambda i: self._pending[i].version)
        others = sorted([m.version for i, m in enumerate(self._pending) if i != first]
                        + list(self._unrolling.values()))
        now = self.weight_store.version
        if not self._unrolling or all(v + self.num_actors - 1 >= now + k
                                      for k, v in enumerate(others, start=1)):
            return first
        return None

    def queue_length(self) -> int:
        """Batches received and not yet handed to the learner."""
        return len(self._pending)

    def release(self, message: messages.BatchReady, reseed_epoch: Optional[int] = None) -> None:
        """Give the slot of a trained batch back to its actor.

        With ``reseed_epoch`` the actor reseeds and resets its envs before its
        next unroll (see ActorConfig); restarted actors are seeded from it too.
        """
        if reseed_epoch is not None:
            self.epoch = reseed_epoch
        handle = self._handles.get(message.actor_id)
        if handle is None or handle.generation != message.generation:
            return
        self._unrolling[message.slot] = self.weight_store.version
        try:
            handle.conn.send((messages.RELEASE, (message.slot, reseed_epoch)))
        except (OSError, ValueError):
            pass  # _poll reports the dead actor


class InProcessActorPool:
    """One actor unrolling inside the learner's process (N = 1, synchronous)."""

    def __init__(self, config: ActorConfig, weight_store: WeightStore,
                 observation_dim: int, action_dim: int, epoch: int = 0):
        self.config = config
        self.epoch = epoch
        self.weight_store = weight_store
        self.actor: Optional[Actor] = None
        self.buffer = allocate_trajectory(config.unroll_length, config.num_envs,
                                          observation_dim, action_dim)
        self.restarts = 0
        self.failures: List[str] = []

    def start(self) -> None:
        self.actor = Actor(0, self.config, self.epoch, 0)

    @property
    def pids(self) -> List[int]:
        return list(self.actor.env.worker_pids) if self.actor else []

    def next_batch(self) -> Tuple[messages.BatchReady, Dict[str, np.ndarray]]:
        newer = self.weight_store.read_newer(self.actor.version)
        if newer is not None:
            self.actor.load_weights(*newer)
        info = self.actor.unroll(self.buffer)
        return messages.BatchReady(0, 0, 0, self.actor.version, self.actor.digest,
                                   info.env_steps, info.unroll_s, 0.0, info.inference_s,
                                   info.env_s, time.monotonic(), info.episodes,
                                   info.env_failures), self.buffer

    def queue_length(self) -> int:
        return 0

    def release(self, message: messages.BatchReady, reseed_epoch: Optional[int] = None) -> None:
        if reseed_epoch is not None:
            self.epoch = reseed_epoch
            self.actor.reseed(reseed_epoch)

    def close(self) -> None:
        if self.actor is not None:
            self.actor.close()
            self.actor = None

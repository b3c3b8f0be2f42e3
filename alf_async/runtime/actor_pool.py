"""The actor-pool interface: where the learner gets its trajectory batches from.

A pool owns N actors, their trajectory slots and the published weights. The
Trainer drives any pool the same way:

    pool.publish_weights(arrays, version=0)
    pool.start()
    while not done:
        message, batch = pool.next_batch()     # oldest version first, lag <= N - 1
        ... train on batch ...
        pool.publish_weights(new_arrays, version + 1)
        pool.release(message)                  # the actor may reuse the slot
    pool.close()

Implementations: ``ProcessActorPool`` (runtime.process_pool; one process per
actor, the default), ``InProcessActorPool`` (runtime.inprocess_pool; N = 1 in the
trainer's process, the reference path), ``RayActorPool`` (runtime.ray_pool; one
Ray actor per actor, on any node of a Ray cluster). Every pool keeps the same contract:
``slots_per_actor`` trajectories in flight per actor, N = 1 exactly synchronous,
lag <= N - 1 with one slot per actor (runtime.scheduler), failed actors restarted
up to ``max_actor_restarts`` (then ``ActorPoolError``), every child process and
shared-memory block released by ``close()`` on every path.

This module is the interface and the helpers the pools share; it imports no
pool. ``make_actor_pool`` (runtime.pool_factory) builds the pool of a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import time
from typing import Callable, Dict, List, Mapping, Optional, Protocol, Tuple, TypeVar

import numpy as np

from alf_async.runtime.messages import BatchReady


class ActorPoolError(RuntimeError):
    """Actors failed more often than the restart budget allows (or fatally)."""


class ActorStartupError(ActorPoolError):
    """An actor failed before it was ready (its envs could not be built, a module
    could not be imported, ...): a failure that would recur, so it is not
    restarted. The message is the failure's own last line."""


def last_line(text: str) -> str:
    """The last non-empty line of a traceback: the error itself."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else str(text)


def check_restart_allowed(failure: str, fatal: bool, restarts: int,
                          max_restarts: int) -> None:
    """Raise ``ActorPoolError`` if a failed actor may not be restarted: its env
    errors are fatal (``Trainer.fatal_env_errors``) or no restart is left."""
    if fatal:
        raise ActorPoolError(f"{failure}\nenv errors are fatal (Trainer.fatal_env_errors"
                             "=True); stopping the run")
    if restarts >= max_restarts:
        raise ActorPoolError(f"{failure}\nno restart left (max_actor_restarts="
                             f"{max_restarts}); stopping the run")


T = TypeVar("T")


def wait_for_batch(take: Callable[[], Optional[T]], poll: Callable[[float], None],
                   timeout: Optional[float]) -> Optional[T]:
    """The waiting loop of a pool's ``next_batch``: ``take()`` the batch the
    scheduler picks, else ``poll(seconds)`` the actors for news (at least once,
    so that messages already waiting are read even with ``timeout`` 0) until
    ``timeout`` seconds have passed (None: until a batch comes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        batch = take()
        if batch is not None:
            return batch
        left = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        poll(min(1.0, left))
        if deadline is not None and time.monotonic() >= deadline:
            return take()


@dataclass
class PoolStats:
    """Counters of a pool, read by the Trainer after each iteration.

    queue_length: batches received and not yet handed to the learner.
    restarts: actor restarts so far (over the whole run of this pool).
    dropped_batches: batches lost with a failed actor (never trained on; the
        Ray pool counts the failed actor's unfinished calls too).
    bytes_moved: payload bytes the pool moved between learner and actors so far
        (trajectories in, weights out), for pools whose actors may run on other
        machines (Ray); 0 where everything stays in this machine's shared memory.
    actor_nodes: actor id -> id of the node it runs on (Ray); empty otherwise.
    unroll_steps: actor id -> env steps it has taken in its current unroll, as
        of its newest heartbeat (every ~2 s; process pool); empty where unknown.
    """

    queue_length: int
    restarts: int
    dropped_batches: int
    bytes_moved: int = 0
    actor_nodes: Dict[int, str] = field(default_factory=dict)
    unroll_steps: Dict[int, int] = field(default_factory=dict)


class ActorPool(Protocol):
    """What the Trainer needs of a source of actor batches."""

    def publish_weights(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        """Make ``arrays`` the weights actors load before their next unroll."""

    def start(self) -> None:
        """Start every actor; returns once each has built its envs."""

    def next_batch(self, timeout: Optional[float] = None
                   ) -> Optional[Tuple[BatchReady, Dict[str, np.ndarray]]]:
        """Wait until the batch to train on next is ready: (message, [T, K] arrays).

        With ``timeout`` (seconds), None if no batch is ready by then (an
        off-policy learner polls while it trains). The arrays stay valid until
        ``release(message)``.
        """

    def release(self, message: BatchReady, reseed_epoch: Optional[int] = None) -> None:
        """Hand the batch's slot back to its actor (reseeding it at ``reseed_epoch``)."""

    def restart_actor(self, actor_id: int, reason: str) -> None:
        """Replace actor ``actor_id`` by a fresh one (counts against the restarts)."""

    def stats(self) -> PoolStats:
        """Current counters."""

    @property
    def pids(self) -> List[int]:
        """Pids of the pool's child processes (actors and env workers)."""

    def close(self) -> None:
        """Stop every actor and release all shared resources. Safe to call twice."""

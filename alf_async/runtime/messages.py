"""The typed messages between actors and the learner, in both directions.

Actor -> learner (over the actor's pipe, or returned by a pool in-process):

- ``ActorReady`` once, after the actor built its envs;
- ``BatchReady`` per trajectory: the data itself is in a shared-memory slot, the
  message carries the slot, the policy version that acted and the actor's
  ``UnrollRecord`` (timings, finished episodes, env failures);
- ``Heartbeat`` every few seconds while busy, so that a hung actor can be told
  from a slow one;
- ``ActorFailed`` with a traceback when the actor dies of an exception.

Learner -> actor:

- ``ReleaseSlot``: the learner trained on the slot and published new weights;
  with ``reseed_epoch`` set the actor reseeds and resets its envs first;
- ``StopActor``: end the actor loop.

Messages are small picklable dataclasses; every actor -> learner message names
the actor and its generation (restart count), so a message of a replaced actor
is recognised and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

# Seconds between heartbeats of a busy actor or Hogwild worker (see
# TrainerSettings.actor_timeout_s).
HEARTBEAT_INTERVAL_S = 2.0


@dataclass
class UnrollRecord:
    """What one unroll of T steps on K envs produced besides the trajectory.

    Attributes:
        unroll_s: seconds of the whole unroll.
        inference_s: seconds spent in the policy (acting and value estimates).
        env_s: seconds spent stepping the batched env.
        env_steps: T * K.
        episodes: (return, length) of the episodes that ended during the unroll.
        env_failures: (env index, traceback) of envs that failed and were
            recreated during the unroll (their episodes are not in ``episodes``).
        acting_env_workers: the actor's env workers acted for their envs and
            unrolled them by themselves (``envs.acting_workers``).
    """

    unroll_s: float
    inference_s: float
    env_s: float
    env_steps: int
    episodes: List[Tuple[float, int]] = field(default_factory=list)
    env_failures: List[Tuple[int, str]] = field(default_factory=list)
    acting_env_workers: bool = False


@dataclass
class ActorReady:
    actor_id: int
    generation: int
    pid: int
    env_worker_pids: List[int]


@dataclass
class BatchReady:
    """A trajectory is complete in ``slot``.

    Attributes:
        version: the policy version that acted (the weight store's version the
            actor loaded before the unroll).
        weights_digest: CRC of those weights (tests check it against the learner's).
        wait_s: seconds the actor waited for a free slot and weights before the
            unroll.
        sent_at: time.monotonic() in the actor (comparable across processes on
            one machine); orders batches by arrival.
        unroll: the actor's record of the unroll.
    """

    actor_id: int
    generation: int
    slot: int
    version: int
    weights_digest: int
    wait_s: float
    sent_at: float
    unroll: UnrollRecord


@dataclass
class Heartbeat:
    """unroll_steps: env steps (t x K) the actor has taken in its current unroll
    (0 while it waits for a slot)."""

    actor_id: int
    generation: int
    unroll_steps: int = 0


@dataclass
class ActorFailed:
    actor_id: int
    generation: int
    error: str
    env_index: Optional[int] = None


@dataclass
class ReleaseSlot:
    """The learner is done with ``slot``; its data may be overwritten."""

    slot: int
    reseed_epoch: Optional[int] = None


@dataclass
class StopActor:
    """End the actor loop (the actor closes its envs and exits)."""

"""The small messages exchanged between actors and the learner.

Actors send ``ActorReady`` once, then a ``BatchReady`` per trajectory (the data
itself is in a shared-memory slot), ``Heartbeat`` while they work, or
``ActorFailed`` with a traceback. The
learner sends ``("release", (slot, reseed_epoch))`` when it has trained on a slot
and published new weights (``reseed_epoch`` is an iteration number when the actor
must reseed and reset its envs before its next unroll, else None), and
``("stop", None)`` at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass
class ActorReady:
    actor_id: int
    generation: int
    pid: int
    env_worker_pids: List[int]


@dataclass
class BatchReady:
    """A trajectory is complete in ``slot``.

    Times are seconds; ``sent_at`` is time.monotonic() in the actor (comparable
    across processes on one machine) and orders batches by arrival.
    """

    actor_id: int
    generation: int
    slot: int
    version: int
    weights_digest: int
    env_steps: int
    unroll_s: float
    wait_s: float
    inference_s: float
    env_s: float
    sent_at: float
    episodes: List[Tuple[float, int]] = field(default_factory=list)
    env_failures: List[Tuple[int, str]] = field(default_factory=list)


@dataclass
class Heartbeat:
    """Sent by a busy actor every few seconds, so that a hung one can be told
    from a slow one."""

    actor_id: int
    generation: int


@dataclass
class ActorFailed:
    actor_id: int
    generation: int
    error: str
    env_index: Optional[int] = None


RELEASE = "release"
STOP = "stop"

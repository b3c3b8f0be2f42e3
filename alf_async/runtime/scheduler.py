"""Which actor batch the learner trains on next, so that lag stays bounded.

A pure class, independent of processes: the pools tell it when a slot is handed
to an actor (with the weight version current then) and when a batch arrives; the
learner asks it for the next batch.

Rule (one slot per actor): a batch acted by version v must be trained at version
v + N - 1 at the latest (lag <= N - 1). The oldest-version pending batch goes
first, but only if every other batch (pending, or still being unrolled, whose
version is at least the one published when its slot was handed out) can still
meet its deadline afterwards, one per iteration; otherwise the learner waits for
the late actor. With several slots per actor, or without ``enforce_lag`` (an
off-policy learner, whose versions count gradient steps and whose batches only
fill a replay buffer), the bound is not enforced and batches go in arrival
order.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Protocol


class _Batch(Protocol):
    actor_id: int
    slot: int
    version: int
    sent_at: float


class LagScheduler:
    """Orders the pending batches of N actors.

    Args:
        num_actors: N.
        slots_per_actor: trajectories an actor may have in flight.
        enforce_lag: hold back batches to keep lag <= N - 1 (one slot per actor).
    """

    def __init__(self, num_actors: int, slots_per_actor: int = 1, enforce_lag: bool = True):
        self.num_actors = num_actors
        self.slots_per_actor = slots_per_actor
        self.enforce_lag = enforce_lag
        self._pending: List[_Batch] = []
        # slot -> the oldest version its unroll under way can act with.
        self._unrolling: Dict[int, int] = {}

    def handed_out(self, slot: int, version: int) -> None:
        """``slot`` was given to its actor while ``version`` was the newest weights."""
        self._unrolling[slot] = version

    def arrived(self, batch: _Batch) -> None:
        """An actor finished ``batch`` (its slot is no longer being unrolled)."""
        self._unrolling.pop(batch.slot, None)
        self._pending.append(batch)

    def drop_actor(self, actor_id: int) -> int:
        """Forget the pending batches of a failed actor; returns how many."""
        before = len(self._pending)
        self._pending = [b for b in self._pending if b.actor_id != actor_id]
        return before - len(self._pending)

    def __len__(self) -> int:
        """Batches received and not yet handed to the learner."""
        return len(self._pending)

    def next(self, current_version: int) -> Optional[_Batch]:
        """Remove and return the batch to train on now, or None to wait."""
        if not self._pending:
            return None
        by_arrival = sorted(range(len(self._pending)), key=lambda i: self._pending[i].sent_at)
        if self.slots_per_actor != 1 or not self.enforce_lag:
            return self._pending.pop(by_arrival[0])
        first = min(by_arrival, key=lambda i: self._pending[i].version)
        others = sorted([b.version for i, b in enumerate(self._pending) if i != first]
                        + list(self._unrolling.values()))
        if not self._unrolling or all(v + self.num_actors - 1 >= current_version + k
                                      for k, v in enumerate(others, start=1)):
            return self._pending.pop(first)
        return None

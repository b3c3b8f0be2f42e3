"""The lag scheduler alone (no processes): which batch the learner takes next."""

from __future__ import annotations

from dataclasses import dataclass

from alf_async.runtime.scheduler import LagScheduler


@dataclass
class Batch:
    actor_id: int
    slot: int
    version: int
    sent_at: float


def test_nothing_pending_means_wait():
    scheduler = LagScheduler(num_actors=2)
    assert scheduler.next(current_version=0) is None
    assert len(scheduler) == 0


def test_one_actor_is_served_in_order():
    scheduler = LagScheduler(num_actors=1)
    scheduler.handed_out(slot=0, version=0)
    batch = Batch(0, 0, 0, 1.0)
    scheduler.arrived(batch)
    assert len(scheduler) == 1
    assert scheduler.next(current_version=0) is batch
    assert len(scheduler) == 0


def test_oldest_version_goes_first_not_first_arrival():
    scheduler = LagScheduler(num_actors=2)
    for slot in (0, 1):
        scheduler.handed_out(slot, 0)
    newer = Batch(actor_id=0, slot=0, version=1, sent_at=1.0)
    older = Batch(actor_id=1, slot=1, version=0, sent_at=2.0)
    scheduler.arrived(newer)
    scheduler.arrived(older)
    assert scheduler.next(current_version=1) is older
    assert scheduler.next(current_version=2) is newer


def test_waits_for_a_late_actor_rather_than_break_its_lag_bound():
    """N = 2: actor 1 still unrolls with version 0; training actor 0's batch now
    would bring the learner to version 2, and actor 1's batch (version >= 0) would
    then be trained with lag 2 > N - 1. The scheduler must wait."""
    scheduler = LagScheduler(num_actors=2)
    scheduler.handed_out(0, 0)
    scheduler.handed_out(1, 0)
    scheduler.arrived(Batch(0, 0, 0, 1.0))
    assert scheduler.next(current_version=0) is not None  # lag of actor 1 can be 1
    scheduler.handed_out(0, 1)  # actor 0 released, unrolls with version 1
    scheduler.arrived(Batch(0, 0, 1, 2.0))
    assert scheduler.next(current_version=1) is None  # actor 1 (version 0) would lag 2
    late = Batch(1, 1, 0, 3.0)
    scheduler.arrived(late)
    assert scheduler.next(current_version=1) is late  # lag 1
    assert scheduler.next(current_version=2).version == 1  # lag 1


def test_several_slots_per_actor_go_in_arrival_order():
    scheduler = LagScheduler(num_actors=1, slots_per_actor=2)
    first, second = Batch(0, 1, 3, 1.0), Batch(0, 0, 2, 2.0)
    scheduler.arrived(second)
    scheduler.arrived(first)
    assert scheduler.next(current_version=5) is first
    assert scheduler.next(current_version=6) is second


def test_dropping_an_actor_forgets_its_batches():
    scheduler = LagScheduler(num_actors=2)
    scheduler.arrived(Batch(0, 0, 0, 1.0))
    scheduler.arrived(Batch(1, 1, 0, 2.0))
    assert scheduler.drop_actor(0) == 1
    assert len(scheduler) == 1
    assert scheduler.next(current_version=0).actor_id == 1


def test_without_the_lag_rule_batches_go_in_arrival_order():
    """An off-policy learner (versions count gradient steps, batches only fill a
    replay buffer) takes whatever arrived first, even where the lag rule of
    test_waits_for_a_late_actor_rather_than_break_its_lag_bound would wait."""
    for enforce_lag, expected in ((True, None), (False, "first")):
        scheduler = LagScheduler(num_actors=2, enforce_lag=enforce_lag)
        scheduler.handed_out(0, 0)
        scheduler.handed_out(1, 40)
        first = Batch(actor_id=0, slot=0, version=0, sent_at=1.0)
        scheduler.arrived(first)
        got = scheduler.next(current_version=72)
        assert got is (first if expected == "first" else None)

"""The shared-memory replay buffer and the env-steps : gradient-steps contract."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

from alf_async.runtime.replay_buffer import ReplayBuffer, replay_nbytes, replay_specs
from alf_async.runtime.step_ratio import StepRatio
from alf_async.utils.shared_memory import list_blocks, shm_directory

O, A = 2, 1


def trajectory(T: int, K: int, start: int) -> dict:
    """A trajectory whose transition n (time-major) carries the number start + n."""
    n = start + np.arange(T * K, dtype=np.float32).reshape(T, K)
    return {"observation": np.repeat(n[..., None], O, -1),
            "action": n[..., None].copy(),
            "reward": n.copy(),
            "next_observation": np.repeat(n[..., None] + 0.5, O, -1),
            "terminated": (n.astype(int) % 3 == 0)}


@pytest.fixture
def buffer():
    b = ReplayBuffer.create(5, O, A)
    yield b
    b.close()


def test_fills_in_time_major_order_and_wraps_around(buffer):
    assert buffer.size == 0
    assert buffer.add_trajectory(trajectory(2, 2, 0)) == 4  # 0, 1, 2, 3
    assert buffer.size == 4 and buffer.position == 4
    np.testing.assert_array_equal(buffer.block.arrays["reward"][:4], [0, 1, 2, 3])
    buffer.add_trajectory(trajectory(1, 3, 4))  # 4, 5, 6: 5 and 6 overwrite 0 and 1
    assert buffer.size == 5 and buffer.position == 2
    np.testing.assert_array_equal(buffer.block.arrays["reward"], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buffer.block.arrays["next_observation"][0], [5.5, 5.5])
    np.testing.assert_array_equal(buffer.block.arrays["terminated"], [False, True, False,
                                                                      True, False])
    # Oldest first for a checkpoint.
    np.testing.assert_array_equal(buffer.state_arrays()["reward"], [2, 3, 4, 5, 6])
    buffer.add_trajectory(trajectory(1, 1, 7), gradient_step=42)
    np.testing.assert_array_equal(buffer.state_arrays()["inserted_at"], [0, 0, 0, 0, 42])


def test_a_trajectory_larger_than_the_buffer_keeps_its_newest_transitions(buffer):
    buffer.add_trajectory(trajectory(1, 1, 100))
    buffer.add_trajectory(trajectory(4, 2, 0))  # 8 transitions into 5 places
    assert buffer.size == 5
    np.testing.assert_array_equal(np.sort(buffer.block.arrays["reward"]), [3, 4, 5, 6, 7])
    np.testing.assert_array_equal(buffer.state_arrays()["reward"], [3, 4, 5, 6, 7])


def test_steps_of_failed_envs_are_left_out(buffer):
    t = trajectory(2, 2, 0)  # transitions 0, 1, 2, 3 (time-major)
    t["env_failed"] = np.array([[False, True], [False, False]])  # transition 1
    assert buffer.add_trajectory(t, gradient_step=3) == 3
    np.testing.assert_array_equal(buffer.state_arrays()["reward"], [0, 2, 3])
    np.testing.assert_array_equal(buffer.state_arrays()["observation"][:, 0], [0, 2, 3])
    np.testing.assert_array_equal(buffer.state_arrays()["next_observation"][:, 0],
                                  [0.5, 2.5, 3.5])
    t = trajectory(1, 3, 10)
    t["env_failed"] = np.ones((1, 3), bool)
    assert buffer.add_trajectory(t) == 0 and buffer.size == 3
    t = trajectory(2, 2, 20)  # 20..23; 21 failed: 20, 22, 23 wrap around
    t["env_failed"] = np.array([[False, True], [False, False]])
    buffer.add_trajectory(t)
    np.testing.assert_array_equal(buffer.state_arrays()["reward"], [2, 3, 20, 22, 23])


def test_samples_uniformly_from_the_valid_entries(buffer):
    buffer.add_trajectory(trajectory(1, 3, 10))
    rng = np.random.default_rng(0)
    batch = buffer.sample(30000, rng)
    assert set(np.unique(batch["reward"])) == {10.0, 11.0, 12.0}  # never an empty row
    counts = np.bincount(batch["reward"].astype(int) - 10)
    assert np.all(np.abs(counts / 30000 - 1 / 3) < 0.02)
    # Rows stay together.
    np.testing.assert_array_equal(batch["observation"][:, 0], batch["reward"])
    np.testing.assert_array_equal(batch["next_observation"][:, 1], batch["reward"] + 0.5)
    assert batch["observation"].shape == (30000, O) and batch["action"].shape == (30000, A)
    empty = ReplayBuffer.create(3, O, A)
    try:
        with pytest.raises(ValueError, match="empty"):
            empty.sample(1, rng)
    finally:
        empty.close()


def test_checkpoint_round_trip_into_a_smaller_buffer(buffer):
    buffer.add_trajectory(trajectory(3, 2, 0))  # 6 into 5: 1..5 kept
    state = buffer.state_arrays()
    small = ReplayBuffer.create(3, O, A)
    try:
        small.load_state_arrays(state)
        np.testing.assert_array_equal(small.state_arrays()["reward"], [3, 4, 5])
        small.add_trajectory(trajectory(1, 1, 9))
        np.testing.assert_array_equal(small.state_arrays()["reward"], [4, 5, 9])
    finally:
        small.close()
    other = ReplayBuffer.create(3, O + 1, A)
    try:
        with pytest.raises(ValueError, match="observation"):
            other.load_state_arrays(state)
    finally:
        other.close()


def _read_size(name, specs, queue):
    b = ReplayBuffer.attach(name, specs)
    queue.put((b.size, b.block.arrays["reward"][: b.size].tolist()))
    b.close()


def test_another_process_sees_the_transitions_and_close_frees_the_block():
    b = ReplayBuffer.create(4, O, A)
    b.add_trajectory(trajectory(1, 2, 7))
    queue = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_read_size, args=(b.name, b.specs, queue))
    p.start()
    assert queue.get(timeout=60) == (2, [7.0, 8.0])
    p.join(30)
    path = os.path.join(shm_directory(), b.name)
    assert os.path.exists(path)
    b.close()
    assert not os.path.exists(path) and b.name not in list_blocks(os.getpid())


def test_nbytes_matches_the_specs():
    assert replay_nbytes(10, 3, 2) == sum(s.nbytes for s in replay_specs(10, 3, 2).values())
    assert replay_nbytes(10, 3, 2) == 10 * (4 * 3 * 2 + 4 * 2 + 4 + 1 + 8) + 16


# -- the ratio contract ---------------------------------------------------------

def test_gradient_steps_earned_and_due():
    r = StepRatio(env_steps_per_gradient_step=2.0, learning_starts=10, lead=4)
    assert [r.gradient_steps_earned(e) for e in (0, 9, 10, 11, 12, 15, 30)] == \
        [0, 0, 0, 0, 1, 2, 10]
    assert r.gradient_steps_due(30, 7) == 3 and r.gradient_steps_due(30, 12) == 0
    half = StepRatio(0.5, 0, 1)  # two gradient steps per env step
    assert half.gradient_steps_earned(3) == 6
    assert r.achieved(30, 10) == 2.0 and np.isnan(r.achieved(30, 0))


def test_actors_are_held_to_the_lead_after_learning_starts():
    r = StepRatio(1.0, learning_starts=8, lead=4)
    assert r.may_collect(0, 4, 0) and r.may_collect(4, 4, 0)  # up to learning_starts
    assert r.may_collect(8, 4, 0)  # 12 <= 8 + 0 + 4
    assert not r.may_collect(12, 4, 0)  # 16 > 12: the learner must pay first
    assert r.may_collect(12, 4, 4)


def test_strict_sync_loop_alternates_collect_and_train():
    """N = 1, lead = one batch: collect b, train b / r, collect b, ..."""
    b, ratio = 6, StepRatio(2.0, learning_starts=0, lead=6)
    env_steps = grads = 0
    events = []
    for _ in range(4):
        assert ratio.may_collect(env_steps, b, grads)
        env_steps += b
        events.append(("collect", env_steps))
        assert not ratio.may_collect(env_steps, b, grads)  # the learner pays first
        due = ratio.gradient_steps_due(env_steps, grads)
        grads += due
        events.append(("train", grads))
    assert events == [("collect", 6), ("train", 3), ("collect", 12), ("train", 6),
                      ("collect", 18), ("train", 9), ("collect", 24), ("train", 12)]
    assert ratio.achieved(env_steps, grads) == 2.0


def test_a_contract_resumed_without_its_buffer_collects_learning_starts_again():
    r = StepRatio(2.0, learning_starts=10, lead=4, env_steps_offset=100,
                  gradient_steps_offset=45)
    assert r.gradient_steps_earned(105) == 45 and r.gradient_steps_due(109, 45) == 0
    assert r.gradient_steps_earned(114) == 47
    assert r.may_collect(106, 4, 45) and not r.may_collect(112, 4, 45)
    assert r.achieved(130, 55) == 2.0


@pytest.mark.parametrize("kwargs, match", [
    ({"env_steps_per_gradient_step": 0.0, "learning_starts": 0, "lead": 1}, "> 0"),
    ({"env_steps_per_gradient_step": 1.0, "learning_starts": -1, "lead": 1}, ">= 0"),
    ({"env_steps_per_gradient_step": 1.0, "learning_starts": 0, "lead": 0}, ">= 1"),
])
def test_bad_ratio_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StepRatio(**kwargs)

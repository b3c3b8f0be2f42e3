"""The actor processes deliver exactly the trajectories of the in-process path.

With the deterministic ``ScriptedPolicy`` and seeded PyBullet envs, the batches a
``ProcessActorPool`` hands to the learner (actor in its own process, envs stepped
in the actor (W = 0) or in env-worker processes (W = 2)) are equal, value for
value and field by field, to those of ``InProcessActorPool`` / ``Actor.unroll``
for several consecutive batches, including the finished-episode statistics that
travel with each batch and the policy version / weights digest it is stamped
with. With N = 2 actors, each actor's stream of batches equals that of an
in-process ``Actor`` with the same actor id (so slots and seeds are not mixed up).

A short time limit (``max_episode_steps``) makes both terminations and
truncations (and so ``truncation_value``) occur inside the compared batches.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

from alf_async.envs.gym_env import env_dims
from alf_async.runtime.actor import Actor
from alf_async.runtime.inprocess_pool import InProcessActorPool
from alf_async.runtime.process_pool import ProcessActorPool
from alf_async.runtime.trajectory import allocate_trajectory, trajectory_specs
from alf_async.runtime.weight_store import weights_digest
from alf_async.settings import TrainerSettings
from scripted_policy import ScriptedPolicy

ENV = "InvertedPendulumBulletEnv-v0"
NUM_ENVS = 3
UNROLL = 20
NUM_BATCHES = 4
OBS_DIM, ACT_DIM, _ = env_dims(ENV)

Batch = Tuple[object, Dict[str, np.ndarray]]  # (BatchReady message, arrays copy)


def make_config(num_env_workers: int, num_actors: int = 1) -> TrainerSettings:
    return TrainerSettings(env_name=ENV, num_envs=NUM_ENVS, num_env_workers=num_env_workers,
                           unroll_length=UNROLL, seed=5, num_actors=num_actors,
                           max_episode_steps=25, num_iterations=NUM_BATCHES)


def weights(version: int) -> Dict[str, np.ndarray]:
    """Distinct arrays per version, so that digests tell versions apart."""
    return {"param/w": np.full((3, 2), version, np.float32),
            "normalizer/mean": np.arange(4, dtype=np.float64) * version}


def copy_batch(arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in arrays.items()}


def drive(pool, until) -> List[Batch]:
    """Take batches like the learner does: next_batch, publish, release."""
    batches: List[Batch] = []
    version = 0
    pool.start()
    while not until(batches):
        assert len(batches) < 50, "pool delivered too many batches"
        message, arrays = pool.next_batch()
        batches.append((message, copy_batch(arrays)))
        version += 1
        pool.publish_weights(weights(version), version)
        pool.release(message)
    return batches


def run_pool(pool, until) -> List[Batch]:
    try:
        pool.publish_weights(weights(0), 0)
        return drive(pool, until)
    finally:
        pool.close()


def reference_actor(actor_id: int, config: TrainerSettings, count: int):
    """``count`` unrolls of an in-process Actor: [(arrays, episodes)]."""
    actor = Actor(actor_id, config, ScriptedPolicy)
    try:
        out = []
        for _ in range(count):
            buffer = allocate_trajectory(UNROLL, NUM_ENVS, OBS_DIM, ACT_DIM)
            info = actor.unroll(buffer)
            out.append((buffer, info.episodes))
        return out
    finally:
        actor.close()


def assert_same_trajectory(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray],
                           where: str, version: Optional[int] = None) -> None:
    """The same data in every field; ``behaviour_version`` (which weights the
    actor had loaded, not what it did: a reference actor loads none) equal to
    ``version`` at every step where given."""
    assert set(got) == set(want) == set(trajectory_specs(UNROLL, NUM_ENVS, OBS_DIM, ACT_DIM))
    if version is not None:
        assert (got["behaviour_version"] == version).all(), f"{where}: behaviour_version"
    for key in set(want) - {"behaviour_version"}:
        assert got[key].dtype == want[key].dtype, f"{where}: dtype of {key}"
        assert got[key].shape == want[key].shape, f"{where}: shape of {key}"
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{where}: field {key}")


@pytest.fixture(scope="module")
def in_process_batches() -> List[Batch]:
    """The reference: InProcessActorPool, W = 0, NUM_BATCHES batches."""
    return run_pool(
        InProcessActorPool(make_config(0), ScriptedPolicy, OBS_DIM, ACT_DIM),
        lambda batches: len(batches) >= NUM_BATCHES)


def test_reference_batches_exercise_every_field(in_process_batches):
    """The compared data is not trivial: episodes end by termination and by
    truncation, and consecutive batches differ."""
    arrays = [a for _, a in in_process_batches]
    assert sum(int(a["terminated"].sum()) for a in arrays) > 0
    assert sum(int(a["truncated"].sum()) for a in arrays) > 0
    assert any(np.any(a["truncation_value"] != 0) for a in arrays)
    assert any(np.any(a["final_observation_row"] >= 0) for a in arrays)  # kept for the learner
    assert sum(len(m.unroll.episodes) for m, _ in in_process_batches) > 0
    assert not np.array_equal(arrays[0]["observation"], arrays[1]["observation"])
    # InProcessActorPool is Actor.unroll: same arrays and episodes.
    for (message, got), (want, episodes) in zip(
            in_process_batches, reference_actor(0, make_config(0), NUM_BATCHES)):
        assert_same_trajectory(got, want, "in-process pool vs Actor.unroll", message.version)
        assert message.unroll.episodes == episodes


@pytest.mark.parametrize("num_env_workers", [0, 2])
def test_process_actor_equals_in_process(in_process_batches, num_env_workers):
    config = make_config(num_env_workers)
    got = run_pool(
        ProcessActorPool(config, ScriptedPolicy, weights(0), OBS_DIM, ACT_DIM),
        lambda batches: len(batches) >= NUM_BATCHES)
    assert len(got) == NUM_BATCHES
    for i, ((message, arrays), (ref_message, ref_arrays)) in enumerate(
            zip(got, in_process_batches)):
        where = f"W={num_env_workers} batch {i}"
        assert_same_trajectory(arrays, ref_arrays, where, message.version)
        assert message.unroll.episodes == ref_message.unroll.episodes, where
        assert message.unroll.env_steps == ref_message.unroll.env_steps == UNROLL * NUM_ENVS
        assert message.actor_id == 0
        # N = 1, one slot: batch i was acted with the weights published after
        # i training iterations, and the actor really loaded them.
        assert message.version == ref_message.version == i, where
        assert message.weights_digest == weights_digest(weights(i)), where
        assert ref_message.weights_digest == weights_digest(weights(i)), where


def test_two_actor_processes_each_equal_their_in_process_actor():
    config = make_config(0, num_actors=2)

    def enough(batches):
        ids = [m.actor_id for m, _ in batches]
        return ids.count(0) >= 3 and ids.count(1) >= 3

    got = run_pool(
        ProcessActorPool(config, ScriptedPolicy, weights(0), OBS_DIM, ACT_DIM), enough)
    streams = {0: [], 1: []}
    for message, arrays in got:
        streams[message.actor_id].append((message, arrays))
        # Every batch names a version that was published before it was sent.
        assert 0 <= message.version < len(got)
        assert message.weights_digest == weights_digest(weights(message.version))
    for actor_id, stream in streams.items():
        reference = reference_actor(actor_id, config, len(stream))
        for i, ((message, arrays), (want, episodes)) in enumerate(zip(stream, reference)):
            where = f"actor {actor_id} batch {i}"
            assert_same_trajectory(arrays, want, where, message.version)
            assert message.unroll.episodes == episodes, where
        # An actor's versions never go backwards.
        versions = [m.version for m, _ in stream]
        assert versions == sorted(versions)
    # The two actors run differently seeded envs.
    assert not np.array_equal(streams[0][0][1]["observation"],
                              streams[1][0][1]["observation"])

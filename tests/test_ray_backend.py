"""The Ray backend on a real multi-node Ray cluster on this machine (loopback).

The cluster is Ray's own test cluster (``ray.cluster_utils.Cluster``): a head
node and two worker nodes, each with its own raylet and object store, so that
actors placed with SPREAD land on different nodes and a node can be removed
mid-run. The pool is driven as the Trainer drives it (next_batch, publish,
release), with the deterministic ``ScriptedPolicy``:

- actors land on different nodes, and the pool reports node ids and bytes moved;
- every actor's stream of batches equals the in-process reference actor's (so
  the process backend's too, which test_runtime_equivalence holds to the same
  reference), for N = 1 and N = 2, with lag <= N - 1;
- an actor killed mid-run, an actor that hangs (SIGSTOP) and a node removed
  mid-run are replaced and the batches keep coming;
- a PACK placement puts every actor on one node.

The train command with ``Trainer.backend="ray"`` (a local Ray instance that the
run starts and stops) is tested in test_ray_train.py.
"""

from __future__ import annotations

import os
import signal
from typing import Dict, List

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

from alf_async.runtime.process_pool import ProcessActorPool
from alf_async.runtime.ray_cluster import least_used_node
from alf_async.runtime.ray_pool import RayActorPool
from alf_async.runtime.weight_store import weights_digest
from alf_async.ray_settings import RayBackendSettings
from scripted_policy import ScriptedPolicy
from test_runtime_equivalence import (ACT_DIM, OBS_DIM, assert_same_trajectory, copy_batch,
                                      make_config, reference_actor, weights)

# One Ray cluster at a time: every test of these modules on one xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

NODE_MEMORY = 80 * 1024 ** 2  # object store of each node, bytes (Ray's minimum is 75 MiB)


@pytest.fixture(scope="module")
def cluster():
    """A head node (1 CPU) and two worker nodes (2 CPUs each) on loopback."""
    c = Cluster(initialize_head=True, connect=True, head_node_args={
        "num_cpus": 1, "object_store_memory": NODE_MEMORY, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=2, object_store_memory=NODE_MEMORY)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def alive_nodes() -> Dict[str, dict]:
    return {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}


def drive(pool: RayActorPool, count: int, during=None) -> List:
    """``count`` batches taken as the learner takes them; ``during(i, pool)`` is
    called before batch i (to inject faults)."""
    batches = []
    version = 0
    pool.publish_weights(weights(0), 0)
    pool.start()
    for i in range(count):
        if during is not None:
            during(i, pool)
        message, arrays = pool.next_batch()
        assert version - message.version <= pool.settings.num_actors - 1, "lag bound"
        batches.append((message, copy_batch(arrays)))
        version += 1
        pool.publish_weights(weights(version), version)
        pool.release(message)
    return batches


def make_pool(num_actors: int, **settings) -> RayActorPool:
    config = make_config(0, num_actors=num_actors).replace(backend="ray", **settings)
    return RayActorPool(config, ScriptedPolicy, OBS_DIM, ACT_DIM,
                        ray_settings=RayBackendSettings(num_cpus_per_actor=1))


def by_actor(batches) -> Dict[int, list]:
    streams: Dict[int, list] = {}
    for message, arrays in batches:
        streams.setdefault(message.actor_id, []).append((message, arrays))
    return streams


@pytest.mark.parametrize("num_actors", [1, 2])
def test_same_trajectories_as_the_process_backend(cluster, num_actors):
    pool = make_pool(num_actors)
    try:
        batches = drive(pool, 3 * num_actors)
        nodes = pool.stats().actor_nodes
    finally:
        pool.close()
    config = make_config(0, num_actors=num_actors)
    process_pool = ProcessActorPool(config, ScriptedPolicy, weights(0), OBS_DIM, ACT_DIM)
    try:
        process_batches = drive(process_pool, 3 * num_actors)
    finally:
        process_pool.close()
    streams, process_streams = by_actor(batches), by_actor(process_batches)
    assert sorted(streams) == list(range(num_actors))
    for actor_id, stream in streams.items():
        reference = reference_actor(actor_id, config, len(stream))
        for i, ((message, arrays), (want, episodes)) in enumerate(zip(stream, reference)):
            where = f"N={num_actors} actor {actor_id} batch {i}"
            assert_same_trajectory(arrays, want, where, message.version)
            assert message.unroll.episodes == episodes, where
        for i, ((message, arrays), (p_message, p_arrays)) in enumerate(
                zip(stream, process_streams[actor_id])):
            where = f"ray vs process, N={num_actors} actor {actor_id} batch {i}"
            assert_same_trajectory(arrays, p_arrays, where, message.version)
            assert message.unroll.episodes == p_message.unroll.episodes, where
            # The actor acted with the weights it says it had.
            assert message.weights_digest == weights_digest(weights(message.version)), where
    if num_actors == 1:  # exactly synchronous: batch i acted with version i
        assert [m.version for m, _ in batches] == list(range(len(batches)))
    else:  # SPREAD: one actor per node
        assert len(set(nodes.values())) == num_actors
        assert set(nodes.values()) <= set(alive_nodes())


def test_bytes_moved_counts_trajectories_and_weights(cluster):
    pool = make_pool(1)
    try:
        drive(pool, 2)
        moved = pool.stats().bytes_moved
    finally:
        pool.close()
    trajectory = sum(v.nbytes for v in copy_batch(
        reference_actor(0, make_config(0), 1)[0][0]).values())
    weight_bytes = sum(v.nbytes for v in weights(0).values())
    # two trajectories in; weights out with the first unroll and two releases
    assert moved == 2 * trajectory + 3 * weight_bytes


def test_pack_places_every_actor_on_one_node(cluster):
    config = make_config(0, num_actors=2).replace(backend="ray")
    pool = RayActorPool(config, ScriptedPolicy, OBS_DIM, ACT_DIM, ray_settings=RayBackendSettings(
        num_cpus_per_actor=1, placement_strategy="PACK"))
    try:
        drive(pool, 2)
        nodes = pool.stats().actor_nodes
    finally:
        pool.close()
    assert len(set(nodes.values())) == 1


def test_killed_actor_is_restarted(cluster):
    pool = make_pool(2)
    killed = {}

    def kill_actor_1(i, pool):
        if i == 2:
            killed["pid"] = pool._handles[1].pid
            os.kill(killed["pid"], signal.SIGKILL)

    try:
        batches = drive(pool, 8, during=kill_actor_1)
        stats = pool.stats()
        new_pid = pool._handles[1].pid
    finally:
        pool.close()
    assert stats.restarts == 1
    assert new_pid != killed["pid"]
    generations = {m.generation for m, _ in batches if m.actor_id == 1}
    assert generations == {0, 1}  # batches came from the replacement too


@pytest.mark.slow  # the process backend's hung actor runs in the suite, Ray's killed one too
def test_hung_actor_is_killed_and_restarted(cluster):
    pool = make_pool(2, actor_timeout_s=12.0)
    stopped = {}

    def stop_actor_0(i, pool):
        if i == 2:
            stopped["pid"] = pool._handles[0].pid
            os.kill(stopped["pid"], signal.SIGSTOP)

    try:
        batches = drive(pool, 8, during=stop_actor_0)
        restarts = pool.stats().restarts
    finally:
        try:  # ray.kill ends a stopped process too; make sure of it
            os.kill(stopped["pid"], signal.SIGKILL)
        except (KeyError, ProcessLookupError):
            pass
        pool.close()
    assert restarts == 1
    assert {m.generation for m, _ in batches if m.actor_id == 0} == {0, 1}


def test_node_removed_mid_run(cluster):
    """Last in this module: it leaves the cluster one worker node short (a node
    added back here would count as this test's leftover process)."""
    pool = make_pool(2)
    removed = {}

    def remove_a_worker_node(i, pool):
        """Removes the worker node of one actor (SPREAD may put an actor on the
        head node, which the cluster cannot remove)."""
        if i == 2:
            workers = {n.node_id: n for n in cluster.worker_nodes}
            actor = next(a for a, handle in pool._handles.items()
                         if handle.node_id in workers)
            removed["actor"] = actor
            removed["node"] = pool._handles[actor].node_id
            cluster.remove_node(workers[removed["node"]])

    try:
        batches = drive(pool, 8, during=remove_a_worker_node)
        stats = pool.stats()
    finally:
        pool.close()
    actor = removed["actor"]
    assert stats.restarts == 1
    assert stats.actor_nodes[actor] != removed["node"]
    # A node with room ran no actor: the restarted one went there, not beside the other.
    assert stats.actor_nodes[actor] != stats.actor_nodes[1 - actor]
    assert {m.generation for m, _ in batches if m.actor_id == actor} == {0, 1}
    assert len(batches) == 8
    assert all(np.isfinite(a["reward"]).all() for _, a in batches)


def test_a_restarted_actor_goes_to_the_node_running_fewest_actors():
    def node(node_id, cpus, alive=True):
        return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": cpus}}

    nodes = [node("head", 1), node("busy", 2), node("lost", 2, alive=False)]
    # The live actor 1 runs on "busy", which has room for one more; "head" is idle.
    assert least_used_node(nodes, {1: "busy"}, 1.0) == "head"
    assert least_used_node(nodes, {1: "head"}, 1.0) == "busy"  # head is full
    assert least_used_node(nodes, {1: "head", 2: "busy", 3: "busy"}, 1.0) is None
    assert least_used_node(nodes, {}, 1.0) == "busy"  # ties: the most CPUs

"""Sweeps on a Ray cluster (alf-sweep --backend=ray): a grid and a search on a
real two-node local cluster (``ray.cluster_utils.Cluster``), trials on both
nodes, and a node removed mid-trial."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("optuna")
from ray.cluster_utils import Cluster  # noqa: E402

from conftest import REPO_ROOT, wait_until  # noqa: E402
from sweep_helpers import SWEEP_COMMAND, read_summary, run  # noqa: E402

# One Ray cluster at a time: every Ray test on one xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

NODE_MEMORY = 80 * 1024 ** 2  # object store of each node, bytes (Ray's minimum)
SWEEP = SWEEP_COMMAND + ["--gin_file=ppo_cartpole.gin", "--backend=ray", "--max_parallel=2",
                         "--gin_param=Trainer.checkpoint_interval=2"]


@pytest.fixture(scope="module")
def cluster():
    """A head node and a worker node of 1 CPU each: two trials of 1 CPU (a
    synchronous CartPole run) run at once only one on each node."""
    c = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": 1, "object_store_memory": NODE_MEMORY, "include_dashboard": False})
    c.add_node(num_cpus=1, object_store_memory=NODE_MEMORY)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


def status(run_dir):
    with open(os.path.join(run_dir, "sweep_run.json")) as f:
        return json.load(f)


def test_grid_runs_on_both_nodes(cluster, tmp_path):
    root = str(tmp_path / "grid")
    result = run(SWEEP + [f"--root_dir={root}", f"--address={cluster.address}",
                          "--shared_dir", "--sweep=Trainer.seed=[1, 2]",
                          "--gin_param=Trainer.num_env_steps=4096",
                          "--gin_param=Trainer.num_env_workers='auto'",
                          "--gin_param=Trainer.env_splits='auto'"])
    assert result.returncode == 0, result.stderr
    rows = read_summary(root)
    assert [rows[n]["status"] for n in ("seed=1", "seed=2")] == ["done", "done"]
    nodes = [status(os.path.join(root, n))["nodes"] for n in ("seed=1", "seed=2")]
    assert all(len(n) == 1 for n in nodes) and nodes[0] != nodes[1]
    all_nodes = {cluster.head_node.node_id} | {n.node_id for n in cluster.worker_nodes}
    assert {nodes[0][0], nodes[1][0]} == all_nodes
    # "auto" sampling settings were pinned to the trial's reservation (1 CPU: W = 0)
    arguments = status(os.path.join(root, "seed=1"))["train_arguments"]
    assert arguments[-2:] == ["--gin_param=Trainer.num_env_workers=0",
                              "--gin_param=Trainer.env_splits=1"]


@pytest.mark.slow
def test_copied_directories_come_back(cluster, tmp_path):
    """Without --shared_dir each trial runs in a node-local copy of its
    directory, brought back into the sweep directory when it ends."""
    root = str(tmp_path / "search")
    result = run(SWEEP + [f"--root_dir={root}", f"--address={cluster.address}",
                          "--search=random", "--num_trials=2",
                          "--sweep=PPOLearner.clip_ratio=uniform(0.1, 0.3)",
                          "--gin_param=Trainer.num_env_steps=2048"])
    assert result.returncode == 0, result.stderr
    for name in ("trial_0000", "trial_0001"):
        run_dir = os.path.join(root, name)
        assert read_summary(root)[name]["status"] == "complete"
        assert read_summary(root)[name]["iterations"] == "2"
        assert os.listdir(os.path.join(run_dir, "checkpoints"))
        assert not os.path.exists(os.path.join(run_dir, "run.lock"))


@pytest.mark.slow
def test_halving_resumes_paused_trials_from_their_copied_directories(cluster, tmp_path):
    """A halving search with node-local copies: a trial paused at a rung comes
    back with its checkpoint, and the one that goes on is shipped out again
    and resumes from it (its metrics rows once each, its budget reached)."""
    root = str(tmp_path / "halving")
    result = run(SWEEP + [f"--root_dir={root}", f"--address={cluster.address}",
                          "--search=random", "--num_trials=2", "--pruner=halving",
                          "--halving_factor=2", "--prune_after_env_steps=2048",
                          "--sweep=PPOLearner.clip_ratio=uniform(0.1, 0.3)",
                          "--gin_param=Trainer.num_env_steps=4096"])
    assert result.returncode == 0, result.stderr
    rows = read_summary(root)
    assert sorted(rows[n]["status"] for n in rows) == ["complete", "pruned"]
    (winner,) = [n for n in rows if rows[n]["status"] == "complete"]
    (loser,) = [n for n in rows if rows[n]["status"] == "pruned"]
    assert rows[winner]["iterations"] == "4" and rows[loser]["iterations"] == "2"
    with open(os.path.join(root, winner, "metrics.jsonl")) as f:
        assert [json.loads(line)["iteration"] for line in f if line.strip()] == [1, 2, 3, 4]
    with open(os.path.join(root, winner, "log.txt")) as f:
        assert "resumed from" in f.read().lower()


@pytest.mark.slow
def test_search_survives_a_node_removed_mid_trial(cluster, tmp_path):
    """Last in this module: it removes the worker node (a node added back
    here would count as this test's leftover process)."""
    root = str(tmp_path / "search")
    worker, = cluster.worker_nodes  # the one worker node of the fixture (a set)
    proc = subprocess.Popen(
        SWEEP + [f"--root_dir={root}", f"--address={cluster.address}", "--shared_dir",
                 "--search=optuna", "--num_trials=3", "--pruner=none",
                 "--sweep=PPOLearner.clip_ratio=uniform(0.1, 0.3)",
                 "--gin_param=Trainer.num_env_steps=16384"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def trial_on_worker_training():
            for name in ("trial_0000", "trial_0001"):
                run_dir = os.path.join(root, name)
                metrics = os.path.join(run_dir, "metrics.jsonl")
                try:
                    on_worker = worker.node_id in status(run_dir).get("nodes", [])
                except (OSError, ValueError):
                    continue
                checkpoints = os.path.join(run_dir, "checkpoints")
                if on_worker and os.path.exists(metrics) and os.path.isdir(checkpoints) \
                        and any(n.endswith(".pt") for n in os.listdir(checkpoints)):
                    return name
            return None

        assert wait_until(trial_on_worker_training, timeout=180), \
            "no trial trains there with a checkpoint written"
        lost = trial_on_worker_training()
        cluster.remove_node(worker)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"{lost}: lost its node" in err and "from its last checkpoint" in err
    rows = read_summary(root)
    assert [rows[n]["status"] for n in ("trial_0000", "trial_0001", "trial_0002")] == \
        ["complete"] * 3
    assert rows[lost]["env_steps"] == "16384"
    # it ran on the worker, then again on the head node, from its checkpoint
    assert status(os.path.join(root, lost))["nodes"] == [worker.node_id,
                                                          cluster.head_node.node_id]
    with open(os.path.join(root, lost, "log.txt")) as f:
        assert "resumed from" in f.read().lower()


def test_a_trial_host_runs_in_a_copy_and_brings_it_back(tmp_path):
    """The Ray actor's class by itself (no cluster): a run in a node-local copy
    of its directory, its metrics rows streamed, the directory archived back."""
    from alf_async.config import PACKAGE_ROOT
    from alf_async.sweep.ray_launch import TrialHost, pack_directory, unpack_directory
    from alf_async.sweep.runner import train_arguments

    sweep_side = str(tmp_path / "trial_0000")
    os.makedirs(sweep_side)
    with open(os.path.join(sweep_side, "sweep_run.json"), "w") as f:
        f.write("{}")
    host = TrialHost()
    host.start(None, "trial_0000", pack_directory(sweep_side),
               train_arguments(["ppo_cartpole.gin"], ["Trainer.num_env_steps=2048"]),
               PACKAGE_ROOT)
    node_side = host.run_dir
    assert node_side != sweep_side and os.path.isfile(os.path.join(node_side,
                                                                   "sweep_run.json"))
    rows, archive = "", b""
    while True:
        code, new_rows, archive = host.poll()
        rows += new_rows
        if code is not None:
            break
        wait_until(lambda: False, timeout=0.2)
    assert code == 0
    assert [json.loads(r)["iteration"] for r in rows.splitlines()] == [1, 2]
    assert not os.path.exists(node_side)  # the node's copy is removed
    unpack_directory(archive, sweep_side)
    assert os.listdir(os.path.join(sweep_side, "checkpoints"))
    assert not os.path.exists(os.path.join(sweep_side, "run.lock"))
    with open(os.path.join(sweep_side, "metrics.jsonl")) as f:
        assert f.read() == rows

"""Hogwild: workers sharing one set of networks ("shared" and "synced" modes),
the run around them (checkpoint, resume, restart, Ctrl-C) and its settings.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from alf_async.algorithms.normalizer import (RunningNormalizer, merge_statistics,
                                             subtract_statistics)
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.hogwild.shared_state import GlobalState, WorkerBinding
from alf_async.settings import HogwildSettings, TrainerSettings
from alf_async.utils.process import mp_context
from alf_async.utils.validation import ConfigError
from hogwild_helpers import gradient_step_in_child, make_sac_learner, sac_batch
from reliability_helpers import (TrainRun, checkpoint_files, checkpoint_iteration,
                                 small_params)

HOGWILD_PPO_GIN = "hogwild_ppo_bullet_inverted_pendulum.gin"


def values(learner) -> dict:
    return {k: v.detach().clone() for k, v in learner.hogwild_tensors().items()}


def changed(before: dict, after: dict) -> set:
    return {k for k in before if not torch.equal(before[k], after[k])}


# -- the normalizer's statistics --------------------------------------------------
def test_merge_and_subtract_statistics_against_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 3)), rng.normal(3.0, 2.0, size=(25, 3))
    a, b = RunningNormalizer(3), RunningNormalizer(3)
    a.update(x)
    b.update(y)
    both = merge_statistics(a.state_arrays(), b.state_arrays())
    xy = np.concatenate([x, y])
    assert both["count"][0] == 65
    np.testing.assert_allclose(both["mean"], xy.mean(0))
    np.testing.assert_allclose(both["m2"] / 65, xy.var(0))
    rest = subtract_statistics(both, a.state_arrays())
    assert rest["count"][0] == 25
    np.testing.assert_allclose(rest["mean"], y.mean(0))
    np.testing.assert_allclose(rest["m2"] / 25, y.var(0))


# -- shared mode ------------------------------------------------------------------
def test_shared_mode_update_in_another_process_is_visible_without_copy(tmp_path):
    ctx = mp_context()
    global_learner = make_sac_learner(seed=0)
    state = GlobalState.share(global_learner, str(tmp_path / 'sync.lock'))
    worker = make_sac_learner(seed=5)  # another worker, in this process
    WorkerBinding(state, worker, "shared", sync_interval=1)
    before = values(worker)
    assert not changed(values(global_learner), before)  # bound: same values
    child = ctx.Process(target=gradient_step_in_child, args=(state, "shared"))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    after = values(worker)
    # The child's step moved the actor, the critics, the targets and alpha, and
    # this worker sees it with no sync call: its tensors are the shared memory.
    assert {"log_alpha"} | {k for k in before if k.startswith("critic_target.")} <= \
        changed(before, after)
    assert changed(before, after) == set(before)
    assert not changed(values(global_learner), after)


def test_shared_mode_workers_step_the_same_storage(tmp_path):
    state = GlobalState.share(make_sac_learner(seed=0), str(tmp_path / 'sync.lock'))
    a, b = make_sac_learner(seed=1), make_sac_learner(seed=2)
    WorkerBinding(state, a, "shared", 1)
    WorkerBinding(state, b, "shared", 1)
    for name, tensor in a.hogwild_tensors().items():
        assert tensor.data_ptr() == b.hogwild_tensors()[name].data_ptr() == \
            state.tensors[name].data_ptr()
    before = values(b)
    a.train_step(sac_batch(0))
    assert changed(before, values(b)) == set(before)
    # Optimizer moments stay private to each worker.
    assert a.optimizers["actor"].state and not b.optimizers["actor"].state


# -- synced mode ------------------------------------------------------------------
def test_synced_mode_sees_global_changes_only_at_sync_points(tmp_path):
    state = GlobalState.share(make_sac_learner(seed=0), str(tmp_path / 'sync.lock'))
    start = {k: v.clone() for k, v in state.tensors.items()}
    a, b = make_sac_learner(seed=1), make_sac_learner(seed=2)
    bind_a = WorkerBinding(state, a, "synced", sync_interval=2)
    bind_b = WorkerBinding(state, b, "synced", sync_interval=2)
    assert not changed(start, values(a)) and not changed(start, values(b))

    a.train_step(sac_batch(0))
    assert not bind_a.after_update(1)  # 1 of 2 updates: no sync yet
    a_local = values(a)
    assert changed(start, a_local) == set(start)
    assert not changed(start, {k: v.clone() for k, v in state.tensors.items()})

    a.train_step(sac_batch(1))
    a_local = values(a)
    assert bind_a.after_update(1)  # second update: push and pull
    pushed = {k: v.clone() for k, v in state.tensors.items()}
    for k in start:  # global = start + a's change; a holds the global values
        torch.testing.assert_close(pushed[k], start[k] + (a_local[k] - start[k]))
        torch.testing.assert_close(values(a)[k], pushed[k])
    assert not changed(start, values(b))  # b has not synced: it sees nothing

    b.train_step(sac_batch(2))
    b_local = values(b)
    bind_b.sync()
    for k in start:  # b's change is added on top of a's
        torch.testing.assert_close(state.tensors[k], pushed[k] + (b_local[k] - start[k]))
        torch.testing.assert_close(values(b)[k], state.tensors[k])


def test_normalizer_statistics_merge_across_workers(tmp_path):
    glob = PPOLearner(3, 1, normalize_observations=True)
    state = GlobalState.share(glob, str(tmp_path / 'sync.lock'))
    a, b = PPOLearner(3, 1), PPOLearner(3, 1)
    bind_a = WorkerBinding(state, a, "shared", 1)
    bind_b = WorkerBinding(state, b, "shared", 1)
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(30, 3)), rng.normal(2.0, 1.0, size=(20, 3))
    a.normalizer.update(x)
    bind_a.after_update(1)
    b.normalizer.update(y)
    bind_b.after_update(1)
    merged = state.read_normalizer()
    xy = np.concatenate([x, y])
    assert merged["count"][0] == 50
    np.testing.assert_allclose(merged["mean"], xy.mean(0))
    np.testing.assert_allclose(merged["m2"] / 50, xy.var(0))
    # A second round: each worker adds only what it saw since its last pull.
    z, u = rng.normal(-1.0, 0.5, size=(10, 3)), rng.normal(size=(15, 3))
    a.normalizer.update(z)
    bind_a.after_update(1)
    b.normalizer.update(u)
    bind_b.after_update(1)
    everything = np.concatenate([x, y, z, u])
    merged = state.read_normalizer()
    assert merged["count"][0] == 75
    np.testing.assert_allclose(merged["mean"], everything.mean(0))
    np.testing.assert_allclose(merged["m2"] / 75, everything.var(0))
    np.testing.assert_allclose(b.normalizer.mean, everything.mean(0))  # b pulled it all
    state.load_normalizer_into(glob)
    np.testing.assert_allclose(glob.normalizer.mean, everything.mean(0))


def test_binding_refuses_other_networks(tmp_path):
    from alf_async.algorithms.sac_learner import SACLearner

    state = GlobalState.share(make_sac_learner(seed=0), str(tmp_path / 'sync.lock'))
    with pytest.raises(ConfigError, match="differ from the global ones"):
        WorkerBinding(state, SACLearner(4, 2), "shared", 1)


# -- settings -----------------------------------------------------------------------
def test_hogwild_settings_errors_name_the_setting():
    with pytest.raises(ConfigError, match="Hogwild.mode"):
        HogwildSettings(mode="locked")
    with pytest.raises(ConfigError, match="Hogwild.sync_interval"):
        HogwildSettings(sync_interval=0)
    with pytest.raises(ConfigError, match="Trainer.runtime"):
        TrainerSettings(num_env_steps=1, runtime="hogwild", backend="inprocess")
    with pytest.raises(ConfigError, match="Trainer.runtime"):
        TrainerSettings(num_env_steps=1, runtime="wild")


# -- runs -----------------------------------------------------------------------------
def _load(path):
    return torch.load(path, weights_only=True)


@pytest.mark.timeout(300)
def test_hogwild_ppo_run_checkpoint_and_resume(tmp_path):
    """A 2-worker synced run (a sync every 2 iterations): the checkpoint holds
    the global networks (trained away from their initial values, equal to what
    the trainer holds, with every worker's last updates synced in) and both
    workers' optimizer states; the budget is exact; a resume continues the
    counters and each worker's optimizer."""
    import gin

    from alf_async.config import parse_config
    from alf_async.training.trainer import Trainer

    root = str(tmp_path / "run")
    params = small_params("Trainer.checkpoint_interval=4", "Hogwild.sync_interval=2",
                          iterations=9)
    parse_config([HOGWILD_PPO_GIN], params)
    try:
        trainer = Trainer(root)
        initial = {k: v.detach().clone()
                   for k, v in trainer.learner.model.state_dict().items()}
        counters = trainer.train()
    finally:
        gin.clear_config()
    assert counters["iteration"] == 9
    files = checkpoint_files(root)
    state = _load(files[-1])
    assert checkpoint_iteration(files[-1]) == counters["iteration"]
    model = state["learner"]["model"]
    for k, v in trainer.learner.model.state_dict().items():
        torch.testing.assert_close(model[k], v)
    assert any(not torch.equal(model[k], initial[k]) for k in initial)
    workers = state["hogwild"]["workers"]
    assert sorted(workers) == ["0", "1"]
    iterations = {w: int(s["iteration"]) for w, s in workers.items()}
    assert all(n >= 1 for n in iterations.values())
    assert sum(iterations.values()) == counters["iteration"]
    assert all(s["optimizer"]["state"] for s in workers.values())
    totals = state["hogwild"]["worker_totals"]
    assert sum(t["env_steps"] for t in totals.values()) == counters["env_steps"]
    # Every batch's observations are in the global statistics: the workers'
    # unsynced iterations were pushed when they stopped.
    assert state["learner"]["normalizer"]["count"][0] == counters["env_steps"]

    parse_config([HOGWILD_PPO_GIN], small_params("Trainer.checkpoint_interval=4",
                                                 "Hogwild.sync_interval=2", iterations=13))
    try:
        counters2 = Trainer(root).train()
    finally:
        gin.clear_config()
    assert counters2["iteration"] == 13
    state2 = _load(checkpoint_files(root)[-1])
    for w, s in state2["hogwild"]["workers"].items():
        assert int(s["iteration"]) >= iterations[w]  # continued, not restarted
    assert sum(int(s["iteration"]) for s in state2["hogwild"]["workers"].values()) == \
        counters2["iteration"]


@pytest.mark.timeout(300)
def test_hogwild_workers_follow_the_learning_rate_schedule(tmp_path):
    """A linear schedule (and an annealed clip range) falls in a Hogwild run
    as in an actor/learner run: each batch trains at the progress of the
    batches granted before it (done or in flight), so the 4 batches of a
    4-iteration run train at 1, 3/4, 1/2 and 1/4 of the learning rate."""
    import gin

    from alf_async.config import parse_config
    from alf_async.training.trainer import Trainer
    from reliability_helpers import read_metrics

    root = str(tmp_path / "run")
    parse_config([HOGWILD_PPO_GIN], small_params(
        "PPOLearner.learning_rate=1e-3", "PPOLearner.learning_rate_schedule='linear'",
        "PPOLearner.anneal_clip_ratio=True", "PPOLearner.clip_ratio=0.2",
        "Trainer.checkpoint_interval=1000", iterations=4))
    try:
        Trainer(root).train()
    finally:
        gin.clear_config()
    rows = read_metrics(root)
    assert sorted(row["learning_rate"] for row in rows) == pytest.approx(
        [0.25e-3, 0.5e-3, 0.75e-3, 1e-3])
    assert sorted(row["clip_ratio"] for row in rows) == pytest.approx([0.05, 0.1, 0.15, 0.2])


def test_hogwild_worker_state_loads_onto_the_cpu(monkeypatch):
    """A worker's state is read with map_location="cpu" (as checkpoints are)."""
    from alf_async.hogwild import worker

    seen = {}
    original = torch.load

    def load(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    state = worker.from_bytes(worker.to_bytes({"step": torch.ones(2)}))
    assert seen.get("map_location") == "cpu" and state["step"].device.type == "cpu"


@pytest.mark.timeout(300)
def test_killed_worker_is_restarted_and_run_finishes(tmp_path):
    root = str(tmp_path / "run")
    params = small_params("Trainer.checkpoint_interval=5", iterations=14)
    with TrainRun(root, params, gin_file=HOGWILD_PPO_GIN) as run:
        run.wait_for_iteration(2)
        victim = run.actors()[1]
        victim.send_signal(signal.SIGKILL)
        rc = run.wait(240)
        run.assert_clean()
        out = run.output()
    assert rc == 0, out[-3000:]
    assert "died (signal SIGKILL)" in out and "restarting it from the global networks" in out
    rows = run.metrics()
    assert rows[-1]["actor_restarts"] == 1
    assert rows[-1]["iteration"] == 14
    assert {r["actor_id"] for r in rows[-6:]} == {0, 1}  # both workers train after it


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig, to_group, status", [(signal.SIGINT, True, 130),
                                                   (signal.SIGTERM, False, 143)],
                         ids=["ctrl-c-group", "sigterm-trainer"])
def test_signal_writes_final_checkpoint_and_ends_workers(tmp_path, sig, to_group, status):
    root = str(tmp_path / "run")
    params = small_params("Trainer.checkpoint_interval=1000", iterations=100000)
    with TrainRun(root, params, gin_file=HOGWILD_PPO_GIN) as run:
        run.wait_for_iteration(2)
        (run.signal_group if to_group else run.signal)(sig)
        rc = run.wait(60)
        run.assert_clean(timeout=5)
        out = run.output()
    assert rc == status, out[-3000:]
    last = run.metrics()[-1]["iteration"]
    files = checkpoint_files(root)
    assert files and checkpoint_iteration(files[-1]) == last
    state = _load(files[-1])
    assert sorted(state["hogwild"]["workers"]) == ["0", "1"]


@pytest.mark.timeout(300)
def test_hogwild_sac_config_trains_holds_the_ratio_and_plays(tmp_path, train_cmd):
    """The shipped Hogwild SAC gin file (shared mode), shrunk to a fast env: two
    workers with their own replay buffers take exactly the gradient steps their
    env steps paid for after its share of learning_starts; per-worker TensorBoard
    curves; the play command acts from the checkpoint."""
    import subprocess
    import sys

    from conftest import REPO_ROOT
    from reliability_helpers import read_metrics

    root = tmp_path / "run"
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [tests_dir, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        train_cmd + ["--gin_file=hogwild_sac_bullet_half_cheetah.gin", f"--root_dir={root}",
                     "--gin_param=Trainer.env_name='sac_test_envs:AlfAsyncPointMass-v0'",
                     "--gin_param=Trainer.num_env_steps=640",
                     "--gin_param=Replay.learning_starts=128",
                     "--gin_param=SquashedGaussianActor.hidden_sizes=(32, 32)",
                     "--gin_param=TwinQNetwork.hidden_sizes=(32, 32)",
                     "--gin_param=SACLearner.batch_size=32"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(str(root))
    last = rows[-1]
    assert last["env_steps"] == 640 and {r["actor_id"] for r in rows} == {0, 1}
    # Each worker: its 64 of learning_starts, then 1 env step : 1 gradient step
    # (the batches go to whichever worker is free, so the split may be uneven).
    assert last["gradient_steps_total"] == 640 - 128
    per_worker = {r["actor_id"]: (r["worker_env_steps"], r["worker_gradient_steps"])
                  for r in rows}
    assert sorted(per_worker) == [0, 1]
    assert sum(e for e, _ in per_worker.values()) == 640
    assert all(g == e - 64 for e, g in per_worker.values()), per_worker
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(root / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"sac/critic_loss", "hogwild/gradient_steps_per_s", "hogwild/worker_0/return",
            "hogwild/worker_1/gradient_steps"} <= tags, sorted(tags)
    state = _load(checkpoint_files(str(root))[-1])
    assert state["learner"]["gradient_steps"] == 512
    played = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.play", f"--root_dir={root}",
         "--num_episodes=1"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=120)
    assert played.returncode == 0, played.stderr[-2000:]
    assert "episode 1: return" in played.stdout

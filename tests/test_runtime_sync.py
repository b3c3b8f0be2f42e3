"""Weight sync, policy lag and determinism of real Trainer runs (N = 1 and N = 2).

Each test builds an ``alf_async.training.trainer.Trainer`` in this process (gin cleared,
tiny sizes) and reads the run's ``metrics.jsonl``. It proves that

- every batch is stamped with one policy version (``behaviour_version``), and the
  parameters the actor used (``behaviour_digest``) equal the parameters the
  learner published as that version (``trainer.loop.batches.published_digests``);
- stronger: every step of every trained batch was acted by exactly that version.
  The log-probs and values the actor recorded are recomputed from the published
  weights of ``behaviour_version`` and match, and do not match the neighbouring
  versions;
- versions advance exactly once per learner iteration (published versions are
  0..n, each with new weights; iteration i trains at version i - 1);
- N = 1 trains every batch exactly on-policy: truncated_fraction 0.0 and
  importance weights 1 on every row, with observation normalization on;
- policy lag: N = 1 gives lag 0 on every batch (synchronous); N = 2 with one slot
  per actor gives lag <= 1 on every batch and lag 1 on some; N = 2 with two slots
  per actor may exceed 1 but stays <= N * slots - 1;
- determinism: N = 1 with a fixed seed, run twice in fresh root dirs, gives
  identical per-iteration PPO statistics, episode returns and weights; the
  in-process backend gives the same numbers as the process backend; a different
  seed gives different numbers (so the comparison can fail).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from typing import Dict, List

import gin
import numpy as np
import psutil
import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.config import register_configurables
from alf_async.envs.gym_env import env_dims
from alf_async.algorithms.policy import NeuralPolicy
from alf_async.runtime.process_pool import ProcessActorPool
from alf_async.settings import TrainerSettings
from conftest import is_multiprocessing_service
from scripted_policy import ScriptedPolicy
from alf_async.utils.shared_memory import list_blocks
from alf_async.runtime.weight_store import WeightStore, weights_digest
from alf_async.training.trainer import Trainer

ENV = "InvertedPendulumBulletEnv-v0"
NUM_ENVS = 2
UNROLL = 32
BINDINGS = """
PPOLearner.mini_batch_size = 32
PPOLearner.num_epochs = 2
PPOLearner.learning_rate = 1e-3
ActorNetwork.hidden_sizes = (16, 16)
ValueNetwork.hidden_sizes = (16, 16)
MetricsRecorder.tensorboard = False
"""
OBS_DIM, ACT_DIM, _ = env_dims(ENV)
PPO_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
             "explained_variance", "grad_norm", "action_std")


def read_metrics(root_dir) -> List[Dict]:
    with open(os.path.join(root_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def live_children():
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if not is_multiprocessing_service(p):
            out.append(p.pid)
    return out


class Run:
    """A finished Trainer run: the trainer, its metrics lines, and (if captured)
    the batches it trained on and the arrays it published, by version."""

    def __init__(self, trainer, metrics, batches, published):
        self.trainer = trainer
        self.metrics = metrics
        self.batches = batches
        self.published = published


@contextlib.contextmanager
def gin_bindings():
    """gin holds BINDINGS inside the block and nothing after it."""
    gin.clear_config()
    register_configurables()
    gin.parse_config(BINDINGS)
    try:
        yield
    finally:
        gin.clear_config()


def run_trainer(root_dir, num_iterations=6, capture=False, **kwargs) -> Run:
    blocks_before = set(list_blocks(os.getpid()))
    children_before = set(live_children())
    batches: List[Dict[str, np.ndarray]] = []
    published: Dict[int, Dict[str, np.ndarray]] = {}
    with pytest.MonkeyPatch.context() as mp, gin_bindings():
        if capture:
            train, publish = PPOLearner.train, WeightStore.publish

            def capturing_train(self, batch, *args, **kwargs):
                batches.append({k: np.array(v, copy=True) for k, v in batch.items()})
                return train(self, batch, *args, **kwargs)

            def recording_publish(self, arrays, version):
                published[version] = {k: np.array(v, copy=True) for k, v in arrays.items()}
                return publish(self, arrays, version)

            mp.setattr(PPOLearner, "train", capturing_train)
            mp.setattr(WeightStore, "publish", recording_publish)
        options = dict(env_name=ENV, num_envs=NUM_ENVS, unroll_length=UNROLL,
                       num_iterations=num_iterations, seed=3, checkpoint_interval=1000,
                       learner_num_threads=1)
        options.update(kwargs)
        trainer = Trainer(root_dir=str(root_dir), **options)
        counters = trainer.train()
    assert counters["iteration"] == num_iterations
    # The run ended its actors and released its shared memory.
    assert set(live_children()) <= children_before
    assert set(list_blocks(os.getpid())) <= blocks_before
    return Run(trainer, read_metrics(root_dir), batches, published)


def recomputed(arrays: Dict[str, np.ndarray], batch: Dict[str, np.ndarray]):
    """(log_prob [T, K], value [T, K]) of the batch's actions under ``arrays``."""
    obs = batch["observation"]
    T, K, O = obs.shape
    with gin_bindings():  # the networks' sizes
        policy = NeuralPolicy(O, batch["action"].shape[-1])
    policy.load_weights(arrays)
    with torch.no_grad():
        x = policy._obs(obs.reshape(T * K, O))
        log_prob = policy.model.actor(x).log_prob(
            torch.from_numpy(batch["action"].reshape(T * K, -1)))
        value = policy.model.predict_value(x)
    return log_prob.numpy().reshape(T, K), value.numpy().reshape(T, K)


def acted_by(arrays, batch) -> bool:
    log_prob, value = recomputed(arrays, batch)
    return (np.allclose(log_prob, batch["log_prob"], rtol=1e-4, atol=1e-4)
            and np.allclose(value, batch["value"], rtol=1e-4, atol=1e-4))


def check_versions_and_digests(run: Run, num_iterations: int) -> None:
    trainer, metrics = run.trainer, run.metrics
    assert [m["iteration"] for m in metrics] == list(range(1, num_iterations + 1))
    # One publication per learner iteration (plus the initial weights, version 0),
    # and each one holds new weights.
    assert sorted(trainer.loop.batches.published_digests) == list(range(num_iterations + 1))
    assert len(set(trainer.loop.batches.published_digests.values())) == num_iterations + 1
    for m in metrics:
        version = m["behaviour_version"]
        assert isinstance(version, int)
        assert 0 <= version <= m["iteration"] - 1, m
        assert m["behaviour_digest"] == trainer.loop.batches.published_digests[version], m
        assert m["lag"] == m["iteration"] - 1 - version, m
    if run.published:
        for version, arrays in run.published.items():
            assert weights_digest(arrays) == trainer.loop.batches.published_digests[version]


def check_batches_acted_by_their_version(run: Run) -> None:
    """Every step of each trained batch was acted by its behaviour version."""
    assert len(run.batches) == len(run.metrics)
    for m, batch in zip(run.metrics, run.batches):
        version = m["behaviour_version"]
        assert acted_by(run.published[version], batch), (
            f"iteration {m['iteration']}: the batch's log-probs/values are not those "
            f"of the published weights of version {version}")
        for other in (version - 1, version + 1):
            if other in run.published:
                assert not acted_by(run.published[other], batch)


@pytest.mark.parametrize("num_env_workers", [0, 1])
def test_one_actor_is_synchronous_and_in_sync(tmp_path, num_env_workers):
    n = 6
    run = run_trainer(tmp_path, num_iterations=n, capture=True, num_actors=1,
                      num_env_workers=num_env_workers)
    check_versions_and_digests(run, n)
    check_batches_acted_by_their_version(run)
    # N = 1: predict -> learn -> predict. Batch i was acted by version i - 1.
    assert [m["behaviour_version"] for m in run.metrics] == list(range(n))
    assert all(m["lag"] == 0 for m in run.metrics)
    assert {m["actor_id"] for m in run.metrics} == {0}
    # Exactly on-policy, with observation normalization on (the default) and
    # the actor acting (W = 0) or its env workers (W = 1): the decoupled
    # default's importance weights are all 1, none is truncated.
    assert [m["truncated_fraction"] for m in run.metrics] == [0.0] * n
    assert [m["importance_weight"] for m in run.metrics] == [1.0] * n
    assert [m["failed_steps"] for m in run.metrics] == [0.0] * n


def test_two_actors_lag_at_most_one(tmp_path):
    n = 8
    run = run_trainer(tmp_path, num_iterations=n, capture=True, num_actors=2)
    check_versions_and_digests(run, n)
    check_batches_acted_by_their_version(run)
    lags = [m["lag"] for m in run.metrics]
    assert all(0 <= lag <= 1 for lag in lags), lags
    assert 1 in lags, lags
    assert {m["actor_id"] for m in run.metrics} == {0, 1}
    # An actor's batches carry non-decreasing versions, each newer than the one
    # of its previous batch (it waits for the learner between unrolls).
    for actor_id in (0, 1):
        versions = [m["behaviour_version"] for m in run.metrics if m["actor_id"] == actor_id]
        assert versions == sorted(set(versions)), versions


def test_two_actors_two_slots_lag_can_exceed_one(tmp_path):
    n = 8
    run = run_trainer(tmp_path, num_iterations=n, num_actors=2, slots_per_actor=2)
    check_versions_and_digests(run, n)
    lags = [m["lag"] for m in run.metrics]
    assert min(lags) >= 0
    # Each actor unrolls its second slot without waiting for the learner.
    assert max(lags) >= 2, lags


def _run_fingerprint(metrics: List[Dict]):
    keys = PPO_STATS + ("episode_return", "episode_length", "episodes", "env_steps",
                        "behaviour_version", "behaviour_digest")
    return [{k: m[k] for k in keys} for m in metrics]


def test_one_actor_fixed_seed_is_deterministic(tmp_path):
    n = 5
    first = run_trainer(tmp_path / "a", num_iterations=n, seed=11)
    second = run_trainer(tmp_path / "b", num_iterations=n, seed=11)
    a, b = _run_fingerprint(first.metrics), _run_fingerprint(second.metrics)
    assert len(a) == n
    # Episodes finished, so returns are compared too (not just None == None).
    assert all(m["episode_return"] is not None for m in a)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"iteration {i + 1} differs:\n{x}\n{y}"
    assert first.trainer.loop.batches.published_digests == second.trainer.loop.batches.published_digests
    # The actor running in the learner's process produces the same run.
    inprocess = run_trainer(tmp_path / "c", num_iterations=n, seed=11, backend="inprocess")
    assert _run_fingerprint(inprocess.metrics) == a
    # The compared numbers depend on the seed: the check is not vacuous.
    other = run_trainer(tmp_path / "d", num_iterations=n, seed=12)
    c = _run_fingerprint(other.metrics)
    assert [x["policy_loss"] for x in c] != [x["policy_loss"] for x in a]
    assert [x["episode_return"] for x in c] != [x["episode_return"] for x in a]


class LatePolicy(ScriptedPolicy):
    """ScriptedPolicy that is slow (``delay_s`` per step) in the actor whose
    policy seed is ``late_seed``: a late actor, as a slower env would make it."""

    def __init__(self, observation_dim, action_dim, seed=0, late_seed=None, delay_s=0.0):
        super().__init__(observation_dim, action_dim, seed)
        self.delay_s = delay_s if seed == late_seed else 0.0

    def act(self, observation):
        time.sleep(self.delay_s)
        return super().act(observation)


@pytest.mark.parametrize("num_actors", [2, 3])
def test_lag_bound_holds_with_a_late_actor(num_actors):
    """One slot per actor: lag <= N - 1 even when one actor is much slower than
    the others (the learner waits for it instead of training the fast actors'
    batches again and again)."""
    config = TrainerSettings(env_name=ENV, num_envs=2, num_env_workers=0, unroll_length=8,
                             seed=1, num_actors=num_actors, max_episode_steps=20,
                             num_iterations=4 * num_actors)
    late = num_actors - 1
    factory = functools.partial(
        LatePolicy, late_seed=config.policy_seed(late, 0, 0), delay_s=0.05)
    arrays = {"param/w": np.zeros(3, np.float32)}
    pool = None
    lags, actors = [], []
    try:
        pool = ProcessActorPool(config, factory, arrays, OBS_DIM, ACT_DIM)
        pool.publish_weights(arrays, 0)
        pool.start()
        for iteration in range(4 * num_actors):
            message, _ = pool.next_batch()
            lags.append(iteration - message.version)
            actors.append(message.actor_id)
            pool.publish_weights({"param/w": np.full(3, iteration + 1, np.float32)},
                                 iteration + 1)
            pool.release(message)
    finally:
        if pool is not None:
            pool.close()
    assert all(0 <= lag <= num_actors - 1 for lag in lags), (lags, actors)
    assert late in actors


def test_max_lag_drops_stale_batches_and_counts_them(tmp_path):
    """N = 2 gives lag 1 for about half the batches; Trainer.max_lag=0 drops those
    (released untrained, counted) and trains only on lag-0 batches."""
    run = run_trainer(tmp_path / "r", num_iterations=6, num_actors=2, max_lag=0)
    lags = [m["lag"] for m in run.metrics]
    assert lags == [0] * 6
    last = run.metrics[-1]
    assert last["dropped_batches"] > 0
    assert last["dropped_env_steps"] == last["dropped_batches"] * UNROLL * NUM_ENVS
    # The budget counts trained env steps only.
    assert last["env_steps"] == 6 * UNROLL * NUM_ENVS

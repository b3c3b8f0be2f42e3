"""Env workers that act for their own envs (``Trainer.acting_env_workers``,
``envs.acting_workers``): one request per unroll instead of a message per step.

- An actor whose workers act writes the same [T, K] trajectories as one that
  acts itself (W = 2, S = 2 and W = 1, S = 1; Gaussian and gSDE exploration;
  with observation normalization and new weights between unrolls, and after a
  reseed), and reports the same finished episodes.
- A worker SIGKILLed in the middle of an unroll: the unroll completes, the
  dead worker's envs have one failed truncation (reward 0) at the step in
  progress and go on with the new worker's envs after it, the failures name
  the worker, and the next unroll runs on the new worker.
- Policies without a numpy copy (recurrent, images, SAC, scripted) act in the
  actor.
"""

from __future__ import annotations

import os
import signal

import gin
import numpy as np
import psutil
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.runtime.actor import Actor
from alf_async.runtime.trajectory import trajectory_specs
from alf_async.settings import TrainerSettings
from conftest import wait_until

ENV = "InvertedPendulumBulletEnv-v0"
SLOW_ENV = "AlfAsyncLatencyPendulum-v0"  # every step also sleeps 5 ms
NUM_ENVS, UNROLL = 4, 30


def _settings(acting: bool, workers: int = 2, splits: int = 2, env: str = ENV,
              unroll: int = UNROLL) -> TrainerSettings:
    return TrainerSettings(env_name=env, num_envs=NUM_ENVS, num_env_workers=workers,
                           env_splits=splits, acting_env_workers=acting, unroll_length=unroll,
                           seed=5, max_episode_steps=12, num_iterations=2)


def _policy(observation_spec, action_spec, seed):
    torch.manual_seed(0)  # the same weights in every actor
    return NeuralPolicy(observation_spec, action_spec, seed)


def _weights(observation_spec, action_spec, step: int):
    """Packed weights of a learner whose normalizer has seen some data
    (different for each ``step``)."""
    learner = PPOLearner(observation_spec, action_spec, seed=step, normalize_observations=True)
    rng = np.random.default_rng(step)
    learner.normalizer.update(
        torch.from_numpy(rng.normal(0.5, 2.0, (64, observation_spec.dim)).astype(np.float32)))
    return learner.weight_arrays()


def _unrolls(acting: bool, count: int = 3, **kwargs):
    """``count`` unrolls of an in-process actor ([T, K] arrays each, with new
    weights before the second and a reseed before the third) and the episodes
    it finished."""
    actor = Actor(0, _settings(acting, **kwargs), _policy)
    try:
        assert (actor._acting is not None) == acting
        obs_spec, action_spec = actor.env.observation_spec, actor.env.action_spec
        specs = trajectory_specs(actor.settings.unroll_length, NUM_ENVS, obs_spec,
                                 actor.env.action_dim)
        out, episodes = [], []
        for i in range(count):
            if i == 1:
                actor.load_weights(1, _weights(obs_spec, action_spec, 1))
            if i == 2:
                actor.reseed(7)
            arrays = {k: np.zeros(v.shape, v.dtype) for k, v in specs.items()}
            record = actor.unroll(arrays)
            out.append(arrays)
            episodes.append(sorted(record.episodes))
        return out, episodes
    finally:
        actor.close()


def _assert_same(a, b):
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("exploration", ["gaussian", "state_dependent"])
@pytest.mark.parametrize("workers,splits", [(2, 2), (1, 1)])
def test_acting_workers_write_the_trajectories_the_actor_would(exploration, workers, splits):
    gin.bind_parameter("ActorNetwork.exploration", exploration)
    gin.bind_parameter("ActorNetwork.sde_sample_interval", 3)
    acted, acted_episodes = _unrolls(True, workers=workers, splits=splits)
    reference, reference_episodes = _unrolls(False, workers=workers, splits=splits)
    _assert_same(acted, reference)
    assert acted_episodes == reference_episodes
    assert sum(len(e) for e in acted_episodes) > 4  # episodes of 12 steps ended
    assert acted[0]["truncated"].any()  # truncation values were computed
    assert np.any(acted[0]["truncation_value"] != 0)
    # The reseed restarted the streams: the third unroll is not the second's
    # continuation of the same samples (its first actions differ from a run
    # that was not reseeded is checked by the equality above with the
    # reference, which was reseeded too).


def test_policies_without_a_numpy_copy_act_in_the_actor():
    actor = Actor(0, _settings(True), lambda o, a, s: NeuralPolicy(o, a, s,
                                                                  numpy_inference=False))
    try:
        assert actor._acting is None
    finally:
        actor.close()


@pytest.mark.timeout(120)
def test_bf16_weights_make_the_actor_act_itself():
    """Weights published for bfloat16 (``PPOLearner.precision``) have no
    numpy copy for the env workers: the actor hands acting back from them at
    that load, then unrolls with its own (bf16) policy (on one thread, as
    in an actor process: a bf16 product's two-thread barrier stalls for
    hundreds of ms on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    actor = Actor(0, _settings(True), _policy)
    try:
        assert actor._acting is not None
        obs_spec, action_spec = actor.env.observation_spec, actor.env.action_spec
        actor.load_weights(1, PPOLearner(obs_spec, action_spec, precision="bf16")
                           .weight_arrays())
        assert actor._acting is None and actor.policy.bf16
        specs = trajectory_specs(UNROLL, NUM_ENVS, obs_spec, actor.env.action_dim)
        arrays = {k: np.zeros(v.shape, v.dtype) for k, v in specs.items()}
        record = actor.unroll(arrays)
        assert not record.acting_env_workers
        assert np.isfinite(arrays["log_prob"]).all() and arrays["reward"].any()
    finally:
        actor.close()
        torch.set_num_threads(threads)


@pytest.mark.timeout(120)
def test_env_workers_that_act_do_not_load_torch():
    # The acting policy (numpy networks, gSDE draws, observation normalizer)
    # reaches the workers pickled; unpickling it must not import torch, which
    # would cost each worker start-up time and memory (libtorch mapped in).
    gin.bind_parameter("ActorNetwork.exploration", "state_dependent")
    actor = Actor(0, _settings(True), _policy)
    try:
        assert actor._acting is not None
        obs_spec, action_spec = actor.env.observation_spec, actor.env.action_spec
        specs = trajectory_specs(UNROLL, NUM_ENVS, obs_spec, actor.env.action_dim)
        for version in (0, 1):  # the first weights, then a learner's with statistics
            if version:
                actor.load_weights(1, _weights(obs_spec, action_spec, 1))
            arrays = {k: np.zeros(v.shape, v.dtype) for k, v in specs.items()}
            actor.unroll(arrays)
            assert np.all(arrays["action"] != 0)  # the workers acted
        pids = actor.env.worker_pids
        assert len(pids) == 2
        for pid in pids:
            with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
                mapped = f.read()
            assert "libpython" in mapped or "numpy" in mapped  # a real map was read
            assert "libtorch" not in mapped, f"env worker {pid} has torch loaded"
    finally:
        actor.close()


@pytest.mark.timeout(180)
def test_a_worker_killed_mid_unroll_is_replaced_and_the_unroll_completes():
    unroll = 200  # 1 s of sleeping per worker and split at 5 ms a step
    settings = _settings(True, env=SLOW_ENV, unroll=unroll)
    actor = Actor(0, settings, _policy, env_modules=("alf_async.envs.latency",))
    try:
        specs = trajectory_specs(unroll, NUM_ENVS, actor.env.observation_spec,
                                 actor.env.action_dim)
        victim = actor.env.worker_pids[1]  # envs 2 and 3
        killed = []

        def kill_once():
            progress = actor._acting.arrays["progress"]
            if not killed and progress[2] >= 5:
                os.kill(victim, signal.SIGKILL)
                assert wait_until(lambda: not psutil.pid_exists(victim) or
                                  psutil.Process(victim).status() == psutil.STATUS_ZOMBIE, 10)
                killed.append(int(progress[2]))

        out = {k: np.zeros(v.shape, v.dtype) for k, v in specs.items()}
        record = actor.unroll(out, on_step=kill_once)
        assert killed and killed[0] < unroll, "the kill did not land mid-unroll"
        failed = actor._acting.arrays["env_failed"].copy()  # PPO's trajectory has no column
        assert not failed[:, :2].any()
        assert failed[:, 2:].sum(axis=0).tolist() == [1, 1]
        t = int(np.flatnonzero(failed[:, 2])[0])
        assert killed[0] <= t < unroll
        assert np.flatnonzero(failed[:, 3]).tolist() == [t]
        assert out["truncated"][t, 2:].all() and not out["terminated"][t, 2:].any()
        assert (out["reward"][t, 2:] == 0).all()
        if t + 1 < unroll:  # the new worker's envs went on
            assert (out["reward"][t + 1:, 2:] > 0).all()
        assert sorted(k for k, _ in record.env_failures) == [2, 3]
        assert all(f"env-worker process {victim}" in text and "SIGKILL" in text
                   for _, text in record.env_failures)
        new_pid = actor.env.worker_pids[1]
        assert new_pid != victim and psutil.Process(new_pid).is_running()
        # The next unroll runs on the new worker, without failures.
        record = actor.unroll({k: np.zeros(v.shape, v.dtype) for k, v in specs.items()})
        assert record.env_failures == []
    finally:
        actor.close()


class _Stop(Exception):
    pass


@pytest.mark.timeout(120)
def test_an_actor_stopped_mid_unroll_ends_its_unrolling_workers():
    """An exception in the actor while its workers unroll (as a SIGTERM's
    SystemExit would be): ``close`` ends the workers, which read no command
    until their unroll is done, and releases the rollout block."""
    unroll = 2000  # 20 s of sleeping per worker: still unrolling when stopped
    actor = Actor(0, _settings(True, env=SLOW_ENV, unroll=unroll), _policy,
                  env_modules=("alf_async.envs.latency",))
    pids = actor.env.worker_pids
    block = actor._acting.block.path
    try:
        specs = trajectory_specs(unroll, NUM_ENVS, actor.env.observation_spec,
                                 actor.env.action_dim)
        progress = actor._acting.arrays["progress"]

        def stop_when_started():
            if progress.min() >= 3:
                raise _Stop

        with pytest.raises(_Stop):
            actor.unroll({k: np.zeros(v.shape, v.dtype) for k, v in specs.items()},
                         on_step=stop_when_started)
        assert progress.max() < unroll
    finally:
        actor.close()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() !=
                   psutil.STATUS_ZOMBIE for pid in pids)
    assert not os.path.exists(block)


@pytest.mark.timeout(240)
def test_a_sync_run_with_env_workers_says_they_act(tmp_path):
    from reliability_helpers import TrainRun, small_params

    params = small_params("Trainer.num_env_workers=2", iterations=3)
    with TrainRun(str(tmp_path / "run"), params) as run:
        rc = run.wait(180)
        run.assert_clean()
        out = run.output()
    assert rc == 0, out[-3000:]
    assert "the env workers act for their envs and unroll them by themselves" in out, \
        out[-3000:]
    assert run.metrics()[-1]["iteration"] == 3

"""Double-buffered sampling (``Trainer.env_splits``) changes the order of work,
never the trajectories.

Split s of S holds the envs k with k % S == s; with env workers each worker's
envs of a split are a group of their own, received as soon as that worker
answers. With a policy whose action depends
on the observation alone (``ObservationPolicy``) and seeded PyBullet envs, an
actor stepping its envs in two splits (in env-worker processes, where inference
and stepping overlap) produces the same [T, K] trajectories as the plain loop.
A worker that dies while both splits are in flight is replaced and its envs
in both splits are reported as failed truncations, once each.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import psutil
import pytest

from alf_async.envs.batched_env import BatchedEnv
from alf_async.envs.gym_env import env_dims
from alf_async.runtime.inprocess_pool import InProcessActorPool
from alf_async.runtime.process_pool import ProcessActorPool
from alf_async.settings import TrainerSettings
from alf_async.utils.validation import ConfigError
from reliability_helpers import kill_and_wait
from scripted_policy import ObservationPolicy
from test_runtime_equivalence import assert_same_trajectory, run_pool, weights

ENV = "InvertedPendulumBulletEnv-v0"
OBS_DIM, ACT_DIM, _ = env_dims(ENV)
NUM_ENVS = 3  # with W = 1, split 0 = envs {0, 2}, split 1 = env {1}: uneven on purpose
UNROLL = 20
NUM_BATCHES = 3


def settings(num_env_workers: int, env_splits: int) -> TrainerSettings:
    return TrainerSettings(env_name=ENV, num_envs=NUM_ENVS, num_env_workers=num_env_workers,
                           env_splits=env_splits, unroll_length=UNROLL, seed=9,
                           max_episode_steps=25, num_iterations=NUM_BATCHES)


def enough(batches):
    return len(batches) >= NUM_BATCHES


def test_split_actor_process_equals_plain_loop():
    want = run_pool(InProcessActorPool(settings(0, 1), ObservationPolicy, OBS_DIM, ACT_DIM),
                    enough)
    got = run_pool(ProcessActorPool(settings(1, 2), ObservationPolicy, weights(0), OBS_DIM,
                                    ACT_DIM), enough)
    assert sum(int(a["terminated"].sum() + a["truncated"].sum()) for _, a in want) > 0
    for i, ((message, arrays), (ref_message, ref_arrays)) in enumerate(zip(got, want)):
        assert_same_trajectory(arrays, ref_arrays, f"env_splits=2 batch {i}", message.version)
        # Episodes finish in another order (split by split), not with other values.
        assert sorted(message.unroll.episodes) == sorted(ref_message.unroll.episodes)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batched_env_split_steps_equal_full_steps(num_workers):
    def run(num_splits):
        rewards = []
        with BatchedEnv(ENV, 4, num_workers, seed=3, max_episode_steps=15,
                        num_splits=num_splits) as env:
            obs = env.reset()
            for _ in range(40):
                action = np.sin(3.0 * obs[:, :ACT_DIM])
                if num_splits == 1:
                    result = env.step(action)
                    obs, reward = result.observation, result.reward
                else:
                    for s, envs in enumerate(env.splits):
                        env.step_send(s, action[envs])
                    reward = np.zeros(4, np.float32)
                    for s, envs in enumerate(env.splits):
                        result = env.step_receive(s)
                        obs[envs], reward[envs] = result.observation, result.reward
                rewards.append(reward)
            return np.array(rewards), sorted(env.pop_finished_episodes())

    plain, split = run(1), run(2)
    np.testing.assert_array_equal(split[0], plain[0])
    assert split[1] == plain[1] and plain[1]


def _zeros(env, group):
    return np.zeros((len(range(env.num_envs)[env.splits[group]]), ACT_DIM), np.float32)


def test_groups_are_one_worker_in_one_split():
    """K = 4, W = 2, S = 2: worker 0 holds envs 0-1, worker 1 envs 2-3; the
    groups are split-major: (split 0: env 0, env 2), (split 1: env 1, env 3).
    With S = 1 or W = 0 a group is a whole split."""
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=2) as env:
        assert [list(range(4)[g]) for g in env.splits] == [[0], [2], [1], [3]]
    with BatchedEnv(ENV, 5, 2, seed=3, num_splits=2) as env:  # workers: 0-2, 3-4
        assert [list(range(5)[g]) for g in env.splits] == [[0, 2], [4], [1], [3]]
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=1) as env:
        assert [list(range(4)[g]) for g in env.splits] == [[0, 1, 2, 3]]
    with BatchedEnv(ENV, 4, 0, seed=3, num_splits=2) as env:
        assert [list(range(4)[g]) for g in env.splits] == [[0, 2], [1, 3]]


def test_a_group_is_received_while_another_worker_is_still_stepping():
    """The group of worker 0 comes back while worker 1 is stopped (SIGSTOP):
    no worker waits for another."""
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=2, worker_timeout_s=120) as env:
        env.reset()
        other = env.worker_pids[1]
        os.kill(other, signal.SIGSTOP)
        try:
            # The signal takes effect when the kernel next runs the worker.
            deadline = time.monotonic() + 60
            while psutil.Process(other).status() != psutil.STATUS_STOPPED:
                assert time.monotonic() < deadline, "the worker did not stop"
                time.sleep(0.01)
            for group in (0, 1):  # split 0 of worker 0, split 0 of worker 1
                env.step_send(group, _zeros(env, group))
            assert not env.step_receive(0).truncated.any()
            assert psutil.Process(other).status() == psutil.STATUS_STOPPED
        finally:
            os.kill(other, signal.SIGCONT)
        assert not env.step_receive(1).truncated.any()
        assert env.pop_failures() == []


def test_worker_lost_with_both_splits_in_flight():
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=2) as env:
        obs = env.reset()
        kill_and_wait(env.worker_pids[0])  # worker 0 holds envs 0 and 1
        for group in range(len(env.splits)):
            env.step_send(group, _zeros(env, group))
        # Groups: env 0, env 2 (split 0), env 1, env 3 (split 1).
        results = [env.step_receive(group) for group in range(4)]
        assert [r.truncated.tolist() for r in results] == [[True], [False], [True], [False]]
        np.testing.assert_array_equal(results[0].final_observation[0], obs[0])
        np.testing.assert_array_equal(results[2].final_observation[0], obs[1])
        failed = sorted(k for k, _ in env.pop_failures())
        assert failed == [0, 1]
        # The replacement steps normally afterwards, in both forms.
        env.step(np.zeros((4, ACT_DIM), np.float32))
        env.step_send(2, _zeros(env, 2))
        assert not env.step_receive(2).truncated.any()
        assert env.pop_failures() == []


def test_worker_lost_with_one_split_received_and_not_sent_again():
    """Split 0 was received (the caller holds its observations) when worker 0
    dies during split 1: the replacement resets env 0 too, so env 0's episode is
    dropped at its next step, not silently continued from a new state."""
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=2) as env:
        obs = env.reset()
        for group in range(len(env.splits)):
            env.step_send(group, _zeros(env, group))
        for group, envs in enumerate(env.splits):
            obs[envs] = env.step_receive(group).observation
        kill_and_wait(env.worker_pids[0])
        env.step_send(2, _zeros(env, 2))  # env 1: worker 0, split 1
        second = env.step_receive(2)
        assert second.truncated.tolist() == [True]  # env 1 (in flight)
        assert sorted(k for k, _ in env.pop_failures()) == [1]
        env.step_send(0, _zeros(env, 0))  # env 0: worker 0, split 0
        again = env.step_receive(0)
        assert again.truncated.tolist() == [True]  # env 0, reset underneath
        np.testing.assert_array_equal(again.final_observation[0], obs[0])
        assert sorted(k for k, _ in env.pop_failures()) == [0]
        env.step_send(0, _zeros(env, 0))
        assert not env.step_receive(0).truncated.any()
        env.step_send(1, _zeros(env, 1))  # worker 1 was never affected
        assert not env.step_receive(1).truncated.any()
        assert env.pop_failures() == []


def test_reset_while_a_split_is_in_flight_is_refused():
    with BatchedEnv(ENV, 2, 0, num_splits=2) as env:
        env.reset()
        env.step_send(0, np.zeros((1, ACT_DIM), np.float32))
        with pytest.raises(RuntimeError, match="step_receive"):
            env.reset()
        with pytest.raises(RuntimeError, match="already being stepped"):
            env.step_send(0, np.zeros((1, ACT_DIM), np.float32))
        env.step_receive(0)


def test_too_many_splits_for_the_envs_per_worker_is_a_config_error():
    with pytest.raises(ConfigError, match=r"Trainer.env_splits=3 .*num_envs=4 over "
                                          r"num_env_workers=2 gives 2"):
        TrainerSettings(env_name=ENV, num_envs=4, num_env_workers=2, env_splits=3,
                        num_iterations=1)
    with pytest.raises(ValueError, match="num_splits=3"):
        BatchedEnv(ENV, 2, 0, num_splits=3)

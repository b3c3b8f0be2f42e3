"""Double-buffered sampling (``Trainer.env_splits``) changes the order of work,
never the trajectories.

Split s of S holds the envs k with k % S == s. With a policy whose action depends
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
        assert_same_trajectory(arrays, ref_arrays, f"env_splits=2 batch {i}")
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


def kill_and_wait(pid: int) -> None:
    """SIGKILL an env worker and wait until it is gone (so the next command
    finds it dead, whatever the timing)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # not reaped here: its parent does that
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)


def test_worker_lost_with_both_splits_in_flight():
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=2) as env:
        obs = env.reset()
        kill_and_wait(env.worker_pids[0])  # worker 0 holds envs 0 and 1
        for s, envs in enumerate(env.splits):
            env.step_send(s, np.zeros((2, ACT_DIM), np.float32))
        first, second = env.step_receive(0), env.step_receive(1)
        # Split 0 = envs (0, 2), split 1 = envs (1, 3): env 0 and env 1 were lost.
        assert first.truncated.tolist() == [True, False]
        assert second.truncated.tolist() == [True, False]
        np.testing.assert_array_equal(first.final_observation[0], obs[0])
        np.testing.assert_array_equal(second.final_observation[0], obs[1])
        failed = sorted(k for k, _ in env.pop_failures())
        assert failed == [0, 1]
        # The replacement steps normally afterwards, in both forms.
        env.step(np.zeros((4, ACT_DIM), np.float32))
        env.step_send(1, np.zeros((2, ACT_DIM), np.float32))
        assert not env.step_receive(1).truncated.any()
        assert env.pop_failures() == []


def test_worker_lost_with_one_split_received_and_not_sent_again():
    """Split 0 was received (the caller holds its observations) when worker 0
    dies during split 1: the replacement resets env 0 too, so env 0's episode is
    dropped at its next step, not silently continued from a new state."""
    with BatchedEnv(ENV, 4, 2, seed=3, num_splits=2) as env:
        obs = env.reset()
        for s, envs in enumerate(env.splits):
            env.step_send(s, np.zeros((2, ACT_DIM), np.float32))
        for s, envs in enumerate(env.splits):
            obs[envs] = env.step_receive(s).observation
        kill_and_wait(env.worker_pids[0])
        env.step_send(1, np.zeros((2, ACT_DIM), np.float32))
        second = env.step_receive(1)
        assert second.truncated.tolist() == [True, False]  # env 1 (in flight)
        assert sorted(k for k, _ in env.pop_failures()) == [1]
        env.step_send(0, np.zeros((2, ACT_DIM), np.float32))
        again = env.step_receive(0)
        assert again.truncated.tolist() == [True, False]  # env 0, reset underneath
        np.testing.assert_array_equal(again.final_observation[0], obs[0])
        assert sorted(k for k, _ in env.pop_failures()) == [0]
        env.step_send(0, np.zeros((2, ACT_DIM), np.float32))
        assert not env.step_receive(0).truncated.any()
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

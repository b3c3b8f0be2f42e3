"""An actor serves its groups of envs in the order their env workers answer
(``BatchedEnv.next_ready``) when its policy samples from one stream per group
(``NeuralPolicy``'s ``sampling_streams``); the trajectories must not depend on
that order.

With K = 4, W = 2, S = 2 the groups are (worker 0, split 0), (worker 1, split
0), (worker 0, split 1), (worker 1, split 1). An actor whose ``next_ready``
always serves worker 1 first (a valid order: each worker answers its own
groups in the order they were sent) must write the same [T, K] trajectories
as one that follows the workers' real timing, for Gaussian and for
state-dependent (gSDE) exploration.
"""

from __future__ import annotations

import os
import signal
import time

import gin
import numpy as np
import psutil
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.envs.batched_env import BatchedEnv
from alf_async.runtime.actor import Actor
from alf_async.runtime.trajectory import trajectory_specs
from alf_async.settings import TrainerSettings

ENV = "InvertedPendulumBulletEnv-v0"
NUM_ENVS, UNROLL = 4, 30


def _settings() -> TrainerSettings:
    # The actor acts for every step here (with acting env workers the workers
    # unroll by themselves and no group order is chosen: test_acting_workers.py).
    return TrainerSettings(env_name=ENV, num_envs=NUM_ENVS, num_env_workers=2, env_splits=2,
                           acting_env_workers=False, unroll_length=UNROLL, seed=5,
                           max_episode_steps=12, num_iterations=2)


def _policy(observation_spec, action_spec, seed):
    torch.manual_seed(0)  # the same weights in every actor
    return NeuralPolicy(observation_spec, action_spec, seed)


def _latest_head(env: BatchedEnv) -> int:
    """The oldest group in flight of the last worker that has one: a valid
    order that differs from the workers' real timing and from the fixed one."""
    heads = {}
    for group in env._in_flight:
        heads.setdefault(env._groups[group][0], group)
    return list(heads.values())[-1]


def _unrolls(order=None, count: int = 2):
    """``count`` unrolls of an in-process actor ([T, K] arrays each) and the
    groups in the order it received them."""
    actor = Actor(0, _settings(), _policy)
    received = []
    choose = actor.env.next_ready if order is None else (lambda: order(actor.env))

    def next_ready():
        group = choose()
        received.append(group)
        return group

    actor.env.next_ready = next_ready
    try:
        obs_spec, action_dim = actor.env.observation_spec, actor.env.action_dim
        specs = trajectory_specs(UNROLL, NUM_ENVS, obs_spec, action_dim)
        out = []
        for _ in range(count):
            arrays = {k: np.zeros(v.shape, v.dtype) for k, v in specs.items()}
            actor.unroll(arrays)
            out.append(arrays)
        return out, received
    finally:
        actor.close()


@pytest.mark.parametrize("exploration", ["gaussian", "state_dependent"])
def test_the_order_groups_are_served_in_does_not_change_trajectories(exploration):
    gin.clear_config()
    gin.bind_parameter("ActorNetwork.exploration", exploration)
    gin.bind_parameter("ActorNetwork.sde_sample_interval", 3)
    try:
        real, real_order = _unrolls()
        forced, forced_order = _unrolls(_latest_head)
    finally:
        gin.clear_config()
    assert len(real_order) == len(forced_order) == 2 * UNROLL * 4
    assert forced_order[0] == 1  # worker 1's split 0 before worker 0's
    assert forced_order != [g % 4 for g in range(len(forced_order))]
    ended = sum(int(a["terminated"].sum() + a["truncated"].sum()) for a in real)
    assert ended > 0
    for i, (got, want) in enumerate(zip(forced, real)):
        for key in want:
            np.testing.assert_array_equal(got[key], want[key],
                                          err_msg=f"unroll {i}, field {key}")
    # Sampling happened: the actions are not the deterministic means.
    assert np.std(real[0]["action"]) > 0


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 60
    # The signal takes effect when the kernel next runs the worker.
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, "the worker did not stop"
        time.sleep(0.01)


def test_next_ready_is_a_group_whose_worker_answered():
    """Worker 0 stopped (SIGSTOP): of groups 0 (worker 0) and 1 (worker 1),
    group 1 is ready; of a worker's own groups the first sent comes first."""
    with BatchedEnv(ENV, NUM_ENVS, 2, seed=3, num_splits=2, worker_timeout_s=120) as env:
        env.reset()
        zeros = np.zeros((1, env.action_dim), np.float32)
        stopped = env.worker_pids[0]
        _stop(stopped)
        try:
            for group in (0, 1, 3):
                env.step_send(group, zeros)
            assert env.next_ready() == 1
            env.step_receive(1)
            assert env.next_ready() == 3
            env.step_receive(3)
            assert psutil.Process(stopped).status() == psutil.STATUS_STOPPED
        finally:
            os.kill(stopped, signal.SIGCONT)
        env.step_send(2, zeros)
        assert env.next_ready() == 0  # sent before group 2, to the same worker
        env.step_receive(0)
        assert env.next_ready() == 2
        env.step_receive(2)
        assert env.pop_failures() == []

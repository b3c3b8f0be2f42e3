"""BatchedEnv steps K PyBullet envs identically in-process and in worker processes.

On InvertedPendulumBulletEnv-v0 with ``max_episode_steps`` lowered to 15 and
scripted actions (full push right / left, which topples the pole: terminations;
no push, which keeps it up until the time limit: truncations; small noise), this
proves that:

- W = 0 (in-process) and W = 2 (two env-worker processes over shared memory)
  give identical observations, rewards, terminated and truncated flags, final
  observations and finished-episode (return, length) statistics for the same
  seeds and actions, and that both terminations and truncations occurred;
- auto-reset semantics match an independent loop over plain ``make_env`` envs:
  at an episode end the step returns the episode's last observation in
  ``final_observation`` and the next episode's first observation in
  ``observation``; env k is seeded with ``seed + k`` at the first reset and
  continues its own RNG afterwards; ``truncated`` is never set together with
  ``terminated``; finished episodes carry their summed reward and length;
- seeds are per env: different envs / seeds give different first observations,
  and env k of seed s starts like env 0 of seed s + k;
- ``close()`` ends the env-worker processes and removes the shared memory, and
  is safe to call twice.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import psutil
import pytest

from alf_async.envs.batched_env import BatchedEnv
from alf_async.envs.env_errors import EnvError
from alf_async.envs.worker_protocol import (EnvCommand, decode_reply, decode_request,
                                            encode_reply, encode_request)
from alf_async.envs.gym_env import make_env
from alf_async.utils.shared_memory import list_blocks
from reliability_helpers import kill_and_wait

# One worker runs this module, so its module fixtures run once rather than
# once on each pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("batched_env")

ENV = "InvertedPendulumBulletEnv-v0"
K = 4
LIMIT = 15
STEPS = 40
SEED = 11


def _actions() -> np.ndarray:
    """[STEPS, K, 1]: env 0 pushes right, env 1 left, env 2 nothing, env 3 noise."""
    rng = np.random.default_rng(0)
    actions = np.zeros((STEPS, K, 1), np.float32)
    actions[:, 0] = 1.0
    actions[:, 1] = -1.0
    actions[:, 3, 0] = rng.uniform(-0.2, 0.2, size=STEPS)
    return actions


def _run_batched(num_workers: int):
    actions = _actions()
    out = {"observation": [], "reward": [], "terminated": [], "truncated": [],
           "final_observation": []}
    with BatchedEnv(ENV, K, num_workers=num_workers, seed=SEED,
                    max_episode_steps=LIMIT) as env:
        assert (env.observation_dim, env.action_dim, env.max_episode_steps) == (5, 1, LIMIT)
        first = env.reset()
        for t in range(STEPS):
            r = env.step(actions[t])
            for key in out:
                out[key].append(getattr(r, key))
        finished = env.pop_finished_episodes()
        assert env.pop_finished_episodes() == []
    traj = {k: np.stack(v) for k, v in out.items()}
    traj["first"] = first
    traj["finished"] = finished
    return traj


def _run_reference():
    """The same envs stepped one by one with plain gymnasium-style auto-reset."""
    actions = _actions()
    obs = np.zeros((STEPS, K, 5), np.float32)
    final = np.full((STEPS, K, 5), np.nan, np.float32)
    reward = np.zeros((STEPS, K), np.float32)
    term = np.zeros((STEPS, K), bool)
    trunc = np.zeros((STEPS, K), bool)
    first = np.zeros((K, 5), np.float32)
    episodes = []  # (end step, env, return, length)
    for k in range(K):
        env = make_env(ENV, max_episode_steps=LIMIT)
        try:
            first[k] = env.reset(seed=SEED + k)
            ret, length = 0.0, 0
            for t in range(STEPS):
                o, r, te, tr, _ = env.step(actions[t, k])
                reward[t, k] = r
                ret += float(np.float32(r))
                length += 1
                if te or tr:
                    term[t, k], trunc[t, k] = te, tr and not te
                    final[t, k] = o
                    episodes.append((t, k, ret, length))
                    ret, length = 0.0, 0
                    o = env.reset()  # no seed: the env's own RNG continues
                obs[t, k] = o
        finally:
            env.close()
    episodes.sort()  # BatchedEnv reports episodes step by step, env by env
    return {"observation": obs, "reward": reward, "terminated": term, "truncated": trunc,
            "final_observation": final, "first": first,
            "finished": [(ret, length) for _, _, ret, length in episodes]}


@pytest.fixture(scope="module")
def runs():
    return {"W0": _run_batched(0), "W2": _run_batched(2), "ref": _run_reference()}


def _assert_same_trajectory(a, b):
    np.testing.assert_array_equal(a["first"], b["first"])
    for key in ("observation", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    done = a["terminated"] | a["truncated"]
    np.testing.assert_array_equal(a["final_observation"][done],
                                  b["final_observation"][done])


def test_scripted_actions_cause_terminations_and_truncations(runs):
    ref = runs["ref"]
    assert ref["terminated"][:, :2].sum() >= 4  # pushed pendulums fall, repeatedly
    assert ref["truncated"][:, 2].sum() == STEPS // LIMIT  # idle one hits the time limit
    assert not (ref["terminated"] & ref["truncated"]).any()
    np.testing.assert_array_equal(np.flatnonzero(ref["truncated"][:, 2]), [14, 29])


def test_in_process_and_worker_processes_give_identical_trajectories(runs):
    w0, w2 = runs["W0"], runs["W2"]
    assert w0["terminated"].any() and w0["truncated"].any()
    _assert_same_trajectory(w0, w2)
    assert w0["finished"] == w2["finished"]
    assert len(w0["finished"]) == int((w0["terminated"] | w0["truncated"]).sum())


def test_auto_reset_semantics_match_independent_loop(runs):
    w0, ref = runs["W0"], runs["ref"]
    _assert_same_trajectory(w0, ref)
    assert [length for _, length in w0["finished"]] == [l for _, l in ref["finished"]]
    for (ret, _), (ref_ret, _) in zip(w0["finished"], ref["finished"]):
        assert ret == pytest.approx(ref_ret, rel=1e-6)
    # At an episode end the returned observation starts a new episode: it differs
    # from the final observation, and the next episode is not a replay of the
    # first one (the env's RNG continued rather than being re-seeded).
    done = w0["terminated"] | w0["truncated"]
    t, k = np.nonzero(done)
    assert len(t) > 0
    assert not np.array_equal(w0["observation"][t, k], w0["final_observation"][t, k])
    assert not np.array_equal(w0["observation"][t[0], k[0]], w0["first"][k[0]])


def test_episode_statistics_are_sums_and_lengths(runs):
    w0 = runs["W0"]
    # Rebuild per-env episodes from the step results alone.
    expected = []
    ret = np.zeros(K)
    length = np.zeros(K, int)
    for t in range(STEPS):
        ret += w0["reward"][t]
        length += 1
        for k in np.flatnonzero(w0["terminated"][t] | w0["truncated"][t]):
            expected.append((ret[k], length[k]))
            ret[k], length[k] = 0.0, 0
    assert [l for _, l in w0["finished"]] == [int(l) for _, l in expected]
    np.testing.assert_allclose([r for r, _ in w0["finished"]], [r for r, _ in expected],
                               rtol=1e-9)
    # Episodes cut by the time limit are exactly max_episode_steps long.
    truncated_lengths = {l for (r, l), trunc in zip(
        w0["finished"], _ended_by_truncation(w0)) if trunc}
    assert truncated_lengths == {LIMIT}


def _ended_by_truncation(traj):
    flags = []
    for t in range(STEPS):
        for k in np.flatnonzero(traj["terminated"][t] | traj["truncated"][t]):
            flags.append(bool(traj["truncated"][t, k]))
    return flags


def test_per_env_seeds():
    with BatchedEnv(ENV, 3, num_workers=0, seed=5) as env:
        first = env.reset()
        again = env.reset()
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[1], first[2])
    np.testing.assert_array_equal(first, again)  # reset re-applies seed + k
    with BatchedEnv(ENV, 1, num_workers=0, seed=7) as env:
        shifted = env.reset()
    np.testing.assert_array_equal(shifted[0], first[2])  # seed 7 + 0 == seed 5 + 2
    with BatchedEnv(ENV, 1, num_workers=0, seed=6) as env:
        other = env.reset()
    assert not np.array_equal(other[0], first[0])


def test_close_ends_worker_processes_and_frees_shared_memory():
    env = BatchedEnv(ENV, 3, num_workers=2, seed=0, max_episode_steps=LIMIT)
    try:
        pids = env.worker_pids
        assert len(pids) == 2 and os.getpid() not in pids
        assert all(psutil.pid_exists(pid) for pid in pids)
        children = {p.pid for p in psutil.Process().children(recursive=True)}
        assert set(pids) <= children
        assert list_blocks(os.getpid())  # the batch arrays live in shared memory
        env.reset()
        env.step(np.zeros((3, 1), np.float32))
    finally:
        env.close()
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert env.worker_pids == []
    assert list_blocks(os.getpid()) == []
    env.close()  # idempotent


@pytest.mark.parametrize("command", ["reset", "reseed"])
def test_a_worker_killed_between_steps_is_replaced_at_the_next_reset(command):
    """A worker that dies after a step is found by the next command sent to
    it; a reset or a reseed (an actor reseeds at every checkpoint) replaces
    it as a step does, instead of failing the actor."""
    with BatchedEnv(ENV, 4, num_workers=2, seed=SEED, max_episode_steps=LIMIT) as env:
        env.reset()
        env.step(np.zeros((4, 1), np.float32))
        assert env.pop_failures() == []
        victim, survivor = env.worker_pids
        kill_and_wait(victim)
        observation = env.reseed(SEED + 1) if command == "reseed" else env.reset()
        assert survivor in env.worker_pids and victim not in env.worker_pids
        assert len(env.worker_pids) == 2
        failures = env.pop_failures()
        assert sorted(k for k, _ in failures) == [0, 1]  # the victim's envs
        assert all(f"env-worker process {victim}" in reason for _, reason in failures)
        assert observation.shape == (4, env.observation_dim)
        assert np.all(np.isfinite(observation)) and np.any(observation[:2] != 0)
        result = env.step(np.zeros((4, 1), np.float32))  # and it steps on
        assert not result.env_failed.any() and env.pop_failures() == []


def test_a_worker_killed_is_fatal_at_a_reset_when_env_errors_are():
    with BatchedEnv(ENV, 2, num_workers=2, seed=SEED, fatal_env_errors=True) as env:
        env.reset()
        kill_and_wait(env.worker_pids[0])
        with pytest.raises(EnvError, match="SIGKILL"):
            env.reseed(SEED + 1)


def test_invalid_arguments():
    with pytest.raises(ValueError):
        BatchedEnv(ENV, 0)
    with pytest.raises(ValueError):
        BatchedEnv(ENV, 2, num_workers=3)


def test_pipe_wire_format_round_trips_and_steps_go_as_raw_bytes():
    # A step is three bytes out and one back; everything else is a pickle.
    assert encode_request(EnvCommand.STEP, ((1, 2),)) == b"s\x01\x02"
    assert encode_request(EnvCommand.STEP) == b"s"
    assert encode_reply([]) == b"k"
    for command, args in ((EnvCommand.STEP, ()), (EnvCommand.STEP, ((0, 2),)),
                          (EnvCommand.STEP, ((255, 300),)), (EnvCommand.RESET, ()),
                          (EnvCommand.SET_SEED, (1234,)), (EnvCommand.CLOSE, ())):
        assert decode_request(encode_request(command, args)) == (command, args)
    assert decode_reply(encode_reply([])) == ("ok", [])
    failures = [(3, "Traceback ... ValueError")]
    assert decode_reply(encode_reply(failures)) == ("ok", failures)
    status, error = decode_reply(pickle.dumps(("error", EnvError("E-v0", 2, "boom"))))
    assert status == "error" and isinstance(error, EnvError) and "boom" in str(error)


@pytest.mark.parametrize("workers", [0, 1])
def test_time_feature_appends_the_elapsed_fraction_of_the_time_limit(workers):
    with BatchedEnv(ENV, 2, num_workers=workers, seed=0) as plain:
        plain_obs = plain.reset()
    with BatchedEnv(ENV, 2, num_workers=workers, seed=0, max_episode_steps=4,
                    time_feature=True) as env:
        assert env.observation_dim == plain.observation_dim + 1
        obs = env.reset()
        np.testing.assert_array_equal(obs[:, :-1], plain_obs)  # the env's own part
        np.testing.assert_array_equal(obs[:, -1], 0.0)
        for t in range(1, 5):
            result = env.step(np.zeros((2, 1), np.float32))
            if t < 4:
                np.testing.assert_allclose(result.observation[:, -1], t / 4)
        # The 4th step ends both episodes by the time limit: the last observation
        # says 4 / 4, the next episode's first 0.
        assert result.truncated.all()
        np.testing.assert_allclose(result.final_observation[:, -1], 1.0)
        np.testing.assert_array_equal(result.observation[:, -1], 0.0)


def test_time_feature_without_a_time_limit_is_refused_by_name():
    import gymnasium as gym

    from alf_async.envs.gym_env import EnvOptionError
    from alf_async.training.trainer import Trainer
    from alf_async.utils.validation import ConfigError

    env_id = "AlfAsyncTestCartPoleNoLimit-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    with pytest.raises(EnvOptionError, match="Trainer.time_feature needs a time limit"):
        make_env(env_id, time_feature=True)
    make_env(env_id, max_episode_steps=50, time_feature=True).close()  # a limit: fine
    with pytest.raises(ConfigError, match=f"time_feature.*{env_id}.*max_episode_steps"):
        Trainer("/nonexistent-run-dir", env_name=env_id, time_feature=True,
                num_env_steps=100)

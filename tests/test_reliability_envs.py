"""Reliability, cases 2 and 3: an env raises in step; an env-worker process dies.

- An env that raises (AlfAsyncFaultyPendulum-v0) is recreated and its episode
  dropped; the run completes, the log names the env id, the env index and the
  exception (of the first few failures; see test_env_failure_log.py), and the
  metrics count ``env_failures``. With
  ``Trainer.fatal_env_errors=True`` the run stops with exit 1 and a message naming
  the env index.
- An env-worker process that dies (SIGKILL of a grandchild of the trainer, or
  AlfAsyncExitingPendulum-v0 with W >= 1, whose failing step ends the worker) is
  detected and handled like an env exception: the run completes, never hangs.
- ``BatchedEnv`` directly: killing a worker makes the next step return its envs as
  truncated (reward 0, episode not reported), ``pop_failures`` names them, and
  stepping goes on with a new worker.
- Trajectories flag a failed env's step (``env_failed``): the replay buffer
  and PPO's losses leave it out.
"""

from __future__ import annotations

import os
import re
import signal
import time

import numpy as np
import psutil
import pytest

from alf_async.envs.batched_env import BatchedEnv
from alf_async.env_failure_log import EnvFailureReporter
from conftest import wait_until
from reliability_helpers import TrainRun, small_params

FAULTY = "AlfAsyncFaultyPendulum-v0"
EXITING = "AlfAsyncExitingPendulum-v0"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_env_workers", [0, 1])
def test_env_exception_is_recovered_and_logged(tmp_path, num_env_workers):
    root = str(tmp_path / "run")
    iterations = 8
    params = small_params(f"Trainer.env_name='{FAULTY}'",
                          f"Trainer.num_env_workers={num_env_workers}",
                          "Trainer.max_actor_restarts=0", iterations=iterations)
    with TrainRun(root, params) as run:
        rc = run.wait(180)
        run.assert_clean()
        out = run.output()
    assert rc == 0, out[-3000:]
    rows = run.metrics()
    assert rows[-1]["iteration"] == iterations
    assert rows[-1]["env_failures"] > 0
    assert rows[-1]["actor_restarts"] == 0  # env failures do not cost the actor
    logged = re.findall(rf"env (\d) of actor 0 \({FAULTY}\) failed and was recreated; its "
                        r"episode was dropped: (?:[\w.]+\.)?InjectedEnvFault: "
                        r"injected env fault", out)
    assert logged, out[-3000:]
    # The first few in full, the rest in summary lines (tests/test_env_failure_log.py).
    assert len(logged) == min(rows[-1]["env_failures"], EnvFailureReporter().full_lines)
    assert all(int(k) in (0, 1) for k in logged)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_env_workers", [0, 1])
def test_fatal_env_errors_stop_the_run_naming_the_env_index(tmp_path, num_env_workers):
    root = str(tmp_path / "run")
    params = small_params(f"Trainer.env_name='{FAULTY}'", "Trainer.fatal_env_errors=True",
                          f"Trainer.num_env_workers={num_env_workers}", iterations=100000)
    with TrainRun(root, params) as run:
        rc = run.wait(180)
        run.assert_clean()
        out = run.output()
    assert rc == 1, out[-3000:]
    assert re.search(r"run stopped at iteration \d+: actor 0 \(pid \d+\) failed: exception "
                     r"\(env index \d\)", out), out[-3000:]
    assert "InjectedEnvFault: injected env fault" in out
    assert "env errors are fatal (Trainer.fatal_env_errors=True)" in out
    assert "restarting actor" not in out


@pytest.mark.timeout(240)
def test_sigkilled_env_worker_is_replaced_and_the_run_completes(tmp_path):
    root = str(tmp_path / "run")
    # Enough iterations (about 0.02 s each here) that the run is still going
    # when the kill lands; the workers are looked up first, while the actor
    # starts (they live from then to the end of the run).
    iterations = 200
    params = small_params("Trainer.num_env_workers=2", "Trainer.max_actor_restarts=0",
                          iterations=iterations)
    with TrainRun(root, params) as run:
        workers = run.wait_for(run.env_workers, 60, "env workers")
        run.wait_for_iteration(2)
        victim = workers[0].pid
        os.kill(victim, signal.SIGKILL)
        rc = run.wait(180)
        run.assert_clean()
        out = run.output()
    assert rc == 0, out[-3000:]
    rows = run.metrics()
    assert rows[-1]["iteration"] == iterations
    assert rows[-1]["env_failures"] >= 1
    assert rows[-1]["actor_restarts"] == 0
    assert re.search(rf"env \d of actor 0 \(InvertedPendulumBulletEnv-v0\) failed and was "
                     rf"recreated; its episode was dropped: env-worker process {victim} "
                     r"\(envs \d\.\.\d\) (died with |closed its pipe \()signal SIGKILL", out), \
        out[-3000:]


@pytest.mark.timeout(300)
def test_env_workers_that_exit_are_replaced_and_the_run_completes(tmp_path):
    """AlfAsyncExitingPendulum-v0 with W = 1: the worker itself exits (code 3)."""
    root = str(tmp_path / "run")
    iterations = 6
    params = small_params(f"Trainer.env_name='{EXITING}'", "Trainer.num_env_workers=1",
                          "Trainer.max_actor_restarts=0", iterations=iterations)
    with TrainRun(root, params) as run:
        rc = run.wait(240)
        run.assert_clean()
        out = run.output()
    assert rc == 0, out[-3000:]
    rows = run.metrics()
    assert rows[-1]["iteration"] == iterations
    assert rows[-1]["env_failures"] > 0
    assert rows[-1]["actor_restarts"] == 0
    assert "exit code 3" in out


@pytest.mark.timeout(120)
def test_batched_env_survives_a_killed_worker():
    num_envs, workers = 4, 2
    with BatchedEnv("InvertedPendulumBulletEnv-v0", num_envs, workers, seed=3) as env:
        env.reset()
        action = np.zeros((num_envs, env.action_dim), np.float32)
        for _ in range(3):
            env.step(action)
        assert env.pop_failures() == []
        assert env.pop_finished_episodes() == []
        old_pids = env.worker_pids
        victim = old_pids[1]  # envs 2 and 3
        os.kill(victim, signal.SIGKILL)
        assert wait_until(lambda: not psutil.pid_exists(victim)
                          or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE, 10)
        start = time.monotonic()
        result = env.step(action)
        assert time.monotonic() - start < 30  # detected, not waited out
        np.testing.assert_array_equal(result.truncated, [False, False, True, True])
        np.testing.assert_array_equal(result.terminated, [False, False, False, False])
        np.testing.assert_array_equal(result.reward[2:], [0.0, 0.0])
        assert result.reward[0] > 0 and result.reward[1] > 0
        assert np.all(np.isfinite(result.observation))
        failures = env.pop_failures()
        assert sorted(k for k, _ in failures) == [2, 3]
        assert all(f"env-worker process {victim}" in text and "SIGKILL" in text
                   for _, text in failures), failures
        # Envs 0 and 1 did not finish, and the dropped episodes of 2 and 3 are
        # not reported as finished.
        assert env.pop_finished_episodes() == []
        new_pids = env.worker_pids
        assert new_pids[0] == old_pids[0] and new_pids[1] != victim
        assert psutil.Process(new_pids[1]).is_running()
        for _ in range(5):
            result = env.step(action)
            assert not result.truncated.any()
        assert env.pop_failures() == []


NAN_ENV = "AlfAsyncNaNPendulum-v0"


@pytest.mark.parametrize("num_workers", [0, 1])
def test_non_finite_observations_never_leave_the_batched_env(num_workers):
    """A NaN observation is an env fault: the env is recreated, its episode
    dropped, and the failure names the env, the step and the field."""
    with BatchedEnv(NAN_ENV, 3, num_workers, seed=4) as env:
        env.reset()
        failures = []
        rng = np.random.default_rng(0)
        for _ in range(300):
            result = env.step(rng.uniform(-1, 1, (3, env.action_dim)).astype(np.float32))
            assert np.all(np.isfinite(result.observation))
            assert np.all(np.isfinite(result.reward))
            failures += env.pop_failures()
        assert failures, "the NaN env (1% per step) should have failed in 900 steps"
        for k, text in failures:
            assert 0 <= k < 3
            assert re.fullmatch(rf"NonFiniteEnvValue: env {k} of {NAN_ENV} returned a "
                                r"non-finite observation \(nan at index 0\) at step \d+ "
                                r"of its episode", text.strip()), text


@pytest.mark.timeout(240)
def test_nan_env_run_completes_and_logs_its_failures(tmp_path):
    root = str(tmp_path / "run")
    params = small_params(f"Trainer.env_name='{NAN_ENV}'", "Trainer.max_actor_restarts=0",
                          iterations=8)
    with TrainRun(root, params) as run:
        rc = run.wait(180)
        run.assert_clean()
        out = run.output()
    assert rc == 0, out[-3000:]
    assert "Traceback" not in out
    rows = run.metrics()
    assert rows[-1]["env_failures"] > 0
    logged = re.findall(r"its episode was dropped: NonFiniteEnvValue: env \d of "
                        rf"{NAN_ENV} returned a non-finite observation", out)
    assert len(logged) == min(rows[-1]["env_failures"], EnvFailureReporter().full_lines), \
        out[-3000:]


def _unroll_with_failures(settings, policy_factory, weights=None, next_observation=False):
    """One unroll of an actor on ``settings`` (an env that fails): the
    trajectory, after checking that every failed step (reward 0, a truncation
    at the last good observation) and no other is flagged ``env_failed``."""
    import alf_async.envs.fault_injection  # noqa: F401  (registers FAULTY)
    from alf_async.runtime.actor import Actor
    from alf_async.runtime.trajectory import allocate_trajectory

    actor = Actor(0, settings, policy_factory)
    try:
        if weights is not None:
            actor.load_weights(0, weights)
        out = allocate_trajectory(settings.unroll_length, settings.num_envs,
                                  actor.env.observation_spec, actor.env.action_dim,
                                  next_observation=next_observation)
        record = actor.unroll(out)
    finally:
        actor.close()
    failed = out["env_failed"]
    assert failed.sum() == len(record.env_failures) > 0
    assert (out["reward"][failed] == 0).all() and out["truncated"][failed].all()
    return out


def test_off_policy_trajectory_marks_the_steps_of_failed_envs():
    """A failed env's step (reward 0, a truncation at the last good observation)
    is marked ``env_failed`` in an off-policy trajectory, so that the replay
    buffer leaves it out instead of storing a transition that never happened."""
    from alf_async.settings import TrainerSettings
    from scripted_policy import ScriptedPolicy

    s = TrainerSettings(algorithm="sac", env_name=FAULTY, num_envs=3, unroll_length=40,
                        num_env_steps=1)
    _unroll_with_failures(s, ScriptedPolicy, next_observation=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers,acting", [(0, False), (1, True)])
def test_ppo_leaves_the_steps_of_failed_envs_out_of_its_losses(workers, acting):
    """PPO's trajectory flags a failed env's step too, whether the actor acts
    or its env workers do; the learner leaves those steps out of its losses
    and counts them (``failed_steps``; the losses' masks:
    tests/test_exact_on_policy.py)."""
    import torch

    from alf_async.algorithms.policy import NeuralPolicy
    from alf_async.algorithms.ppo_learner import PPOLearner
    from alf_async.envs.gym_env import env_spec
    from alf_async.settings import TrainerSettings

    def policy(observation_spec, action_spec, seed):
        torch.manual_seed(0)
        return NeuralPolicy(observation_spec, action_spec, seed)

    import alf_async.envs.fault_injection  # noqa: F401  (registers FAULTY)

    s = TrainerSettings(env_name=FAULTY, num_envs=3, num_env_workers=workers, env_splits=1,
                        acting_env_workers=acting, unroll_length=200, num_env_steps=1, seed=2)
    spec, action_spec, _ = env_spec(FAULTY)
    learner = PPOLearner(spec, action_spec, num_epochs=1, mini_batch_size=200)
    out = _unroll_with_failures(s, policy, learner.weight_arrays())
    failed = out["env_failed"]
    assert (out["final_observation_row"][failed] == -1).all()  # no final observation
    stats = learner.train(out, 0)
    assert stats["failed_steps"] == float(failed.sum())
    assert np.isfinite(stats["policy_loss"]) and stats["truncated_fraction"] == 0.0

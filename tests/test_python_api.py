"""The Python API (docs/python_api.md): ``alf_async.train`` and ``alf_async.load``
with ``Policy.predict`` as a Stable-Baselines3 user calls them.

- A run trained with evaluation on, then loaded and played in a plain
  gymnasium loop over the evaluator's seeds, gives the evaluator's final
  episodes exactly (the returns and lengths of the last eval.jsonl row).
- predict takes one observation or a batch; episode_start resets the rows of a
  recurrent policy's state; SAC and Hogwild checkpoints load and act; bad
  paths, shapes and states raise errors naming what was expected.
- train returns the counters, writes the run, resumes it, raises clear errors
  and leaves gin's config and the logger as it found them; importing the
  package does not import torch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import gin
import numpy as np
import pytest

import alf_async
from alf_async.config import ConfigError, register_configurables
from alf_async.playback.player import PolicyLoadError
from alf_async.training.launch import RunDirError
from conftest import REPO_ROOT
from policy_runs import TINY, rollout, trained_run  # noqa: F401  (a fixture)


# -- the SB3 round trip: train with evaluation, load, play the same episodes ------

EVAL_EPISODES = 3


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """(run directory, the counters train returned): CartPole for 4 iterations
    of 4 envs x 32 steps, evaluated (3 episodes of at most 60 steps) at the end."""
    root = str(tmp_path_factory.mktemp("evaluated") / "run")
    counters = alf_async.train("ppo_cartpole.gin", root, bindings=TINY + [
        "Trainer.num_iterations=4", "Trainer.num_envs=4", "Trainer.unroll_length=32",
        "PPOLearner.mini_batch_size=64", "PPOLearner.num_epochs=2", "Trainer.seed=11",
        "Trainer.max_episode_steps=60", "Trainer.eval_interval_env_steps=512",
        f"Trainer.eval_episodes={EVAL_EPISODES}"])
    return root, counters


def test_predict_in_a_gymnasium_loop_repeats_the_runs_evaluation(evaluated_run):
    """The evaluator plays episode i from reset seed ``eval_seed + i`` with the
    deterministic policy of the final weights, which the final checkpoint
    holds; a gymnasium loop over the same seeds acting with predict one
    observation at a time gets the same episodes. The comparison is exact:
    CartPole's actions are the argmax of two logits, which the evaluator's
    batched numpy inference and predict's single rows compute to the same
    float32 values (a different rounding could only matter at a near-tie)."""
    root, _ = evaluated_run
    with open(os.path.join(root, "eval.jsonl"), encoding="utf-8") as f:
        final = [json.loads(line) for line in f][-1]
    assert final["env_steps"] == 512 and len(final["returns"]) == EVAL_EPISODES

    policy = alf_async.load(root)
    env = policy.make_env()
    returns, lengths = [], []
    try:
        for episode in range(EVAL_EPISODES):
            observation, _ = env.reset(seed=policy.eval_seed + episode)
            total, length, done = 0.0, 0, False
            while not done:
                action, _ = policy.predict(observation, deterministic=True)
                observation, reward, terminated, truncated, _ = env.step(action)
                total, length, done = total + reward, length + 1, terminated or truncated
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
    assert returns == final["returns"] and lengths == final["lengths"]
    assert np.mean(returns) == final["eval_return"]


# -- predict ----------------------------------------------------------------------

def test_one_observation_or_a_batch(trained_run):  # noqa: F811
    for kind in ("box", "discrete"):
        policy = alf_async.load(trained_run(kind))
        observations = rollout(policy, 20)["observation"]
        actions, state = policy.predict(observations)
        assert state is None and actions.shape == (20,) + policy.action_space.shape
        for observation, batch_action in zip(observations, actions):
            action, state = policy.predict(observation)
            assert state is None and action.shape == policy.action_space.shape
            assert policy.action_space.contains(action)
            # Equal up to float32 rounding (BLAS sums a row and a batch apart).
            np.testing.assert_allclose(action, batch_action, rtol=1e-5, atol=1e-6)
        # Sampling: other actions than the mode's, still valid ones.
        sampled, _ = policy.predict(observations, deterministic=False)
        assert all(policy.action_space.contains(a) for a in sampled)
        assert not np.array_equal(sampled, actions)


def test_episode_start_resets_the_rows_of_a_recurrent_state(trained_run):  # noqa: F811
    policy = alf_async.load(trained_run("lstm"))
    assert policy.recurrent and policy.state_size == 64
    steps = rollout(policy, 12)
    observation = steps["observation"][5]
    carried = steps["next_state"][4]  # the state after five steps
    assert np.abs(carried).max() > 1e-3
    fresh_action, fresh_state = policy.predict(observation)  # state None: zeros
    assert fresh_state.shape == (64,)
    _, reset_state = policy.predict(observation, carried, episode_start=True)
    np.testing.assert_array_equal(reset_state, fresh_state)
    _, kept_state = policy.predict(observation, carried, episode_start=False)
    assert not np.allclose(kept_state, fresh_state)
    # A batch of two: only the row whose episode starts is reset.
    actions, states = policy.predict(np.stack([observation, observation]),
                                     np.stack([carried, carried]),
                                     episode_start=np.array([True, False]))
    assert actions.shape == (2,) and states.shape == (2, 64)
    np.testing.assert_allclose(states[0], fresh_state, atol=1e-6)
    np.testing.assert_allclose(states[1], kept_state, atol=1e-6)
    assert actions[0] == fresh_action


def test_a_sac_checkpoint_loads_and_acts_in_its_env(trained_run):  # noqa: F811
    policy = alf_async.load(trained_run("sac"))
    assert policy.algorithm == "sac" and not policy.recurrent
    assert policy.observation_space.shape == (9, 9, 1)
    assert policy.observation_space.dtype == np.uint8
    steps = rollout(policy, 20)
    assert steps["action"].shape == (20, 1) and steps["action"].dtype == np.float32
    assert np.all(np.abs(steps["action"]) < 1)
    again, _ = policy.predict(steps["observation"])
    np.testing.assert_allclose(again, steps["action"], atol=1e-6)
    sampled, _ = policy.predict(steps["observation"], deterministic=False)
    assert not np.allclose(sampled, again)  # past learning_starts: the actor samples


def test_a_hogwild_checkpoint_loads_as_any_other(tmp_path):
    """Hogwild writes the learner of its global networks into its checkpoints,
    as the other runtimes do: load, predict and export take it as it is."""
    root = str(tmp_path / "run")
    counters = alf_async.train("hogwild_ppo_bullet_inverted_pendulum.gin", root,
                               bindings=TINY + ["Trainer.num_actors=2",
                                                "Trainer.num_iterations=2"])
    assert counters["iteration"] == 2
    policy = alf_async.load(root)
    observations = rollout(policy, 10)["observation"]
    actions, _ = policy.predict(observations)
    assert actions.shape == (10, 1)
    import torch

    exported = torch.jit.load(policy.export(tmp_path / "policy.pt"))
    np.testing.assert_allclose(exported(torch.from_numpy(observations)).numpy(), actions,
                               rtol=1e-5, atol=1e-6)


# -- bad input --------------------------------------------------------------------

def test_load_errors_name_the_path(trained_run, tmp_path):  # noqa: F811
    root = trained_run("discrete")
    with pytest.raises(PolicyLoadError, match=f"{tmp_path / 'missing'} does not exist"):
        alf_async.load(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(os.path.join(root, "config.gin"), empty / "config.gin")
    with pytest.raises(PolicyLoadError, match="holds no checkpoint"):
        alf_async.load(empty)
    stray = tmp_path / "ckpt-1.pt"
    shutil.copy(os.path.join(root, "checkpoints", "ckpt-1.pt"), stray)
    with pytest.raises(PolicyLoadError, match="not a checkpoint of a run"):
        alf_async.load(stray)
    # A checkpoint file of the run is as good as the run.
    checkpoint = os.path.join(root, "checkpoints", "ckpt-1.pt")
    assert alf_async.load(checkpoint).checkpoint == checkpoint


def test_predict_errors_say_what_fits(trained_run):  # noqa: F811
    policy = alf_async.load(trained_run("discrete"))
    with pytest.raises(ValueError, match=r"observation of shape \(3,\) does not fit .* "
                                         r"give one observation of shape \(4,\) or a batch "
                                         r"of shape \(B, 4\)"):
        policy.predict(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="feed-forward and keeps no state"):
        policy.predict(np.zeros(4, np.float32), state=np.zeros(4, np.float32))
    recurrent = alf_async.load(trained_run("lstm"))
    with pytest.raises(ValueError, match=r"state of shape \(2, 64\) does not fit"):
        recurrent.predict(np.zeros((3, 2), np.float32), np.zeros((2, 64), np.float32))
    with pytest.raises(ValueError, match="episode_start has 2 value"):
        recurrent.predict(np.zeros((3, 2), np.float32), episode_start=[True, False])


# -- train ------------------------------------------------------------------------

def test_train_returns_counters_writes_and_resumes_the_run(evaluated_run, tmp_path):
    root, counters = evaluated_run
    assert counters == {"iteration": 4, "env_steps": 512, "episodes": counters["episodes"],
                        "wall_time": counters["wall_time"]}
    assert counters["episodes"] > 0 and counters["wall_time"] > 0
    for name in ("config.gin", "operative_config.gin", "metrics.jsonl", "eval.jsonl",
                 "log.txt", os.path.join("checkpoints", "ckpt-4.pt")):
        assert os.path.isfile(os.path.join(root, name)), name

    # The caller's gin bindings and logger are as before; a resume trains on.
    register_configurables()
    gin.parse_config("Trainer.seed = 123")
    before = gin.config_str()
    logger = logging.getLogger("alf_async")
    handlers = list(logger.handlers)
    resumed = str(tmp_path / "resumed")
    shutil.copytree(root, resumed)
    again = alf_async.train(None, resumed, bindings=["Trainer.num_iterations=5"])
    assert again["iteration"] == 5 and again["env_steps"] == 640
    assert gin.config_str() == before
    assert logger.handlers == handlers
    with open(os.path.join(resumed, "metrics.jsonl"), encoding="utf-8") as f:
        assert [json.loads(line)["iteration"] for line in f][-1] == 5


def test_train_errors_are_exceptions_naming_the_problem(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(RunDirError, match=r"root_dir=.*a_file is a file, not a folder"):
        alf_async.train("ppo_cartpole.gin", a_file)
    with pytest.raises(RunDirError, match="gin_file is required: .* holds no config.gin"):
        alf_async.train(None, tmp_path / "new")
    with pytest.raises(ConfigError, match="Unknown gin parameter 'not_a_setting'"):
        alf_async.train("ppo_cartpole.gin", tmp_path / "run",
                        bindings=["Trainer.not_a_setting=1"])
    assert not (tmp_path / "run" / "config.gin").exists()


def test_importing_the_package_does_not_import_torch():
    code = ("import sys, alf_async; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert callable(alf_async.load) and callable(alf_async.train); "
            "assert alf_async.Policy.__name__ == 'Policy'; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        alf_async.nope  # noqa: B018

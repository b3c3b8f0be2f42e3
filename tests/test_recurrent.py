"""Recurrent policies (ActorCritic.rnn): the state an actor hands over with a
trajectory, its resets at episode starts, the learner's re-run of the sequence,
and runs that train, resume and play with an LSTM."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

import gin
import numpy as np
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.sequence_batches import BatchColumns
from alf_async.envs.gym_env import env_spec
from alf_async.envs.masked_envs import MASKED_CARTPOLE_ID
from alf_async.networks import ActorCritic
from alf_async.runtime.actor import Actor
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.settings import TrainerSettings
from reliability_helpers import read_metrics, train_in_this_process
from scripted_policy import WeightFreePolicy

UNROLL = 24
NUM_ENVS = 4


class StepCountingPolicy(WeightFreePolicy):
    """A recurrent policy whose state [K, 1] counts the steps its env has taken
    in the current episode: log_prob is the count the step started with, value
    the count + 100 (so the actor's value calls show which state they used)."""

    state_size = 1

    def act(self, observation, state):
        count = state[:, 0].copy()
        action = np.zeros((len(observation), 1), np.float32)
        return action, count, count + 100.0, state + 1.0

    def value(self, observation, state):
        return state[:, 0] + 100.0


def settings(num_env_workers: int = 0, env_splits: int = 1,
             env_name: str = MASKED_CARTPOLE_ID, max_episode_steps: int = 9) -> TrainerSettings:
    return TrainerSettings(env_name=env_name, num_envs=NUM_ENVS,
                           num_env_workers=num_env_workers, env_splits=env_splits,
                           unroll_length=UNROLL, max_episode_steps=max_episode_steps, seed=3,
                           num_iterations=1)


def unrolls(actor: Actor, count: int, records: list = None) -> List[Dict[str, np.ndarray]]:
    out = []
    for _ in range(count):
        buffer = allocate_trajectory(UNROLL, NUM_ENVS, actor.env.observation_spec,
                                     actor.env.action_spec.dim, state_size=actor.state_size)
        record = actor.unroll(buffer)
        if records is not None:
            records.append(record)
        out.append(buffer)
    return out


def check_counts(batches: List[Dict[str, np.ndarray]]) -> None:
    """Replay the counting policy's state from the episode flags and compare it
    with what the actor handed over and what the policy saw at each step."""
    count = np.zeros(NUM_ENVS)
    ended_before = np.ones(NUM_ENVS, bool)
    for b in batches:
        np.testing.assert_array_equal(b["initial_state"][:, 0], count)
        np.testing.assert_array_equal(b["episode_start"][0], ended_before)
        for t in range(UNROLL):
            count[b["episode_start"][t]] = 0.0
            np.testing.assert_array_equal(b["log_prob"][t], count, err_msg=f"step {t}")
            count += 1.0
            truncated = b["truncated"][t]
            np.testing.assert_array_equal(b["truncation_value"][t][truncated],
                                          count[truncated] + 100.0)
            ended = b["terminated"][t] | truncated
            if t + 1 < UNROLL:
                np.testing.assert_array_equal(b["episode_start"][t + 1], ended)
            count[ended] = 0.0
            ended_before = ended
        np.testing.assert_array_equal(b["bootstrap_value"], count + 100.0)


@pytest.mark.parametrize("workers,splits", [(0, 1), (2, 2)])
def test_the_state_handed_over_is_the_state_the_unroll_began_with(workers, splits):
    actor = Actor(0, settings(workers, splits), StepCountingPolicy)
    try:
        batches = unrolls(actor, 3)
    finally:
        actor.close()
    check_counts(batches)
    flags = np.stack([b["episode_start"][1:] for b in batches])
    assert flags.any() and not flags.all()
    # Both kinds of episode end happened mid-unroll, and some state crossed
    # from one unroll into the next.
    assert any(b["terminated"].any() for b in batches)
    assert any(b["truncated"].any() for b in batches)
    assert any((b["initial_state"] > 0).any() for b in batches[1:])


def test_an_env_recreated_after_a_failure_starts_from_zero_state():
    """AlfAsyncFaultyPendulum-v0 raises in 1% of its steps (seeded): the env is
    recreated, the step reported as truncated, and its state row zeroed."""
    actor = Actor(0, settings(env_name="AlfAsyncFaultyPendulum-v0", max_episode_steps=1000),
                  StepCountingPolicy)
    records: list = []
    try:
        batches = unrolls(actor, 12, records)
    finally:
        actor.close()
    assert sum(len(r.env_failures) for r in records) >= 1
    check_counts(batches)


def test_reseeding_the_actor_starts_every_env_from_zero_state():
    actor = Actor(0, settings(), StepCountingPolicy)
    try:
        unrolls(actor, 1)
        actor.reseed(epoch=5)
        (batch,) = unrolls(actor, 1)
    finally:
        actor.close()
    assert not batch["initial_state"].any() and batch["episode_start"][0].all()


@pytest.mark.parametrize("rnn", ["lstm", "gru"])
@pytest.mark.parametrize("shared_rnn", [True, False])
def test_sequence_equals_step_by_step_with_resets(rnn, shared_rnn):
    torch.manual_seed(0)
    model = ActorCritic(3, 2, rnn=rnn, rnn_size=5, shared_rnn=shared_rnn)
    T, B = 7, 4
    obs = torch.randn(T, B, 3)
    state = torch.randn(B, model.state_size)
    starts = torch.rand(T, B) < 0.3
    dist, value, states = model.sequence(obs, state, starts, keep_every=3)
    assert states.shape == (3, B, model.state_size)  # steps 0, 3, 6
    actions = torch.randn(T * B, 2)
    want_lp, want_v = [], []
    s = state
    for t in range(T):
        s = s * (~starts[t]).float().unsqueeze(-1)
        if t % 3 == 0:
            torch.testing.assert_close(states[t // 3], s)
        d, v, s = model.step(obs[t], s)
        want_lp.append(d.log_prob(actions[t * B:(t + 1) * B]))
        want_v.append(v)
    torch.testing.assert_close(dist.log_prob(actions), torch.cat(want_lp))
    torch.testing.assert_close(value, torch.cat(want_v))
    assert model.state_size == 5 * (2 if rnn == "lstm" else 1) * (1 if shared_rnn else 2)


def test_batch_columns_cut_chunks_of_one_env_in_time_order():
    layout = BatchColumns(unroll_length=6, num_envs=2, chunk_length=3)
    x = torch.arange(12).reshape(6, 2)  # x[t, k] = 2 t + k
    cols = layout.columns(x)
    assert cols.shape == (3, 4)
    # column c * K + k: steps c * 3 .. c * 3 + 2 of env k
    assert cols[:, 0].tolist() == [0, 2, 4] and cols[:, 1].tolist() == [1, 3, 5]
    assert cols[:, 2].tolist() == [6, 8, 10] and cols[:, 3].tolist() == [7, 9, 11]
    states = torch.arange(2 * 2).reshape(2, 2, 1)  # steps 0 and 3 of the 2 envs
    assert layout.start_states(states)[:, 0].tolist() == [0, 1, 2, 3]
    assert layout.pick(cols, torch.tensor([3, 0])).tolist() == [7, 0, 9, 2, 11, 4]
    flat = BatchColumns(6, 2, 1)
    assert flat.columns(x).reshape(-1).tolist() == x.reshape(-1).tolist()
    with pytest.raises(ValueError, match="must divide"):
        BatchColumns(6, 2, 4)


@pytest.fixture
def lstm_bindings():
    gin.parse_config("ActorCritic.rnn = 'lstm'\nActorCritic.rnn_size = 16")
    yield
    gin.clear_config()


def neural_actor(actor_id: int, learner: PPOLearner) -> Actor:
    actor = Actor(actor_id, settings(), NeuralPolicy)
    actor.load_weights(0, learner.weight_arrays())
    return actor


def single_step_learner(chunk_length, lag_correction) -> PPOLearner:
    observation, action_spec, _ = env_spec(MASKED_CARTPOLE_ID)
    learner = PPOLearner(observation, action_spec, num_epochs=1,
                         mini_batch_size=UNROLL * NUM_ENVS, normalize_observations=False,
                         chunk_length=chunk_length, lag_correction=lag_correction, seed=1)
    with torch.no_grad():  # logits far from uniform: the action depends on the state
        learner.model.core.rnn.weight_ih_l0.mul_(30.0)
        learner.model.actor.mean.weight.mul_(300.0)
    return learner


@pytest.mark.parametrize("chunk_length,lag_correction",
                         [(None, "none"), (8, "none"), (8, "decoupled")])
def test_the_learner_reruns_each_trajectory_from_its_own_stored_state(
        lstm_bindings, chunk_length, lag_correction):
    """On-policy data (weights unchanged since acting): the learner's re-run
    (the pass over the batch, and the minibatch's re-run from the chunks' states
    of that pass) must give the actor's own log-probabilities from the
    trajectory's initial state and resets (PPO's ratio pi / mu = 1, no KL;
    decoupled: pi_prox / mu = 1); another actor's state must not."""
    learner = single_step_learner(chunk_length, lag_correction)
    twin = single_step_learner(chunk_length, lag_correction)  # the same seed: same weights
    actors = [neural_actor(i, learner) for i in range(2)]
    try:
        batches = [unrolls(actor, 2)[-1] for actor in actors]
    finally:
        for actor in actors:
            actor.close()
    assert not np.allclose(batches[0]["initial_state"], batches[1]["initial_state"])
    own = learner.train(batches[1])
    swapped = dict(batches[1], initial_state=batches[0]["initial_state"])
    other = twin.train(swapped)
    if lag_correction == "none":
        assert own["approx_kl"] < 1e-7 and own["clip_fraction"] == 0.0
        assert other["approx_kl"] > 1e-4
    else:
        assert abs(own["importance_weight"] - 1.0) < 1e-5 and own["truncated_fraction"] == 0
        assert other["truncated_fraction"] > 0.0


def test_sac_refuses_a_recurrent_network(tmp_path, capsys):
    code = train_in_this_process(str(tmp_path / "run"), ["sac_bullet_half_cheetah.gin"],
                                 ["ActorCritic.rnn='lstm'"])
    assert code == 2
    assert "ActorCritic.rnn='lstm'" in capsys.readouterr().err


def _run(cmd, cwd):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("ALF_ASYNC_CONFIG_PATH", None)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_async_lstm_run_trains_resumes_and_plays(tmp_path, train_cmd):
    """The async (N = 2) LSTM config from the command: trains, resumes from its
    checkpoint with the recurrent networks, and plays episodes that carry state."""
    root = str(tmp_path / "run")
    small = ["--gin_param=Trainer.num_envs=4", "--gin_param=Trainer.unroll_length=32",
             "--gin_param=PPOLearner.mini_batch_size=64", "--gin_param=PPOLearner.num_epochs=2"]
    _run(train_cmd + ["--gin_file=async_ppo_cartpole_masked_lstm.gin", f"--root_dir={root}",
                      "--gin_param=Trainer.num_iterations=4"] + small, cwd=str(tmp_path))
    proc = _run(train_cmd + [f"--root_dir={root}", "--gin_param=Trainer.num_iterations=6"],
                cwd=str(tmp_path))
    assert "resumed" in proc.stderr
    rows = read_metrics(root)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert {r["actor_id"] for r in rows} == {0, 1}
    assert all(np.isfinite(r["policy_loss"]) for r in rows)
    play = _run([sys.executable, "-m", "alf_async.bin.play", f"--root_dir={root}",
                 "--num_episodes=2"], cwd=str(tmp_path))
    assert play.stdout.count("episode ") >= 2 and "mean" in play.stdout


def _best_late_return(root: str) -> float:
    """The best episode_return (a running mean over recent episodes) of the
    second half of the run. Not the last row: the LSTM runs' running mean
    swings by about 20 near their budget (sync: 97 at 21k env steps, 75 at
    24k), and where the swing stands at the budget depends on the CPU's float
    rounding; the feed-forward run stays at 44-48 over its second half."""
    rows = [r for r in read_metrics(root) if "episode_return" in r]
    return max(r["episode_return"] for r in rows if r["env_steps"] >= rows[-1]["env_steps"] / 2)


@pytest.mark.slow
# Three training runs one after the other: 115-155 s on a quiet 2-core
# machine, 300 s (pytest.ini's limit) beside a long training run.
@pytest.mark.timeout(600)
def test_memory_makes_the_masked_task_learnable_sync_and_async(tmp_path, train_cmd):
    """A short run of the shipped LSTM configs (sync and async N = 2) against the
    same config without memory: the LSTM policies pull well ahead. (The runs to
    CartPole's score are bench/recurrent_cartpole.py's.)"""
    returns = {}
    for name, budget, extra in (
            ("sync", 24000, ["--gin_file=ppo_cartpole_masked_lstm.gin"]),
            # 10 epochs a batch (not 20): slower per env step early on, faster per second
            ("async", 40000, ["--gin_file=async_ppo_cartpole_masked_lstm.gin"]),
            ("feed_forward", 24000, ["--gin_file=ppo_cartpole_masked_lstm.gin",
                                     "--gin_param=ActorCritic.rnn=None",
                                     "--gin_param=ActorNetwork.hidden_sizes=(64, 64)",
                                     "--gin_param=ValueNetwork.hidden_sizes=(64, 64)"])):
        root = str(tmp_path / name)
        _run(train_cmd + [f"--root_dir={root}", f"--gin_param=Trainer.num_env_steps={budget}"]
             + extra, cwd=str(tmp_path))
        returns[name] = _best_late_return(root)
    assert returns["feed_forward"] < 60, returns  # about 48: it cannot see velocities
    # Sync over seeds 0, 1, 2 (batches normalized as they were acted): 82, 121,
    # 98 (before: 97, 67, 86); one seed's swing is about 20. Measured with the
    # constant learning rate the file had before its linear schedule (which,
    # over these short budgets, lowers the rate within the run).
    assert returns["sync"] > 1.5 * returns["feed_forward"], returns
    assert returns["async"] > 1.8 * returns["feed_forward"], returns


def test_hogwild_workers_train_an_lstm_policy(tmp_path, train_cmd):
    """Hogwild workers act and train with the recurrent policy (each worker's
    own actor carries its envs' states)."""
    root = str(tmp_path / "run")
    _run(train_cmd + ["--gin_file=ppo_cartpole_masked_lstm.gin", f"--root_dir={root}",
                      "--gin_param=Trainer.runtime='hogwild'", "--gin_param=Trainer.num_actors=2",
                      "--gin_param=Trainer.num_iterations=6", "--gin_param=Trainer.num_envs=4",
                      "--gin_param=PPOLearner.mini_batch_size=128"], cwd=str(tmp_path))
    rows = read_metrics(root)
    assert rows and rows[-1]["iteration"] >= 6
    assert all(np.isfinite(r["policy_loss"]) for r in rows)


@pytest.mark.parametrize("lag_correction,recompute_values,chunk_length",
                         [("vtrace", False, None), ("decoupled", True, 8), ("none", True, None)])
def test_every_lag_correction_and_value_recomputation_train_a_recurrent_policy(
        lstm_bindings, lag_correction, recompute_values, chunk_length):
    observation, action_spec, _ = env_spec(MASKED_CARTPOLE_ID)
    learner = PPOLearner(observation, action_spec, num_epochs=2, mini_batch_size=32,
                         chunk_length=chunk_length, lag_correction=lag_correction,
                         recompute_values=recompute_values, seed=2)
    actor = neural_actor(0, learner)
    try:
        first, second = unrolls(actor, 2)
    finally:
        actor.close()
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    for batch in (first, second):  # the second is one version stale
        stats = learner.train(batch)
        assert stats["gradient_steps"] > 0
        assert all(np.isfinite(v) for v in stats.values()), stats
    after = learner.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if "rnn" in k)

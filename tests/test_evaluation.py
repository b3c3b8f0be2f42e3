"""Periodic deterministic evaluation (Trainer.eval_interval_env_steps).

- A seeded synchronous run trains exactly the same with evaluation on and off
  (the evaluator is a process of its own, sharing no random state), and with it
  on, every evaluation is a row of eval.jsonl at the multiples of the interval
  and at the end, goes to the next metrics row as eval_return and to
  TensorBoard as eval/return at the weights' env steps.
- Evaluation episodes are deterministic: the evaluator process gives the same
  returns for the same weights, every time.
- A resumed run drops the evaluations of weights newer than its checkpoint.
"""

from __future__ import annotations

import glob
import json
import os

import gin
import numpy as np
import pytest

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.envs.gym_env import env_spec
from alf_async.metrics import EVAL_FILE, MetricsRecorder, truncate_metrics_file
from alf_async.settings import TrainerSettings
from alf_async.training.evaluation import Evaluation
from alf_async.training.trainer import Trainer

ENV = "CartPole-v1"
NUM_ENVS, UNROLL, ITERATIONS = 4, 32, 6
INTERVAL = 256  # two iterations of 4 x 32 steps

# Values a run must repeat exactly (times and evaluation fields aside).
TRAINING_KEYS = ("iteration", "env_steps", "episodes", "episode_return", "episode_length",
                 "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
                 "behaviour_digest")


def _settings(**overrides) -> dict:
    values = dict(env_name=ENV, num_envs=NUM_ENVS, unroll_length=UNROLL,
                  num_iterations=ITERATIONS, seed=3, checkpoint_interval=100,
                  max_episode_steps=60)
    values.update(overrides)
    return values


def _train(root: str, **overrides) -> list:
    gin.clear_config()
    gin.bind_parameter("PPOLearner.mini_batch_size", 64)
    gin.bind_parameter("PPOLearner.num_epochs", 2)
    gin.bind_parameter("MetricsRecorder.console_interval_s", 0.0)
    try:
        Trainer(root, **_settings(**overrides)).train()
    finally:
        gin.clear_config()
    with open(os.path.join(root, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _eval_rows(root: str) -> list:
    with open(os.path.join(root, EVAL_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_evaluation_leaves_training_unchanged_and_is_reported_everywhere(tmp_path):
    plain = _train(str(tmp_path / "plain"))
    root = str(tmp_path / "evaluated")
    evaluated = _train(root, eval_interval_env_steps=INTERVAL, eval_episodes=3)

    assert [[row.get(k) for k in TRAINING_KEYS] for row in evaluated] == \
        [[row.get(k) for k in TRAINING_KEYS] for row in plain]
    assert not os.path.exists(os.path.join(str(tmp_path / "plain"), EVAL_FILE))

    evals = _eval_rows(root)
    steps = NUM_ENVS * UNROLL
    # Due at each multiple of the interval; the last one at the budget's end.
    assert [e["env_steps"] for e in evals] == [INTERVAL, 2 * INTERVAL, ITERATIONS * steps]
    assert [e["iteration"] for e in evals] == [2, 4, 6]
    for e in evals:
        assert len(e["returns"]) == len(e["lengths"]) == 3
        assert e["eval_return"] == pytest.approx(np.mean(e["returns"]))
        assert e["eval_return_std"] == pytest.approx(np.std(e["returns"]))
        assert all(1 <= n <= 60 for n in e["lengths"])  # the run's time limit
        assert e["wall_time"] > 0
    # Each result reaches a metrics row (the final one arrives after the last row).
    reported = [(row["eval_env_steps"], row["eval_return"]) for row in evaluated
                if row.get("eval_return") is not None]
    assert reported == [(e["env_steps"], e["eval_return"]) for e in evals[:len(reported)]]
    assert len(reported) >= 1
    assert all(row["eval_env_steps"] == 0 for row in evaluated
               if row.get("eval_return") is None)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = []
    for path in glob.glob(os.path.join(root, "tensorboard", "**", "events.out.tfevents.*"),
                          recursive=True):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        if "eval/return" in acc.Tags()["scalars"]:
            points += [(e.step, e.value) for e in acc.Scalars("eval/return")]
    assert sorted(points) == [(e["env_steps"], pytest.approx(e["eval_return"]))
                              for e in evals]


def test_evaluation_episodes_are_deterministic(tmp_path):
    """The same weights, evaluated twice by the evaluator process, give the same
    episodes; other weights give others."""
    settings = TrainerSettings(**_settings(eval_interval_env_steps=1, eval_episodes=4))
    observation, action_spec, _ = env_spec(ENV, 60)
    learner = PPOLearner(observation, action_spec, seed=0)
    other = PPOLearner(observation, action_spec, seed=1)
    weights = [learner.weight_arrays()]
    evaluation = Evaluation(settings, observation, action_spec, lambda: weights[0], "")
    metrics = MetricsRecorder(str(tmp_path), tensorboard=False)
    try:
        evaluation.start(0)
        for step, w in ((1, learner), (2, other), (3, learner)):
            weights[0] = w.weight_arrays()
            evaluation.after_iteration({"iteration": step, "env_steps": step,
                                        "wall_time": 0.0}, metrics)
        evaluation.finish({"iteration": 3, "env_steps": 3, "wall_time": 0.0}, metrics)
    finally:
        evaluation.close()
        metrics.close()
    assert not evaluation.failed
    first, second, third = _eval_rows(str(tmp_path))
    assert first["returns"] == third["returns"] and first["lengths"] == third["lengths"]
    assert [first["env_steps"], second["env_steps"], third["env_steps"]] == [1, 2, 3]
    # Four different start states: not every episode is the same one.
    assert len(set(first["returns"]) | set(second["returns"])) > 1


def test_a_resumed_run_drops_evaluations_past_its_checkpoint(tmp_path):
    path = str(tmp_path / EVAL_FILE)
    with open(path, "w", encoding="utf-8") as f:
        for steps in (256, 512, 768):
            f.write(json.dumps({"iteration": steps // 128, "env_steps": steps}) + "\n")
        f.write('{"iteration": 8, "env_st')  # torn by a crash
    truncate_metrics_file(path, 512, key="env_steps")
    assert [r["env_steps"] for r in _eval_rows(str(tmp_path))] == [256, 512]


def test_a_failing_evaluator_is_reported_once_and_training_goes_on(tmp_path, caplog):
    """Weights that do not fit the evaluator's network (a stand-in for any
    failure in its process): one error naming the cause, no more requests, and
    the caller is never raised to."""
    settings = TrainerSettings(**_settings(eval_interval_env_steps=1, eval_episodes=2))
    observation, action_spec, _ = env_spec(ENV, 60)
    wrong = PPOLearner(observation.dim + 3, action_spec, seed=0).weight_arrays()
    evaluation = Evaluation(settings, observation, action_spec, lambda: wrong, "")
    metrics = MetricsRecorder(str(tmp_path), tensorboard=False)
    try:
        evaluation.start(0)
        evaluation.after_iteration({"iteration": 1, "env_steps": 1, "wall_time": 0.0}, metrics)
        with caplog.at_level("ERROR", logger="alf_async"):
            evaluation.finish({"iteration": 1, "env_steps": 1, "wall_time": 0.0}, metrics)
            evaluation.after_iteration({"iteration": 2, "env_steps": 2, "wall_time": 0.0},
                                       metrics)
    finally:
        evaluation.close()
        metrics.close()
    assert evaluation.failed
    stopped = [r.getMessage() for r in caplog.records if "evaluation stopped" in r.getMessage()]
    assert len(stopped) == 1 and "size mismatch" in stopped[0], stopped
    assert not os.path.exists(os.path.join(str(tmp_path), EVAL_FILE))

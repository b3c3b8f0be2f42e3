"""bench/width_decomposition.py: counterfactual steps on copies of the learner
start where the learner is, and each variant trains with its own loss."""

from __future__ import annotations

import json

import alf_async
from alf_async.algorithms.ppo_learner import PPOLearner
from bench import width_decomposition
from policy_runs import TINY


def test_counterfactual_steps_rerun_the_real_step_and_vary_the_loss(tmp_path):
    out = tmp_path / "steps.jsonl"
    real_train = PPOLearner.train
    # Two actors of 2 envs: from the second iteration on, batches are one
    # version old; observations normalized (the shipped pendulum file).
    bindings = [b for b in TINY if not b.startswith(("Trainer.num_actors",
                                                     "Trainer.num_iterations"))]
    # The async Ant file's correction, so that "decoupled" is a variant too;
    # steps large enough for the clip to act.
    bindings += ["Trainer.num_actors=2", "Trainer.num_iterations=4",
                 "PPOLearner.num_epochs=4", "PPOLearner.learning_rate=0.01",
                 "PPOLearner.lag_correction='vtrace_gae'",
                 "PPOLearner.recompute_values=True", "PPOLearner.rho_bar=100.0"]
    with width_decomposition.counterfactual_steps(
            str(out), width_decomposition.VARIANTS) as rows:
        alf_async.train("async_ppo_bullet_inverted_pendulum.gin", str(tmp_path / "run"),
                        bindings=bindings)
    assert PPOLearner.train is real_train  # the wrapper is gone again
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    assert len(rows) == 4
    stale = [r for r in rows if r["lag"]]
    fresh = [r for r in rows if not r["lag"]]
    assert stale and fresh
    for row in rows:
        # the copy that trains as configured lands exactly where the learner does
        assert row["check_error"] == 0.0
    for row in fresh:
        assert set(row["variants"]) == set(width_decomposition.VARIANTS) - set(
            width_decomposition.STALE_ONLY)
    for row in stale:
        assert set(row["variants"]) == set(width_decomposition.VARIANTS)
        steps = {name: v["d_log_std"] for name, v in row["variants"].items()}
        # every other loss moves the log std differently on the same batch
        for name in width_decomposition.VARIANTS[1:]:
            assert steps[name] != steps["as_configured"], name
    summary = width_decomposition.summarize(rows)
    assert summary["max_check_error"] == 0.0
    assert summary["1"]["iterations"] == len(stale)
    assert summary["1"]["as_configured"]["minus_configured"] == 0.0

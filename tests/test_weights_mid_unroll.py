"""Trainer.weights_mid_unroll: actors load weights the learner publishes during
their unroll; a batch acted by two versions is normalized and corrected step
by step (the learner), and a real async run reports the lower lag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alf_async.algorithms import ppo_learner as ppo_learner_module
from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.utils.validation import ConfigError
from reliability_helpers import (DEMO_GIN, SLOW_ENV_PARAM, read_metrics, small_params,
                                 train_in_this_process)

T, K, OLD_STEPS = 8, 4, 5  # steps t < OLD_STEPS acted by the older version


def _batch(seed: int) -> dict:
    """Observations far from earlier batches' (the statistics move a lot)."""
    rng = np.random.default_rng(seed)
    return {
        "observation": (rng.standard_normal((T, K, 3)) * (1 + seed) + 3.0 * seed
                        ).astype(np.float32),
        "action": np.zeros((T, K, 2), np.float32),
        "reward": rng.standard_normal((T, K)).astype(np.float32),
        "terminated": rng.random((T, K)) < 0.1, "truncated": np.zeros((T, K), bool),
        "log_prob": np.zeros((T, K), np.float32), "value": np.zeros((T, K), np.float32),
        "truncation_value": np.zeros((T, K), np.float32),
        "bootstrap_value": np.zeros(K, np.float32),
    }


def _two_version_batch(learner: PPOLearner):
    """A batch whose first OLD_STEPS steps were acted by the learner's previous
    version and the rest by its current one (as an actor that loaded the new
    weights mid-unroll), and the two acting policies."""
    policies = {}
    for version in (0, 1):
        policy = NeuralPolicy(3, 2, seed=version)
        policy.load_weights(learner.weight_arrays())  # published as `version`
        policies[version] = policy
        if version == 0:
            learner.train(_batch(seed=1), 0)
    batch = _batch(seed=2)
    batch["behaviour_version"] = np.where(np.arange(T)[:, None] < OLD_STEPS, 0, 1
                                          ).astype(np.int32).repeat(K, axis=1)
    for t in range(T):
        acting = policies[0 if t < OLD_STEPS else 1]
        batch["action"][t], batch["log_prob"][t], batch["value"][t] = acting.act(
            batch["observation"][t])
    return batch, policies


def test_each_step_is_normalized_with_its_versions_statistics():
    learner = PPOLearner(3, 2, num_epochs=1, mini_batch_size=32)
    batch, policies = _two_version_batch(learner)
    raw = batch["observation"]
    versions = torch.from_numpy(batch["behaviour_version"]).long()
    normalizer = learner._batch_normalizer(raw, 0, versions, [0, 1])
    got = normalizer.normalize(torch.from_numpy(raw)).numpy()
    for t in range(T):
        acting = policies[0 if t < OLD_STEPS else 1]
        np.testing.assert_array_equal(got[t], acting._obs(raw[t]).numpy())
    # the two versions' statistics differ: one set for all would be wrong somewhere
    assert not np.array_equal(policies[0]._obs(raw[0]).numpy(),
                              policies[1]._obs(raw[0]).numpy())


def test_steps_of_the_current_version_keep_mu_as_pi_prox(monkeypatch):
    """Decoupled PPO on a two-version batch: the steps acted by the learner's
    current weights take the actor's log-probs as pi_prox exactly (ratio 1 at
    the start, as in a sync run); the older steps get pi_prox recomputed."""
    seen = []
    real_loss = ppo_learner_module.ppo_loss

    def recording_loss(*args, **kwargs):
        seen.append((args[1].detach().clone(), args[10].detach().clone()))
        return real_loss(*args, **kwargs)

    learner = PPOLearner(3, 2, num_epochs=1, mini_batch_size=T * K)
    assert learner.lag_correction == "decoupled"
    batch, _ = _two_version_batch(learner)
    monkeypatch.setattr(ppo_learner_module, "ppo_loss", recording_loss)
    stats = learner.train(batch, 0)
    (old_log_prob, proximal), = seen  # one minibatch: every step
    exact = int((proximal == old_log_prob).sum())
    assert exact == (T - OLD_STEPS) * K
    assert stats["step_lag"] == pytest.approx(OLD_STEPS / T)


def test_a_one_version_batch_reports_its_lag():
    learner = PPOLearner(3, 2, num_epochs=1, mini_batch_size=32)
    learner.weight_arrays()
    learner.train(_batch(seed=0), 0)
    batch = _batch(seed=1)
    batch["behaviour_version"] = np.zeros((T, K), np.int32)
    assert learner.train(batch, 0)["step_lag"] == 1.0


def test_only_the_process_backend_loads_weights_mid_unroll():
    from alf_async.settings import TrainerSettings

    with pytest.raises(ConfigError, match="Trainer.weights_mid_unroll=True needs"):
        TrainerSettings(num_iterations=1, backend="inprocess", weights_mid_unroll=True)


@pytest.mark.parametrize("mid_unroll", [True, False])
def test_async_actors_act_part_of_their_unroll_with_newer_weights(tmp_path, mid_unroll):
    """Two actor processes on an env that takes 5 ms a step, so that the
    learner trains one actor's batch while the other unrolls: with
    weights_mid_unroll the later steps of a batch are acted by the version the
    learner then trains it with (step_lag below the batch's lag); without it
    every step is the unroll's first version (step_lag equal to lag)."""
    root = str(tmp_path / "run")
    params = small_params(SLOW_ENV_PARAM, "Trainer.num_actors=2", "Trainer.num_env_workers=0",
                          f"Trainer.weights_mid_unroll={mid_unroll}", iterations=8)
    assert train_in_this_process(root, [DEMO_GIN], params) == 0
    rows = read_metrics(root)
    assert len(rows) == 8
    for row in rows:
        assert 0.0 <= row["step_lag"] <= row["lag"]
    if mid_unroll:
        assert any(row["step_lag"] < row["lag"] for row in rows), rows
    else:
        assert all(row["step_lag"] == row["lag"] for row in rows)

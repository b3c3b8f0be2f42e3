"""On-policy data is trained exactly as PPO2 trains it, and what a trajectory
carries for the learner beyond the steps themselves.

- The learner normalizes a batch with the statistics its acting policy used
  (``PPOLearner.observation_stats = "behaviour"``, the default), so the first
  minibatch's ratio pi / mu of every iteration of a sync loop is 1 (to the
  float rounding of the actors' numpy inference), decoupled and V-trace see
  importance weights of exactly 1 (a real sync run's metrics read
  truncated_fraction 0.0 on every row, with the actor acting itself and with
  acting env workers: tests/test_runtime_sync.py). After a resume, the first
  batch is trained as the uninterrupted learner trains it.
- ``recompute_values`` recomputes the bootstrap value V(s_T) and the
  truncation values from the observations the trajectory carries
  (``bootstrap_observation``, ``final_observation``), which actors and acting
  env workers fill alike; an env's truncations past the kept rows keep the
  actor's values.
- A step whose env failed (``env_failed``) is left out of the losses (its
  action, reward and truncation value change nothing) and counted
  (``failed_steps``); with a real failing env: tests/test_reliability_envs.py.
"""

from __future__ import annotations

import io
from typing import Dict, List

import numpy as np
import pytest
import torch

import alf_async.algorithms.ppo_learner as ppo_learner_module
from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.runtime.actor import Actor
from alf_async.envs.final_observations import FINAL_OBSERVATION_ROWS
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.settings import TrainerSettings

O, A = 3, 2


def _batch(seed: int, T: int = 8, K: int = 4) -> Dict[str, np.ndarray]:
    """A trajectory of random steps (observations away from the statistics of
    the previous seeds' batches), to be acted by ``_act``."""
    rng = np.random.default_rng(seed)
    batch = allocate_trajectory(T, K, O, A)
    batch["observation"][:] = rng.normal(3.0 * seed, 1.0 + seed, (T, K, O))
    batch["reward"][:] = rng.standard_normal((T, K))
    batch["terminated"][:] = rng.random((T, K)) < 0.1
    batch["truncated"][:] = (rng.random((T, K)) < 0.1) & ~batch["terminated"]
    batch["final_observation_row"][:] = -1
    batch["bootstrap_observation"][:] = rng.normal(3.0 * seed, 1.0 + seed, (K, O))
    for t, k in zip(*np.nonzero(batch["truncated"])):
        row = (batch["final_observation_row"][:t, k] >= 0).sum()
        if row < FINAL_OBSERVATION_ROWS:
            batch["final_observation_row"][t, k] = row
            batch["final_observation"][row, k] = rng.normal(3.0 * seed, 1.0 + seed, O)
    return batch


def _act(batch: Dict[str, np.ndarray], weights: Dict[str, np.ndarray], seed: int = 0,
         numpy_inference: bool = True) -> Dict[str, np.ndarray]:
    """Fill the batch's actions, log-probs and values (bootstrap and
    truncation values too) as an actor acting with ``weights`` does."""
    policy = NeuralPolicy(O, A, seed=seed, numpy_inference=numpy_inference)
    policy.load_weights(weights)
    for t in range(len(batch["observation"])):
        batch["action"][t], batch["log_prob"][t], batch["value"][t] = policy.act(
            batch["observation"][t])
    batch["bootstrap_value"][:] = policy.value(batch["bootstrap_observation"])
    rows = batch["final_observation_row"]
    batch["truncation_value"][:] = 0.0
    for t, k in zip(*np.nonzero(rows >= 0)):
        batch["truncation_value"][t, k] = policy.value(
            batch["final_observation"][rows[t, k], k][None])[0]
    return batch


class FirstMinibatch:
    """Records log pi - log mu of the first minibatch of every iteration (the
    first ``ppo_loss`` call after ``train`` starts)."""

    def __init__(self, monkeypatch):
        self.log_ratios: List[torch.Tensor] = []
        self._first = False
        loss, train = ppo_learner_module.ppo_loss, PPOLearner.train

        def recording_loss(log_prob, old_log_prob, *args, **kwargs):
            if self._first:
                self.log_ratios.append((log_prob - old_log_prob).detach().clone())
                self._first = False
            return loss(log_prob, old_log_prob, *args, **kwargs)

        def marking_train(learner, *args, **kwargs):
            self._first = True
            return train(learner, *args, **kwargs)

        monkeypatch.setattr(ppo_learner_module, "ppo_loss", recording_loss)
        monkeypatch.setattr(PPOLearner, "train", marking_train)


def _same_parameters(a: PPOLearner, b: PPOLearner) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                 b.model.state_dict().values()))


@pytest.mark.parametrize("numpy_inference", [True, False])
@pytest.mark.parametrize("mode", ["none", "decoupled", "vtrace_gae"])
def test_the_first_minibatch_ratio_is_one_in_a_sync_loop(monkeypatch, mode, numpy_inference):
    """predict -> learn -> predict with observation normalization on: every
    iteration's first minibatch has pi / mu = 1 (bit for bit where the actor
    runs the torch networks; to the float rounding of numpy inference, which
    sums the matrix products in another order), and the importance weights
    of the lag corrections are exactly 1."""
    first = FirstMinibatch(monkeypatch)
    learner = PPOLearner(O, A, num_epochs=2, mini_batch_size=16, seed=2,
                         lag_correction=mode, recompute_values=mode == "vtrace_gae")
    assert learner.normalize_observations
    for iteration in range(4):
        batch = _act(_batch(iteration), learner.weight_arrays(), seed=iteration,
                     numpy_inference=numpy_inference)
        stats = learner.train(batch, behaviour_version=iteration)
        if mode != "none":
            assert stats["truncated_fraction"] == 0.0
            assert stats["importance_weight"] == 1.0 and stats["behaviour_kl"] == 0.0
    assert len(first.log_ratios) == 4
    largest = max(float(r.abs().max()) for r in first.log_ratios)
    assert largest <= (1e-5 if numpy_inference else 1e-6), largest


def _copy(learner: PPOLearner, **kwargs) -> PPOLearner:
    """A new learner resumed from a checkpoint of ``learner`` (through bytes)."""
    buffer = io.BytesIO()
    torch.save(learner.state_dict(), buffer)
    buffer.seek(0)
    resumed = PPOLearner(O, A, **kwargs)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    return resumed


def test_the_first_batch_after_a_resume_is_trained_as_without_the_resume(monkeypatch):
    """A resumed run publishes its weights (and statistics) before its actors
    start, so the first batch after the resume is normalized as it was acted
    and trained exactly as the uninterrupted learner trains it."""
    kwargs = dict(num_epochs=2, mini_batch_size=16, seed=2)
    first = FirstMinibatch(monkeypatch)
    learner = PPOLearner(O, A, **kwargs)
    for iteration in range(2):
        learner.train(_act(_batch(iteration), learner.weight_arrays()), iteration)
    resumed = _copy(learner, **kwargs)
    weights = resumed.weight_arrays()  # published to the new actors at start
    batch = _act(_batch(2), weights)
    learner.weight_arrays()
    learner.train({k: v.copy() for k, v in batch.items()}, 2)
    stats = resumed.train(batch, 2)
    assert _same_parameters(learner, resumed)
    assert stats["truncated_fraction"] == 0.0
    assert float(first.log_ratios[-1].abs().max()) <= 1e-5


def test_recompute_values_recomputes_the_bootstrap_and_truncation_values():
    """A stale batch (acted by older weights, whose values are nonsense for
    the learner): with ``recompute_values`` the bootstrap and truncation
    values come from the batch's observations under the learner's value
    network, as if the actor had computed them with it."""
    kwargs = dict(num_epochs=1, mini_batch_size=32, seed=3, recompute_values=True,
                  lag_correction="vtrace_gae")
    old = PPOLearner(O, A, seed=9)  # the stale behaviour policy
    batch = _act(_batch(1), old.weight_arrays())
    assert (batch["final_observation_row"] >= 0).any()
    learner, reference, kept = (PPOLearner(O, A, **kwargs) for _ in range(3))
    current = learner.weight_arrays()
    for other in (reference, kept):
        other.weight_arrays()
    stale = {k: v.copy() for k, v in batch.items()}
    stale["bootstrap_value"][:] = 50.0
    stale["truncation_value"][stale["truncated"]] = -50.0
    # The reference: the same batch with the ends the learner's network gives.
    exact = {k: v.copy() for k, v in batch.items()}
    ends = _act({k: v.copy() for k, v in batch.items()}, current, numpy_inference=False)
    exact["bootstrap_value"], exact["truncation_value"] = (ends["bootstrap_value"],
                                                           ends["truncation_value"])
    learner.train(stale)
    reference.train(exact)
    for (name, a), b in zip(learner.model.state_dict().items(),
                            reference.model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    # Without the observations, the actor's (stale) ends are kept.
    del stale["bootstrap_observation"]
    kept.train(stale)
    assert not _same_parameters(kept, reference)


def _perturbed_failed_steps(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    out = {k: v.copy() for k, v in batch.items()}
    failed = out["env_failed"]
    out["action"][failed] += 3.0
    out["log_prob"][failed] -= 5.0
    out["reward"][failed] = 100.0
    out["truncation_value"][failed] = 1e3
    return out


@pytest.mark.parametrize("mode", ["none", "decoupled", "vtrace_gae"])
def test_failed_steps_are_left_out_of_the_losses(mode):
    """A failed step (reward 0, a truncation at the last good observation) is
    no transition: what the batch says about its action, reward and
    truncation value changes nothing, the step before it bootstraps from
    V(s_t) of the failed step's observation, and the steps are counted."""
    kwargs = dict(num_epochs=2, mini_batch_size=16, seed=5, lag_correction=mode)
    learner = PPOLearner(O, A, **kwargs)
    batch = _batch(1)
    batch["env_failed"][[2, 5], [1, 3]] = True
    batch["truncated"][batch["env_failed"]] = True
    batch["terminated"][batch["env_failed"]] = False
    batch["final_observation_row"][batch["env_failed"]] = -1
    batch = _act(batch, learner.weight_arrays())
    batch["reward"][batch["env_failed"]] = 0.0
    other = PPOLearner(O, A, **kwargs)
    other.weight_arrays()
    stats = learner.train(batch, 0)
    other_stats = other.train(_perturbed_failed_steps(batch), 0)
    assert _same_parameters(learner, other)
    assert stats["failed_steps"] == other_stats["failed_steps"] == 2.0
    assert stats["value_loss"] == other_stats["value_loss"]


def _pendulum(acting: bool) -> TrainerSettings:
    """Pendulum-v1 never terminates: with a time limit of 12 steps, every env
    is truncated at steps 11, 23 and 35 of a 40-step unroll."""
    return TrainerSettings(env_name="Pendulum-v1", num_envs=3, num_env_workers=1,
                           env_splits=1, acting_env_workers=acting, unroll_length=40,
                           seed=1, max_episode_steps=12, num_iterations=1)


def _policy(observation_spec, action_spec, seed):
    torch.manual_seed(0)
    return NeuralPolicy(observation_spec, action_spec, seed)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("acting", [False, True])
def test_actors_keep_the_bootstrap_and_final_observations(acting):
    """The actor (or its acting env workers) keeps s_T and the final
    observations of each env's first R truncations; the values it recorded
    are those of exactly these observations."""
    actor = Actor(0, _pendulum(acting), _policy)
    try:
        assert (actor._acting is not None) == acting
        learner = PPOLearner(actor.env.observation_spec, actor.env.action_spec)
        learner.normalizer.update(np.random.default_rng(0).normal(0, 2, (64, 3)))
        actor.load_weights(0, learner.weight_arrays())
        out = allocate_trajectory(40, 3, actor.env.observation_spec, actor.env.action_dim)
        out["final_observation_row"][:] = 7  # stale contents of a reused slot
        actor.unroll(out)
        policy = actor.policy
        assert out["truncated"][[11, 23, 35]].all() and out["truncated"].sum() == 9
        rows = out["final_observation_row"]
        assert rows[11].tolist() == [0] * 3 and rows[23].tolist() == [1] * 3
        assert rows[35].tolist() == [-1] * 3  # past R = 2: the actor's value is kept
        assert (rows[~out["truncated"]] == -1).all()
        for t, row in ((11, 0), (23, 1)):
            np.testing.assert_array_equal(policy.value(out["final_observation"][row]),
                                          out["truncation_value"][t])
        np.testing.assert_array_equal(policy.value(out["bootstrap_observation"]),
                                      out["bootstrap_value"])
        np.testing.assert_array_equal(out["bootstrap_observation"], actor._observation)
        assert not out["env_failed"].any()
    finally:
        actor.close()

"""bench/width_decomposition.py: counterfactual steps on copies of the learner
start where the learner is, each variant trains with its own loss, and the
patches are undone."""

from __future__ import annotations

import json
import math

import pytest
import torch

import alf_async
from alf_async.algorithms import ppo_learner as ppo_learner_module
from alf_async.algorithms import ppo_loss as ppo_loss_module
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.ppo_loss import ppo_loss
from bench import width_decomposition
from policy_runs import TINY


def test_counterfactual_steps_rerun_the_real_step_and_vary_the_loss(tmp_path):
    out = tmp_path / "steps.jsonl"
    real_train = PPOLearner.train
    real_loss, real_normalize = ppo_learner_module.ppo_loss, ppo_loss_module.normalize_advantages
    real_advantages = ppo_learner_module.advantages_and_returns
    # Two actors of 2 envs: from the second iteration on, batches are one
    # version old; observations normalized (the shipped pendulum file).
    bindings = [b for b in TINY if not b.startswith(("Trainer.num_actors",
                                                     "Trainer.num_iterations"))]
    # V-trace's correction (the async HalfCheetah file's), so that "decoupled"
    # and "gae_advantages" are variants too; steps large enough for the clip
    # to act.
    bindings += ["Trainer.num_actors=2", "Trainer.num_iterations=4",
                 "PPOLearner.num_epochs=4", "PPOLearner.learning_rate=0.01",
                 "PPOLearner.lag_correction='vtrace_gae'",
                 "PPOLearner.recompute_values=True", "PPOLearner.rho_bar=100.0"]
    with width_decomposition.counterfactual_steps(
            str(out), width_decomposition.VARIANTS) as rows:
        alf_async.train("async_ppo_bullet_inverted_pendulum.gin", str(tmp_path / "run"),
                        bindings=bindings)
    # the wrapper and every patch are gone again
    assert PPOLearner.train is real_train
    assert ppo_learner_module.ppo_loss is real_loss
    assert ppo_loss_module.normalize_advantages is real_normalize
    assert ppo_learner_module.advantages_and_returns is real_advantages
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


def _minibatch(n: int = 64):
    generator = torch.Generator().manual_seed(0)
    log_prob = torch.randn(n, generator=generator, dtype=torch.float64) * 0.1
    behaviour = log_prob + torch.randn(n, generator=generator, dtype=torch.float64) * 0.3
    proximal = log_prob + torch.randn(n, generator=generator, dtype=torch.float64) * 0.05
    advantages = torch.randn(n, generator=generator, dtype=torch.float64) + 0.5
    zeros = torch.zeros(n, dtype=torch.float64)
    return log_prob, behaviour, proximal, advantages, zeros


def test_without_weights_is_the_decoupled_loss_with_mu_set_to_pi_prox():
    log_prob, behaviour, proximal, advantages, zeros = _minibatch()
    args = (zeros, zeros, zeros, 0.2, 0.5, 0.0, True)
    out = width_decomposition._without_weights(ppo_loss)(
        log_prob, behaviour, advantages, *args, proximal, 100.0, None, "behaviour")
    expected = ppo_loss(log_prob, proximal, advantages, *args, proximal, 100.0, None,
                        "behaviour")
    weighted = ppo_loss(log_prob, behaviour, advantages, *args, proximal, 100.0, None,
                        "behaviour")
    assert out.stats["importance_weight"] == 1.0
    assert torch.equal(out.loss, expected.loss)
    assert not torch.equal(out.loss, weighted.loss)


def test_uncentred_advantages_keep_their_mean_and_take_the_valid_samples_std():
    _, _, _, advantages, _ = _minibatch()
    scaled = width_decomposition._uncentred(advantages)
    assert scaled.mean() > 0.3  # not centred
    assert torch.allclose(scaled * advantages.std(unbiased=False), advantages)
    valid = torch.arange(len(advantages)) % 2 == 0
    masked = width_decomposition._uncentred(advantages, valid=valid)
    std = advantages[valid].std(unbiased=False)
    assert torch.allclose(masked[valid] * std, advantages[valid])


def test_gae_advantages_take_gae_for_the_policy_and_vtrace_for_the_values():
    T, K = 6, 2
    generator = torch.Generator().manual_seed(1)
    rewards = torch.randn(T, K, generator=generator)
    values = torch.randn(T, K, generator=generator)
    batch = {"terminated": torch.zeros(T, K, dtype=torch.bool),
             "truncated": torch.zeros(T, K, dtype=torch.bool),
             "truncation_value": torch.zeros(T, K), "bootstrap_value": torch.randn(K)}
    log_rho = torch.randn(T, K, generator=generator) * 0.5
    compute = ppo_learner_module.advantages_and_returns
    vtrace = compute(rewards, values, batch, 0.99, 0.95, log_rho, 100.0, 1.0, True)
    gae = compute(rewards, values, batch, 0.99, 0.95)
    mixed = width_decomposition._gae_advantages(compute)(
        rewards, values, batch, 0.99, 0.95, log_rho, 100.0, 1.0, True)
    assert torch.equal(mixed[0], gae[0]) and torch.equal(mixed[1], vtrace[1])
    assert not torch.equal(gae[0], vtrace[0]) and not torch.equal(gae[1], vtrace[1])


def test_summary_pairs_each_variant_with_the_configured_step_of_its_batch():
    rows = [{"lag": 1, "real": a, "variants": {"as_configured": {"d_log_std": a},
                                               "none": {"d_log_std": b}}}
            for a, b in [(-3.0, -1.0), (-5.0, -2.0), (-4.0, -3.0)]]
    rows.append({"lag": 0, "real": -2.0, "variants": {"as_configured": {"d_log_std": -2.0}},
                 "check_error": 0.0})
    summary = width_decomposition.summarize(rows)
    none = summary["1"]["none"]
    assert none["d_log_std"] == pytest.approx(-2.0)
    assert none["minus_configured"] == pytest.approx(2.0)  # diffs 2, 3, 1
    assert none["stderr"] == pytest.approx(math.sqrt(1.0 / 3))  # sample variance 1
    assert summary["1"]["real_d_log_std"] == pytest.approx(-4.0)
    assert summary["0"]["as_configured"]["stderr"] is None  # one iteration
    assert summary["max_check_error"] == 0.0


def test_newey_west_stderr_weights_the_neighbours_of_a_correlated_series():
    blocky = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # n = 9, L = 2: autocovariances 2/9, 8/81, -2/81 with weights 1, 4/3, 2/3
    assert width_decomposition.newey_west_stderr(blocky) == pytest.approx(math.sqrt(82 / 2187))
    naive = math.sqrt(sum((v - 1 / 3) ** 2 for v in blocky) / 8 / 9)
    assert width_decomposition.newey_west_stderr(blocky) > naive
    alternating = [0.0, 1.0] * 5
    alternating_naive = math.sqrt(sum((v - 0.5) ** 2 for v in alternating) / 9 / 10)
    assert width_decomposition.newey_west_stderr(alternating) < alternating_naive
    assert width_decomposition.newey_west_stderr([1.0, 2.0]) is None
    # n = 64 is a cube: L = 4 (float 64 ** (1/3) is 3.999...), so a period-5
    # series, whose autocovariance at lag 5 would count only with L = 5, gives
    # a variance from lags 0-4 alone
    series = [float(i % 5) for i in range(64)]
    mean = sum(series) / 64
    c = [v - mean for v in series]
    gamma = [sum(c[i] * c[i - k] for i in range(k, 64)) / 64 for k in range(6)]
    expected = gamma[0] + sum(2 * (1 - k / 5) * gamma[k] for k in range(1, 5))
    assert width_decomposition.newey_west_stderr(series) == pytest.approx(
        math.sqrt(max(expected, 0.0) / 64))


def test_summary_gives_the_autocorrelated_stderr_of_the_differences_in_row_order():
    diffs = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    rows = [{"lag": 1, "real": -1.0, "variants": {"as_configured": {"d_log_std": -1.0},
                                                  "none": {"d_log_std": -1.0 + d}}}
            for d in diffs]
    entry = width_decomposition.summarize(rows)["1"]["none"]
    assert entry["stderr_autocorrelated"] == pytest.approx(math.sqrt(82 / 2187))
    assert entry["stderr"] == pytest.approx(math.sqrt(2 / 9 * 9 / 8 / 9))

"""The PPO2 loss in ``alf_async.algorithms.ppo_loss`` is correct.

Proves, on a small minibatch worked out by hand, that ``ppo_loss``:

- normalizes advantages per minibatch as (A - mean) / population std;
- computes the clipped surrogate policy loss -min(r A, clip(r, 1-eps, 1+eps) A),
  the squared value loss and the entropy bonus, and combines them with the given
  weights;
- reports clip fraction and approx KL consistent with their definitions;

and that the gradient of ``clipped_surrogate_loss`` with respect to log pi is
zero exactly where the clip is active on the side that would increase the
objective (ratio > 1 + eps with A > 0, ratio < 1 - eps with A < 0), and equal to
-ratio * A (so non-zero) inside the clip range and on the other side.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alf_async.algorithms.ppo_loss import (clipped_surrogate_loss, normalize_advantages,
                                           ppo_loss)

# Advantages with mean 5 and population std 2, so normalized values are exact.
RAW_ADV = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
NORM_ADV = [-1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 1.0, 2.0]
RATIOS = [1.0, 1.5, 0.5, 1.1, 0.7, 1.3, 1.25, 0.9]


def _f64(values):
    return torch.tensor(values, dtype=torch.float64)


def _log_probs():
    old = _f64([-0.3, -1.0, 0.2, -2.0, -0.5, 0.0, -1.5, -0.7])
    new = old + torch.log(_f64(RATIOS))
    return new, old


def test_normalize_advantages_uses_mean_and_population_std():
    out = normalize_advantages(_f64(RAW_ADV))
    torch.testing.assert_close(out, _f64(NORM_ADV), rtol=0, atol=1e-8)


def test_clipped_surrogate_per_sample_hand_computed():
    new, old = _log_probs()
    loss = clipped_surrogate_loss(new, old, _f64(NORM_ADV), clip_ratio=0.2)
    # sample: ratio, A -> -min(r A, clip(r) A)
    # 0: 1.0, -1.5 -> 1.5
    # 1: 1.5, -0.5 -> -min(-0.75, -0.6) = 0.75   (unclipped side: ratio*A is smaller)
    # 2: 0.5, -0.5 -> -min(-0.25, -0.4) = 0.4    (clipped at 0.8)
    # 3: 1.1, -0.5 -> 0.55
    # 4, 5: A = 0 -> 0
    # 6: 1.25, 1.0 -> -min(1.25, 1.2) = -1.2     (clipped at 1.2)
    # 7: 0.9, 2.0 -> -1.8
    expected = _f64([1.5, 0.75, 0.4, 0.55, 0.0, 0.0, -1.2, -1.8])
    torch.testing.assert_close(loss, expected, rtol=0, atol=1e-12)


def test_ppo_loss_hand_computed_terms_and_total():
    new, old = _log_probs()
    value = _f64([1, 2, 3, 4, 0, 0, 0, 0])
    returns = _f64([0, 2, 5, 4, 1, 0, 0, -1])
    entropy = _f64([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    out = ppo_loss(new, old, _f64(RAW_ADV), value, returns, entropy, clip_ratio=0.2,
                   value_loss_weight=0.25, entropy_coef=0.1, normalize_advantage=True)
    # policy: mean of [1.5, .75, .4, .55, 0, 0, -1.2, -1.8] = 0.2 / 8
    policy = 0.2 / 8
    # value: squared errors [1, 0, 4, 0, 1, 0, 0, 1] -> 7 / 8
    value_loss = 7 / 8
    entropy_mean = 3.6 / 8
    total = policy + 0.25 * value_loss - 0.1 * entropy_mean
    assert out.loss.item() == pytest.approx(total, abs=1e-9)
    assert out.stats["policy_loss"].item() == pytest.approx(policy, abs=1e-9)
    assert out.stats["value_loss"].item() == pytest.approx(value_loss, abs=1e-12)
    assert out.stats["entropy"].item() == pytest.approx(entropy_mean, abs=1e-12)
    # |ratio - 1| > 0.2 for ratios 1.5, 0.5, 0.7, 1.3, 1.25
    assert out.stats["clip_fraction"].item() == pytest.approx(5 / 8)
    kl = sum((r - 1) - math.log(r) for r in RATIOS) / 8
    assert out.stats["approx_kl"].item() == pytest.approx(kl, abs=1e-12)
    assert out.stats["approx_kl"].item() > 0
    # Statistics are detached; the loss is differentiable.
    assert all(not s.requires_grad for s in out.stats.values())


def test_ppo_loss_without_advantage_normalization_uses_raw_advantages():
    new, old = _log_probs()
    zeros = torch.zeros(8, dtype=torch.float64)
    out = ppo_loss(new, old, _f64(RAW_ADV), zeros, zeros, zeros, clip_ratio=0.2,
                   value_loss_weight=0.5, entropy_coef=0.0, normalize_advantage=False)
    # All raw advantages are positive: -min(r A, clip(r) A) = -min(r, clip(r)) * A
    expected = -sum(min(r, min(max(r, 0.8), 1.2)) * a
                    for r, a in zip(RATIOS, RAW_ADV)) / 8
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    out_norm = ppo_loss(new, old, _f64(RAW_ADV), zeros, zeros, zeros, clip_ratio=0.2,
                        value_loss_weight=0.5, entropy_coef=0.0, normalize_advantage=True)
    assert out_norm.loss.item() == pytest.approx(0.2 / 8, abs=1e-9)


def test_ppo_loss_gradients_of_value_and_entropy_terms():
    """d loss / d V = w * 2 (V - R) / B and d loss / d entropy = -c / B."""
    B = 4
    log_prob = torch.zeros(B, dtype=torch.float64)
    value = _f64([1.0, -2.0, 0.5, 3.0]).requires_grad_()
    returns = _f64([0.0, 0.0, 1.0, 1.0])
    entropy = _f64([1.0, 1.0, 1.0, 1.0]).requires_grad_()
    out = ppo_loss(log_prob, log_prob, _f64([1, 2, 3, 4]), value, returns, entropy,
                   value_loss_weight=0.3, entropy_coef=0.05)
    out.loss.backward()
    torch.testing.assert_close(value.grad, 0.3 * 2 * (value.detach() - returns) / B)
    torch.testing.assert_close(entropy.grad, torch.full((B,), -0.05 / B, dtype=torch.float64))


def _surrogate_grad(ratio: float, advantage: float, eps: float = 0.2) -> float:
    old = torch.tensor([0.1], dtype=torch.float64)
    new = (old + math.log(ratio)).clone().requires_grad_()
    clipped_surrogate_loss(new, old, torch.tensor([advantage], dtype=torch.float64),
                           eps).sum().backward()
    return new.grad.item()


@pytest.mark.parametrize("ratio,advantage", [
    (1.5, 1.0),    # ratio > 1 + eps, A > 0: clipped, no incentive to go further
    (1.21, 3.0),
    (0.5, -1.0),   # ratio < 1 - eps, A < 0: clipped
    (0.79, -2.0),
])
def test_surrogate_gradient_zero_where_clip_is_active(ratio, advantage):
    assert _surrogate_grad(ratio, advantage) == 0.0


@pytest.mark.parametrize("ratio,advantage", [
    (1.0, 1.0), (1.1, -1.0), (0.9, 2.0), (1.19, 0.5), (0.81, -0.5),  # inside the range
    (1.5, -1.0),   # above the range but A < 0: the unclipped term is the minimum
    (0.5, 1.0),    # below the range but A > 0: the unclipped term is the minimum
])
def test_surrogate_gradient_nonzero_inside_or_on_the_other_side(ratio, advantage):
    # d/d logpi of -(ratio * A) = -ratio * A
    assert _surrogate_grad(ratio, advantage) == pytest.approx(-ratio * advantage, rel=1e-9)


def test_surrogate_gradient_batch_masks_only_clipped_samples():
    ratios = [1.5, 1.5, 0.5, 0.5, 1.05]
    advantages = [1.0, -1.0, -1.0, 1.0, 1.0]
    old = torch.zeros(5, dtype=torch.float64)
    new = torch.log(_f64(ratios)).requires_grad_()
    clipped_surrogate_loss(new, old, _f64(advantages), 0.2).sum().backward()
    expected = [0.0, 1.5, 0.0, -0.5, -1.05]
    torch.testing.assert_close(new.grad, _f64(expected), rtol=1e-9, atol=0)


def test_decoupled_loss_reports_the_share_of_truncated_importance_weights():
    """pi_prox / mu of [0.5, 1.0, 1.5, 2.0, 3.0] with rho_bar 1.2: three of the
    five weights exceed it and are cut to 1.2."""
    weights = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0])
    old = torch.zeros(5)
    proximal = weights.log()
    out = ppo_loss(proximal.clone(), old, torch.ones(5), torch.zeros(5), torch.zeros(5),
                   torch.zeros(5), normalize_advantage=False, proximal_log_prob=proximal,
                   max_importance_weight=1.2)
    assert out.stats["truncated_fraction"].item() == pytest.approx(3 / 5)
    # Cut off: 0.3 + 0.8 + 1.8 of the weights' sum 8.
    assert out.stats["truncated_weight"].item() == pytest.approx(2.9 / 8)
    assert out.stats["importance_weight"].item() == pytest.approx(8.0 / 5)
    kl = sum((w - 1) - np.log(w) for w in [0.5, 1.0, 1.5, 2.0, 3.0]) / 5
    assert out.stats["behaviour_kl"].item() == pytest.approx(kl, rel=1e-5)
    # The policy loss used the truncated weights: -min(w, 1.2) * A (r = 1).
    assert out.stats["policy_loss"].item() == pytest.approx(-(0.5 + 1.0 + 1.2 * 3) / 5)
    untruncated = ppo_loss(proximal.clone(), old, torch.ones(5), torch.zeros(5),
                           torch.zeros(5), torch.zeros(5), normalize_advantage=False,
                           proximal_log_prob=proximal)
    assert "truncated_fraction" not in untruncated.stats
    assert "truncated_weight" not in untruncated.stats


@pytest.mark.parametrize("decoupled", [False, True])
def test_masked_samples_count_in_no_loss_and_no_statistic(decoupled):
    """``valid``: the loss, its gradient and the statistics of a minibatch
    with masked samples (steps whose env failed) are those of the valid
    samples alone, whatever the masked ones hold."""
    g = torch.Generator().manual_seed(2)
    B = 10
    valid = torch.ones(B, dtype=torch.bool)
    valid[[3, 7]] = False
    old, adv = torch.randn(B, generator=g), torch.randn(B, generator=g)
    value, returns = torch.randn(B, generator=g), torch.randn(B, generator=g)
    entropy, proximal = torch.rand(B, generator=g), old + 0.3 * torch.randn(B, generator=g)
    new = (old + 0.2 * torch.randn(B, generator=g)).requires_grad_()
    garbage = torch.full((B,), 1e4)
    garbage[valid] = 0.0

    def loss(log_prob, keep=None, noise=0.0):
        pick = (lambda x: x) if keep is None else (lambda x: x[keep])
        return ppo_loss(pick(log_prob), pick(old), pick(adv + noise), pick(value),
                        pick(returns + noise), pick(entropy), 0.2, 0.5, 0.01, True,
                        pick(proximal) if decoupled else None, 1.0 if decoupled else None,
                        None if keep is not None else valid)

    masked = loss(new, noise=garbage)
    masked.loss.backward()
    grad = new.grad.clone()
    new.grad = None
    alone = loss(new, keep=valid)
    alone.loss.backward()
    torch.testing.assert_close(masked.loss, alone.loss)
    torch.testing.assert_close(grad[valid], new.grad[valid])
    assert (grad[~valid] == 0).all()
    assert masked.stats.keys() == alone.stats.keys()
    for key in masked.stats:
        torch.testing.assert_close(masked.stats[key], alone.stats[key], msg=key)


def test_weighted_advantage_moments_hand_computed():
    """Weights [1, 1, 2, 0] on A = [0, 2, 4, 100]: the last sample weighs
    nothing, so the weighted mean is (0 + 2 + 8) / 4 = 2.5 and the weighted
    variance (6.25 + 0.25 + 2 * 2.25) / 4 = 2.75."""
    adv = _f64([0.0, 2.0, 4.0, 100.0])
    out = normalize_advantages(adv, epsilon=0.0, weight=_f64([1.0, 1.0, 2.0, 0.0]))
    torch.testing.assert_close(out, (adv - 2.5) / math.sqrt(2.75), rtol=0, atol=1e-12)
    # Equal weights give the unweighted moments; masked samples weigh nothing.
    torch.testing.assert_close(normalize_advantages(_f64(RAW_ADV), epsilon=0.0,
                                                    weight=torch.full((8,), 3.0,
                                                                      dtype=torch.float64)),
                               _f64(NORM_ADV), rtol=0, atol=1e-12)
    valid = torch.tensor([True, True, True, False])
    torch.testing.assert_close(
        normalize_advantages(adv, epsilon=0.0, valid=valid, weight=_f64([1.0, 1.0, 2.0, 5.0])),
        (adv - 2.5) / math.sqrt(2.75), rtol=0, atol=1e-12)


def test_proximal_advantage_moments_recentre_a_stale_batch():
    """On a stale batch (pi_prox != mu) "proximal" normalizes the advantages
    with their pi_prox / mu-weighted moments, so the weighted mean of what the
    surrogate sees is 0 and the loss differs from "behaviour"'s; on on-policy
    data (pi_prox = mu) both give the same loss."""
    g = torch.Generator().manual_seed(5)
    B = 64
    old = torch.randn(B, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    # pi_prox favours the samples with high advantages, as after an improving step.
    proximal = old + 0.5 * adv
    zeros = torch.zeros(B, dtype=torch.float64)

    def loss(moments, prox):
        return ppo_loss(prox.clone(), old, adv, zeros, zeros, zeros, entropy_coef=0.0,
                        value_loss_weight=0.0, proximal_log_prob=prox,
                        max_importance_weight=1.0, advantage_moments=moments).loss

    stale_behaviour, stale_proximal = loss("behaviour", proximal), loss("proximal", proximal)
    assert abs(stale_behaviour.item() - stale_proximal.item()) > 1e-3
    # At r = 1 the decoupled loss is -mean(min(w, 1) * A_norm): recompute it by hand.
    w = torch.exp(proximal - old)
    share = w / w.sum()
    mean = (share * adv).sum()
    std = (share * (adv - mean) ** 2).sum().sqrt()
    expected = -(w.clamp(max=1.0) * (adv - mean) / (std + 1e-8)).mean()
    torch.testing.assert_close(stale_proximal, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loss("proximal", old), loss("behaviour", old), rtol=1e-12,
                               atol=1e-12)

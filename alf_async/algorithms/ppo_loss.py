"""The PPO2 loss (and its decoupled variant for stale data), as pure functions on a
minibatch of B samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import torch

# Relative margin above rho_bar from which an importance weight counts as
# truncated in the statistics (the loss truncates at rho_bar exactly).
TRUNCATION_TOLERANCE = 1e-5


def masked_mean(x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """mean(x) over the samples of x [B] where ``valid`` [B] bool is True (all
    when None); 0 when none is."""
    if valid is None:
        return x.mean()
    return torch.where(valid, x, torch.zeros_like(x)).sum() / valid.sum().clamp(min=1)


def normalize_advantages(advantages: torch.Tensor, epsilon: float = 1e-8,
                         valid: Optional[torch.Tensor] = None,
                         weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(A - mean(A)) / (std(A) + eps) over the minibatch; A [B] (mean and
    population std over the samples ``valid`` [B] bool marks, if given).

    With ``weight`` [B] (>= 0, e.g. pi_prox / mu) the mean and std are the
    self-normalized weighted ones, sum(w A) / sum(w): the advantages' moments
    under the policy the weights point to instead of the one that sampled.
    """
    if weight is not None:
        if valid is not None:
            weight = torch.where(valid, weight, torch.zeros_like(weight))
        share = weight / weight.sum().clamp(min=torch.finfo(weight.dtype).tiny)
        centred = advantages - (share * advantages).sum()
        std = (share * centred * centred).sum().sqrt()
        return centred / (std + epsilon)
    if valid is None:
        return (advantages - advantages.mean()) / (advantages.std(unbiased=False) + epsilon)
    centred = advantages - masked_mean(advantages, valid)
    std = masked_mean(centred * centred, valid).sqrt()
    return centred / (std + epsilon)


def clipped_surrogate_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                           advantages: torch.Tensor, clip_ratio: float) -> torch.Tensor:
    """Per-sample PPO policy loss [B].

    ratio = exp(log pi(a|s) - log mu(a|s))   (mu: the behaviour policy)
    loss  = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)

    The gradient is zero where the clip is active on the side that would increase
    the objective (ratio > 1 + eps with A > 0, ratio < 1 - eps with A < 0).
    """
    ratio = torch.exp(log_prob - old_log_prob)
    clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    return -torch.min(ratio * advantages, clipped * advantages)


def decoupled_surrogate_loss(log_prob: torch.Tensor, proximal_log_prob: torch.Tensor,
                             behaviour_log_prob: torch.Tensor, advantages: torch.Tensor,
                             clip_ratio: float,
                             max_importance_weight: Optional[float] = None) -> torch.Tensor:
    """Per-sample decoupled PPO policy loss [B] (Hilton, Cobbe, Schulman 2021).

    The clip is centred on the proximal policy pi_prox (the learner's weights at
    the start of the update), not on the behaviour policy mu that acted:

    w     = min(pi_prox(a|s) / mu(a|s), max_importance_weight)   (a constant)
    r     = pi(a|s) / pi_prox(a|s)
    loss  = -w * min(r * A, clip(r, 1 - eps, 1 + eps) * A)

    With pi_prox = mu (no lag) w = 1 and this is ``clipped_surrogate_loss``.
    """
    weight = torch.exp(proximal_log_prob - behaviour_log_prob).detach()
    if max_importance_weight is not None:
        weight = torch.clamp(weight, max=max_importance_weight)
    return weight * clipped_surrogate_loss(log_prob, proximal_log_prob, advantages,
                                           clip_ratio)


@dataclass
class PPOLossOutput:
    """The scalar loss to minimize and detached statistics."""

    loss: torch.Tensor
    stats: Dict[str, torch.Tensor]


def ppo_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor,
             advantages: torch.Tensor, value: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, clip_ratio: float = 0.2,
             value_loss_weight: float = 0.5, entropy_coef: float = 1e-2,
             normalize_advantage: bool = True,
             proximal_log_prob: Optional[torch.Tensor] = None,
             max_importance_weight: Optional[float] = None,
             valid: Optional[torch.Tensor] = None,
             advantage_moments: str = "behaviour") -> PPOLossOutput:
    """PPO2 loss for a minibatch.

    loss = mean(policy_loss) + value_loss_weight * mean((V(s) - R)^2)
           - entropy_coef * mean(entropy)

    (means, the advantages' normalization and the statistics over the samples
    ``valid`` marks, if given).

    Args:
        log_prob: [B] log pi(a|s) under the current policy (sum over action dims).
        old_log_prob: [B] log mu(a|s) recorded by the actor.
        advantages: [B] GAE advantages (normalized here if normalize_advantage).
        value: [B] V(s) under the current value network.
        returns: [B] lambda-returns, the value targets.
        entropy: [B] entropy of pi(.|s).
        proximal_log_prob: [B] log pi_prox(a|s); given, the policy loss is the
            decoupled one (``decoupled_surrogate_loss``) and approx_kl /
            clip_fraction are measured against pi_prox.
        max_importance_weight: truncation of pi_prox / mu (decoupled only).
        valid: [B] bool, the samples that are transitions (False: the env
            failed at that step, ``value_ops``); None: all are. The others
            count in no loss and no statistic.
        advantage_moments: where the advantages' normalization takes its mean
            and std: "behaviour" (PPO2's: the minibatch as mu sampled it) or
            "proximal" (weighted by pi_prox / mu, untruncated and
            self-normalized: the moments under pi_prox; needs
            ``proximal_log_prob``, without it the same as "behaviour"). On a
            stale batch the policy has already moved towards its good actions,
            so under pi_prox the advantages' mean is above the batch's; centred
            on the batch, that offset meets the clip and the truncation
            unevenly and narrows the policy (docs/notebook/async_policy_width.md).

    Statistics: policy_loss, value_loss, entropy, approx_kl, clip_fraction; with
    ``proximal_log_prob`` also importance_weight (mean pi_prox / mu),
    behaviour_kl (an estimate of KL(mu || pi_prox): how stale the batch is) and, with
    ``max_importance_weight``, truncated_fraction (the share of samples whose
    pi_prox / mu exceeds it) and truncated_weight (the share of the batch's
    summed pi_prox / mu that the truncation removes: small when many weights
    are cut by little, as when the learner normalizes observations with
    statistics the acting policy had not yet seen).
    """
    # log(pi_prox / mu) and pi_prox / mu, for the moments and the statistics
    # (the loss takes its own, truncated, in decoupled_surrogate_loss).
    log_importance = importance = None
    if proximal_log_prob is not None:
        log_importance = (proximal_log_prob - old_log_prob).detach()
        importance = torch.exp(log_importance)
    if normalize_advantage:
        advantages = normalize_advantages(
            advantages, valid=valid,
            weight=importance if advantage_moments == "proximal" else None)
    if proximal_log_prob is None:
        policy_loss = masked_mean(clipped_surrogate_loss(log_prob, old_log_prob, advantages,
                                                         clip_ratio), valid)
        anchor = old_log_prob
    else:
        policy_loss = masked_mean(decoupled_surrogate_loss(
            log_prob, proximal_log_prob, old_log_prob, advantages, clip_ratio,
            max_importance_weight), valid)
        anchor = proximal_log_prob
    value_loss = masked_mean((value - returns) ** 2, valid)
    entropy_mean = masked_mean(entropy, valid)
    loss = policy_loss + value_loss_weight * value_loss - entropy_coef * entropy_mean
    with torch.no_grad():
        log_ratio = log_prob - anchor
        ratio = log_ratio.exp()
        stats = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy_mean.detach(),
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, valid),
            "clip_fraction": masked_mean(((ratio - 1.0).abs() > clip_ratio).float(), valid),
        }
        if proximal_log_prob is not None:
            weight = importance
            stats["importance_weight"] = masked_mean(weight, valid)
            # How far the behaviour policy is from the proximal one: an
            # estimate of KL(mu || pi_prox) from samples of mu, (w - 1) - log w.
            stats["behaviour_kl"] = masked_mean((weight - 1.0) - log_importance, valid)
            if max_importance_weight is not None:
                # The share of samples whose pi_prox / mu the truncation cut
                # (by more than float rounding: on-policy data, whose ratio is 1
                # up to the last bits, counts as cut by none).
                cut = weight > max_importance_weight * (1.0 + TRUNCATION_TOLERANCE)
                stats["truncated_fraction"] = masked_mean(cut.float(), valid)
                if valid is not None:
                    weight = torch.where(valid, weight, torch.zeros_like(weight))
                removed = weight - weight.clamp(max=max_importance_weight)
                stats["truncated_weight"] = removed.sum() / weight.sum().clamp(
                    min=torch.finfo(weight.dtype).tiny)
    return PPOLossOutput(loss, stats)

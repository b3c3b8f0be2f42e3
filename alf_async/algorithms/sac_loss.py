"""SAC's losses (Haarnoja et al. 2018, with automatic temperature), as small
functions of tensors so that each can be checked against hand values.

Shapes: B = batch. ``alpha`` is the entropy temperature (> 0): a float or a
0-d tensor on the batch's device (the learner keeps it there, unread).
"""

from __future__ import annotations

from typing import Iterable, Union

import torch

Scalar = Union[float, torch.Tensor]


def critic_target(reward: torch.Tensor, terminated: torch.Tensor, next_q1: torch.Tensor,
                  next_q2: torch.Tensor, next_log_prob: torch.Tensor, alpha: Scalar,
                  gamma: float) -> torch.Tensor:
    """y = r + gamma (1 - terminated) (min(Q1', Q2') - alpha log pi(a' | s')) [B].

    ``next_q*`` are the target networks' values at (s', a' ~ pi(s')). A step
    that ended its episode by truncation has ``terminated`` False and bootstraps.
    """
    soft_value = torch.min(next_q1, next_q2) - alpha * next_log_prob
    return reward + gamma * (1.0 - terminated.float()) * soft_value


def critic_loss(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum of both Q networks' mean squared errors to the (detached) target."""
    target = target.detach()
    return ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()


def actor_loss(q1: torch.Tensor, q2: torch.Tensor, log_prob: torch.Tensor,
               alpha: Scalar) -> torch.Tensor:
    """mean(alpha log pi(a | s) - min(Q1, Q2)(s, a)), a reparameterized from pi."""
    return (alpha * log_prob - torch.min(q1, q2)).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor,
                     target_entropy: float) -> torch.Tensor:
    """-mean(log_alpha (log pi + target_entropy)): alpha rises while the policy's
    entropy (-log pi) is below ``target_entropy`` and falls while above it."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], source: Iterable[torch.Tensor],
                  tau: float) -> None:
    """target <- (1 - tau) target + tau source, in place."""
    target, source = list(target), list(source)
    torch._foreach_lerp_(target, source, tau)

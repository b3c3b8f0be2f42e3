"""Optimizer steps that never apply a non-finite update.

``GuardedStep`` backpropagates a loss, clips the global gradient norm and steps
the optimizer only where the loss and the gradient norm are finite; a skipped
step is counted, and more than ``max_skipped_updates`` skips in a row raise
``NonFiniteError`` (the run then stops and keeps its last good checkpoint).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from alf_async.algorithms.adam import Adam


class NonFiniteError(FloatingPointError):
    """A loss or gradient became NaN or infinite during training."""


class GuardedStep:
    """Gradient steps with clipping and a guard against non-finite updates.

    Args:
        max_skipped_updates: the most non-finite steps in a row that are
            skipped before ``NonFiniteError``.
        setting: the setting's name, for the error message.
    """

    def __init__(self, max_skipped_updates: int,
                 setting: str = "PPOLearner.max_skipped_updates"):
        self.max_skipped_updates = int(max_skipped_updates)
        self.setting = setting
        self.consecutive_skips = 0

    def __call__(self, model: torch.nn.Module, optimizer: Adam,
                 loss: torch.Tensor, max_grad_norm: float,
                 where: Callable[[], str]) -> Optional[torch.Tensor]:
        """One step on ``loss``; returns the gradient's global norm (before
        clipping; ``max_grad_norm`` 0 disables clipping), or None where the
        step was skipped. ``where()`` describes the step for the error."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        if max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        else:
            grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        if torch.isfinite(loss) and torch.isfinite(grad_norm):
            self.consecutive_skips = 0
            optimizer.step()
            return grad_norm
        optimizer.zero_grad(set_to_none=True)
        self.consecutive_skips += 1
        if self.consecutive_skips > self.max_skipped_updates:
            raise NonFiniteError(
                f"non-finite {'loss' if not torch.isfinite(loss) else 'gradient norm'}"
                f" at {where()}: loss={loss.item()}, grad_norm={grad_norm.item()} "
                f"({self.consecutive_skips} non-finite updates in a row, more than "
                f"{self.setting}={self.max_skipped_updates})")
        return None

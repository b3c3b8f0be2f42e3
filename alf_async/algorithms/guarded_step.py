"""Optimizer steps that never apply a non-finite update.

``GuardedStep`` backpropagates a loss, clips the global gradient norm and steps
the optimizer only where the loss and the gradient norm are finite; a skipped
step is counted, and more than ``max_skipped_updates`` skips in a row raise
``NonFiniteError`` (the run then stops and keeps its last good checkpoint).

Whether a step is finite is one value read back from the learner's device
(on a GPU, a wait for every kernel queued before it): a step reads it once.
The two halves are separate so that a caller can read other values of the
step in the same read: ``backward`` (no read), then ``finite`` (a 0-d tensor
on the device), then ``apply`` with its value; ``__call__`` does all three.
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

    @staticmethod
    def backward(model: torch.nn.Module, optimizer: Adam, loss: torch.Tensor,
                 max_grad_norm: float) -> torch.Tensor:
        """Backpropagate ``loss`` and clip the gradient; returns its global
        norm before clipping (a 0-d tensor on the device; ``max_grad_norm`` 0
        disables clipping). Reads nothing back to the host."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        if max_grad_norm > 0:
            return torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))

    @staticmethod
    def finite(loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
        """1.0 where both the loss and the gradient norm are finite, else 0.0
        (a float 0-d tensor on the device, to be read with other values)."""
        return (torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)).to(loss.dtype)

    def apply(self, optimizer: Adam, finite: bool, loss: torch.Tensor,
              grad_norm: torch.Tensor, where: Callable[[], str]) -> bool:
        """Step the optimizer if ``finite`` (the value ``finite`` read back);
        otherwise drop the gradient and count the skip (``NonFiniteError``
        past ``max_skipped_updates`` in a row). Returns whether it stepped.
        ``where()`` describes the step for the error."""
        if finite:
            self.consecutive_skips = 0
            optimizer.step()
            return True
        optimizer.zero_grad(set_to_none=True)
        self.consecutive_skips += 1
        if self.consecutive_skips > self.max_skipped_updates:
            raise NonFiniteError(
                f"non-finite {'loss' if not torch.isfinite(loss) else 'gradient norm'}"
                f" at {where()}: loss={loss.item()}, grad_norm={grad_norm.item()} "
                f"({self.consecutive_skips} non-finite updates in a row, more than "
                f"{self.setting}={self.max_skipped_updates})")
        return False

    def __call__(self, model: torch.nn.Module, optimizer: Adam,
                 loss: torch.Tensor, max_grad_norm: float,
                 where: Callable[[], str]) -> Optional[torch.Tensor]:
        """One step on ``loss`` (one read back to the host); returns the
        gradient's global norm (before clipping), or None where the step was
        skipped."""
        grad_norm = self.backward(model, optimizer, loss, max_grad_norm)
        if self.apply(optimizer, bool(self.finite(loss, grad_norm)), loss, grad_norm, where):
            return grad_norm
        return None

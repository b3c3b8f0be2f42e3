"""Action distributions of the actor-critic networks.

Each gives ``log_prob(action)`` and ``entropy()`` summed over action dimensions
([B]), ``sample(generator)`` and ``mode()`` as stored action rows [B, dim]
(float32; choice indices for discrete spaces).

- ``NormalDistribution``: a diagonal Normal (continuous actions).
- ``StateDependentNormal``: the Normal of generalized state-dependent
  exploration (gSDE; Raffin et al., "Smooth Exploration for Robotic
  Reinforcement Learning", 2021): the exploration noise of a step is
  ``latent(s) @ W``, with ``latent`` [B, F] the actor's last hidden features
  and ``W`` [F, A] a matrix whose entries are Normal(0, sigma_fa^2) (sigma
  learned). For one state that noise is Normal with variance
  ``sum_f latent_f^2 sigma_fa^2`` per action dimension, independent across
  dimensions, so the log-probability of an action is a diagonal Normal's
  whether ``W`` was drawn for this step or kept for several (the actors keep
  it for a few steps: smoother, state-dependent exploration).
- ``CategoricalDistribution``: one Categorical per action dimension.

Their math is float32 whatever the networks' precision
(``utils.precision``): the networks hand them float32 outputs, and the
products of gSDE's scale and noise run with autocast off.

Shapes: B = batch, A = action dimensions, F = the actor's feature width.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from alf_async.utils.precision import float32_context

# Added to the state-dependent variance so that a state whose features are all
# zero (possible with ReLU) still has a proper density.
SDE_VARIANCE_FLOOR = 1e-6


def sde_scale(latent: torch.Tensor, matrix_std: torch.Tensor) -> torch.Tensor:
    """gSDE's per-state std [B, A]: sqrt(latent^2 @ sigma^2 + floor), for
    features latent [B, F] and noise-matrix stds sigma [F, A]; float32
    under any autocast (its product is no network's)."""
    with float32_context(latent):
        latent, matrix_std = latent.float(), matrix_std.float()
        return torch.sqrt((latent * latent) @ (matrix_std * matrix_std) + SDE_VARIANCE_FLOOR)


def sde_noise(latent: torch.Tensor, eps: torch.Tensor, matrix_std: torch.Tensor) -> torch.Tensor:
    """gSDE's noise [B, A]: each row's features latent [B, F] times its noise
    matrix eps * sigma (standard-normal draws eps [B, F, A], sigma [F, A]);
    float32 under any autocast."""
    with float32_context(latent):
        return torch.einsum("bf,bfa->ba", latent.float(), eps.float() * matrix_std.float())


def normal(loc: torch.Tensor, scale: torch.Tensor) -> torch.distributions.Normal:
    """``torch.distributions.Normal(loc, scale)``, its arguments and samples
    validated on the CPU only: a check reads a value back from the device,
    which on a GPU waits for every kernel queued before it (a learner's
    non-finite values are caught by its step's finite check instead)."""
    return torch.distributions.Normal(
        loc, scale, validate_args=None if loc.device.type == "cpu" else False)


class NormalDistribution:
    """A diagonal Normal over A continuous action dimensions (loc, scale [B, A])."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        self.normal = normal(loc, scale)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """action [B, A] -> log-density [B] (summed over dimensions)."""
        return self.normal.log_prob(action).sum(-1)

    def entropy(self) -> torch.Tensor:
        return self.normal.entropy().sum(-1)

    def sample(self, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return torch.normal(self.normal.loc, self.normal.scale, generator=generator)

    def mode(self) -> torch.Tensor:
        return self.normal.loc


class StateDependentNormal(NormalDistribution):
    """The per-state Normal of gSDE.

    Args:
        loc: the mean [B, A].
        latent: the features the noise is a linear function of [B, F]
            (detached by the actor: the exploration scale does not train them).
        matrix_std: sigma [F, A], the std of each entry of the noise matrix W.

    ``sample`` draws a fresh W per row (the marginal Normal); ``sample_with``
    uses given standard-normal draws eps [B, F, A] (W = eps * sigma), which an
    actor keeps per env for several steps.
    """

    def __init__(self, loc: torch.Tensor, latent: torch.Tensor, matrix_std: torch.Tensor):
        super().__init__(loc, sde_scale(latent, matrix_std))
        self.latent = latent
        self.matrix_std = matrix_std

    def noise(self, eps: torch.Tensor) -> torch.Tensor:
        """The exploration noise [B, A] of standard-normal draws eps [B, F, A]."""
        return sde_noise(self.latent, eps, self.matrix_std)

    def sample_with(self, eps: torch.Tensor) -> torch.Tensor:
        """An action [B, A]: the mean plus the noise of the draws eps [B, F, A]."""
        return self.normal.loc + self.noise(eps)


class CategoricalDistribution:
    """Independent Categoricals, one per action dimension (logits [B, sum(nvec)])."""

    def __init__(self, logits: torch.Tensor, nvec: Sequence[int]):
        self.log_probs = [torch.log_softmax(part, dim=-1)
                          for part in torch.split(logits, list(nvec), dim=-1)]

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """action [B, D] (choice indices as floats) -> log-probability [B]."""
        index = action.long()
        return sum(lp.gather(-1, index[:, d:d + 1]).squeeze(-1)
                   for d, lp in enumerate(self.log_probs))

    def entropy(self) -> torch.Tensor:
        return sum(-(lp.exp() * lp).sum(-1) for lp in self.log_probs)

    def sample(self, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return torch.stack([torch.multinomial(lp.exp(), 1, generator=generator).squeeze(-1)
                            for lp in self.log_probs], dim=-1).float()

    def mode(self) -> torch.Tensor:
        return torch.stack([lp.argmax(-1) for lp in self.log_probs], dim=-1).float()


ActionDistribution = Union[NormalDistribution, StateDependentNormal, CategoricalDistribution]

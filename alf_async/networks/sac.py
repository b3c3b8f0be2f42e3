"""SAC's networks: a tanh-squashed Gaussian policy and twin Q networks.

Actions are the stored continuous rows of ``envs.spaces`` ([B, A] in [-1, 1];
the env wrapper maps them to the env's bounds), so the policy's tanh output is
stored and stepped as it is.

Shapes: B = batch, O = observation_dim, A = action_dim.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import gin
import torch
import torch.nn as nn
import torch.nn.functional as F

from alf_async.networks.actor_critic import mlp


@gin.configurable
class SquashedGaussianActor(nn.Module):
    """pi(a | s) = tanh(u), u ~ Normal(mean(s), std(s)) (state-dependent std).

    Args:
        observation_dim: O.
        action_dim: A.
        hidden_sizes: hidden layers of the shared body.
        activation: one of tanh, relu, elu, silu.
        min_log_std, max_log_std: bounds of the log standard deviation of u.
        initial_log_std: bias of the log-std head at start (SB3-zoo's PyBullet
            SAC starts at -3 through gSDE; here a plain bias).
    """

    def __init__(self, observation_dim: int, action_dim: int,
                 hidden_sizes: Sequence[int] = (400, 300), activation: str = "relu",
                 min_log_std: float = -20.0, max_log_std: float = 2.0,
                 initial_log_std: float = 0.0):
        super().__init__()
        self.body, size = mlp(observation_dim, hidden_sizes, activation)
        self.mean = nn.Linear(size, action_dim)
        self.log_std = nn.Linear(size, action_dim)
        nn.init.constant_(self.log_std.bias, initial_log_std)
        self.min_log_std, self.max_log_std = min_log_std, max_log_std

    def distribution(self, observation: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """observation [B, O] -> (mean [B, A], std [B, A]) of the pre-tanh u."""
        h = self.body(observation)
        log_std = self.log_std(h).clamp(self.min_log_std, self.max_log_std)
        return self.mean(h), log_std.exp()

    def sample(self, observation: torch.Tensor, generator: Optional[torch.Generator] = None,
               deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized action [B, A] in (-1, 1) and its log-density [B].

        The log-density includes the tanh change of variables:
        log pi(a) = log N(u) - sum_i log(1 - tanh(u_i)^2), computed stably as
        2 (log 2 - u - softplus(-2u)).
        """
        mean, std = self.distribution(observation)
        if deterministic:
            u = mean
        else:
            # The generator may live on the CPU while the networks are on a
            # GPU (the learner keeps its RNG on the CPU, so that checkpoints
            # load on any device).
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype,
                                device=generator.device if generator is not None
                                else mean.device).to(mean.device)
            u = mean + std * noise
        log_prob = torch.distributions.Normal(mean, std).log_prob(u).sum(-1)
        log_prob = log_prob - squash_correction(u)
        return torch.tanh(u), log_prob


def squash_correction(u: torch.Tensor) -> torch.Tensor:
    """sum_i log(1 - tanh(u_i)^2) for u [B, A] -> [B], without overflow."""
    return (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


@gin.configurable
class TwinQNetwork(nn.Module):
    """Two independent Q(s, a) MLPs on [observation, action].

    Args:
        observation_dim: O.
        action_dim: A.
        hidden_sizes, activation: of each Q network.
    """

    def __init__(self, observation_dim: int, action_dim: int,
                 hidden_sizes: Sequence[int] = (400, 300), activation: str = "relu"):
        super().__init__()
        self.q1 = _QNetwork(observation_dim + action_dim, hidden_sizes, activation)
        self.q2 = _QNetwork(observation_dim + action_dim, hidden_sizes, activation)

    def forward(self, observation: torch.Tensor,
                action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(observation [B, O], action [B, A]) -> (Q1 [B], Q2 [B])."""
        x = torch.cat([observation, action], dim=-1)
        return self.q1(x), self.q2(x)


class _QNetwork(nn.Module):
    def __init__(self, input_dim: int, hidden_sizes: Sequence[int], activation: str):
        super().__init__()
        self.body, size = mlp(input_dim, hidden_sizes, activation)
        self.head = nn.Linear(size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)).squeeze(-1)

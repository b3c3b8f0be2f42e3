"""Actor and value networks (ALF's humanoid defaults).

Actor: an MLP of ``hidden_sizes`` with ``activation``, then a linear layer giving
the mean of a diagonal Normal over actions; its log standard deviation is a learned
parameter independent of the state (initial std ``initial_std``). The mean layer's
weights start small (scaled by ``mean_init_scale``) so that the first policy acts
near zero. Value: an MLP of ``hidden_sizes`` with ``activation`` and a scalar head.

Shapes: B = batch (any leading dims), O = observation_dim, A = action_dim.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple

import gin
import torch
import torch.nn as nn

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def mlp(input_dim: int, hidden_sizes: Sequence[int], activation: str) -> Tuple[nn.Module, int]:
    """A stack of Linear + activation layers; returns (module, output size)."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got '{activation}'")
    layers, size = [], input_dim
    for hidden in hidden_sizes:
        if int(hidden) < 1:
            raise ValueError(f"hidden layer sizes must be >= 1, got {list(hidden_sizes)}")
        layer = nn.Linear(size, int(hidden))
        nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers += [layer, _ACTIVATIONS[activation]()]
        size = int(hidden)
    return nn.Sequential(*layers), size


@gin.configurable
class ActorNetwork(nn.Module):
    """Diagonal Normal policy with a state-independent learned log-std.

    Args:
        observation_dim: O.
        action_dim: A.
        hidden_sizes: sizes of the hidden layers.
        activation: one of tanh, relu, elu, silu.
        initial_std: standard deviation of the initial policy.
        mean_init_scale: the mean layer's orthogonal init gain (small: mean ~ 0).
        min_log_std, max_log_std: bounds applied to the log-std.
    """

    def __init__(self, observation_dim: int, action_dim: int,
                 hidden_sizes: Sequence[int] = (32, 32, 32), activation: str = "tanh",
                 initial_std: float = 1.0, mean_init_scale: float = 0.01,
                 min_log_std: float = -5.0, max_log_std: float = 2.0):
        super().__init__()
        if initial_std <= 0:
            raise ValueError(f"initial_std must be > 0, got {initial_std}")
        self.body, size = mlp(observation_dim, hidden_sizes, activation)
        self.mean = nn.Linear(size, action_dim)
        nn.init.orthogonal_(self.mean.weight, gain=mean_init_scale)
        nn.init.zeros_(self.mean.bias)
        self.log_std = nn.Parameter(torch.full((action_dim,), math.log(initial_std)))
        self.min_log_std = min_log_std
        self.max_log_std = max_log_std

    def forward(self, observation: torch.Tensor) -> torch.distributions.Normal:
        """observation [B, O] (normalized) -> Normal with loc/scale [B, A]."""
        mean = self.mean(self.body(observation))
        log_std = self.log_std.clamp(self.min_log_std, self.max_log_std)
        return torch.distributions.Normal(mean, log_std.exp().expand_as(mean))


@gin.configurable
class ValueNetwork(nn.Module):
    """State-value MLP.

    Args:
        observation_dim: O.
        hidden_sizes: sizes of the hidden layers.
        activation: one of tanh, relu, elu, silu.
    """

    def __init__(self, observation_dim: int, hidden_sizes: Sequence[int] = (32, 32, 32),
                 activation: str = "tanh"):
        super().__init__()
        self.body, size = mlp(observation_dim, hidden_sizes, activation)
        self.head = nn.Linear(size, 1)
        nn.init.orthogonal_(self.head.weight, gain=1.0)
        nn.init.zeros_(self.head.bias)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """observation [B, O] (normalized) -> value [B]."""
        return self.head(self.body(observation)).squeeze(-1)


class ActorCritic(nn.Module):
    """The actor and value networks of one agent, as one module.

    Its ``state_dict`` is what the learner publishes to actors and checkpoints.
    """

    def __init__(self, observation_dim: int, action_dim: int):
        super().__init__()
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.actor = ActorNetwork(observation_dim, action_dim)
        self.value = ValueNetwork(observation_dim)

    @torch.no_grad()
    def act(self, observation: torch.Tensor, generator: torch.Generator = None,
            deterministic: bool = False):
        """Sample actions for normalized observations [K, O].

        Returns (action [K, A], log_prob [K], value [K]); with ``deterministic``
        the action is the distribution's mean.
        """
        dist = self.actor(observation)
        if deterministic:
            action = dist.mean
        else:
            action = torch.normal(dist.loc, dist.scale, generator=generator)
        return action, dist.log_prob(action).sum(-1), self.value(observation)

    @torch.no_grad()
    def predict_value(self, observation: torch.Tensor) -> torch.Tensor:
        """Value [K] of normalized observations [K, O]."""
        return self.value(observation)

"""SAC's networks: a tanh-squashed Gaussian policy and twin Q networks.

Actions are the stored continuous rows of ``envs.spaces`` ([B, A] in [-1, 1];
the env wrapper maps them to the env's bounds), so the policy's tanh output is
stored and stepped as it is.

Image observations (an ``ObservationSpec`` with ``is_image``) go through an
``ImageEncoder`` first: the policy has its own, and the twin Q networks share
one, trained by the critic loss only (the actor's loss does not reach the
critic's encoder, nor the critic's the actor's), as Stable-Baselines3's SAC
does by default. Vector observations feed the MLPs directly, as before.

Shapes: B = batch, O = the observation's shape (a vector [O] or a frame), A =
action_dim.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import gin
import torch
import torch.nn as nn
import torch.nn.functional as F

from alf_async.envs.spaces import ObservationSpec, as_observation_spec
from alf_async.networks.actor_critic import HIDDEN_INITS, mlp
from alf_async.networks.distributions import normal, sde_noise, sde_scale
from alf_async.networks.encoders import ImageEncoder
from alf_async.utils.precision import Float32Linear
from alf_async.utils.validation import check


def _encoder(observation: Union[ObservationSpec, int]) -> Tuple[Optional[nn.Module], int]:
    """(an ``ImageEncoder`` for image observations else None, the MLP's input size)."""
    spec = as_observation_spec(observation)
    if not spec.is_image:
        return None, spec.dim
    encoder = ImageEncoder(spec)
    return encoder, encoder.feature_size


@gin.configurable
class SquashedGaussianActor(nn.Module):
    """pi(a | s) = tanh(u), u ~ Normal(mean(s), std(s)).

    Two ways to make the std, chosen by ``use_sde``:

    - plain SAC (default): a linear log-std head on the body's features h(s),
      std = exp(W h + b);
    - gSDE (generalized state-dependent exploration, Raffin et al. 2022, as
      rl-baselines3-zoo runs SAC on PyBullet): a parameter log_sigma [H, A] and
      the noise u - mean = h(s) @ E with E [H, A], E_ij ~ Normal(0, sigma_ij^2),
      so std_j(s) = sqrt(sum_i h_i(s)^2 sigma_ij^2) (h detached, as SB3's
      default). An actor holds one E per env for ``sde_sample_interval`` steps,
      which gives smooth exploration (``SACPolicy``); the learner draws each
      sample's noise independently from the same per-state Normal. The mean is
      clipped to [-sde_clip_mean, sde_clip_mean] (SB3's hardtanh).

    Args:
        observation_dim: the env's ``ObservationSpec`` (images get an
            ``ImageEncoder`` before the body), or O for a vector of O values.
        action_dim: A.
        hidden_sizes: hidden layers of the shared body (H = the last one).
        activation: one of tanh, relu, elu, silu.
        min_log_std, max_log_std: bounds of the log std of u (plain), or of
            log_sigma (gSDE).
        initial_log_std: the log-std head's bias at start (plain), or every
            log_sigma_ij at start (gSDE; the zoo uses -3).
        use_sde: explore with gSDE instead of the plain log-std head.
        sde_sample_interval: gSDE: env steps an actor holds its exploration
            matrix E before drawing a new one (the zoo's SAC draws one per
            collection of train_freq = 8 steps).
        sde_clip_mean: gSDE: bound of the pre-tanh mean.
        hidden_init: the hidden layers' initialization, "orthogonal" (gain
            sqrt(2), zero biases) or "torch_default" (``nn.Linear``'s own, as
            Stable-Baselines3's SAC); the output layers always keep
            ``nn.Linear``'s own.
    """

    def __init__(self, observation_dim: Union[ObservationSpec, int], action_dim: int,
                 hidden_sizes: Sequence[int] = (400, 300), activation: str = "relu",
                 min_log_std: float = -20.0, max_log_std: float = 2.0,
                 initial_log_std: float = 0.0, use_sde: bool = False,
                 sde_sample_interval: int = 8, sde_clip_mean: float = 2.0,
                 hidden_init: str = "orthogonal"):
        super().__init__()
        if sde_sample_interval < 1:
            raise ValueError(f"SquashedGaussianActor.sde_sample_interval must be >= 1 "
                             f"env step, got {sde_sample_interval}")
        if sde_clip_mean <= 0:
            raise ValueError(f"SquashedGaussianActor.sde_clip_mean must be > 0, "
                             f"got {sde_clip_mean}")
        check("SquashedGaussianActor", "hidden_init", hidden_init, "choice",
              choices=HIDDEN_INITS)
        self.encoder, inputs = _encoder(observation_dim)
        self.body, size = mlp(inputs, hidden_sizes, activation, hidden_init)
        self.feature_dim = size
        self.mean = Float32Linear(size, action_dim)
        self.use_sde = use_sde
        self.sde_sample_interval = sde_sample_interval
        self.sde_clip_mean = sde_clip_mean
        if use_sde:
            self.sde_log_sigma = nn.Parameter(torch.full((size, action_dim),
                                                         float(initial_log_std)))
        else:
            self.log_std = Float32Linear(size, action_dim)
            nn.init.constant_(self.log_std.bias, initial_log_std)
        self.min_log_std, self.max_log_std = min_log_std, max_log_std

    def sde_sigma(self) -> torch.Tensor:
        """gSDE's sigma [H, A] (> 0)."""
        return self.sde_log_sigma.clamp(self.min_log_std, self.max_log_std).exp()

    def features(self, observation: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
        """observation [B, *O] -> (mean [B, A], std [B, A] of the pre-tanh u, the
        body's features h [B, H])."""
        if self.encoder is not None:
            observation = self.encoder(observation)
        h = self.body(observation)
        mean = self.mean(h)  # Float32Linear heads: float32 under any autocast
        if self.use_sde:
            h = h.float()
            mean = mean.clamp(-self.sde_clip_mean, self.sde_clip_mean)
            # (SB3's epsilon keeps the std > 0 where every feature is 0.)
            return mean, sde_scale(h.detach(), self.sde_sigma()), h
        log_std = self.log_std(h).clamp(self.min_log_std, self.max_log_std)
        return mean, log_std.exp(), h.float()

    def distribution(self, observation: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """observation [B, O] -> (mean [B, A], std [B, A]) of the pre-tanh u."""
        mean, std, _ = self.features(observation)
        return mean, std

    def mode(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic action tanh(mean) [B, A] of observations [B, *O]
        (what ``sample(..., deterministic=True)`` gives), without distribution
        objects, so that it traces for export (``playback.export``)."""
        return torch.tanh(self.features(observation)[0])

    def sample(self, observation: torch.Tensor, generator: Optional[torch.Generator] = None,
               deterministic: bool = False,
               exploration: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized action [B, A] in (-1, 1) and its log-density [B].

        ``exploration`` (gSDE only): standard-normal draws [B, H, A] that the
        caller holds over several steps; the noise is then h(s) @ (sigma * it).
        Without it each row's noise is drawn afresh.

        The log-density includes the tanh change of variables:
        log pi(a) = log N(u) - sum_i log(1 - tanh(u_i)^2), computed stably as
        2 (log 2 - u - softplus(-2u)).
        """
        mean, std, h = self.features(observation)
        if deterministic:
            u = mean
        elif exploration is not None:
            if not self.use_sde:
                raise ValueError("an exploration matrix is only for gSDE "
                                 "(SquashedGaussianActor.use_sde = True)")
            u = mean + sde_noise(h.detach(), exploration.to(mean.device), self.sde_sigma())
        else:
            # The generator may live on the CPU while the networks are on a
            # GPU (the learner keeps its RNG on the CPU, so that checkpoints
            # load on any device).
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype,
                                device=generator.device if generator is not None
                                else mean.device).to(mean.device)
            u = mean + std * noise
        log_prob = normal(mean, std).log_prob(u).sum(-1)
        log_prob = log_prob - squash_correction(u)
        return torch.tanh(u), log_prob


def squash_correction(u: torch.Tensor) -> torch.Tensor:
    """sum_i log(1 - tanh(u_i)^2) for u [B, A] -> [B], without overflow."""
    return (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


@gin.configurable
class TwinQNetwork(nn.Module):
    """Two independent Q(s, a) MLPs on [observation, action] (on [the shared
    image encoder's features, action] for images).

    Args:
        observation_dim: the env's ``ObservationSpec`` or O (as
            ``SquashedGaussianActor``'s).
        action_dim: A.
        hidden_sizes, activation: of each Q network.
        hidden_init: the hidden layers' initialization (as
            ``SquashedGaussianActor``'s); the output layers keep ``nn.Linear``'s own.
    """

    def __init__(self, observation_dim: Union[ObservationSpec, int], action_dim: int,
                 hidden_sizes: Sequence[int] = (400, 300), activation: str = "relu",
                 hidden_init: str = "orthogonal"):
        super().__init__()
        check("TwinQNetwork", "hidden_init", hidden_init, "choice", choices=HIDDEN_INITS)
        self.encoder, inputs = _encoder(observation_dim)
        self.q1 = _QNetwork(inputs + action_dim, hidden_sizes, activation, hidden_init)
        self.q2 = _QNetwork(inputs + action_dim, hidden_sizes, activation, hidden_init)

    def forward(self, observation: torch.Tensor,
                action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(observation [B, *O], action [B, A]) -> (Q1 [B], Q2 [B])."""
        if self.encoder is not None:
            observation = self.encoder(observation)
        x = torch.cat([observation, action], dim=-1)
        return self.q1(x), self.q2(x)


class _QNetwork(nn.Module):
    def __init__(self, input_dim: int, hidden_sizes: Sequence[int], activation: str,
                 hidden_init: str):
        super().__init__()
        self.body, size = mlp(input_dim, hidden_sizes, activation, hidden_init)
        self.head = Float32Linear(size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, I] -> Q [B] (float32 under any autocast)."""
        return self.head(self.body(x)).squeeze(-1)

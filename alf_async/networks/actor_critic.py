"""Actor and value networks (ALF's humanoid defaults), for any supported action space.

Actor: an MLP of ``hidden_sizes`` with ``activation``, then a head chosen by the
action space (``envs.spaces.ActionSpec``):

- continuous: a linear layer giving the mean of a diagonal Normal whose log
  standard deviation is a learned parameter independent of the state (initial
  std ``initial_std``), or, with ``exploration="state_dependent"``, whose
  scale depends on the state (gSDE, ``distributions.StateDependentNormal``);
  the mean layer's weights start small (``mean_init_scale``) so that the first
  policy acts near zero; with ``squash_mean`` the mean is tanh of that layer's
  output, inside the action box [-1, 1]^A (as ALF's humanoid actor,
  TF-Agents' ``NormalProjectionNetwork`` with its default mean transform);
- discrete / multi-discrete: a linear layer giving the logits of one Categorical
  per action dimension (sum(nvec) logits), started small likewise (near-uniform).

Both return an ``ActionDistribution`` (``networks.distributions``).

Value: an MLP of ``hidden_sizes`` with ``activation`` and a scalar head.

``ActorCritic`` holds both; for image observations it puts an
``encoders.ImageEncoder`` in front of them (the MLPs then take its features).

Shapes: B = batch, O = observation_dim (the features' width for images), A =
the stored action width.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import gin
import torch
import torch.nn as nn

from alf_async.envs.spaces import (ActionSpec, ObservationSpec, as_action_spec,
                                   as_observation_spec)
from alf_async.networks.distributions import (ActionDistribution, CategoricalDistribution,
                                              NormalDistribution, StateDependentNormal)
from alf_async.networks.encoders import ImageEncoder
from alf_async.networks.recurrent import RNN_KINDS, RecurrentCore
from alf_async.utils.precision import Float32Linear
from alf_async.utils.validation import check

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


HIDDEN_INITS = ("orthogonal", "torch_default")


def mlp(input_dim: int, hidden_sizes: Sequence[int], activation: str,
        hidden_init: str = "orthogonal") -> Tuple[nn.Module, int]:
    """A stack of Linear + activation layers; returns (module, output size).

    ``hidden_init``: "orthogonal" (weights orthogonal with gain sqrt(2), biases
    0: the PPO implementations' choice) or "torch_default" (``nn.Linear``'s own:
    weights and biases uniform in +-1/sqrt(fan_in), as Stable-Baselines3's SAC).
    """
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got '{activation}'")
    if hidden_init not in HIDDEN_INITS:
        raise ValueError(f"hidden_init must be one of {list(HIDDEN_INITS)}, got '{hidden_init}'")
    layers, size = [], input_dim
    for hidden in hidden_sizes:
        if int(hidden) < 1:
            raise ValueError(f"hidden layer sizes must be >= 1, got {list(hidden_sizes)}")
        layer = nn.Linear(size, int(hidden))
        if hidden_init == "orthogonal":
            nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
            nn.init.zeros_(layer.bias)
        layers += [layer, _ACTIVATIONS[activation]()]
        size = int(hidden)
    return nn.Sequential(*layers), size


EXPLORATIONS = ("gaussian", "state_dependent")


@gin.configurable
class ActorNetwork(nn.Module):
    """Policy network: a diagonal Normal (continuous) or Categoricals (discrete).

    The Normal's scale is a learned log-std independent of the state
    ("gaussian") or gSDE's state-dependent one ("state_dependent").

    Args:
        observation_dim: O.
        action_spec: the env's action space (an integer A means A continuous
            dimensions).
        hidden_sizes: sizes of the hidden layers.
        activation: one of tanh, relu, elu, silu.
        hidden_init: "orthogonal" or "torch_default" (see ``mlp``).
        initial_std: standard deviation of the initial policy ("gaussian").
        mean_init_scale: the output layer's orthogonal init gain (small: the first
            policy acts near zero, or near uniformly for discrete actions).
        min_log_std, max_log_std: bounds applied to the learned log-stds
            (continuous; for "state_dependent", those of the noise matrix).
        exploration: continuous actions: "gaussian" (the default) or
            "state_dependent" (gSDE: the noise is the last hidden features
            [B, F] times a noise matrix W [F, A] with learned entry stds,
            ``distributions.StateDependentNormal``).
        sde_initial_log_std: "state_dependent": the initial log-std of W's
            entries (the rl-baselines3-zoo's PyBullet PPO: -2, or -1 for Ant).
        sde_sample_interval: "state_dependent": an actor keeps each env's W
            for this many steps before drawing a new one (the zoo's
            ``sde_sample_freq``: 4); 1 draws one every step.
        squash_mean: continuous actions: the Normal's mean is tanh of the
            output layer, so it stays inside [-1, 1]^A, the box every env's
            actions are clipped to (``envs.spaces``); samples are not squashed
            and may still fall outside (the env clips them). False (the
            default): the mean is the output layer itself, unbounded.
    """

    def __init__(self, observation_dim: int, action_spec: Union[ActionSpec, int],
                 hidden_sizes: Sequence[int] = (32, 32, 32), activation: str = "tanh",
                 hidden_init: str = "orthogonal", initial_std: float = 1.0,
                 mean_init_scale: float = 0.01, min_log_std: float = -5.0,
                 max_log_std: float = 2.0, exploration: str = "gaussian",
                 sde_initial_log_std: float = -2.0, sde_sample_interval: int = 4,
                 squash_mean: bool = False):
        super().__init__()
        if initial_std <= 0:
            raise ValueError(f"initial_std must be > 0, got {initial_std}")
        check("ActorNetwork", "exploration", exploration, "choice", choices=EXPLORATIONS)
        check("ActorNetwork", "sde_sample_interval", sde_sample_interval, "int", low=1)
        check("ActorNetwork", "squash_mean", squash_mean, "bool")
        self.action_spec = spec = as_action_spec(action_spec)
        self.body, size = mlp(observation_dim, hidden_sizes, activation, hidden_init)
        outputs = sum(spec.nvec) if spec.discrete else spec.dim
        # ``mean`` (the name checkpoints know) holds the logits for discrete actions.
        self.mean = Float32Linear(size, outputs)
        nn.init.orthogonal_(self.mean.weight, gain=mean_init_scale)
        nn.init.zeros_(self.mean.bias)
        self.state_dependent = exploration == "state_dependent" and not spec.discrete
        self.sde_sample_interval = int(sde_sample_interval)
        if self.state_dependent:
            self.sde_log_std = nn.Parameter(torch.full((size, spec.dim),
                                                       float(sde_initial_log_std)))
        elif not spec.discrete:
            self.log_std = nn.Parameter(torch.full((spec.dim,), math.log(initial_std)))
        self.min_log_std = min_log_std
        self.max_log_std = max_log_std
        self.squash_mean = bool(squash_mean) and not spec.discrete

    def _output(self, features: torch.Tensor) -> torch.Tensor:
        """features [B, F] -> the mean [B, A] (tanh-squashed with
        ``squash_mean``) or the logits [B, sum(nvec)], in float32 under any
        autocast: the distribution's math is float32."""
        out = self.mean(features)  # Float32Linear: float32 under any autocast
        return torch.tanh(out) if self.squash_mean else out

    def forward(self, observation: torch.Tensor) -> ActionDistribution:
        """observation [B, O] (normalized) -> the action distribution."""
        features = self.body(observation)
        out = self._output(features)
        if self.action_spec.discrete:
            return CategoricalDistribution(out, self.action_spec.nvec)
        if self.state_dependent:
            matrix_std = self.sde_log_std.clamp(self.min_log_std, self.max_log_std).exp()
            return StateDependentNormal(out, features.detach().float(), matrix_std)
        log_std = self.log_std.clamp(self.min_log_std, self.max_log_std)
        return NormalDistribution(out, log_std.exp().expand_as(out))

    def mode(self, observation: torch.Tensor) -> torch.Tensor:
        """The mode of the action distribution of (normalized) observations
        [B, O] as stored rows [B, A] (the Normal's mean; each dimension's most
        likely choice for discrete actions), computed without distribution
        objects so that it traces for export (``playback.export``)."""
        out = self._output(self.body(observation))
        if self.action_spec.discrete:
            return CategoricalDistribution(out, self.action_spec.nvec).mode()
        return out

    def action_std(self) -> Optional[float]:
        """Mean standard deviation of a continuous policy ("state_dependent":
        the mean std of the noise matrix's entries; None for discrete)."""
        std = self.action_std_tensor()
        return None if std is None else float(std)

    def action_std_tensor(self) -> Optional[torch.Tensor]:
        """``action_std`` as a 0-d tensor on the network's device (not read
        back to the host), or None for discrete actions."""
        if self.action_spec.discrete:
            return None
        log_std = self.sde_log_std if self.state_dependent else self.log_std
        return log_std.detach().clamp(self.min_log_std, self.max_log_std).exp().mean()


@gin.configurable
class ValueNetwork(nn.Module):
    """State-value MLP.

    Args:
        observation_dim: O.
        hidden_sizes: sizes of the hidden layers.
        activation: one of tanh, relu, elu, silu.
        hidden_init: "orthogonal" or "torch_default" (see ``mlp``).
    """

    def __init__(self, observation_dim: int, hidden_sizes: Sequence[int] = (32, 32, 32),
                 activation: str = "tanh", hidden_init: str = "orthogonal"):
        super().__init__()
        self.body, size = mlp(observation_dim, hidden_sizes, activation, hidden_init)
        self.head = Float32Linear(size, 1)
        nn.init.orthogonal_(self.head.weight, gain=1.0)
        nn.init.zeros_(self.head.bias)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """observation [B, O] (normalized) -> value [B] (float32 under any autocast)."""
        return self.head(self.body(observation)).squeeze(-1)


@gin.configurable
class ActorCritic(nn.Module):
    """The actor and value networks of one agent, as one module.

    Its ``state_dict`` is what the learner publishes to actors and checkpoints.
    Vector observations [B, O] go straight into both MLPs (as before images were
    supported: the same parameters and names). Image observations [B, *O] go
    through an ``ImageEncoder`` first: one shared by both networks
    (``shared_encoder``, the default: one convolutional pass per frame serves
    both, which halves the learner's dominant cost on a CPU, and the value loss
    shapes the features too, as in Stable-Baselines3's and Sample Factory's
    defaults), or one each.

    With ``rnn`` set, a recurrent core (``networks.recurrent.RecurrentCore``)
    sits between the encoder (or the observation) and the MLPs, and the network
    carries a state of ``state_size`` S floats per env: ``step`` acts on one
    step, ``sequence`` re-runs a [T, B] unroll from its start states. Without
    ``rnn`` (the default) the network is feed-forward, S = 0, and ``step`` and
    ``sequence`` give what ``evaluate`` gives.

    Args:
        observation: the env's ``ObservationSpec`` (an int O: a float32 vector).
        action_spec: the env's action space (an int A: A continuous dimensions).
        shared_encoder: one image encoder for both networks (images only).
        rnn: None (feed-forward), "lstm" or "gru".
        rnn_size: the core's hidden size H.
        shared_rnn: one core whose output feeds both MLPs (the default: one
            recurrent pass per step serves both, as Sample Factory's default), or
            one core each (as sb3-contrib's RecurrentPPO; the state is then the
            actor core's followed by the value core's).
    """

    def __init__(self, observation: Union[ObservationSpec, int],
                 action_spec: Union[ActionSpec, int], shared_encoder: bool = True,
                 rnn: Optional[str] = None, rnn_size: int = 128, shared_rnn: bool = True):
        super().__init__()
        spec = self.observation_spec = as_observation_spec(observation)
        self.observation_dim = spec.dim
        self.action_spec = as_action_spec(action_spec)
        self.shared_encoder = bool(shared_encoder) and spec.is_image
        features = spec.dim
        if spec.is_image:
            if self.shared_encoder:
                self.encoder = ImageEncoder(spec)
                features = self.encoder.feature_size
            else:
                self.actor_encoder = ImageEncoder(spec)
                self.value_encoder = ImageEncoder(spec)
                features = self.actor_encoder.feature_size
        check("ActorCritic", "rnn", rnn, "choice", choices=(None,) + RNN_KINDS)
        check("ActorCritic", "rnn_size", rnn_size, "int", low=1)
        check("ActorCritic", "shared_rnn", shared_rnn, "bool")
        self.rnn = rnn
        self.shared_rnn = bool(shared_rnn)
        self._actor_state = 0  # S of the actor's core (the value core's follows)
        if rnn is not None:
            if self.shared_rnn:
                self.core = RecurrentCore(rnn, features, rnn_size)
                self._actor_state = self.core.state_size
            else:
                self.actor_core = RecurrentCore(rnn, features, rnn_size)
                self.value_core = RecurrentCore(rnn, features, rnn_size)
                self._actor_state = self.actor_core.state_size
            features = int(rnn_size)
        self.actor = ActorNetwork(features, self.action_spec)
        self.value = ValueNetwork(features)

    @property
    def state_size(self) -> int:
        """S: floats of recurrent state per env (0: feed-forward)."""
        if self.rnn is None:
            return 0
        return self._actor_state * (1 if self.shared_rnn else 2)

    def _encoded(self, observation: torch.Tensor, encoder: str) -> torch.Tensor:
        """The input of one head ("actor_encoder" or "value_encoder") for
        observations [B, *O]: the observations themselves for vectors, the
        shared encoder's or that head's own features for images."""
        if not self.observation_spec.is_image:
            return observation
        return (self.encoder if self.shared_encoder else getattr(self, encoder))(observation)

    def _inputs(self, observation: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(actor input, value input) [B, F] of observations [B, *O]: one
        tensor twice unless the image encoders are separate."""
        if not self.observation_spec.is_image or self.shared_encoder:
            x = self._encoded(observation, "actor_encoder")
            return x, x
        return self.actor_encoder(observation), self.value_encoder(observation)

    def evaluate(self, observation: torch.Tensor) -> Tuple[ActionDistribution, torch.Tensor]:
        """(the action distribution, value [B]) of (normalized) observations [B, *O]
        (feed-forward networks; recurrent ones use ``step`` or ``sequence``);
        a shared image encoder runs once for both."""
        self._check_feed_forward("evaluate")
        if self.shared_encoder:
            features = self.encoder(observation)
            return self.actor(features), self.value(features)
        return self.distribution(observation), self.state_value(observation)

    def log_prob_and_value(self, observation: torch.Tensor, action: torch.Tensor,
                           chunk_rows: Optional[int] = None
                           ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(log pi(a | s) [B], V(s) [B]) of (normalized) observations [B, *O] and
        actions [B, A] (feed-forward networks), ``chunk_rows`` rows at a time
        (None: one pass), so that a batch of frames is never all float at once."""
        rows = chunk_rows or max(len(observation), 1)
        log_probs, values = [], []
        for start in range(0, len(observation), rows):
            dist, value = self.evaluate(observation[start:start + rows])
            log_probs.append(dist.log_prob(action[start:start + rows]))
            values.append(value)
        return torch.cat(log_probs), torch.cat(values)

    def distribution(self, observation: torch.Tensor) -> ActionDistribution:
        """The action distribution of (normalized) observations [B, *O]
        (feed-forward networks)."""
        self._check_feed_forward("distribution")
        return self.actor(self._encoded(observation, "actor_encoder"))

    def state_value(self, observation: torch.Tensor) -> torch.Tensor:
        """Value [B] of (normalized) observations [B, *O] (feed-forward networks)."""
        self._check_feed_forward("state_value")
        return self.value(self._encoded(observation, "value_encoder"))

    def _check_feed_forward(self, method: str) -> None:
        if self.rnn is not None:
            raise TypeError(f"ActorCritic.{method} is for feed-forward networks; this one "
                            f"has ActorCritic.rnn={self.rnn!r}: use step() or sequence()")

    def step(self, observation: torch.Tensor, state: torch.Tensor
             ) -> Tuple[ActionDistribution, torch.Tensor, torch.Tensor]:
        """One step: (normalized) observations [B, *O] and the state each env
        carries [B, S] -> (action distribution, value [B], next state [B, S])."""
        if self.rnn is None:
            dist, value = self.evaluate(observation)
            return dist, value, state
        actor_out, value_out, next_state = self._core_step(observation, state)
        return self.actor(actor_out), self.value(value_out), next_state

    def _core_step(self, observation: torch.Tensor, state: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of the recurrent core(s): (normalized) observations [B, *O]
        and the envs' state [B, S] -> (the actor's input [B, H], the value
        network's input [B, H], next state [B, S])."""
        actor_in, value_in = self._inputs(observation)
        if self.shared_rnn:
            out, next_state = self.core(actor_in, state)
            return out, out, next_state
        split = self._actor_state
        actor_out, actor_next = self.actor_core(actor_in, state[:, :split])
        value_out, value_next = self.value_core(value_in, state[:, split:])
        return actor_out, value_out, torch.cat([actor_next, value_next], dim=-1)

    def mode(self, observation: torch.Tensor, state: Optional[torch.Tensor] = None
             ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The deterministic action of (normalized) observations [B, *O]: (the
        mode as stored rows [B, A], the next state [B, S] of a recurrent
        network from the envs' ``state`` [B, S], else ``state``). The same
        numbers as ``act(..., deterministic=True)``, without distribution
        objects, so that it traces for export (``playback.export``)."""
        if self.rnn is None:
            return self.actor.mode(self._encoded(observation, "actor_encoder")), state
        actor_out, _, next_state = self._core_step(observation, state)
        return self.actor.mode(actor_out), next_state

    def sequence(self, observation: torch.Tensor, state: torch.Tensor,
                 episode_start: torch.Tensor, keep_every: int = 0
                 ) -> Tuple[ActionDistribution, torch.Tensor, Optional[torch.Tensor]]:
        """Re-run an unroll of B envs.

        Args:
            observation: [T, B, *O] (normalized).
            state: [B, S], the state each env started the unroll with.
            episode_start: [T, B] bool, an episode begins at step t (the state
                is zeroed before it); best on the host where the network is on
                a GPU (``RecurrentCore.run_sequence``).
            keep_every: L > 0: also return the states steps 0, L, 2L, ...
                started from.
        Returns:
            (action distribution over the T * B samples in time-major order,
            value [T * B], the kept states [T / L, B, S] or None).
        """
        T, B = observation.shape[:2]
        flat = observation.reshape((T * B,) + tuple(observation.shape[2:]))
        if self.rnn is None:
            dist, value = self.evaluate(flat)
            return dist, value, (state.new_zeros((T // keep_every, B, 0)) if keep_every
                                 else None)
        actor_in, value_in = (x.reshape(T, B, -1) for x in self._inputs(flat))
        if self.shared_rnn:
            out, states = self.core.run_sequence(actor_in, state, episode_start, keep_every)
            out = out.reshape(T * B, -1)
            return self.actor(out), self.value(out), states
        split = self._actor_state
        actor_out, actor_states = self.actor_core.run_sequence(
            actor_in, state[:, :split], episode_start, keep_every)
        value_out, value_states = self.value_core.run_sequence(
            value_in, state[:, split:], episode_start, keep_every)
        states = torch.cat([actor_states, value_states], dim=-1) if keep_every else None
        return (self.actor(actor_out.reshape(T * B, -1)),
                self.value(value_out.reshape(T * B, -1)), states)

    @torch.no_grad()
    def act(self, observation: torch.Tensor, generator: torch.Generator = None,
            deterministic: bool = False, state: Optional[torch.Tensor] = None,
            sde_draws: Optional[torch.Tensor] = None):
        """Sample actions for (normalized) observations [K, *O].

        Returns (action [K, A] stored rows, log_prob [K], value [K]); with
        ``deterministic`` the action is the distribution's mode (the mean of a
        Normal, the most likely choice of a Categorical). A recurrent network
        takes the envs' ``state`` [K, S] and returns the next state [K, S] as a
        fourth element. ``sde_draws`` [K, F, A] (state-dependent exploration
        only): the standard-normal draws of each env's noise matrix, kept by
        the caller across steps; None draws new ones.
        """
        if state is None:
            dist, value = self.evaluate(observation)
        else:
            dist, value, state = self.step(observation, state)
        if deterministic:
            action = dist.mode()
        elif sde_draws is not None and isinstance(dist, StateDependentNormal):
            action = dist.sample_with(sde_draws)
        else:
            action = dist.sample(generator)
        if state is None:
            return action, dist.log_prob(action), value
        return action, dist.log_prob(action), value, state

    @torch.no_grad()
    def predict_value(self, observation: torch.Tensor,
                      state: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Value [K] of (normalized) observations [K, *O] (with the envs' state
        [K, S] for a recurrent network; the state is not advanced)."""
        if state is None:
            return self.state_value(observation)
        return self.step(observation, state)[1]

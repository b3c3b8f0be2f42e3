"""A numpy snapshot of a feed-forward ``ActorCritic`` on vector observations,
for the actors' inference on small batches.

Why: an actor acts on K / S observations at a time (8 with the PyBullet
configs' 16 envs in 2 splits). At that size a torch forward pass is almost all
fixed cost per operation (dispatch, autograd bookkeeping, ``nn.Module`` calls,
``torch.distributions`` argument checks): measured on the 2-core VM, about
400 us per ``act`` of 8 observations with the (64, 64) networks against about
110 us for the same arithmetic in numpy. The actor process shares the cores
with its env workers, so every microsecond it spends comes out of stepping.

What it computes is what ``ActorCritic.evaluate`` then ``act`` compute: the
actor MLP's output (the Normal's mean, with the scale exp(clamp(log_std)), or
the Categoricals' logits), the value MLP's output, a sampled (or, when
deterministic, the most likely) action and its log-probability with torch's
formulas, in float32. Results agree with the torch model to float32 rounding
(the matrix products may sum in another order); tests/test_numpy_inference.py
checks that against the model for every activation and action kind.

Only what it knows how to copy exactly is copied: ``NumpyActorCritic.of``
returns None for image observations (conv encoders), recurrent cores, or any
layer type it does not know, and the caller then uses the torch model.
State-dependent exploration (gSDE) is copied too: the scale is computed from
the actor's last hidden features, and the noise from the caller's draws of
each env's noise matrix.

A snapshot and its forward pass are numpy only: unpickling one (an env
worker that acts receives it through its pipe) does not import torch, which
only building one (``of``, in the actor or learner) needs.

Shapes: B = batch, O = observation_dim, A = stored action width.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:  # torch only where a snapshot is built
    import torch.nn as nn

    from alf_async.networks.actor_critic import ActorCritic

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x), with the sigmoid as 0.5 (1 + tanh(x / 2)): no overflow
    half = np.float32(0.5)
    return x * (half + half * np.tanh(half * x))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, np.float32(alpha) * np.expm1(np.minimum(x, 0)))


def _activation(module: "nn.Module") -> Optional[Callable[[np.ndarray], np.ndarray]]:
    """The numpy function of an activation module (None: not one we copy);
    module-level functions, so that a snapshot pickles (env workers that act
    receive one: ``algorithms.acting_policy``)."""
    import torch.nn as nn

    if type(module) is nn.Tanh:
        return np.tanh
    if type(module) is nn.ReLU:
        return _relu
    if type(module) is nn.ELU:
        return functools.partial(_elu, alpha=float(module.alpha))
    if type(module) is nn.SiLU:
        return _silu
    return None


# One layer: ("linear", (weight [in, out], bias [out])) or ("fn", function).
_Layer = Tuple[str, object]


def _layers(modules: Sequence["nn.Module"]) -> Optional[List[_Layer]]:
    """Numpy copies of a chain of Linear and activation modules (None if the
    chain holds anything else)."""
    import torch.nn as nn

    layers: List[_Layer] = []
    for module in modules:
        if isinstance(module, nn.Linear):  # Float32Linear too
            weight = module.weight.detach().numpy().astype(np.float32).T.copy()
            bias = (module.bias.detach().numpy().astype(np.float32).copy()
                    if module.bias is not None else np.zeros(weight.shape[1], np.float32))
            layers.append(("linear", (weight, bias)))
        else:
            fn = _activation(module)
            if fn is None:
                return None
            layers.append(("fn", fn))
    return layers


def _run(layers: List[_Layer], x: np.ndarray) -> np.ndarray:
    for kind, layer in layers:
        if kind == "linear":
            weight, bias = layer
            x = x @ weight
            x += bias
        else:
            x = layer(x)
    return x


class NumpyActorCritic:
    """The weights of a feed-forward vector ``ActorCritic`` as numpy arrays,
    and its forward pass; build with ``of`` (a snapshot: rebuild after the
    model's weights change)."""

    def __init__(self, body: List[_Layer], head: List[_Layer], value: List[_Layer],
                 nvec: Tuple[int, ...], log_std: Optional[np.ndarray],
                 sde_std: Optional[np.ndarray] = None,
                 sde_variance_floor: Optional[float] = None):
        if sde_std is not None and sde_variance_floor is None:
            raise ValueError("a gSDE snapshot needs the variance floor of the torch "
                             "model's scale (networks.distributions.SDE_VARIANCE_FLOOR)")
        self._body = body  # the actor's hidden layers (features [B, F])
        self._head = head  # its output layer (mean or logits; then tanh with squash_mean)
        self._value = value
        self._nvec = nvec  # choices per dimension; () for continuous actions
        self._sde_std = sde_std  # [F, A] the noise matrix's stds (gSDE), or None
        if sde_std is not None:
            self._sde_var = (sde_std * sde_std).astype(np.float32)
            self._sde_floor = np.float32(sde_variance_floor)
        elif log_std is not None:
            self._scale = np.exp(log_std).astype(np.float32)
            self._log_scale = np.log(self._scale)

    @classmethod
    def of(cls, model: "ActorCritic") -> Optional["NumpyActorCritic"]:
        """A snapshot of ``model``, or None where only torch can run it (image
        observations, a recurrent core, an unknown layer)."""
        from alf_async.networks.distributions import SDE_VARIANCE_FLOOR

        if model.observation_spec.is_image or model.rnn is not None:
            return None
        actor, value = model.actor, model.value
        body, head = _layers(list(actor.body)), _layers([actor.mean])
        if head is not None and actor.squash_mean:
            head.append(("fn", np.tanh))
        value_layers = _layers(list(value.body) + [value.head])
        if body is None or head is None or value_layers is None:
            return None
        spec = actor.action_spec
        log_std = sde_std = None
        if actor.state_dependent:
            sde_std = (actor.sde_log_std.detach().clamp(actor.min_log_std, actor.max_log_std)
                       .exp().numpy().astype(np.float32))
        elif not spec.discrete:
            log_std = actor.log_std.detach().clamp(actor.min_log_std, actor.max_log_std).numpy()
        return cls(body, head, value_layers, tuple(spec.nvec) if spec.discrete else (),
                   log_std, sde_std, SDE_VARIANCE_FLOOR)

    def value(self, observation: np.ndarray) -> np.ndarray:
        """(normalized) observations [B, O] float32 -> value [B]."""
        return _run(self._value, observation)[:, 0]

    def act(self, observation: np.ndarray, rng: np.random.Generator,
            deterministic: bool = False, sde_draws: Optional[np.ndarray] = None
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(normalized) observations [B, O] float32 -> (action [B, A], log_prob
        [B], value [B]), as ``ActorCritic.act``; samples with ``rng``, or
        (state-dependent exploration) with the noise-matrix draws ``sde_draws``
        [B, F, A] where given."""
        features = _run(self._body, observation)
        out = _run(self._head, features)
        value = self.value(observation)
        if self._nvec:
            action, log_prob = self._categorical(out, rng, deterministic)
            return action, log_prob.astype(np.float32), value
        if self._sde_std is not None:
            scale = np.sqrt((features * features) @ self._sde_var + self._sde_floor)
            log_scale = np.log(scale)
        else:
            scale, log_scale = self._scale, self._log_scale
        action = out.copy()
        if not deterministic:
            if sde_draws is not None and self._sde_std is not None:
                action += np.einsum("bf,bfa->ba", features, sde_draws * self._sde_std)
            else:
                action += scale * rng.standard_normal(out.shape, dtype=np.float32)
        # torch's Normal.log_prob, from the action as stored
        diff = action - out
        log_prob = (-(diff * diff) / (2.0 * scale * scale) - log_scale
                    - np.float32(_HALF_LOG_2PI)).sum(-1)
        return action, log_prob.astype(np.float32), value

    def _categorical(self, logits: np.ndarray, rng: np.random.Generator,
                     deterministic: bool) -> Tuple[np.ndarray, np.ndarray]:
        """One Categorical per action dimension: (choices [B, D] as float32,
        summed log-probability [B])."""
        batch = logits.shape[0]
        action = np.empty((batch, len(self._nvec)), np.float32)
        log_prob = np.zeros(batch, np.float32)
        rows = np.arange(batch)
        start = 0
        for d, n in enumerate(self._nvec):
            part = logits[:, start:start + n]
            start += n
            shifted = part - part.max(-1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
            if deterministic:
                choice = log_p.argmax(-1)
            else:
                cumulative = np.cumsum(np.exp(log_p), -1)
                u = rng.random(batch, dtype=np.float32) * cumulative[:, -1]
                choice = np.minimum((cumulative <= u[:, None]).sum(-1), n - 1)
            action[:, d] = choice
            log_prob += log_p[rows, choice]
        return action, log_prob

"""SAC's policy as actors run it: numpy in, numpy out, on the CPU.

``SACPolicy`` implements ``runtime.policy.Policy`` with the squashed-Gaussian
actor rebuilt from ``SACLearner.weight_arrays``. Until the learner has taken a
gradient step (the published ``explore/uniform`` flag), it acts uniformly at
random in [-1, 1]^A, as SB3's SAC does before ``learning_starts``. SAC keeps no
state-value network: ``value`` is 0 (the trajectory's value fields are unused
by an off-policy learner).

With gSDE (``SquashedGaussianActor.use_sde``) the policy holds one standard-
normal exploration draw [H, A] per env (``algorithms.sde_draws``; the actor
names the envs of each call, ``env_ids``) and draws a new one every
``sde_sample_interval`` of that env's steps, so an env's exploration noise is a
smooth function of its state between draws. Actions and draws come from one
random stream per group of envs the actor serves (``stream``;
``algorithms.sampling_streams``), so the actor may serve the groups in the
order their env workers answer.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple, Union

import numpy as np
import torch

from alf_async.algorithms.sampling_streams import SamplingStreams
from alf_async.algorithms.sde_draws import SdeDraws
from alf_async.envs.spaces import (ActionSpec, ObservationSpec, as_action_spec,
                                   as_observation_spec)
from alf_async.networks.sac import SquashedGaussianActor
from alf_async.runtime.weight_store import unpack_weights
from alf_async.utils.precision import Bf16Inference, compute_context, published_bf16


class SACPolicy:
    """The SAC actor network sampling on the CPU.

    Args:
        observation: the env's ``ObservationSpec`` (an integer O: a vector of
            O values; images as ``SACLearner``'s).
        action_spec: the env's (continuous) action space.
        seed: seeds the sampling streams.
        deterministic: act with tanh(mean) (for evaluation).

    The actor network infers in the precision the published weights name
    (``SACLearner.precision`` as resolved; ``utils.precision``); under bf16
    through a copy whose linear and convolution layers hold bfloat16 weights,
    rounded once per weight load (``Bf16Inference``: the same numbers).
    """

    def __init__(self, observation: Union[ObservationSpec, int],
                 action_spec: Union[ActionSpec, int], seed: int = 0,
                 deterministic: bool = False):
        self.action_dim = as_action_spec(action_spec).dim
        spec = as_observation_spec(observation)
        self._image = spec.is_image  # frames reach the encoder in their own dtype
        self.actor = SquashedGaussianActor(spec, self.action_dim)
        self.actor.eval()
        self.sampling_streams = True
        self._streams = SamplingStreams(seed)
        self.deterministic = deterministic
        self.uniform = True
        self.bf16 = False  # the published precision (float32 until weights say)
        self._bf16: Optional[Bf16Inference] = None
        self.per_env_exploration = self.actor.use_sde and not deterministic
        self._sde = (SdeDraws((self.actor.feature_dim, self.action_dim),
                              self.actor.sde_sample_interval)
                     if self.per_env_exploration else None)

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        groups = unpack_weights(arrays)
        self.actor.load_state_dict({k: torch.from_numpy(np.array(v))
                                    for k, v in groups["param"].items()})
        self.uniform = bool(groups.get("explore", {}).get("uniform", np.zeros(1))[0] > 0)
        self.bf16 = published_bf16(arrays)
        if self.bf16:
            if self._bf16 is None:
                self._bf16 = Bf16Inference(self.actor)
            self._bf16.refresh()

    def reseed(self, seed: int) -> None:
        self._streams.reseed(seed)
        if self._sde is not None:
            self._sde.reset()

    @torch.no_grad()
    def act(self, observation: np.ndarray, env_ids: Optional[np.ndarray] = None,
            stream: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """observation [K, *O] -> (action [K, A] in [-1, 1], log_prob [K], value [K] = 0);
        ``env_ids`` [K]: which of the actor's envs the rows are (gSDE keeps a
        draw per env; None: envs 0 .. K - 1); ``stream``: the sampling stream
        (the actor's group of envs)."""
        k = len(observation)
        rng, generator = self._streams(stream)
        if self.uniform and not self.deterministic:
            action = torch.rand((k, self.action_dim), generator=generator) * 2 - 1
            log_prob = torch.full((k,), -self.action_dim * float(np.log(2.0)))
        else:
            obs = torch.from_numpy(np.ascontiguousarray(
                observation if self._image else np.asarray(observation, np.float32)))
            draws = None if self._sde is None else torch.from_numpy(self._sde(env_ids, k, rng))
            actor = self._bf16.copy if self.bf16 else self.actor
            with compute_context(torch.device("cpu"), self.bf16):  # float32 outputs
                action, log_prob = actor.sample(obs, generator, self.deterministic,
                                                exploration=draws)
        return action.numpy(), log_prob.numpy(), np.zeros(k, np.float32)

    def value(self, observation: np.ndarray) -> np.ndarray:
        """SAC has no state-value network: 0 for each of the M observations."""
        return np.zeros(len(observation), np.float32)

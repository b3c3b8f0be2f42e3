"""The learner's policy as actors run it: numpy in, numpy out, on the CPU.

``NeuralPolicy`` is the actor-critic (and, when the learner normalizes
observations, its observation normalizer) rebuilt from the arrays the learner
publishes (``PPOLearner.weight_arrays``). It implements ``runtime.policy.Policy``;
the Trainer hands the class to the actor pool as the actors' policy factory.
A recurrent network (``ActorCritic.rnn``) makes it a recurrent policy:
``state_size`` S > 0, and ``act`` and ``value`` take the envs' states.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple, Union

import gin
import numpy as np
import torch

from alf_async.algorithms.acting_policy import ActingPolicy, ActingWeights
from alf_async.algorithms.normalizer import RunningNormalizer
from alf_async.algorithms.sampling_streams import SamplingStreams
from alf_async.algorithms.sde_draws import SdeDraws
from alf_async.envs.spaces import ActionSpec, ObservationSpec, as_observation_spec
from alf_async.networks import ActorCritic
from alf_async.networks.numpy_inference import NumpyActorCritic
from alf_async.runtime.weight_store import unpack_weights
from alf_async.utils.precision import Bf16Inference, compute_context, published_bf16


@gin.configurable
class NeuralPolicy:
    """The actor-critic with the learner's normalizer, sampling on the CPU.

    Args:
        observation: the env's ``ObservationSpec`` (an integer O: a float32
            vector).
        action_spec: the env's action space (an integer A: A continuous dimensions).
        seed: seeds the action-sampling generators (one per stream).
        deterministic: act with the distribution's mean (for evaluation).
        numpy_inference: act with a numpy copy of the networks where it can
            (feed-forward networks on vector observations; images and recurrent
            networks always use torch): the same outputs to float32 rounding,
            about 3-4x cheaper per call on small batches. Actions are then
            sampled with the streams' numpy generators. False: always
            torch.

    Sampling streams (``sampling_streams``): ``act(..., stream=g)`` samples
    from stream g (``algorithms.sampling_streams``), so an actor that calls the
    policy for its groups of envs in the order their env workers answer gets
    the same actions as in any other order.

    With state-dependent exploration (``ActorNetwork.exploration``) a sampling
    policy keeps one noise matrix per env (``per_env_exploration``): the actor
    passes the indices of the envs it acts for (``env_ids``; without them the
    rows are envs 0 .. B - 1), and each env's matrix is redrawn every
    ``ActorNetwork.sde_sample_interval`` of its steps (``algorithms.sde_draws``).

    Observations are normalized exactly when the published weights carry
    normalizer statistics (``PPOLearner.normalize_observations``); otherwise the
    networks see the raw observations, as the learner's do.

    Precision: the policy infers in the precision the published weights name
    (``PPOLearner.precision`` as resolved; ``utils.precision``), so that its
    log-probabilities and values come from the computation the learner runs
    for the same weights and observations. Under "bf16" it acts with torch
    (bfloat16 autocast) whatever ``numpy_inference`` says, and has no numpy
    copy for acting env workers; its linear and convolution layers then hold
    bfloat16 weights, rounded once per weight load rather than at every step
    (``utils.precision.Bf16Inference``: the same numbers).
    """

    def __init__(self, observation: Union[ObservationSpec, int],
                 action_spec: Union[ActionSpec, int], seed: int = 0,
                 deterministic: bool = False, numpy_inference: bool = True):
        spec = as_observation_spec(observation)
        self.model = ActorCritic(spec, action_spec)
        self.model.eval()
        self.normalizer = RunningNormalizer(spec.dim)
        self._image = spec.is_image
        self.normalize = False
        self.sampling_streams = True
        self._streams = SamplingStreams(seed)
        self.deterministic = deterministic
        self.state_size = self.model.state_size
        actor = self.model.actor
        self.per_env_exploration = actor.state_dependent and not deterministic
        self._sde = (SdeDraws(tuple(actor.sde_log_std.shape), actor.sde_sample_interval)
                     if self.per_env_exploration else None)
        self.numpy_inference = bool(numpy_inference)
        self.bf16 = False  # the published precision (float32 until weights say)
        self._numpy: Optional[NumpyActorCritic] = None
        self._bf16: Optional[Bf16Inference] = None
        self._snapshot()

    def _snapshot(self) -> None:
        """Copy the model's weights for inference: numpy (float32, where it
        applies) or bfloat16 layers (under bf16)."""
        self._numpy = (NumpyActorCritic.of(self.model)
                       if self.numpy_inference and not self.bf16 else None)
        if self.bf16:
            if self._bf16 is None:
                self._bf16 = Bf16Inference(self.model)
            self._bf16.refresh()

    def _inference_model(self) -> ActorCritic:
        """The network act and value run: under bf16 its copy with bfloat16
        layers, else the model."""
        return self._bf16.copy if self.bf16 else self.model

    def _compute(self):
        """The context the network's inference runs in (the published precision)."""
        return compute_context(torch.device("cpu"), self.bf16)

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        groups = unpack_weights(arrays)
        self.model.load_state_dict({k: torch.from_numpy(np.array(v))
                                    for k, v in groups["param"].items()})
        self.normalize = "normalizer" in groups
        self.bf16 = published_bf16(arrays)
        if self.normalize:
            self.normalizer.load_state_arrays(groups["normalizer"])
        self._snapshot()

    def reseed(self, seed: int) -> None:
        self._streams.reseed(seed)
        if self._sde is not None:  # every env draws a new noise matrix at its next step
            self._sde.reset()

    def acting_weights(self) -> Optional[ActingWeights]:
        """The current weights for an ``ActingPolicy`` (None without numpy
        inference: images, recurrent networks, ``numpy_inference=False``,
        weights published for bfloat16)."""
        if self._numpy is None:
            return None
        return ActingWeights(self._numpy,
                             self.normalizer.array_normalizer() if self.normalize else None)

    def acting_copy(self) -> Optional[ActingPolicy]:
        """A numpy copy of this policy that env workers act with
        (``Trainer.acting_env_workers``): the same samples for the same seed,
        stream and envs; None where numpy inference does not apply."""
        weights = self.acting_weights()
        if weights is None:
            return None
        sde = (None if self._sde is None else (self._sde.shape, self._sde.interval))
        return ActingPolicy(weights, self._streams.seed, self.deterministic, sde)

    def _numpy_obs(self, observation: np.ndarray) -> np.ndarray:
        x = np.asarray(observation, np.float32)
        return self.normalizer.normalize_array(x) if self.normalize else x

    def _obs(self, observation: np.ndarray) -> torch.Tensor:
        if self._image:  # frames go to the model as stored (uint8 stays uint8)
            return torch.from_numpy(np.ascontiguousarray(observation))
        x = torch.from_numpy(np.asarray(observation, np.float32))
        return self.normalizer.normalize(x) if self.normalize else x

    def act(self, observation: np.ndarray, state: Optional[np.ndarray] = None,
            env_ids: Optional[np.ndarray] = None, stream: int = 0) -> Tuple:
        """observation [K, *O] -> (action [K, A], log_prob [K], value [K]); a
        recurrent policy takes the envs' ``state`` [K, S] and returns the next
        state [K, S] fourth. ``env_ids`` [K]: which of the actor's envs the rows
        are (state-dependent exploration keeps a noise matrix per env);
        ``stream``: the sampling stream to draw from (the actor's group)."""
        rng, generator = self._streams(stream)
        draws = None if self._sde is None else self._sde(env_ids, len(observation), rng)
        if self._numpy is not None:
            return self._numpy.act(self._numpy_obs(observation), rng, self.deterministic,
                                   draws)
        with self._compute():  # float32 outputs whatever the precision
            out = self._inference_model().act(
                self._obs(observation), generator, self.deterministic,
                state=None if state is None else torch.from_numpy(np.asarray(state, np.float32)),
                sde_draws=None if draws is None else torch.from_numpy(draws))
        return tuple(x.numpy() for x in out)

    def value(self, observation: np.ndarray, state: Optional[np.ndarray] = None
              ) -> np.ndarray:
        """observation [M, *O] (and a recurrent policy's states [M, S]) -> value [M]."""
        if self._numpy is not None:
            return self._numpy.value(self._numpy_obs(observation))
        model = self._inference_model()
        with self._compute():
            if state is None:
                return model.predict_value(self._obs(observation)).numpy()
            return model.predict_value(
                self._obs(observation),
                torch.from_numpy(np.asarray(state, np.float32))).numpy()

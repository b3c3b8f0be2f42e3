"""The policy an env worker acts with when it unrolls its own envs
(``Trainer.acting_env_workers``; ``envs.acting_workers``).

``ActingPolicy`` is numpy only and picklable (it travels to the env workers
through their pipes), and samples exactly as ``NeuralPolicy``'s numpy path does
for the same seed, sampling stream and envs: the same network snapshot
(``NumpyActorCritic``), the same observation normalization
(``ArrayNormalizer``, which ``RunningNormalizer.normalize_array`` also uses),
the same stream seeds (``utils.seeding.stream_seed``) and per-env gSDE
draws (``SdeDraws``). So an actor whose workers act writes the same
trajectories as one that acts itself (tests/test_acting_workers.py).

Shapes: B = batch, O = observation_dim, A = stored action width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

from alf_async.algorithms.array_normalizer import ArrayNormalizer
from alf_async.algorithms.sde_draws import SdeDraws
from alf_async.networks.numpy_inference import NumpyActorCritic
from alf_async.utils.seeding import stream_seed


@dataclass
class ActingWeights:
    """One weights version as an acting policy needs it: the networks' numpy
    snapshot and the observation normalizer (None: observations go in raw)."""

    net: NumpyActorCritic
    normalizer: Optional[ArrayNormalizer]


class ActingPolicy:
    """A feed-forward policy on vector observations, acting in numpy.

    Args:
        weights: the networks and normalizer to act with (``load`` replaces them).
        seed: the policy's seed; stream g samples from a generator seeded with
            ``stream_seed(seed, g)``.
        deterministic: act with the distribution's mode.
        sde: (noise-matrix shape (F, A), redraw interval in steps) for
            state-dependent exploration, or None.
    """

    def __init__(self, weights: ActingWeights, seed: int, deterministic: bool = False,
                 sde: Optional[Tuple[Tuple[int, int], int]] = None):
        self.weights = weights
        self.deterministic = bool(deterministic)
        self._sde = SdeDraws(*sde) if sde is not None else None
        self._rngs: Dict[int, np.random.Generator] = {}
        self.reseed(seed)

    def load(self, weights: ActingWeights) -> None:
        self.weights = weights

    def reseed(self, seed: int) -> None:
        """Restart every stream from ``seed``; every env redraws its gSDE noise."""
        self.seed = int(seed)
        self._rngs.clear()
        if self._sde is not None:
            self._sde.reset()

    def _rng(self, stream: int) -> np.random.Generator:
        rng = self._rngs.get(stream)
        if rng is None:
            rng = self._rngs[stream] = np.random.default_rng(stream_seed(self.seed, stream))
        return rng

    def _obs(self, observation: np.ndarray) -> np.ndarray:
        x = np.asarray(observation, np.float32)
        normalizer = self.weights.normalizer
        return x if normalizer is None else normalizer(x)

    def act(self, observation: np.ndarray, env_ids: np.ndarray, stream: int
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """observation [B, O] of envs ``env_ids`` [B] -> (action [B, A],
        log_prob [B], value [B]), sampled from stream ``stream``."""
        rng = self._rng(stream)
        draws = None if self._sde is None else self._sde(env_ids, len(observation), rng)
        return self.weights.net.act(self._obs(observation), rng, self.deterministic, draws)

    def value(self, observation: np.ndarray) -> np.ndarray:
        """observation [B, O] -> value [B]."""
        return self.weights.net.value(self._obs(observation))

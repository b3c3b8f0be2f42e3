"""What the runtime needs of a policy: numpy in, numpy out, CPU only.

An actor calls ``policy.act(obs)`` once per step of its batched env and
``policy.value(obs)`` for observations that ended an episode by truncation;
``load_weights`` takes the arrays the learner published. The runtime never builds
a policy itself: the pool gets a factory ``factory(observation_spec, action_spec,
seed) -> Policy`` (the env's ``envs.spaces.ObservationSpec`` and ``ActionSpec``)
(the learner's ``NeuralPolicy`` in training runs, scripted policies in the
runtime's tests).
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol, Tuple

import numpy as np


class Policy(Protocol):
    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """observation [K, *O] -> (action [K, A] stored rows, log_prob [K], value [K])."""

    def value(self, observation: np.ndarray) -> np.ndarray:
        """observation [M, O] -> value [M]."""

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Take the learner's published arrays."""

    def reseed(self, seed: int) -> None:
        """Restart the policy's sampling randomness from ``seed``."""


PolicyFactory = Callable[[int, int, int], Policy]

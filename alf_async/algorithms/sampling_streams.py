"""The random streams an actor's policy samples actions from: one per group of
envs the actor acts for, so that the actions do not depend on the order in
which the actor serves the groups (``runtime.actor``: groups are served in the
order their env workers answer).

Stream 0 is seeded with the policy's seed itself (a single-group actor samples
exactly as from one generator seeded with it); stream g >= 1 with
``derive_seed(seed, g)``.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import torch

from alf_async.utils.seeding import stream_seed


class SamplingStreams:
    """(numpy generator, torch generator) per stream, made at first use.

    Args:
        seed: the policy's seed; ``reseed`` restarts every stream from a new one.
    """

    def __init__(self, seed: int = 0):
        self._streams: Dict[int, Tuple[np.random.Generator, torch.Generator]] = {}
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        self.seed = int(seed)
        self._streams.clear()

    def __call__(self, stream: int = 0) -> Tuple[np.random.Generator, torch.Generator]:
        """Stream ``stream``'s (numpy, torch) generators."""
        generators = self._streams.get(stream)
        if generators is None:
            seed = stream_seed(self.seed, stream)
            generators = (np.random.default_rng(seed), torch.Generator().manual_seed(seed))
            self._streams[stream] = generators
        return generators

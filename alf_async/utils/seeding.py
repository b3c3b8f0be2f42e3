"""Deriving independent seeds from tuples of integers.

Every seed alf_async uses (env k of actor i after r restarts, an actor's sampling
RNG, a recreated env) comes from ``derive_seed(base, ...)`` so that runs are
reproducible and no two streams share a seed by accident.
"""

from __future__ import annotations

import numpy as np


def derive_seed(*values: int) -> int:
    """A well-mixed seed in [0, 2**31 - 2**20) from integers (numpy's SeedSequence).

    The upper bound leaves room for ``seed + k`` (env k of a batch) below 2**31.
    """
    return int(np.random.SeedSequence([int(v) % (2 ** 63) for v in values])
               .generate_state(1)[0] % (2 ** 31 - 2 ** 20))


def stream_seed(seed: int, stream: int) -> int:
    """The seed of sampling stream ``stream`` of a policy seeded with ``seed``
    (``algorithms.sampling_streams``): the seed itself for stream 0, so that a
    single-stream policy samples as one generator seeded with it would."""
    return int(seed) if stream == 0 else derive_seed(seed, stream)

"""The noise matrices an actor's policy keeps per env for state-dependent
exploration (gSDE: ``networks.distributions.StateDependentNormal`` for PPO,
``networks.sac.SquashedGaussianActor`` with ``use_sde`` for SAC).

Each env k holds standard-normal draws eps_k [F, A] (its noise matrix is
eps_k * sigma) for ``interval`` of its own steps, then draws anew. The actor
steps its envs split by split (``BatchedEnv.splits``) and names the envs of
each call (``env_ids``), so every env keeps its own matrix and counts its own
steps, however the envs are grouped.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np


class SdeDraws:
    """Per-env standard-normal draws [E, F, A], redrawn every ``interval`` steps.

    Args:
        shape: (F, A), the noise matrix's shape.
        interval: steps each env keeps its draws (>= 1).

    The draws come from the generator the caller passes with each call (a
    policy's sampling stream for the envs' group), so they follow the policy's
    seed and do not depend on the order in which groups are served.
    """

    def __init__(self, shape: Tuple[int, int], interval: int):
        if int(interval) < 1:
            raise ValueError(f"the noise matrix's sample interval must be >= 1 step, "
                             f"got {interval}")
        self.shape = tuple(int(n) for n in shape)
        self.interval = int(interval)
        self._draws = np.zeros((0,) + self.shape, np.float32)
        self._age = np.zeros(0, np.int64)  # steps each env's draws were used

    def reset(self) -> None:
        """Every env draws anew at its next step (the policy was reseeded)."""
        self._age[:] = 0

    def __call__(self, env_ids: Optional[np.ndarray], batch: int,
                 rng: np.random.Generator) -> np.ndarray:
        """The draws [B, F, A] of envs ``env_ids`` [B] for this step (None: the
        rows are envs 0 .. batch - 1), each env's redrawn from ``rng`` every
        ``interval`` of its steps."""
        ids = (np.arange(batch) if env_ids is None else np.asarray(env_ids, np.int64))
        grown = int(ids.max()) + 1 - len(self._age) if ids.size else 0
        if grown > 0:
            self._draws = np.concatenate(
                [self._draws, np.zeros((grown,) + self.shape, np.float32)])
            self._age = np.concatenate([self._age, np.zeros(grown, np.int64)])
        redraw = ids[self._age[ids] % self.interval == 0]
        if redraw.size:
            self._draws[redraw] = rng.standard_normal((redraw.size,) + self.shape,
                                                      dtype=np.float32)
        self._age[ids] += 1
        return self._draws[ids]

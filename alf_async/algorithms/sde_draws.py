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
        seed: seeds the draws' generator (``reseed`` restarts it).
    """

    def __init__(self, shape: Tuple[int, int], interval: int, seed: int = 0):
        if int(interval) < 1:
            raise ValueError(f"the noise matrix's sample interval must be >= 1 step, "
                             f"got {interval}")
        self.shape = tuple(int(n) for n in shape)
        self.interval = int(interval)
        self._draws = np.zeros((0,) + self.shape, np.float32)
        self._age = np.zeros(0, np.int64)  # steps each env's draws were used
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Restart the generator; every env draws anew at its next step."""
        self._rng = np.random.default_rng(seed)
        self._age[:] = 0

    def __call__(self, env_ids: Optional[np.ndarray], batch: int,
                 rng: Optional[np.random.Generator] = None) -> np.ndarray:
        """The draws [B, F, A] of envs ``env_ids`` [B] for this step (None: the
        rows are envs 0 .. batch - 1), each env's redrawn every ``interval``
        of its steps, from ``rng`` (None: this object's own generator; a
        policy with sampling streams passes the stream of the envs' group)."""
        ids = (np.arange(batch) if env_ids is None else np.asarray(env_ids, np.int64))
        grown = int(ids.max()) + 1 - len(self._age) if ids.size else 0
        if grown > 0:
            self._draws = np.concatenate(
                [self._draws, np.zeros((grown,) + self.shape, np.float32)])
            self._age = np.concatenate([self._age, np.zeros(grown, np.int64)])
        redraw = ids[self._age[ids] % self.interval == 0]
        if redraw.size:
            generator = self._rng if rng is None else rng
            self._draws[redraw] = generator.standard_normal((redraw.size,) + self.shape,
                                                            dtype=np.float32)
        self._age[ids] += 1
        return self._draws[ids]

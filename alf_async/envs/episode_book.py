"""``EpisodeBook``: the running returns and lengths of a batch's K envs, the
episodes they finished and the env failures met, for ``BatchedEnv``.

An episode that ends (terminated or truncated) is reported with its return
and length, unless its env failed at that step or a lost life ended it while
the game goes on (``life_lost``: the game's episode continues, so that the
statistics count whole games) (the failure truncates and
drops it); a failure reported apart from a step (a worker lost between
unrolls, a reset that failed) drops the env's running episode too.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import numpy as np


class EpisodeBook:
    """Book-keeping of the episodes of K envs.

    Args:
        num_envs: K.
    """

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, np.float64)  # [K] of the running episodes
        self.lengths = np.zeros(num_envs, np.int64)  # [K]
        self._finished: List[Tuple[float, int]] = []
        self._failures: List[Tuple[int, str]] = []

    def restart(self) -> None:
        """Every env starts a new episode (a reset)."""
        self.returns[:] = 0
        self.lengths[:] = 0

    def count_step(self, envs: Union[slice, Sequence[int]], reward: np.ndarray,
                   terminated: np.ndarray, truncated: np.ndarray, failed: np.ndarray,
                   life_lost: np.ndarray) -> None:
        """Add a step of ``envs`` (rewards and flags [G] in their order)."""
        returns, lengths = self.returns[envs], self.lengths[envs]
        returns += reward
        lengths += 1
        ended = (terminated | truncated) & ~life_lost
        for j in np.flatnonzero(ended):
            if not failed[j]:
                self._finished.append((float(returns[j]), int(lengths[j])))
            returns[j] = 0.0
            lengths[j] = 0
        self.returns[envs], self.lengths[envs] = returns, lengths

    def count_steps(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                    failed: np.ndarray, life_lost: np.ndarray) -> None:
        """Add T steps of all K envs (rows [T, K])."""
        for t in range(len(reward)):
            self.count_step(slice(None), reward[t], terminated[t], truncated[t], failed[t],
                            life_lost[t])

    def note_failures(self, failures: Sequence[Tuple[int, str]], drop: bool = True) -> None:
        """Record (env index, reason) failures; ``drop``: end those envs'
        running episodes unreported (False where the steps already did)."""
        for k, details in failures:
            self._failures.append((k, details))
            if drop:
                self.returns[k] = 0.0
                self.lengths[k] = 0

    def pop_finished_episodes(self) -> List[Tuple[float, int]]:
        """(return, length) of the episodes finished since the last call."""
        finished, self._finished = self._finished, []
        return finished

    def pop_failures(self) -> List[Tuple[int, str]]:
        """(env index, traceback or reason) of env failures since the last call."""
        failures, self._failures = self._failures, []
        return failures

"""What the Stable-Baselines3 peer scripts measure during ``model.learn``:
collection time apart from the updates, and the returns of finished episodes
(from the Monitor wrapper's ``info["episode"]``; under SB3's AtariWrapper a
whole game). Imported from SB3's own virtualenv only."""

from __future__ import annotations

import time
from collections import deque


def rollout_timer(last_n: int = 20):
    """A new SB3 callback with ``rollout_s`` (seconds spent collecting) and
    ``returns`` (the last ``last_n`` episode returns)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class RolloutTimer(BaseCallback):
        def __init__(self):
            super().__init__()
            self.rollout_s, self._t0 = 0.0, 0.0
            self.returns = deque(maxlen=last_n)

        def _on_rollout_start(self) -> None:
            self._t0 = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.rollout_s += time.perf_counter() - self._t0

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            return True

    return RolloutTimer()

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


def progress_saver(save_dir: str, save_every: int, stop_after_s=None, window: int = 100):
    """A new SB3 callback for long runs that resume across sessions: appends
    {"env_steps", "wall_s", "return", "games"} to ``save_dir``/progress.jsonl
    after every rollout (wall_s: learning seconds summed over earlier
    sessions, read back from the file; return: mean of the last ``window``
    finished episodes), saves the model every ``save_every`` agent steps, and
    stops learning after ``stop_after_s`` seconds of this session."""
    import json
    import os

    from stable_baselines3.common.callbacks import BaseCallback

    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, "progress.jsonl")
    before_s, games = 0.0, 0
    recent = deque(maxlen=window)
    window_path = os.path.join(save_dir, "return_window.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if rows:
            before_s, games = rows[-1]["wall_s"], rows[-1]["games"]
    if os.path.isfile(window_path):  # the last games of the sessions before
        with open(window_path, encoding="utf-8") as f:
            recent.extend(json.load(f))

    class ProgressSaver(BaseCallback):
        def __init__(self):
            super().__init__()
            self._start = time.perf_counter()
            self._next_save = None

        def _on_step(self) -> bool:
            nonlocal games
            for info in self.locals.get("infos", ()):
                if "episode" in info:
                    recent.append(float(info["episode"]["r"]))
                    games += 1
            elapsed = time.perf_counter() - self._start
            return stop_after_s is None or elapsed < stop_after_s

        def _on_rollout_end(self) -> None:
            steps = int(self.model.num_timesteps)
            row = {"env_steps": steps, "wall_s": before_s + time.perf_counter() - self._start,
                   "return": (sum(recent) / len(recent)) if recent else None, "games": games}
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            with open(window_path, "w", encoding="utf-8") as f:
                json.dump(list(recent), f)
            if self._next_save is None:
                self._next_save = (steps // save_every + 1) * save_every
            if steps >= self._next_save:
                self.model.save(os.path.join(save_dir, "model.zip"))
                self._next_save += save_every

    return ProgressSaver()

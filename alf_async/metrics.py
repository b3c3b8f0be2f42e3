"""What a run records: the metrics file, TensorBoard scalars and a console line.

Definitions (see docs/async_guide.md):

- T: seconds between the ends of two consecutive training iterations.
- EPS = K / T: envs per second seen by the learner (K = envs of one actor).
- env steps/s = K * unroll_length / T.
- lag: learner version when training on a batch minus the version that acted.

Every training iteration appends one JSON object to ``<root_dir>/metrics.jsonl``
and writes the same scalars to TensorBoard (x axis: env steps). The console gets a
progress line every ``console_interval_s`` seconds.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import sys
import time
from typing import Any, Deque, Dict, Optional, Tuple

import gin

logger = logging.getLogger("alf_async")

# metrics-file key -> TensorBoard tag
TENSORBOARD_TAGS = {
    "episode_return": "episode/return",
    "episode_length": "episode/length",
    "T": "throughput/T",
    "EPS": "throughput/EPS",
    "env_steps_per_s": "throughput/env_steps_per_s",
    "learner_train_s": "time/learner_train_s",
    "learner_wait_s": "time/learner_wait_s",
    "actor_unroll_s": "time/actor_unroll_s",
    "actor_wait_s": "time/actor_wait_s",
    "actor_inference_s": "time/actor_inference_s",
    "actor_env_s": "time/actor_env_s",
    "queue_length": "async/queue_length",
    "lag": "async/lag",
    "policy_loss": "ppo/policy_loss",
    "value_loss": "ppo/value_loss",
    "entropy": "ppo/entropy",
    "approx_kl": "ppo/approx_kl",
    "clip_fraction": "ppo/clip_fraction",
    "explained_variance": "ppo/explained_variance",
    "grad_norm": "ppo/grad_norm",
    "action_std": "ppo/action_std",
}


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def format_count(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


def truncate_metrics_file(path: str, last_iteration: int) -> None:
    """Keep only the records of iterations <= ``last_iteration`` (atomic rewrite).

    A partly written last line (a crash mid-write) is dropped too.
    """
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if int(record.get("iteration", 0)) <= last_iteration:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(tmp, path)


@gin.configurable
class MetricsRecorder:
    """Writes per-iteration metrics to jsonl, TensorBoard and the console.

    Args:
        root_dir: the run directory.
        console_interval_s: seconds between console progress lines (0: every
            iteration).
        return_window: finished episodes averaged for the reported return.
        tensorboard: write TensorBoard event files.
        resume_from: (iteration, env_steps) of the checkpoint a resumed run starts
            from: records of later iterations (written before a crash) are
            removed from the metrics file and purged from TensorBoard, so that
            counters never go backward.
    """

    def __init__(self, root_dir: str, console_interval_s: float = 5.0,
                 return_window: int = 100, tensorboard: bool = True,
                 resume_from: Optional[Tuple[int, int]] = None):
        self.root_dir = root_dir
        self.console_interval_s = console_interval_s
        self.metrics_path = os.path.join(root_dir, "metrics.jsonl")
        if resume_from is not None:
            truncate_metrics_file(self.metrics_path, resume_from[0])
        self._file = open(self.metrics_path, "a", encoding="utf-8")
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = resume_from[1] + 1 if resume_from is not None else None
            self._writer = SummaryWriter(os.path.join(root_dir, "tensorboard"),
                                         purge_step=purge)
        self._returns: Deque[float] = collections.deque(maxlen=return_window)
        self._lengths: Deque[float] = collections.deque(maxlen=return_window)
        self._lags: Deque[int] = collections.deque(maxlen=1000)
        self._recent_T: Deque[float] = collections.deque(maxlen=20)
        self._last_console = 0.0

    def add_episodes(self, episodes) -> None:
        for ret, length in episodes:
            self._returns.append(float(ret))
            self._lengths.append(float(length))

    @property
    def mean_return(self) -> float:
        return sum(self._returns) / len(self._returns) if self._returns else float("nan")

    @property
    def mean_length(self) -> float:
        return sum(self._lengths) / len(self._lengths) if self._lengths else float("nan")

    def record(self, metrics: Dict[str, Any]) -> Dict[str, Any]:
        """Complete ``metrics`` with episode statistics and write it everywhere."""
        metrics = dict(metrics)
        metrics["episode_return"] = self.mean_return
        metrics["episode_length"] = self.mean_length
        self._lags.append(int(metrics.get("lag", 0)))
        if metrics.get("T"):
            self._recent_T.append(metrics["T"])
        line = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in metrics.items()}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()
        if self._writer is not None:
            step = int(metrics["env_steps"])
            for key, tag in TENSORBOARD_TAGS.items():
                value = metrics.get(key)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._writer.add_scalar(tag, value, step)
        return metrics

    def console(self, metrics: Dict[str, Any], budget_env_steps: int,
                budget_iterations: int, force: bool = False) -> Optional[str]:
        """Print a progress line if ``console_interval_s`` has passed."""
        now = time.monotonic()
        if not force and now - self._last_console < self.console_interval_s:
            return None
        self._last_console = now
        steps = metrics["env_steps"]
        mean_T = (sum(self._recent_T) / len(self._recent_T)) if self._recent_T else float("nan")
        rate = metrics["num_envs"] * metrics["unroll_length"] / mean_T if self._recent_T else float("nan")
        if budget_env_steps:
            progress = f"steps {format_count(steps)}/{format_count(budget_env_steps)}"
            eta = (budget_env_steps - steps) / rate if rate and math.isfinite(rate) else float("nan")
        else:
            progress = f"steps {format_count(steps)}"
            eta = float("nan")
        if budget_iterations:
            progress += f" it {metrics['iteration']}/{budget_iterations}"
            if mean_T == mean_T:
                eta_it = (budget_iterations - metrics["iteration"]) * mean_T
                eta = min(eta, eta_it) if eta == eta else eta_it
        else:
            progress += f" it {metrics['iteration']}"
        lags = list(self._lags)[-100:]
        eps = metrics["num_envs"] / mean_T if mean_T == mean_T else float("nan")
        line = (f"[alf_async] {progress} | return {self.mean_return:.1f} | "
                f"EPS {eps:.2f} | T {mean_T:.2f}s | "
                f"lag {min(lags)}/{sum(lags) / len(lags):.2f}/{max(lags)} | "
                f"ETA {format_duration(eta)}")
        print(line, file=sys.stderr, flush=True)
        return line

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

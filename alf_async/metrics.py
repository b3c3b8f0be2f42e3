"""What a run records: the metrics file, TensorBoard scalars and a console line.

Definitions (see docs/async_guide.md):

- T: seconds between the ends of two consecutive training iterations.
- EPS = K / T: envs per second seen by the learner (K = envs of one actor).
- env steps/s = K * unroll_length / T.
- lag: learner version when training on a batch minus the version that acted.

Every training iteration appends one JSON object to ``<root_dir>/metrics.jsonl``
and writes the same scalars to TensorBoard (x axis: env steps). The console gets a
progress line every ``console_interval_s`` seconds. Every deterministic
evaluation (``Trainer.eval_interval_env_steps``) appends one object to
``<root_dir>/eval.jsonl`` (env steps and training wall time of the weights,
eval_return = mean, eval_return_std, eval_episode_length, the episodes' returns
and lengths), goes to TensorBoard as ``eval/return`` at the weights' env steps,
to the next metrics row as ``eval_return``, and to the console.

A write that fails (no space left on the device, a quota, a read-only file
system) raises ``OSError`` naming the file: ``metrics.jsonl`` (the torn row is cut
off again, so the file holds whole rows only) or the TensorBoard event file.
TensorBoard writes from a background thread; its error is raised on the
trainer's thread at the next scalar written (or at ``close``), and the thread's
own traceback is not printed.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import time
from typing import Any, Deque, Dict, Iterable, Mapping, Optional, Tuple

import gin

from alf_async.iteration_record import NAN, TENSORBOARD_TAGS, IterationRecord
from alf_async.utils.files import atomic_write, with_filename
from alf_async.utils.formatting import format_count, format_duration
from alf_async.utils.tensorboard import open_tensorboard

logger = logging.getLogger("alf_async")

EVAL_FILE = "eval.jsonl"




def truncate_metrics_file(path: str, last_iteration: int, key: str = "iteration") -> None:
    """Keep only the records whose ``key`` is <= ``last_iteration`` (atomic
    rewrite; ``key="env_steps"`` for eval.jsonl).

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
            if int(record.get(key, 0)) <= last_iteration:
                kept.append(line if line.endswith("\n") else line + "\n")
    with atomic_write(path) as f:
        f.writelines(kept)


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

    Raises (here, ``record``, ``add_worker_scalars`` and ``close``):
        OSError: ``metrics.jsonl`` or the TensorBoard event file could not be
            written; ``filename`` names it (``event_file`` for TensorBoard).
    """

    def __init__(self, root_dir: str, console_interval_s: float = 5.0,
                 return_window: int = 100, tensorboard: bool = True,
                 resume_from: Optional[Tuple[int, int]] = None):
        self.root_dir = root_dir
        self.console_interval_s = console_interval_s
        self.metrics_path = os.path.join(root_dir, "metrics.jsonl")
        self.eval_path = os.path.join(root_dir, EVAL_FILE)
        if resume_from is not None:
            truncate_metrics_file(self.metrics_path, resume_from[0])
            truncate_metrics_file(self.eval_path, resume_from[1], key="env_steps")
        # Unbuffered: a row is written by one write call when it is recorded, so
        # a failed write leaves no bytes behind in a buffer to fail again later.
        self._file = open(self.metrics_path, "ab", buffering=0)
        self._writer = None
        self.event_file: Optional[str] = None  # TensorBoard's, once it is open
        if tensorboard:
            purge = resume_from[1] + 1 if resume_from is not None else None
            try:
                self._writer, self.event_file = open_tensorboard(
                    os.path.join(root_dir, "tensorboard"), purge)
            except BaseException:
                self._file.close()
                raise
        self._returns: Deque[float] = collections.deque(maxlen=return_window)
        self._lengths: Deque[float] = collections.deque(maxlen=return_window)
        self._lags: Deque[int] = collections.deque(maxlen=1000)
        self._recent_T: Deque[float] = collections.deque(maxlen=20)
        self._last_console = 0.0
        self._eval_file = None  # eval.jsonl, opened at the first evaluation
        self._new_eval: Optional[Tuple[float, int]] = None  # for the next row
        self.last_eval: Optional[Dict[str, Any]] = None  # the newest evaluation

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

    def episode_window(self) -> Dict[str, list]:
        """The recent episodes (returns, lengths) as plain lists, for checkpoints."""
        return {"returns": list(self._returns), "lengths": list(self._lengths)}

    def load_episode_window(self, window: Mapping[str, Any]) -> None:
        """Restore ``episode_window()`` so a resumed run reports the same return."""
        self._returns.clear()
        self._lengths.clear()
        self._returns.extend(float(x) for x in window.get("returns", ()))
        self._lengths.extend(float(x) for x in window.get("lengths", ()))

    def record(self, record: IterationRecord) -> IterationRecord:
        """Complete ``record`` with the episode means and write it everywhere."""
        record = dataclasses.replace(record, episode_return=self.mean_return,
                                     episode_length=self.mean_length)
        if self._new_eval is not None:
            record = dataclasses.replace(record, eval_return=self._new_eval[0],
                                         eval_env_steps=self._new_eval[1])
            self._new_eval = None
        self._lags.append(int(record.lag))
        if record.T:
            self._recent_T.append(record.T)
        self._append_row(record.to_json())
        if self._writer is not None:
            scalars = record.scalars()
            self._add_scalars(((tag, scalars[key]) for key, tag in TENSORBOARD_TAGS.items()
                               if key in scalars),
                              int(record.env_steps))
        return record

    def record_evaluation(self, row: Mapping[str, Any]) -> None:
        """Write one evaluation: ``row`` holds iteration, env_steps and
        wall_time of the weights evaluated, eval_return, eval_return_std,
        eval_episode_length, returns and lengths (lists), eval_s. Goes to
        eval.jsonl, to TensorBoard at the weights' env steps, to the next
        metrics row and to the console (one line)."""
        if self._eval_file is None:
            self._eval_file = open(self.eval_path, "ab", buffering=0)
        self._append_row(row, self._eval_file, self.eval_path)
        steps = int(row["env_steps"])
        self._new_eval = (float(row["eval_return"]), steps)
        self.last_eval = dict(row)
        if self._writer is not None:
            # At the weights' env steps, not the row's: not in TENSORBOARD_TAGS.
            self._add_scalars([("eval/return", float(row["eval_return"])),
                               ("eval/return_std", float(row["eval_return_std"])),
                               ("eval/episode_length", float(row["eval_episode_length"]))],
                              steps)
        print(f"[alf_async] eval at {format_count(steps)} steps (it {row['iteration']}): "
              f"return {row['eval_return']:.1f} +- {row['eval_return_std']:.1f} over "
              f"{len(row['returns'])} episode(s), length {row['eval_episode_length']:.0f} "
              f"({row['eval_s']:.1f} s)", file=sys.stderr, flush=True)

    def _append_row(self, row: Mapping[str, Any], file: Any = None,
                    path: Optional[str] = None) -> None:
        """Append ``row`` as one line of ``metrics.jsonl`` (or of ``file`` at
        ``path``); on a failed write the file is cut back to its last whole row
        and ``OSError`` names it."""
        file, path = (self._file, self.metrics_path) if file is None else (file, path)
        data = memoryview((json.dumps(row) + "\n").encode("utf-8"))
        fd = file.fileno()
        start = os.fstat(fd).st_size
        try:
            while data:
                data = data[file.write(data):]
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise with_filename(e, path) from None

    def _add_scalars(self, scalars: Iterable[Tuple[str, float]], step: int) -> None:
        """Write (tag, value) pairs to TensorBoard at ``step`` (env steps).

        A failed write of the writer's thread is raised here as ``OSError``
        naming ``event_file``; the writer is dropped then (its thread has ended).
        """
        try:
            for tag, value in scalars:
                self._writer.add_scalar(tag, value, step)
        except OSError as e:
            self._writer = None
            raise with_filename(e, self.event_file) from None

    def add_worker_scalars(self, worker_id: int, values: Mapping[str, float],
                           env_steps: int) -> None:
        """TensorBoard curves of one Hogwild worker: ``hogwild/worker_<id>/<name>``
        (finite values only) at ``env_steps`` (the run's total)."""
        if self._writer is None:
            return
        self._add_scalars(((f"hogwild/worker_{worker_id}/{name}", value)
                           for name, value in values.items()
                           if isinstance(value, (int, float)) and math.isfinite(value)),
                          int(env_steps))

    def console(self, record: IterationRecord, budget_env_steps: int,
                budget_iterations: int, force: bool = False) -> Optional[str]:
        """Print a progress line if ``console_interval_s`` has passed."""
        now = time.monotonic()
        if not force and now - self._last_console < self.console_interval_s:
            return None
        self._last_console = now
        steps = record.env_steps
        mean_T = (sum(self._recent_T) / len(self._recent_T)) if self._recent_T else NAN
        rate = record.num_envs * record.unroll_length / mean_T if self._recent_T else NAN
        eta = NAN
        progress = f"steps {format_count(steps)}"
        if budget_env_steps:
            progress += f"/{format_count(budget_env_steps)}"
            if rate and math.isfinite(rate):
                eta = (budget_env_steps - steps) / rate
        progress += f" it {record.iteration}"
        if budget_iterations:
            progress += f"/{budget_iterations}"
            if math.isfinite(mean_T):
                eta_it = (budget_iterations - record.iteration) * mean_T
                eta = min(eta, eta_it) if math.isfinite(eta) else eta_it
        lags = list(self._lags)[-100:]
        eps = record.num_envs / mean_T if math.isfinite(mean_T) else NAN
        line = (f"[alf_async] {progress} | return {self.mean_return:.1f} | "
                f"EPS {eps:.2f} | T {mean_T:.2f}s | "
                f"lag {min(lags)}/{sum(lags) / len(lags):.2f}/{max(lags)} | "
                f"ETA {format_duration(eta, missing='?')}")
        if self.last_eval is not None:
            line += (f" | eval {self.last_eval['eval_return']:.1f} @ "
                     f"{format_count(self.last_eval['env_steps'])}")
        print(line, file=sys.stderr, flush=True)
        return line

    def close(self) -> None:
        """Close the metrics file and TensorBoard (which writes what it holds).

        A TensorBoard write that fails here raises ``OSError`` naming
        ``event_file``, unless another exception is already propagating (close
        called from a ``finally``): it is then logged as one ERROR line, and
        the first error stays the one reported.
        """
        self._file.close()
        if self._eval_file is not None:
            self._eval_file.close()
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except OSError as e:
            error = with_filename(e, self.event_file)
            if sys.exc_info()[1] is None:
                raise error from None
            logger.error("TensorBoard could not write %s: %s", error.filename,
                         error.strerror or error)

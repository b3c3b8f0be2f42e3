"""Periodic deterministic evaluation, the trainer's side.

With ``Trainer.eval_interval_env_steps = I > 0`` an evaluation is due each time
the run's env steps pass a multiple of I, and once more when the budget is
reached: the learner's weights of that moment go to the evaluator process
(``training.evaluator_process``), which plays ``Trainer.eval_episodes`` episodes
with the mean action on envs of its own. Its answer is recorded when it
arrives (``MetricsRecorder.record_evaluation``: eval.jsonl, TensorBoard
``eval/return`` at the weights' env steps, the next metrics row, the console).

Training does not wait for evaluations (one is in flight at a time; later ones
queue, each with the weights of its own moment), except for the last one when
the budget is reached. The evaluator competes with the actors for the CPU, so
T and EPS of a run with evaluation are those of a machine doing both.
An evaluator that fails is reported in one log line and training goes on
without evaluation.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Any, Callable, Deque, Dict, Mapping, Optional

import numpy as np

from alf_async.envs.spaces import ObservationSpec
from alf_async.metrics import MetricsRecorder
from alf_async.settings import TrainerSettings, eval_seed
from alf_async.training.evaluator_process import (EvalFailed, EvalRequest, EvalResult,
                                                  EvaluatorLaunch, StopEvaluator,
                                                  evaluator_process_main, summarize)
from alf_async.utils.process import (describe_exit, start_child, stop_processes,
                                     torch_child_context)

logger = logging.getLogger("alf_async")

# Seconds the end of a run waits for its last evaluations.
FINAL_EVAL_TIMEOUT_S = 600.0


class Evaluation:
    """The evaluator process of a run and the schedule of its evaluations.

    Args:
        settings: the run's (eval_interval_env_steps > 0, eval_episodes, env).
        observation, action_spec: the env's, as the learner has them.
        weights: returns the learner's current weights (``weight_arrays()``).
        gin_config: the run's bindings, for the evaluator's networks.
    """

    def __init__(self, settings: TrainerSettings, observation: ObservationSpec, action_spec: Any,
                 weights: Callable[[], Mapping[str, np.ndarray]], gin_config: str):
        self.settings = settings
        self.interval = settings.eval_interval_env_steps
        self._weights = weights
        self._launch = EvaluatorLaunch(
            settings.algorithm, settings.env_name, settings.max_episode_steps,
            settings.time_feature, settings.eval_episodes, eval_seed(settings.seed),
            observation, action_spec, gin_config, os.getpid())
        self._process = None
        self._conn = None
        self._queue: Deque[EvalRequest] = collections.deque()
        self._in_flight = 0
        self._last_requested_steps: Optional[int] = None
        self.failed = False

    # -- life cycle ------------------------------------------------------------
    def start(self, env_steps: int) -> None:
        """Start the evaluator process (it builds its envs while training runs).
        ``env_steps``: the run's count now (a resumed run's next evaluation is
        at the next multiple of the interval)."""
        ctx = torch_child_context()
        self._conn, child_conn = ctx.Pipe()
        self._process = start_child(ctx, evaluator_process_main, (self._launch, child_conn),
                                    name="alf_async-evaluator")
        child_conn.close()
        self._last_requested_steps = env_steps if env_steps else None
        self._next_due = (env_steps // self.interval + 1) * self.interval

    def close(self) -> None:
        """End the evaluator process (twice is safe)."""
        if self._process is None:
            return
        try:
            self._conn.send(StopEvaluator())
        except (OSError, ValueError):
            pass
        stop_processes([self._process], grace_s=5.0)
        self._conn.close()
        self._process = None

    # -- during training ---------------------------------------------------------
    def after_iteration(self, counters: Mapping[str, float], metrics: MetricsRecorder) -> None:
        """Record the results that arrived; ask for an evaluation if one is due."""
        self.collect(metrics)
        steps = int(counters["env_steps"])
        if not self.failed and steps >= self._next_due:
            self._next_due = (steps // self.interval + 1) * self.interval
            self._request(counters)

    def finish(self, counters: Mapping[str, float], metrics: MetricsRecorder) -> None:
        """At the end of the budget: evaluate the final weights (unless they are
        the last ones asked for) and wait for every evaluation still owed."""
        if self.failed or self._process is None:
            return
        if self._last_requested_steps != int(counters["env_steps"]):
            self._request(counters)
        deadline = time.monotonic() + FINAL_EVAL_TIMEOUT_S
        while (self._in_flight or self._queue) and not self.failed:
            if time.monotonic() > deadline:
                logger.error("the last evaluation did not finish within %.0f s; the run "
                             "ends without it", FINAL_EVAL_TIMEOUT_S)
                return
            self.collect(metrics, wait_s=1.0)

    # -- the pipe ----------------------------------------------------------------
    def _request(self, counters: Mapping[str, float]) -> None:
        weights = {k: np.array(v, copy=True) for k, v in self._weights().items()}
        self._queue.append(EvalRequest(int(counters["iteration"]), int(counters["env_steps"]),
                                       float(counters["wall_time"]), weights))
        self._last_requested_steps = int(counters["env_steps"])
        self._send_next()

    def _send_next(self) -> None:
        if self._in_flight or not self._queue or self.failed:
            return
        try:
            self._conn.send(self._queue.popleft())
            self._in_flight = 1
        except (OSError, ValueError):
            self._fail(f"the evaluator process is gone "
                       f"({describe_exit(self._process.exitcode)})")

    def collect(self, metrics: MetricsRecorder, wait_s: float = 0.0) -> None:
        """Record every result that has arrived (waiting up to ``wait_s`` for one)."""
        if self._process is None or self.failed:
            return
        try:
            ready = self._conn.poll(wait_s)
            while ready:
                message = self._conn.recv()
                if isinstance(message, EvalFailed):
                    logger.error("the evaluator's traceback:\n%s", message.error.rstrip())
                    self._fail(message.error.strip().splitlines()[-1])
                    return
                self._in_flight = 0
                metrics.record_evaluation(self._row(message))
                self._send_next()
                ready = self._conn.poll(0)
        except (EOFError, OSError):
            self._fail(f"the evaluator process ended "
                       f"({describe_exit(self._process.exitcode)})")
            return
        if self._in_flight and not self._process.is_alive():
            self._fail(f"the evaluator process ended ({describe_exit(self._process.exitcode)})")

    @staticmethod
    def _row(result: EvalResult) -> Dict[str, Any]:
        row: Dict[str, Any] = {"iteration": result.iteration, "env_steps": result.env_steps,
                               "wall_time": result.wall_time}
        row.update(summarize(result))
        row.update(returns=[float(r) for r in result.returns],
                   lengths=[int(n) for n in result.lengths], eval_s=result.eval_s)
        return row

    def _fail(self, reason: str) -> None:
        self.failed = True
        self._queue.clear()
        self._in_flight = 0
        logger.error("evaluation stopped, training goes on without it: %s", reason)

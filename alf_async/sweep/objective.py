"""A trial's objective, read from its metrics rows (maximised by the search).

The metric is a key of the metrics rows: ``eval_return`` (rows where an
evaluation arrived) or ``episode_return`` (every row once an episode ended: the
mean training return of the last 100 episodes). Its curve is the metric against
env steps. The objective is:

- ``final``: the curve's last value;
- ``auc``: the area under the curve divided by its span of env steps, i.e. the
  curve's mean over env steps (trapezoids between rows), in the metric's units;
  a single point is its own value. It rewards learning early as well as well.

While a trial trains, the same function of the curve so far is reported to the
pruner at each new point (step = env steps).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from alf_async.reporting.run_metrics import Record, finite

OBJECTIVES = ("final", "auc")
METRICS = ("eval_return", "episode_return")

Curve = List[Tuple[int, float]]


def metric_curve(records: Sequence[Record], metric: str) -> Curve:
    """(env_steps, value) of the rows where ``metric`` is a finite number.

    An evaluation row counts at the env steps of the weights it evaluated
    (``eval_env_steps``), the others at the row's env steps."""
    curve: Curve = []
    for record in records:
        value = finite(record.get(metric))
        if value is None:
            continue
        steps = int(record.get("env_steps") or 0)
        if metric == "eval_return" and record.get("eval_env_steps"):
            steps = int(record.get("eval_env_steps"))
        curve.append((steps, value))
    return curve


def objective_value(curve: Curve, objective: str) -> Optional[float]:
    """``final`` or ``auc`` of a curve (see the module docstring); None if empty."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if not curve:
        return None
    if objective == "final" or len(curve) == 1:
        return curve[-1][1] if objective == "final" else curve[0][1]
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(curve, curve[1:]))
    span = curve[-1][0] - curve[0][0]
    return area / span if span > 0 else curve[-1][1]

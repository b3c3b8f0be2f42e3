"""Reading a run's ``metrics.jsonl`` and summarizing it.

Every function here is pure (records in, numbers out) except ``read_metrics`` and
``find_run_dirs``, which only read files.

Warm-up: the first training iterations of a run are not representative. The first
one includes starting the actor processes and their envs; with N actors, the
first N batches were all collected from the start, so iterations 2..N find their
batch ready. ``summarize_run`` therefore averages T, the time split and the lag
over iterations after the first ``warmup`` (default: N, the run's number of
actors). A run too short for that is summarized by its last iteration only
(``RunSummary.warmup_fallback``).

T of a run is the mean of its per-iteration T; its EPS is K / T (not the mean of
per-iteration EPS).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from alf_async.iteration_record import IterationRecord

# Files a sweep directory holds beside its runs (written by alf_async.sweep).
SWEEP_FILE = "sweep.json"  # the sweep's command line and grid
MACHINE_FILE = "machine.json"  # the machine the runs ran on

METRICS_FILE = "metrics.jsonl"

Record = IterationRecord


def parse_metrics_lines(lines: Iterable[str]) -> List[Record]:
    """``IterationRecord``s from metrics.jsonl lines, one per iteration, in order.

    Lines that are not JSON objects (a line cut by a crash) are skipped. If an
    iteration appears twice (a run resumed from an older checkpoint), the later
    record wins.
    """
    by_iteration: Dict[int, Record] = {}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "iteration" in record:
            by_iteration[int(record["iteration"])] = IterationRecord.from_json(record)
    return [by_iteration[i] for i in sorted(by_iteration)]


def read_metrics(run_dir: str) -> List[Record]:
    """The records of ``<run_dir>/metrics.jsonl`` ([] when there is none)."""
    path = os.path.join(run_dir, METRICS_FILE)
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return parse_metrics_lines(f)


def find_run_dirs(root: str) -> List[str]:
    """Run directories (holding metrics.jsonl) at or below ``root``, sorted."""
    found = []
    for directory, subdirs, files in os.walk(root):
        if METRICS_FILE in files:
            found.append(directory)
            subdirs[:] = []  # a run directory holds no other runs
        else:
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    return sorted(found)


def finite(value: Any) -> Optional[float]:
    """``value`` as a float if it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def mean_of(records: Sequence[Record], key: str) -> Optional[float]:
    """Mean of the finite values of ``key`` in ``records`` (None if none)."""
    values = [v for v in (finite(r.get(key)) for r in records) if v is not None]
    return sum(values) / len(values) if values else None


def steady_records(records: Sequence[Record],
                   warmup: Optional[int] = None) -> Tuple[List[Record], int, bool]:
    """(records after warm-up, warm-up used, whether the last-record fallback applied).

    ``warmup`` None means the run's number of actors (1 if unknown).
    """
    if warmup is None:
        warmup = int(records[0].get("num_actors") or 1) if records else 1
    kept = [r for r in records if int(r["iteration"]) > warmup]
    if kept or not records:
        return kept, warmup, False
    return [records[-1]], warmup, True


def return_curve(records: Sequence[Record]) -> List[Tuple[int, float, float]]:
    """(env_steps, wall_time_s, mean episode return) of iterations with a return."""
    curve = []
    for r in records:
        ret = finite(r.get("episode_return"))
        if ret is not None:
            curve.append((int(r.get("env_steps", 0)), float(r.get("wall_time", 0.0)), ret))
    return curve


def threshold_crossing(records: Sequence[Record],
                       threshold: float) -> Optional[Tuple[float, int]]:
    """(wall_time_s, env_steps) when the mean return first reached ``threshold``."""
    for steps, wall, ret in return_curve(records):
        if ret >= threshold:
            return wall, steps
    return None


@dataclass
class RunSummary:
    """What the tables report about one run (None where there is no data)."""

    num_envs: Optional[int] = None
    num_actors: Optional[int] = None
    unroll_length: Optional[int] = None
    iterations: int = 0
    env_steps: int = 0
    wall_time_s: Optional[float] = None
    final_return: Optional[float] = None
    mean_T: Optional[float] = None
    mean_EPS: Optional[float] = None
    mean_lag: Optional[float] = None
    max_lag: Optional[float] = None
    actor_unroll_s: Optional[float] = None
    actor_wait_s: Optional[float] = None
    learner_train_s: Optional[float] = None
    learner_wait_s: Optional[float] = None
    warmup: int = 0
    steady_iterations: int = 0
    warmup_fallback: bool = False
    time_to_threshold_s: Optional[float] = None
    steps_to_threshold: Optional[int] = None

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def summarize_run(records: Sequence[Record], warmup: Optional[int] = None,
                  return_threshold: Optional[float] = None) -> RunSummary:
    """Summarize one run's records (see the module docstring for the rules)."""
    if not records:
        return RunSummary()
    last = records[-1]
    steady, warmup_used, fallback = steady_records(records, warmup)
    num_envs = last.get("num_envs")
    mean_T = mean_of(steady, "T")
    curve = return_curve(records)
    lags = [v for v in (finite(r.get("lag")) for r in steady) if v is not None]
    summary = RunSummary(
        num_envs=int(num_envs) if num_envs is not None else None,
        num_actors=int(last["num_actors"]) if last.get("num_actors") is not None else None,
        unroll_length=(int(last["unroll_length"]) if last.get("unroll_length") is not None
                       else None),
        iterations=int(last["iteration"]),
        env_steps=int(last.get("env_steps", 0)),
        wall_time_s=finite(last.get("wall_time")),
        final_return=curve[-1][2] if curve else None,
        mean_T=mean_T,
        mean_EPS=(num_envs / mean_T) if (num_envs and mean_T) else None,
        mean_lag=sum(lags) / len(lags) if lags else None,
        max_lag=max(lags) if lags else None,
        actor_unroll_s=mean_of(steady, "actor_unroll_s"),
        actor_wait_s=mean_of(steady, "actor_wait_s"),
        learner_train_s=mean_of(steady, "learner_train_s"),
        learner_wait_s=mean_of(steady, "learner_wait_s"),
        warmup=warmup_used,
        steady_iterations=len(steady),
        warmup_fallback=fallback,
    )
    if return_threshold is not None:
        crossing = threshold_crossing(records, return_threshold)
        if crossing is not None:
            summary.time_to_threshold_s, summary.steps_to_threshold = crossing
    return summary


def gin_binding_text(config_text: str, binding: str) -> Optional[str]:
    """The value text of ``binding`` (e.g. ``Trainer.env_name``) in gin text.

    Only single-line bindings are recognized; string quotes are removed.
    """
    pattern = re.compile(r"^\s*" + re.escape(binding) + r"\s*=\s*(.+?)\s*$", re.MULTILINE)
    matches = pattern.findall(config_text)
    if not matches:
        return None
    value = matches[-1]
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value


def run_config_value(run_dir: str, binding: str,
                     file_name: str = "config.gin") -> Optional[str]:
    """``gin_binding_text`` of a run's saved config (None if absent)."""
    path = os.path.join(run_dir, file_name)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return gin_binding_text(f.read(), binding)

"""The sweep's summary table: one row per run, as CSV and markdown.

Columns: the run's name, its swept parameters, status and exit code, then from
its metrics (see ``run_metrics``): iterations, env steps, training wall time,
final mean return, mean T, EPS = K / T, mean policy lag, and, when a return
threshold is given, the wall time and env steps at which the mean return first
reached it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from alf_async.reporting.report import NOT_REACHED
from alf_async.sweep.grid import RunSpec
from alf_async.utils.files import write_text
from alf_async.reporting.run_metrics import RunSummary, read_metrics, summarize_run
from alf_async.reporting.tables import (
    MISSING, csv_text, fmt_int, fmt_number, markdown_table)

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"


@dataclass
class SummaryRow:
    """One run of the table."""

    spec: RunSpec
    status: str
    exit_code: Optional[int]
    summary: RunSummary


def param_names(specs: Sequence[RunSpec]) -> List[str]:
    """The parameter columns: every swept name in sweep order (labels without ':')."""
    names: List[str] = []
    for spec in specs:
        for name in spec.as_dict():
            if name not in names:
                names.append(name)
    return names


def table(rows: Sequence[SummaryRow], threshold: Optional[float] = None
          ) -> Tuple[List[str], List[list], List[str], List[list]]:
    """(csv headers, csv rows, markdown headers, markdown rows)."""
    params = param_names([r.spec for r in rows])
    csv_headers = (["run"] + params + ["status", "exit_code", "iterations", "env_steps",
                                       "wall_time_s", "final_return", "mean_T_s",
                                       "mean_EPS", "mean_lag"])
    md_headers = (["run"] + params + ["status", "exit code", "iterations", "env steps",
                                      "wall time (s)", "final return", "T (s)", "EPS",
                                      "lag"])
    if threshold is not None:
        csv_headers += ["time_to_threshold_s", "steps_to_threshold"]
        md_headers += [f"time to {threshold:g} (s)", f"steps to {threshold:g}"]
    csv_rows, md_rows = [], []
    for row in rows:
        s, values = row.summary, row.spec.as_dict()
        csv_row = ([row.spec.name] + [values.get(p) for p in params]
                   + [row.status, row.exit_code, s.iterations, s.env_steps, s.wall_time_s,
                      s.final_return, s.mean_T, s.mean_EPS, s.mean_lag])
        md_row = ([row.spec.name] + [values.get(p, MISSING) for p in params]
                  + [row.status, fmt_int(row.exit_code), fmt_int(s.iterations),
                     fmt_int(s.env_steps), fmt_number(s.wall_time_s, 1),
                     fmt_number(s.final_return, 1), fmt_number(s.mean_T, 3),
                     fmt_number(s.mean_EPS, 2), fmt_number(s.mean_lag, 2)])
        if threshold is not None:
            csv_row += [s.time_to_threshold_s, s.steps_to_threshold]
            md_row += ([NOT_REACHED] * 2 if s.steps_to_threshold is None else
                       [fmt_number(s.time_to_threshold_s, 1), fmt_int(s.steps_to_threshold)])
        csv_rows.append(csv_row)
        md_rows.append(md_row)
    return csv_headers, csv_rows, md_headers, md_rows


def summary_markdown(rows: Sequence[SummaryRow], threshold: Optional[float] = None) -> str:
    _, _, headers, md_rows = table(rows, threshold)
    numeric = [h not in ("run", "status") and i > len(param_names([r.spec for r in rows]))
               for i, h in enumerate(headers)]
    return markdown_table(headers, md_rows, numeric)


def summary_csv(rows: Sequence[SummaryRow], threshold: Optional[float] = None) -> str:
    headers, csv_rows, _, _ = table(rows, threshold)
    return csv_text(headers, csv_rows)


def collect_rows(outcomes: Sequence, warmup: Optional[int] = None,
                 threshold: Optional[float] = None) -> List[SummaryRow]:
    """Summary rows from ``runner.RunOutcome``s (reads each run's metrics)."""
    return [SummaryRow(o.spec, o.status, o.exit_code,
                       summarize_run(read_metrics(o.run_dir), warmup, threshold))
            for o in outcomes]


def write_summary(root_dir: str, rows: Sequence[SummaryRow],
                  threshold: Optional[float] = None) -> Tuple[str, str]:
    """Write summary.csv and summary.md in ``root_dir``; returns their paths."""
    paths = (os.path.join(root_dir, SUMMARY_CSV), os.path.join(root_dir, SUMMARY_MD))
    for path, text in zip(paths, (summary_csv(rows, threshold),
                                  summary_markdown(rows, threshold))):
        write_text(path, text)
    return paths

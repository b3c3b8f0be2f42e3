"""The sweep's summary table: one row per run, as CSV and markdown.

Columns: the run's name, its swept parameters, status and exit code (a search's
trials: status complete, pruned or failed, and their objective), then from
its metrics (see ``run_metrics``): iterations, env steps, training wall time,
final mean return, mean T, EPS = K / T, mean policy lag, and, when a return
threshold is given, the wall time and env steps at which the mean return first
reached it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from alf_async.reporting.report import NOT_REACHED
from alf_async.sweep.grid import RunSpec, is_label
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
    objective: Optional[float] = None


def param_names(specs: Sequence[RunSpec]) -> List[str]:
    """The parameter columns: every swept name in sweep order (labels without ':')."""
    names: List[str] = []
    for spec in specs:
        for name in spec.as_dict():
            if name not in names:
                names.append(name)
    return names


def table(rows: Sequence[SummaryRow], threshold: Optional[float] = None,
          objective: Optional[str] = None
          ) -> Tuple[List[str], List[list], List[str], List[list]]:
    """(csv headers, csv rows, markdown headers, markdown rows); ``objective``
    (a search's, e.g. "final episode_return") adds the objective column."""
    params = param_names([r.spec for r in rows])
    extra = ["objective"] if objective else []
    csv_headers = (["run"] + params + ["status"] + extra
                   + ["exit_code", "iterations", "env_steps", "wall_time_s", "final_return",
                      "mean_T_s", "mean_EPS", "mean_lag"])
    md_headers = (["run"] + params + ["status"] + ([f"objective ({objective})"] if objective
                                                   else [])
                  + ["exit code", "iterations", "env steps", "wall time (s)",
                     "final return", "T (s)", "EPS", "lag"])
    if threshold is not None:
        csv_headers += ["time_to_threshold_s", "steps_to_threshold"]
        md_headers += [f"time to {threshold:g} (s)", f"steps to {threshold:g}"]
    csv_rows, md_rows = [], []
    for row in rows:
        s, values = row.summary, row.spec.as_dict()
        csv_row = ([row.spec.name] + [values.get(p) for p in params] + [row.status]
                   + ([row.objective] if objective else [])
                   + [row.exit_code, s.iterations, s.env_steps, s.wall_time_s,
                      s.final_return, s.mean_T, s.mean_EPS, s.mean_lag])
        md_row = ([row.spec.name] + [values.get(p, MISSING) for p in params] + [row.status]
                  + ([fmt_number(row.objective, 2)] if objective else [])
                  + [fmt_int(row.exit_code), fmt_int(s.iterations),
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


def summary_markdown(rows: Sequence[SummaryRow], threshold: Optional[float] = None,
                     objective: Optional[str] = None) -> str:
    _, _, headers, md_rows = table(rows, threshold, objective)
    numeric = [h not in ("run", "status") and i > len(param_names([r.spec for r in rows]))
               for i, h in enumerate(headers)]
    return markdown_table(headers, md_rows, numeric)


def summary_csv(rows: Sequence[SummaryRow], threshold: Optional[float] = None,
                objective: Optional[str] = None) -> str:
    headers, csv_rows, _, _ = table(rows, threshold, objective)
    return csv_text(headers, csv_rows)


def collect_rows(outcomes: Sequence, warmup: Optional[int] = None,
                 threshold: Optional[float] = None,
                 objectives: Optional[Dict[str, Optional[float]]] = None
                 ) -> List[SummaryRow]:
    """Summary rows from ``runner.RunOutcome``s (reads each run's metrics);
    ``objectives``: a search's objective of each run by name."""
    return [SummaryRow(o.spec, o.status, o.exit_code,
                       summarize_run(read_metrics(o.run_dir), warmup, threshold),
                       (objectives or {}).get(o.spec.name))
            for o in outcomes]


def write_summary(root_dir: str, rows: Sequence[SummaryRow],
                  threshold: Optional[float] = None,
                  objective: Optional[str] = None) -> Tuple[str, str]:
    """Write summary.csv and summary.md in ``root_dir``; returns their paths."""
    paths = (os.path.join(root_dir, SUMMARY_CSV), os.path.join(root_dir, SUMMARY_MD))
    for path, text in zip(paths, (summary_csv(rows, threshold, objective),
                                  summary_markdown(rows, threshold, objective))):
        write_text(path, text)
    return paths


def best_gin_text(spec: RunSpec, objective: float, description: str) -> str:
    """A gin file binding the best trial's searched values (labels left out)."""
    lines = [f"# The best trial of a search: {spec.name}, {description} {objective:.4g}.",
             "# Its searched bindings; use it after the sweep's gin files, e.g.",
             "#   alf-train --gin_file=<the sweep's gin file> --gin_file=best.gin"]
    lines += [f"{name} = {value}" for name, value in spec.params if not is_label(name)]
    return "\n".join(lines) + "\n"


def gin_param_flags(spec: RunSpec) -> str:
    """The best trial's bindings as a ready ``--gin_param`` list (shell-quoted)."""
    import shlex

    return " ".join(shlex.quote(f"--gin_param={p}") for p in spec.gin_params)

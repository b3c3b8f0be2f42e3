"""Building the EPS report from run directories: read, summarize, plot, write.

``build_report(root)`` finds every run directory at or below ``root`` (a sweep
directory, or a directory of runs, or one run), summarizes each run
(``run_metrics``), groups them by (K, N) (``eps_study``), draws the figures
(``plots``) and writes ``eps_report.md`` with the PNGs next to it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from alf_async.reporting import plots
from alf_async.utils.files import write_text
from alf_async.reporting.eps_study import Cell, make_cells
from alf_async.reporting.report import MIN_CURVE_POINTS, ReportInput, render_report
from alf_async.reporting.run_metrics import (
    find_run_dirs, read_metrics, return_curve, run_config_value, summarize_run)

REPORT_FILE = "eps_report.md"
PLOT_FILES = {"eps_vs_k": "eps_vs_k.png", "return_vs_time": "return_vs_time.png",
              "return_vs_steps": "return_vs_steps.png"}


class ReportError(ValueError):
    """The report cannot be built (no runs found, ...)."""


@dataclass
class BuiltReport:
    """What ``build_report`` wrote (paths) and the study's cells."""

    report: str
    plots: Dict[str, str]
    cells: List[Cell]


def _run_setting(run_dirs: List[str], binding: str) -> List[str]:
    values = []
    for run_dir in run_dirs:
        value = (run_config_value(run_dir, binding, "operative_config.gin")
                 or run_config_value(run_dir, binding))
        if value is not None and value not in values:
            values.append(value)
    return values


def _machine(root: str):
    from alf_async.reporting.machine import describe_machine
    from alf_async.reporting.run_metrics import MACHINE_FILE
    from alf_async.utils.files import read_json

    recorded = read_json(os.path.join(root, MACHINE_FILE))
    if recorded:
        return recorded, "Recorded by the sweep that ran these runs."
    return describe_machine(), ("This is the machine that built the report; the runs' "
                                "own machine was not recorded (runs made without "
                                "alf_async.bin.sweep).")


def _title(root: str, envs: List[str]) -> str:
    from alf_async.reporting.run_metrics import SWEEP_FILE
    from alf_async.utils.files import read_json

    sweep = read_json(os.path.join(root, SWEEP_FILE)) or {}
    files = [os.path.basename(f) for f in sweep.get("gin_files", [])]
    if files:
        return ", ".join(files)
    if envs:
        return ", ".join(envs)
    return os.path.basename(os.path.abspath(root))


def build_report(root: str, report_dir: Optional[str] = None,
                 warmup: Optional[int] = None,
                 threshold: Optional[float] = None) -> BuiltReport:
    """Write the report for the runs under ``root`` into ``report_dir`` (default root)."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise ReportError(f"{root} is not a directory")
    run_dirs = find_run_dirs(root)
    if not run_dirs:
        raise ReportError(f"no run directory (holding metrics.jsonl) at or below {root}")
    report_dir = os.path.abspath(report_dir or root)
    os.makedirs(report_dir, exist_ok=True)

    runs, curves = [], {}
    for run_dir in run_dirs:
        name = os.path.relpath(run_dir, root)
        if name == ".":
            name = os.path.basename(run_dir)
        records = read_metrics(run_dir)
        runs.append((name, summarize_run(records, warmup, threshold)))
        curves[name] = return_curve(records)
    runs.sort(key=lambda r: (r[1].num_envs or 0, r[1].num_actors or 0, r[0]))
    cells = make_cells([s for _, s in runs])

    written: Dict[str, str] = {}
    if cells:
        written["eps_vs_k"] = plots.plot_eps_vs_k(
            cells, os.path.join(report_dir, PLOT_FILES["eps_vs_k"]))
    curve_points = {name: len(c) for name, c in curves.items()}
    if any(k >= MIN_CURVE_POINTS for k in curve_points.values()):
        ordered = {name: curves[name] for name, _ in runs}
        for key, x in (("return_vs_time", "time"), ("return_vs_steps", "steps")):
            written[key] = plots.plot_return_curves(
                ordered, os.path.join(report_dir, PLOT_FILES[key]), x=x)

    envs = _run_setting(run_dirs, "Trainer.env_name")
    iterations = [s.iterations for _, s in runs]
    settings = {
        "env": ", ".join(envs) or "unknown",
        "unroll_length": ", ".join(str(u) for u in sorted(
            {s.unroll_length for _, s in runs if s.unroll_length})) or "unknown",
        "K (envs per actor)": ", ".join(str(k) for k in sorted(
            {s.num_envs for _, s in runs if s.num_envs})),
        "N (actors)": ", ".join(str(n) for n in sorted(
            {s.num_actors for _, s in runs if s.num_actors})),
        "iterations per run": (f"{min(iterations)}" if min(iterations) == max(iterations)
                               else f"{min(iterations)} to {max(iterations)}"),
    }
    machine, note = _machine(root)
    data = ReportInput(
        title=_title(root, envs), source=f"Runs: `{root}`.", machine=machine,
        machine_note=note, runs=runs, cells=cells, settings=settings,
        plots={k: os.path.relpath(p, report_dir) for k, p in written.items()},
        curve_points=curve_points, warmup=warmup, threshold=threshold,
        generated=time.strftime("on %Y-%m-%d %H:%M"))
    path = os.path.join(report_dir, REPORT_FILE)
    write_text(path, render_report(data))
    return BuiltReport(report=path, plots=written, cells=cells)

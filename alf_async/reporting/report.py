"""The markdown text of the EPS report (pure: data in, text out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from alf_async.reporting.eps_study import Cell, eps_table, time_split_table
from alf_async.reporting.run_metrics import RunSummary
from alf_async.reporting.tables import (
    fmt_int, fmt_number, markdown_table)
from alf_async.utils.formatting import format_duration

MIN_CURVE_POINTS = 3


@dataclass
class ReportInput:
    """Everything the report shows.

    Attributes:
        title: the study's name (e.g. the gin file).
        source: where the runs come from (a sentence).
        machine: ``machine.describe_machine()``.
        machine_note: a remark on the machine (e.g. it is not the runs' machine).
        runs: (run name, summary) in display order.
        cells: ``eps_study.make_cells`` of the summaries.
        settings: extra set-up facts (name -> value), e.g. env and unroll length.
        plots: figure name -> PNG file name relative to the report.
        curve_points: run name -> number of points of its return curve.
        warmup: the ``--warmup_iterations`` given (None: N per run).
        threshold: the return threshold, if any.
    """

    title: str
    source: str
    machine: Dict[str, object]
    runs: Sequence[Tuple[str, RunSummary]]
    cells: Sequence[Cell]
    settings: Dict[str, str] = field(default_factory=dict)
    machine_note: str = ""
    plots: Dict[str, str] = field(default_factory=dict)
    curve_points: Dict[str, int] = field(default_factory=dict)
    warmup: Optional[int] = None
    threshold: Optional[float] = None
    generated: str = ""


def machine_section(machine: Dict[str, object], note: str = "") -> str:
    versions = machine.get("versions") or {}
    gpus = machine.get("gpus") or []
    rows = [
        ["CPUs", f"{machine.get('cpu_count')} ({machine.get('cpus_usable')} usable by "
                 "this process)"],
        ["CPU model", machine.get("cpu_model", "unknown")],
        ["memory", f"{machine.get('memory_gb')} GiB"],
        ["GPU", ", ".join(gpus) if gpus else "none"],
        ["OS", machine.get("os", "unknown")],
        ["python", machine.get("python", "unknown")],
    ] + [[name, version or "not installed"] for name, version in versions.items()]
    text = "## Machine\n\n" + markdown_table(["", ""], rows)
    return text + (f"\n{note}\n" if note else "")


def _warmup_sentence(warmup: Optional[int]) -> str:
    skipped = (f"the first {warmup} iteration(s) of each run" if warmup is not None
               else "the first N iterations of each run (N = its number of actors)")
    return (f"T is the mean wall-clock time between two consecutive training iterations "
            f"of the learner, skipping {skipped} as warm-up: the first iteration "
            "includes starting the actor processes and their envs, and with N actors "
            "the first N batches are all collected from the start. EPS = K / T "
            "(environments per second seen by the learner); env steps/s = "
            "K x unroll_length / T.")


def _ratio_sentences(cells: Sequence[Cell]) -> List[str]:
    by_key = {(c.num_envs, c.num_actors): c for c in cells}
    out = []
    for c in cells:
        sync = by_key.get((c.num_envs, 1))
        if c.num_actors >= 2 and sync and sync.EPS and c.EPS:
            out.append(f"- K = {c.num_envs}: async (N = {c.num_actors}) sees "
                       f"{c.EPS / sync.EPS:.2f}x the EPS of sync "
                       f"({fmt_number(c.EPS)} vs {fmt_number(sync.EPS)} envs/s), with a "
                       f"mean policy lag of {fmt_number(c.lag)} iterations.")
    return out


NOT_REACHED = "not reached"


def runs_table(runs: Sequence[Tuple[str, RunSummary]], threshold: Optional[float]) -> str:
    headers = ["run", "K", "N", "iterations", "env steps", "wall time", "final return",
               "T (s)", "EPS", "lag"]
    if threshold is not None:
        headers += [f"time to {threshold:g}", f"steps to {threshold:g}"]
    rows = []
    for name, s in runs:
        row = [name, fmt_int(s.num_envs), fmt_int(s.num_actors), fmt_int(s.iterations),
               fmt_int(s.env_steps), format_duration(s.wall_time_s),
               fmt_number(s.final_return, 1), fmt_number(s.mean_T, 3),
               fmt_number(s.mean_EPS, 2), fmt_number(s.mean_lag, 2)]
        if threshold is not None:
            row += ([NOT_REACHED] * 2 if s.steps_to_threshold is None else
                    [format_duration(s.time_to_threshold_s), fmt_int(s.steps_to_threshold)])
        rows.append(row)
    return markdown_table(headers, rows, [False] + [True] * (len(headers) - 1))


def render_report(data: ReportInput) -> str:
    """The whole report as markdown."""
    parts = [f"# EPS report: {data.title}\n",
             f"Generated{' ' + data.generated if data.generated else ''} by "
             f"`python -m alf_async.bin.eps_report`. {data.source}\n",
             machine_section(data.machine, data.machine_note)]

    setup = ["## Set-up\n"]
    for name, value in data.settings.items():
        setup.append(f"- {name}: {value}")
    setup.append(f"- runs: {len(data.runs)}")
    setup.append("")
    setup.append(_warmup_sentence(data.warmup))
    parts.append("\n".join(setup) + "\n")

    throughput = ["## Throughput\n"]
    if data.cells:
        headers, rows = eps_table(data.cells)
        throughput.append(markdown_table(headers, rows, [False] + [True] * (len(headers) - 1)))
        if any(c.warmup_fallback for c in data.cells):
            throughput.append("\\* some runs of this row had no iteration after the "
                              "warm-up; their last iteration is used instead. Run longer "
                              "for a steady-state measure.\n")
        ratios = _ratio_sentences(data.cells)
        if ratios:
            throughput.append("\n".join(ratios) + "\n")
        if "eps_vs_k" in data.plots:
            throughput.append(f"![EPS vs K]({data.plots['eps_vs_k']})\n")
    else:
        throughput.append("No run has throughput data (metrics.jsonl with T).\n")
    parts.append("\n".join(throughput))

    if data.cells:
        headers, rows = time_split_table(data.cells)
        parts.append(
            "## Where the time goes\n\n"
            "Mean seconds per training iteration (after warm-up). U = actor unroll "
            "time, L = learner train time. Sync pays about U + L per iteration; async "
            "overlaps the N actors' unrolls with training, so its ideal T is "
            "max(L, (U + L) / N). Actor wait is the time an actor waits for new "
            "weights after handing over its batch; learner wait is the time the learner "
            "waits for the next batch. Lag is the learner version at training minus "
            "the version that collected the batch.\n\n"
            + markdown_table(headers, rows,
                             [False, False] + [True] * (len(headers) - 3) + [False]))

    curves = ["## Learning curves\n"]
    long_enough = [n for n, k in data.curve_points.items() if k >= MIN_CURVE_POINTS]
    if long_enough and ("return_vs_time" in data.plots or "return_vs_steps" in data.plots):
        for key, caption in (("return_vs_time", "Return vs wall-clock time"),
                             ("return_vs_steps", "Return vs env steps")):
            if key in data.plots:
                curves.append(f"![{caption}]({data.plots[key]})\n")
    else:
        curves.append(f"The runs are too short for learning curves (fewer than "
                      f"{MIN_CURVE_POINTS} iterations with finished episodes); run "
                      "longer to get them.\n")
    parts.append("\n".join(curves))

    parts.append("## Runs\n\n" + runs_table(data.runs, data.threshold))
    return "\n".join(parts)

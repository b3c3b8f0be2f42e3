"""Measure what async training buys on this machine: ALF's async-guide study.

Run the study (a sweep over K and N, one run at a time) and write the report::

    python -m alf_async.bin.eps_report --gin_file=ppo_bullet_humanoid.gin \\
        --root_dir=runs/eps_humanoid --num_envs=32,48,96 --num_actors=1,2 \\
        --num_iterations=30

Or build the report from existing runs (a sweep directory, or any directory of
run directories)::

    python -m alf_async.bin.eps_report --from_dir=runs/eps_humanoid

The report (``eps_report.md`` and PNG figures, in ``--report_dir``, default the
runs' directory) names the machine and gives, per K, sync and async T and EPS =
K / T and their ratio, the time split of an iteration that explains the ratio, and
learning curves when the runs are long enough. Re-running the same command skips
the finished runs.

Exit status: 0 report written; 1 some run failed (the report covers the others);
2 bad input; 130/143 interrupted.
"""

from __future__ import annotations

import sys
from typing import List, Optional, Sequence

from absl import flags

from alf_async.bin.common import ExitCode, run_command, define_run_flags
from alf_async.bin.common import user_error as _user_error

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command's flags (defined at start-up, not import)."""
    define_run_flags()
    flags.DEFINE_string("root_dir", None, "directory of the study's runs (a sweep)")
    flags.DEFINE_list("num_envs", ["32", "48", "96"], "K values (envs per actor)")
    flags.DEFINE_list("num_actors", ["1", "2"], "N values (1 = sync)")
    flags.DEFINE_integer("num_iterations", 30, "budget of each run in training "
                         "iterations (0: no limit; then set --num_env_steps)")
    flags.DEFINE_integer("num_env_steps", 0, "budget of each run in env steps (0: no "
                         "limit)")
    flags.DEFINE_string("from_dir", None, "build the report from the runs under this "
                        "directory instead of running them")
    flags.DEFINE_string("report_dir", None, "where to write the report (default: the "
                        "runs' directory)")


def user_error(message: str) -> int:
    return _user_error(message, command="alf_async.eps_report")


def _ints(values: Sequence[str], flag: str, minimum: int) -> List[int]:
    try:
        ints = [int(v) for v in values]
    except ValueError:
        raise ValueError(f"--{flag} takes comma-separated integers, got "
                         f"{','.join(values)!r}") from None
    if not ints or any(i < minimum for i in ints):
        raise ValueError(f"--{flag} values must be integers >= {minimum}")
    return sorted(set(ints))


def study_sweeps(num_envs: Sequence[int], num_actors: Sequence[int]) -> List[str]:
    """The --sweep values of the study."""
    return [f"Trainer.num_envs=[{', '.join(map(str, num_envs))}]",
            f"Trainer.num_actors=[{', '.join(map(str, num_actors))}]"]


def report(root: str, report_dir: Optional[str], warmup: Optional[int],
           threshold: Optional[float]) -> int:
    """Build and announce the report; returns an exit status."""
    from alf_async.reporting.eps_report import ReportError, build_report
    from alf_async.reporting.eps_study import eps_table
    from alf_async.reporting.tables import markdown_table

    try:
        built = build_report(root, report_dir, warmup, threshold)
    except ReportError as e:
        return user_error(str(e))
    if built.cells:
        headers, rows = eps_table(built.cells)
        print(markdown_table(headers, rows))
    print(f"report: {built.report}", file=sys.stderr)
    for path in built.plots.values():
        print(f"figure: {path}", file=sys.stderr)
    return 0


def run_study(root_dir: str, gin_files: Sequence[str], num_envs: Sequence[int],
              num_actors: Sequence[int], num_iterations: int, num_env_steps: int,
              gin_params: Sequence[str] = (), max_parallel: int = 1,
              report_dir: Optional[str] = None, warmup: Optional[int] = None,
              threshold: Optional[float] = None, stop_timeout_s: float = 60.0) -> int:
    """Run the study's sweep, then build its report; returns an exit status."""
    from alf_async.bin.sweep import sweep

    if num_iterations < 0 or num_env_steps < 0 or not (num_iterations or num_env_steps):
        return user_error("set a budget: --num_iterations and/or --num_env_steps > 0")
    if max_parallel > 1:
        print(f"alf_async.eps_report: warning: --max_parallel={max_parallel} runs share "
              "the machine: T and EPS will be slower than alone", file=sys.stderr)
    budget = [f"Trainer.num_iterations={num_iterations}",
              f"Trainer.num_env_steps={num_env_steps}"]
    status = sweep(root_dir, gin_files, study_sweeps(num_envs, num_actors),
                   budget + list(gin_params), max_parallel, threshold, warmup,
                   stop_timeout_s)
    if status == ExitCode.BAD_INPUT:
        return status
    report_status = report(root_dir, report_dir, warmup, threshold)
    return status or report_status


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}"))
    if FLAGS.from_dir:
        if FLAGS.gin_file or FLAGS.root_dir:
            sys.exit(user_error("--from_dir builds the report from existing runs; "
                                "do not combine it with --gin_file or --root_dir"))
        sys.exit(report(FLAGS.from_dir, FLAGS.report_dir, FLAGS.warmup_iterations,
                        FLAGS.return_threshold))
    if not FLAGS.gin_file or not FLAGS.root_dir:
        sys.exit(user_error("give --gin_file and --root_dir to run the study, or "
                            "--from_dir to report on existing runs"))
    try:
        num_envs = _ints(FLAGS.num_envs, "num_envs", 1)
        num_actors = _ints(FLAGS.num_actors, "num_actors", 1)
    except ValueError as e:
        sys.exit(user_error(str(e)))
    sys.exit(run_study(FLAGS.root_dir, FLAGS.gin_file, num_envs, num_actors,
                       FLAGS.num_iterations, FLAGS.num_env_steps, FLAGS.gin_param or [],
                       FLAGS.max_parallel, FLAGS.report_dir, FLAGS.warmup_iterations,
                       FLAGS.return_threshold, FLAGS.stop_timeout_s))


def run_main() -> None:
    define_flags()
    run_command(main)


if __name__ == "__main__":
    run_main()

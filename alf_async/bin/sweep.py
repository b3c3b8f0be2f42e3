"""Run a grid of trainings and tabulate them.

    python -m alf_async.bin.sweep --gin_file=ppo_bullet_inverted_pendulum.gin \\
        --sweep='Trainer.num_envs=[8, 16]' \\
        --sweep='Trainer.num_actors,:mode=[(1, sync), (2, async)]' \\
        --root_dir=runs/sweep [--gin_param=...] [--max_parallel=2] [--return_threshold=900]

Sweep syntax (``--sweep``, repeatable; the grid is the product of the sweeps):

- ``NAME=[v1, v2, ...]``: a gin binding and its values (gin source text).
- ``NAME1,NAME2=[(a1, b1), (a2, b2)]``: tied bindings that vary together.
- a name starting with ``:`` is a label: not passed to gin, it names the run.

Each run is a ``python -m alf_async.bin.train`` process writing to
``<root_dir>/<run name>`` (e.g. ``num_envs=8,mode=sync``). Running the same
command again skips finished runs and resumes unfinished ones. At the end the
summary (``summary.csv``, ``summary.md``) is written and printed.

Exit status: 0 every run done; 1 some run failed or was killed; 2 bad input;
130 stopped by Ctrl-C; 143 stopped by SIGTERM. Ctrl-C stops the running trainings
cleanly (each writes a final checkpoint); Ctrl-C twice kills them.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import List, Optional, Sequence

from absl import flags

from alf_async.bin.common import ExitCode, run_command, define_run_flags
from alf_async.bin.common import user_error as _user_error

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command's flags (defined at start-up, not import, to allow importing
    several commands in one process)."""
    define_run_flags()
    flags.DEFINE_multi_string("sweep", None, "a swept binding, e.g. "
                              "'Trainer.num_envs=[32, 64]' (repeatable)")
    flags.DEFINE_string("root_dir", None, "the sweep directory")
    flags.DEFINE_bool("dry_run", False, "print the runs and their commands, run nothing")


def user_error(message: str) -> int:
    return _user_error(message, command="alf_async.sweep")


def sweep(root_dir: str, gin_files: Sequence[str], sweeps: Sequence[str],
          gin_params: Sequence[str] = (), max_parallel: int = 1,
          return_threshold: Optional[float] = None, warmup: Optional[int] = None,
          stop_timeout_s: float = 60.0, dry_run: bool = False) -> int:
    """Run the sweep and print its summary; returns the exit status."""
    from alf_async.config import ConfigError, find_gin_file
    from alf_async.sweep import summary as sweep_summary
    from alf_async.sweep.grid import SweepSyntaxError, parse_sweep, run_specs
    from alf_async.reporting.machine import describe_machine
    from alf_async.reporting.run_metrics import MACHINE_FILE, SWEEP_FILE
    from alf_async.sweep.runner import SweepLockedError, SweepRunner
    from alf_async.utils.files import write_json

    if not gin_files:
        return user_error("--gin_file is required")
    if max_parallel < 1:
        return user_error(f"--max_parallel must be >= 1, got {max_parallel}")
    try:
        gin_paths = [find_gin_file(f) for f in gin_files]
        specs = run_specs([parse_sweep(s) for s in sweeps])
    except (ConfigError, SweepSyntaxError) as e:
        return user_error(str(e))
    runner = SweepRunner(root_dir, gin_paths, specs, gin_params, max_parallel,
                         stop_timeout_s)
    if dry_run:
        for spec in specs:
            print(f"{spec.name}: {' '.join(runner.command(spec))}")
        return 0
    os.makedirs(runner.root_dir, exist_ok=True)
    write_json(os.path.join(runner.root_dir, SWEEP_FILE), {
        "gin_files": gin_paths, "sweeps": list(sweeps), "gin_params": list(gin_params),
        "runs": [s.name for s in specs]})
    write_json(os.path.join(runner.root_dir, MACHINE_FILE), describe_machine())
    print(f"[sweep] {len(specs)} run(s) in {runner.root_dir}, {max_parallel} at a time",
          file=sys.stderr, flush=True)
    try:
        outcomes = runner.run()
    except SweepLockedError as e:
        return user_error(str(e))
    rows = sweep_summary.collect_rows(outcomes, warmup, return_threshold)
    csv_path, md_path = sweep_summary.write_summary(runner.root_dir, rows, return_threshold)
    print(sweep_summary.summary_markdown(rows, return_threshold))
    print(f"summary: {md_path} and {csv_path}", file=sys.stderr)
    if runner.stop_signal is not None:
        return ExitCode.SIGINT if runner.stop_signal == signal.SIGINT else ExitCode.SIGTERM
    return 0 if all(o.status == "done" for o in outcomes) else 1


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}"))
    if not FLAGS.root_dir:
        sys.exit(user_error("--root_dir is required"))
    sys.exit(sweep(FLAGS.root_dir, FLAGS.gin_file or [], FLAGS.sweep or [],
                   FLAGS.gin_param or [], FLAGS.max_parallel, FLAGS.return_threshold,
                   FLAGS.warmup_iterations, FLAGS.stop_timeout_s, FLAGS.dry_run))


def run_main() -> None:
    define_flags()
    run_command(main)


if __name__ == "__main__":
    run_main()

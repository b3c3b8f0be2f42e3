"""What every alf_async command shares: exit codes, the user-error printer,
logging set-up (``utils.run_log``, shared with the Python API) and the flags
common to commands that start training runs.

Exit statuses (``ExitCode``): 0 done; 1 the run failed; 2 bad input
(configuration, files, arguments); 130 Ctrl-C; 143 SIGTERM.
"""

from __future__ import annotations

import atexit
import gc
import sys
from typing import Callable, List

from alf_async.utils.exit_codes import ExitCode
from alf_async.utils.run_log import setup_logging

__all__ = ["ExitCode", "user_error", "setup_logging", "define_run_flags", "run_command"]


def run_command(main: Callable[[List[str]], None]) -> None:
    """Run a command's ``main`` under absl, and end the process quickly.

    The last exit handler to run freezes the garbage collector's objects: the
    interpreter's final collections over torch's objects would take most of a
    second, and every file and child has been closed by then (the other exit
    handlers, multiprocessing's and logging's, run before it).
    """
    from absl import app

    show_command_flags_in_help(main.__module__)
    atexit.register(gc.freeze)  # registered first, so it runs last
    app.run(main)


def show_command_flags_in_help(command_module: str) -> None:
    """Make ``--help`` print the command's description and flags under any
    program name.

    absl's ``--help`` shows the docstring of ``__main__`` and the flags defined
    by the module it takes for the main one, ``sys.argv[0]``. That holds for
    ``python -m alf_async.bin.<command>``, but a console script (``alf-train``)
    is a generated file with neither, so ``--help`` printed only a usage line.
    The flags of ``command_module`` and the shared ones defined here
    (``define_run_flags``) become key flags of the program, and the command's
    docstring stands in for a missing one of ``__main__``.
    """
    from absl import flags

    program = sys.argv[0]
    for module_name in (command_module, __name__):
        for flag in flags.FLAGS.get_flags_for_module(module_name):
            flags.FLAGS.register_key_flag_for_module(program, flag)
    main_module = sys.modules.get("__main__")
    command = sys.modules.get(command_module)
    if main_module is not None and command is not None and not (main_module.__doc__ or "").strip():
        main_module.__doc__ = command.__doc__


def user_error(message: str, command: str = "alf_async") -> int:
    """Print ``<command>: error: <message>`` as one paragraph; returns exit code 2.

    gin's call-chain notes ("In call to configurable ...") are dropped and the
    message's lines are joined, so the user reads one sentence or paragraph.
    """
    lines = [line.strip() for line in str(message).strip().splitlines()
             if line.strip() and not line.strip().startswith("In call to configurable")]
    print(f"{command}: error: {' '.join(lines)}", file=sys.stderr, flush=True)
    return ExitCode.BAD_INPUT


def define_run_flags() -> None:
    """Flags of commands that start training runs as a sweep (sweep, eps_report).

    Each is defined once, here; a command calls this in its ``define_flags``.
    """
    from absl import flags

    flags.DEFINE_multi_string("gin_file", None, "gin file(s) of every run")
    flags.DEFINE_multi_string("gin_param", None, "a binding common to every run")
    flags.DEFINE_integer("max_parallel", 1, "runs at a time (> 1 distorts timings)")
    flags.DEFINE_integer("warmup_iterations", None, "iterations skipped when averaging "
                         "T (default: the run's number of actors)")
    flags.DEFINE_float("return_threshold", None, "report env steps and wall time until "
                       "the mean return of the last 100 episodes first reaches this "
                       "value (alias: --target_return)")
    flags.DEFINE_alias("target_return", "return_threshold")
    flags.DEFINE_float("stop_timeout_s", 60.0, "on Ctrl-C, seconds to wait for runs to "
                       "stop before killing them")

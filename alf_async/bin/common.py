"""What every alf_async command shares: exit codes, the user-error printer,
logging set-up and the flags common to commands that start training runs.

Exit statuses (``ExitCode``): 0 done; 1 the run failed; 2 bad input
(configuration, files, arguments); 130 Ctrl-C; 143 SIGTERM.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
from typing import Callable, List, Optional

from alf_async.utils.exit_codes import ExitCode

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


class RunLogFileHandler(logging.FileHandler):
    """``<root_dir>/log.txt``: a file handler that, when a line cannot be written
    (no space left on the device, ...), says so once on stderr in one line and
    stops writing the file, instead of printing a traceback for every line.
    The lines still reach stderr through the stream handler."""

    def __init__(self, filename: str):
        super().__init__(filename)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def flush(self) -> None:
        if not self.failed:
            super().flush()

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            if not self.failed:  # the failure was not reported yet
                raise

    def handleError(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        self.failed = True
        error = sys.exc_info()[1]
        reason = (getattr(error, "strerror", None) or error) if error else "unknown error"
        print(f"alf_async: warning: could not write {self.baseFilename}: {reason}; "
              "log lines go to stderr only from now on", file=sys.stderr, flush=True)


def setup_logging(root_dir: Optional[str]) -> logging.Logger:
    """Log INFO to stderr and, with a run directory, to <root_dir>/log.txt
    (``RunLogFileHandler``: a failed write of it is one warning, not a traceback)."""
    logger = logging.getLogger("alf_async")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(fmt)
    logger.addHandler(stream)
    if root_dir:
        os.makedirs(root_dir, exist_ok=True)
        file_handler = RunLogFileHandler(os.path.join(root_dir, "log.txt"))
        file_handler.setFormatter(fmt)
        logger.addHandler(file_handler)
    return logger


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

"""Exit statuses of every alf_async command (train, sweep, eps_report, play)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # the run failed (an actor out of restarts, a learner error, ...)
    BAD_INPUT = 2  # configuration, files or arguments; nothing was run
    SIGINT = 130  # stopped by Ctrl-C (after a final checkpoint where one was due)
    SIGTERM = 143  # stopped by SIGTERM (likewise)

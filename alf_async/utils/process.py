"""Helpers for the child processes alf_async starts.

Every child (actor, env worker) calls ``init_child_process()`` first: it ignores
SIGINT (Ctrl-C reaches the whole process group; the parent decides how to stop)
and asks Linux to send ``death_signal`` when the parent dies, so that no child
outlives a parent killed with SIGKILL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing as mp
import os
import signal
import sys
import time
from typing import Iterable, Optional

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int) -> bool:
    """Deliver ``sig`` to this process when its parent exits (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except OSError:
        return False


def init_child_process(death_signal: int = signal.SIGKILL,
                       expected_parent: Optional[int] = None) -> None:
    """Common set-up for every child process of alf_async."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal(death_signal)
    # The parent may have died before prctl took effect.
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)


def mp_context() -> mp.context.BaseContext:
    """The multiprocessing context of alf_async: spawn (safe with torch threads)."""
    return mp.get_context("spawn")


def stop_processes(processes: Iterable[mp.process.BaseProcess],
                   grace_s: float = 5.0) -> None:
    """Join processes, escalating to SIGTERM and then SIGKILL after ``grace_s``.

    The caller should already have asked them to stop (an event or a message).
    """
    processes = [p for p in processes if p is not None and p.pid is not None]
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join(2.0)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def seconds_since_process_start() -> float:
    """Seconds since this process was started (its interpreter launched)."""
    import psutil

    return max(0.0, time.time() - psutil.Process().create_time())


def describe_exit(exitcode: Optional[int]) -> str:
    """'exit code 3' or 'signal SIGKILL' for a process's exit code."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"

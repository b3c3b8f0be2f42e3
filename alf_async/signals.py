"""Graceful stop on Ctrl-C and SIGTERM.

While a run trains, ``GracefulStop`` turns SIGINT into ``KeyboardInterrupt`` and
SIGTERM into ``TerminationRequested``, but never in the middle of a training
iteration: a signal that arrives inside ``iteration()`` is deferred and raised when
the iteration ends, so the final checkpoint always holds a consistent learner.
A second signal while stopping (or a second Ctrl-C) calls ``kill_now`` (which
should kill every child at once) and exits with 130 / 143.

A stop raised from the handler can be lost or disguised when the signal arrives
while the main thread is inside a library's C code that checks for signals: Ray's
``ray.wait``/``ray.get`` pass on only KeyboardInterrupt and SystemExit, so a
TerminationRequested raised there comes out as ``SystemError: ... returned a
result with an exception set`` (its ``__cause__`` the stop), or is discarded by
other such code. So the requested stop is also remembered: the next
``iteration()`` block raises it before it starts, and ``unwrapping_stops()``
turns an exception caused by a stop back into the stop itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Callable, Iterator, Optional

import psutil

from alf_async.utils.exit_codes import ExitCode
from alf_async.utils.shared_memory import sweep_stale_blocks


class TerminationRequested(Exception):
    """SIGTERM was received; the run stops with a final checkpoint."""


class GracefulStop:
    """Installs SIGINT/SIGTERM handlers for the duration of a ``with`` block.

    Args:
        kill_now: called on a second signal, before ``os._exit``.
    """

    def __init__(self, kill_now: Callable[[], None]):
        self.kill_now = kill_now
        self.stopping = False
        self._interrupts = 0
        self._in_iteration = False
        self._deferred: Optional[BaseException] = None
        self._requested: Optional[BaseException] = None  # raised by the handler
        self._previous = {}

    def __enter__(self) -> "GracefulStop":
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        self.stopping = True
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGINT:
            self._interrupts += 1
        if self.stopping or self._interrupts >= 2:
            self.kill_now()
            os._exit(ExitCode.SIGINT if signum == signal.SIGINT else ExitCode.SIGTERM)
        stop = KeyboardInterrupt() if signum == signal.SIGINT else TerminationRequested()
        if self._in_iteration:
            self._deferred = stop
            return
        self._requested = stop  # raised again by iteration() if this one is lost
        raise stop

    @contextlib.contextmanager
    def unwrapping_stops(self) -> Iterator[None]:
        """Re-raise an exception whose cause chain holds a stop (library code
        wrapped it, see the module docstring) as that stop."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - re-raised unless a stop caused it
            stop = _stop_in_chain(e)
            if stop is None:
                raise
            self._requested = None
            raise stop from None

    @contextlib.contextmanager
    def iteration(self) -> Iterator[None]:
        """A block that a signal does not interrupt; a deferred stop is raised
        after it, and a stop requested before it (if not acted on) before it."""
        if self._requested is not None and not self.stopping:
            stop, self._requested = self._requested, None
            raise stop
        self._in_iteration = True
        try:
            yield
        finally:
            self._in_iteration = False
        if self._deferred is not None:
            stop, self._deferred = self._deferred, None  # raised once
            raise stop


def _stop_in_chain(error: BaseException) -> Optional[BaseException]:
    """The KeyboardInterrupt / TerminationRequested among ``error``'s causes."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (KeyboardInterrupt, TerminationRequested)):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def kill_children_now() -> None:
    """SIGKILL every descendant process and remove this process's shared memory.

    The emergency exit of a second Ctrl-C: nothing is waited for but the kills.
    """
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=5)
    sweep_stale_blocks(include_own=True)
    print("[alf_async] second interrupt: children killed, exiting now", flush=True)

"""GracefulStop: a stop that a library's C code swallowed is still acted on.

Ray's ``ray.wait`` / ``ray.get`` check for signals from C code and discard any
exception the Python handler raises other than KeyboardInterrupt ("Exception
ignored in ... check_signals"): a SIGTERM that arrived while the trainer waited
for a Ray actor was lost, and the run kept training (the intermittent hang of
tests/test_ray_train.py). Here the real signal is sent to this process and the
handler's exception is swallowed the same way; the next iteration must stop.
"""

from __future__ import annotations

import os
import signal

import pytest

from alf_async.signals import GracefulStop, TerminationRequested


@pytest.mark.parametrize("signum, stop", [(signal.SIGTERM, TerminationRequested),
                                          (signal.SIGINT, KeyboardInterrupt)])
def test_a_swallowed_stop_is_raised_by_the_next_iteration(signum, stop):
    with GracefulStop(kill_now=lambda: None) as guard:
        try:
            os.kill(os.getpid(), signum)
        except (TerminationRequested, KeyboardInterrupt):
            pass  # lost in foreign code
        with pytest.raises(stop):
            with guard.iteration():
                raise AssertionError("the iteration ran after a stop was requested")
        with guard.iteration():  # raised once: the run's own stop path goes on
            pass


def test_a_signal_inside_an_iteration_is_raised_after_it_once():
    ran = []
    with GracefulStop(kill_now=lambda: None) as guard:
        with pytest.raises(TerminationRequested):
            with guard.iteration():
                os.kill(os.getpid(), signal.SIGTERM)
                ran.append("rest of the iteration")
        with guard.iteration():
            ran.append("next")
    assert ran == ["rest of the iteration", "next"]


def test_no_stop_is_raised_again_while_stopping():
    with GracefulStop(kill_now=lambda: None) as guard:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except TerminationRequested:
            pass
        guard.stopping = True  # the run's stop path (final checkpoint, drain)
        with guard.iteration():
            pass


def test_a_stop_wrapped_by_library_code_comes_out_as_the_stop():
    """Ray's C code turns a TerminationRequested raised by the handler into
    ``SystemError(... returned a result with an exception set)`` caused by it."""
    with GracefulStop(kill_now=lambda: None) as guard:
        with pytest.raises(TerminationRequested):
            with guard.unwrapping_stops():
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                except TerminationRequested as stop:
                    raise SystemError("returned a result with an exception set") from stop
        with guard.iteration():  # acted on: not raised again
            pass
        with pytest.raises(ValueError):  # anything else goes through unchanged
            with guard.unwrapping_stops():
                raise ValueError("not a stop")

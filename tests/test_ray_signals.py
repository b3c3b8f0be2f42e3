"""A SIGTERM that reaches the trainer while it waits inside Ray is acted on.

The real fault: the trainer's main thread waits in ``ray.wait`` (as the Ray pool
does between batches) when SIGTERM arrives. Ray's C code runs the Python handler
and passes on only KeyboardInterrupt and SystemExit: the handler's
TerminationRequested comes out disguised (a SystemError caused by it) or not at
all. Either way the run must see the stop, at the latest at its next iteration.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from alf_async.signals import GracefulStop, TerminationRequested  # noqa: E402

# One Ray cluster at a time: every test of these modules on one xdist worker.
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture
def local_ray():
    ray.init(address="local", num_cpus=1, include_dashboard=False,
             _node_ip_address="127.0.0.1", logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.timeout(120)
def test_sigterm_inside_ray_wait_stops_the_run(local_ray):
    @ray.remote
    def unroll_forever():
        time.sleep(60)

    ref = unroll_forever.remote()
    seen = []
    with GracefulStop(kill_now=lambda: None) as guard:
        signal.signal(signal.SIGTERM, guard._on_signal)  # ray.init took SIGTERM over
        # The signal comes while the main thread waits in Ray (2 s is ample for
        # it to get there; if it came earlier, it would be raised in Python code,
        # which must stop the run just the same).
        timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        try:
            with pytest.raises(TerminationRequested):
                with guard.unwrapping_stops():
                    ray.wait([ref], timeout=6)  # the pool waits <= 1 s at a time
                    seen.append("wait returned")
                    with guard.iteration():
                        seen.append("an iteration ran after the signal")
        finally:
            timer.cancel()
    assert "an iteration ran after the signal" not in seen
    ray.cancel(ref, force=True)

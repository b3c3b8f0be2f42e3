"""How bench scripts run their child processes (training runs, peer
libraries' scripts): to the end, or stopped cleanly on a timeout, a stop
condition, Ctrl-C, SIGTERM or an error, so that no child outlives its bench.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

import psutil

from alf_async.utils.shared_memory import block_owner_pid, list_blocks

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
logger = logging.getLogger("bench")


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While inside: SIGTERM raises ``SystemExit(143)`` in the main thread.

    Python's default SIGTERM ends the process at once, without running
    ``except`` or ``finally``: a bench killed while it waits on a child would
    leave the child training. Inside this block the bench stops its child
    first, as it does on Ctrl-C. (Outside the main thread, nothing changes.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_child(cmd: Sequence[str], env: Optional[Dict[str, str]] = None,
              timeout_s: Optional[float] = None, stop_when=None, poll_s: float = 5.0,
              capture_stdout: bool = False, quiet: bool = False,
              cwd: Optional[str] = REPO_ROOT) -> Dict[str, Any]:
    """Run ``cmd`` (in ``cwd``) to its end, or stop it (SIGTERM, then SIGKILL
    after a grace period) after ``timeout_s`` seconds, when
    ``stop_when()`` turns true (checked every ``poll_s`` seconds), or when this
    process gets Ctrl-C, SIGTERM or any exception while waiting.

    The child's stderr (discarded if ``quiet``), and its stdout unless
    ``capture_stdout``, go to our stderr. Returns {"returncode", "wall_s",
    "stopped_early", "timed_out"} and, with ``capture_stdout``, "stdout" (text).
    """
    start = time.monotonic()
    stopped_early = timed_out = False
    with sigterm_raises():
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=env, text=capture_stdout,
            stdout=subprocess.PIPE if capture_stdout else sys.stderr.fileno(),
            stderr=subprocess.DEVNULL if quiet else sys.stderr.fileno())
        chunks: List[str] = []
        reader = None
        if capture_stdout:  # drained beside the wait, so a chatty child never blocks
            reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()),
                                      daemon=True)
            reader.start()
        try:
            while True:
                try:
                    proc.wait(timeout=poll_s)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    logger.warning("run exceeded %.0f s; stopping it", timeout_s)
                    timed_out = True
                    _terminate(proc)
                    break
                if stop_when is not None and stop_when():
                    logger.info("stop condition met; stopping the run")
                    stopped_early = True
                    _terminate(proc)
                    break
        except BaseException:
            _terminate(proc)
            raise
        finally:
            if reader is not None:
                reader.join()
    status: Dict[str, Any] = {"returncode": proc.returncode,
                              "wall_s": time.monotonic() - start,
                              "stopped_early": stopped_early, "timed_out": timed_out}
    if capture_stdout:
        status["stdout"] = "".join(chunks)
    return status


def run_peer_json(cmd: Sequence[str], timeout_s: Optional[float] = None,
                  quiet: bool = False) -> Dict[str, Any]:
    """Run a peer's script (another library's, in its own virtualenv; see
    bench/peers) from the current directory and return the JSON object on the
    last line of its stdout that starts with "{". A failed, timed-out or silent
    run raises SystemExit naming the command.
    """
    logger.info("running: %s", " ".join(cmd))
    status = run_child(cmd, timeout_s=timeout_s, capture_stdout=True, quiet=quiet,
                       cwd=None)
    lines = [line for line in status["stdout"].splitlines() if line.startswith("{")]
    if status["returncode"] != 0 or status["timed_out"] or not lines:
        why = (f"stopped after {timeout_s:.0f} s" if status["timed_out"]
               else f"exit {status['returncode']}" if status["returncode"] != 0
               else "no JSON line on its stdout")
        raise SystemExit(f"{' '.join(cmd[:2])} failed ({why})")
    return json.loads(lines[-1])


def _terminate(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM (the trainer checkpoints and stops its children), then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class DescendantWatch:
    """Every process seen below a run's root process (pid -> creation time), so
    that after the run a bench can tell whether any of them outlived it or left
    a shared-memory block behind. Call ``record()`` while the run lives (each
    call adds the descendants alive then); a pid reused by an unrelated process
    later does not count, its creation time differs.
    """

    def __init__(self, root_pid: int):
        self.root_pid = root_pid
        self.seen: Dict[int, float] = {}

    def record(self, pids: Optional[Iterable[int]] = None) -> None:
        """Add ``pids``, or (None) every descendant of the root alive now."""
        if pids is None:
            try:
                pids = [p.pid for p in psutil.Process(self.root_pid).children(recursive=True)]
            except psutil.Error:
                return
        for pid in pids:
            try:
                self.seen.setdefault(int(pid), psutil.Process(int(pid)).create_time())
            except psutil.Error:
                pass

    def alive(self) -> List[int]:
        """The pids seen that still run (zombies excepted)."""
        left = []
        for pid, created in self.seen.items():
            try:
                proc = psutil.Process(pid)
                if (abs(proc.create_time() - created) < 0.01
                        and proc.status() != psutil.STATUS_ZOMBIE):
                    left.append(pid)
            except psutil.Error:
                pass
        return left

    def wait_gone(self, timeout_s: float = 15.0) -> List[int]:
        """Give the processes seen ``timeout_s`` seconds to end; the pids still
        running then."""
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.alive()

    def leftover_blocks(self) -> List[str]:
        """Shared-memory blocks whose owner is the root or a process seen."""
        owners = set(self.seen) | {self.root_pid}
        return [name for name in list_blocks() if block_owner_pid(name) in owners]

    def kill_alive(self) -> None:
        """SIGKILL whatever is still running (so it cannot disturb a next run)."""
        for pid in self.alive():
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass

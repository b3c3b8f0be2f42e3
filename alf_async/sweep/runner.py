"""Running a grid of training runs, each as its own ``alf_async.bin.train`` process.

Layout of a sweep directory::

    <root_dir>/sweep.json              the sweep's gin files, sweeps and bindings
    <root_dir>/machine.json            the machine (see ``machine.py``)
    <root_dir>/summary.csv, summary.md one row per run (written by ``sweep_summary``)
    <root_dir>/<run name>/             a normal run directory, plus:
        sweep_run.json                 status, exit code and train arguments
        train_output.txt               the train process's stdout and stderr

Each run is started as ``python -m alf_async.bin.train --root_dir=<run dir>
--gin_file=... --gin_param=...`` in a new session (process group), so that it has
its own operative config and process tree, and a terminal Ctrl-C reaches only the
sweep; if the sweep itself dies, its runs receive SIGTERM (a clean stop). Running the sweep again skips runs whose last attempt finished (exit 0)
with the same train arguments and resumes the others (train resumes from the
newest checkpoint). A run whose directory another training holds (its run lock,
``utils.run_lock``) is not started: it is marked "locked" and the sweep exits 1.

Stopping: on SIGINT or SIGTERM the sweep starts no new run, forwards the signal
once to every running train process (which stops after its current iteration with
a final checkpoint), waits up to ``stop_timeout_s``, then kills what is left with
SIGKILL on its whole process group. A second Ctrl-C skips the wait.
"""

from __future__ import annotations

import collections
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional, Sequence

from alf_async.sweep.grid import RunSpec
from alf_async.utils.exit_codes import ExitCode
from alf_async.utils import run_lock
from alf_async.utils.files import read_json, write_json

STATUS_FILE = "sweep_run.json"
OUTPUT_FILE = "train_output.txt"
LOCK_FILE = ".sweep.lock"


def status_of_exit(exit_code: int) -> str:
    """done (0), interrupted (Ctrl-C/SIGTERM), killed (by a signal), failed (other)."""
    if exit_code == ExitCode.OK:
        return "done"
    if exit_code in (ExitCode.SIGINT, ExitCode.SIGTERM):
        return "interrupted"
    if exit_code < 0:
        return "killed"
    return "failed"


@dataclass
class RunOutcome:
    """A grid point's state after this invocation of the sweep."""

    spec: RunSpec
    run_dir: str
    status: str  # done | failed | interrupted | killed | pending | running
    exit_code: Optional[int] = None
    elapsed_s: Optional[float] = None  # process time of the last attempt
    skipped: bool = False  # finished by an earlier invocation


class SweepLockedError(RuntimeError):
    """Another sweep is running in the same directory."""


def train_arguments(gin_files: Sequence[str], gin_params: Sequence[str]) -> List[str]:
    """The train command's flags other than --root_dir."""
    return ([f"--gin_file={f}" for f in gin_files]
            + [f"--gin_param={p}" for p in gin_params])


def is_finished(status: Optional[dict], arguments: Sequence[str]) -> bool:
    """A run is finished if its last attempt exited 0 with the same arguments."""
    return bool(status) and status.get("status") == "done" and \
        list(status.get("train_arguments", [])) == list(arguments)


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_with_parent() -> None:
    """In the child before exec: SIGTERM it (a clean stop) if the sweep dies."""
    from alf_async.utils.process import set_parent_death_signal

    set_parent_death_signal(signal.SIGTERM)


def _tail(path: str, lines: int = 6) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(collections.deque(f, maxlen=lines)).rstrip()
    except OSError:
        return ""


class SweepRunner:
    """Runs the grid's runs as subprocesses, ``max_parallel`` at a time.

    Args:
        root_dir: the sweep directory.
        gin_files: gin files of every run (absolute paths).
        specs: the grid points (``grid.run_specs``).
        gin_params: bindings common to every run, applied before the swept ones.
        max_parallel: runs at a time (1: one after the other).
        stop_timeout_s: after forwarding Ctrl-C/SIGTERM, how long to wait for
            the runs to stop before killing them.
        log: prints a progress line.
    """

    def __init__(self, root_dir: str, gin_files: Sequence[str], specs: Sequence[RunSpec],
                 gin_params: Sequence[str] = (), max_parallel: int = 1,
                 stop_timeout_s: float = 60.0,
                 log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)):
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        self.root_dir = os.path.abspath(root_dir)
        self.gin_files = list(gin_files)
        self.specs = list(specs)
        self.gin_params = list(gin_params)
        self.max_parallel = max_parallel
        self.stop_timeout_s = stop_timeout_s
        self.log = log
        self.stop_signal: Optional[int] = None
        self._signals_received = 0

    # -- paths and commands ---------------------------------------------------
    def run_dir(self, spec: RunSpec) -> str:
        return os.path.join(self.root_dir, spec.name)

    def arguments(self, spec: RunSpec) -> List[str]:
        return train_arguments(self.gin_files, self.gin_params + spec.gin_params)

    def command(self, spec: RunSpec) -> List[str]:
        return ([sys.executable, "-m", "alf_async.bin.train",
                 f"--root_dir={self.run_dir(spec)}"] + self.arguments(spec))

    # -- signals --------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        self._signals_received += 1
        if self.stop_signal is None:
            self.stop_signal = signum

    # -- running --------------------------------------------------------------
    def run(self) -> List[RunOutcome]:
        """Run every unfinished grid point; returns the outcomes in grid order."""
        os.makedirs(self.root_dir, exist_ok=True)
        lock = open(os.path.join(self.root_dir, LOCK_FILE), "w")
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SweepLockedError(
                    f"another sweep is running in {self.root_dir}") from None
            handlers = self._install_signal_handlers()
            try:
                return self._run_all()
            finally:
                for signum, handler in handlers.items():
                    signal.signal(signum, handler)
        finally:
            lock.close()

    def _install_signal_handlers(self) -> Dict[int, object]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _run_all(self) -> List[RunOutcome]:
        outcomes: Dict[str, RunOutcome] = {}
        queue: Deque[RunSpec] = collections.deque()
        for spec in self.specs:
            run_dir = self.run_dir(spec)
            status = read_json(os.path.join(run_dir, STATUS_FILE))
            if is_finished(status, self.arguments(spec)):
                outcomes[spec.name] = RunOutcome(spec, run_dir, "done", 0,
                                                 status.get("elapsed_s"), skipped=True)
                self.log(f"[sweep] {spec.name}: finished earlier, skipped")
            else:
                outcomes[spec.name] = RunOutcome(spec, run_dir, "pending")
                queue.append(spec)
        total = len(queue)
        running: Dict[str, subprocess.Popen] = {}
        started: Dict[str, float] = {}
        launched = 0
        while (queue or running) and self.stop_signal is None:
            while queue and len(running) < self.max_parallel and self.stop_signal is None:
                spec = queue.popleft()
                if self._locked_elsewhere(outcomes[spec.name]):
                    continue
                launched += 1
                running[spec.name] = self._launch(spec, launched, total)
                started[spec.name] = time.monotonic()
                outcomes[spec.name].status = "running"
            for name, proc in list(running.items()):
                if proc.poll() is not None:
                    self._finish(outcomes[name], proc, time.monotonic() - started[name])
                    del running[name]
            time.sleep(0.1)
        if running:
            self._stop(running)
            for name, proc in running.items():
                self._finish(outcomes[name], proc, time.monotonic() - started[name])
        return [outcomes[spec.name] for spec in self.specs]

    def _locked_elsewhere(self, outcome: RunOutcome) -> bool:
        """Whether another process trains in the run's directory now (its run
        lock, ``utils.run_lock``); such a run is not started but marked
        "locked", which makes the sweep exit 1 as a failed run does."""
        holder = run_lock.holder(outcome.run_dir)
        if holder is None:
            return False
        outcome.status = "locked"
        self.log(f"[sweep] {outcome.spec.name}: not started, its directory "
                 f"{outcome.run_dir} is in use by another training ({holder.describe()}); "
                 "run the sweep again once that training has ended")
        return True

    def _launch(self, spec: RunSpec, index: int, total: int) -> subprocess.Popen:
        run_dir = self.run_dir(spec)
        os.makedirs(run_dir, exist_ok=True)
        resuming = os.path.isdir(os.path.join(run_dir, "checkpoints"))
        write_json(os.path.join(run_dir, STATUS_FILE), {
            "name": spec.name, "params": spec.as_dict(), "status": "running",
            "exit_code": None, "train_arguments": self.arguments(spec),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        from alf_async.config import PACKAGE_ROOT

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [PACKAGE_ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        output_path = os.path.join(run_dir, OUTPUT_FILE)
        with open(output_path, "ab") as output:
            output.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} "
                         f"{' '.join(self.command(spec))}\n".encode())
            output.flush()
            proc = subprocess.Popen(self.command(spec), stdout=output,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True,
                                    preexec_fn=_stop_with_parent)
        self.log(f"[sweep] ({index}/{total}) {spec.name}: "
                 f"{'resumed' if resuming else 'started'} (pid {proc.pid}), "
                 f"output in {output_path}")
        return proc

    def _finish(self, outcome: RunOutcome, proc: subprocess.Popen, elapsed: float) -> None:
        code = proc.wait()
        _kill_group(proc.pid)  # anything the run left in its process group
        outcome.exit_code = code
        outcome.status = status_of_exit(code)
        outcome.elapsed_s = elapsed
        path = os.path.join(outcome.run_dir, STATUS_FILE)
        record = read_json(path) or {}
        record.update({"status": outcome.status, "exit_code": code, "elapsed_s": elapsed,
                       "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        write_json(path, record)
        message = f"[sweep] {outcome.spec.name}: {outcome.status} (exit code {code}) " \
                  f"after {elapsed:.1f}s"
        if outcome.status == "failed":
            tail = _tail(os.path.join(outcome.run_dir, OUTPUT_FILE))
            message += "; last output:\n    " + tail.replace("\n", "\n    ")
        self.log(message)

    def _stop(self, running: Dict[str, subprocess.Popen]) -> None:
        """Forward the stop signal, wait, then kill the remaining process groups."""
        signum = self.stop_signal or signal.SIGINT
        name = signal.Signals(signum).name
        self.log(f"[sweep] {name}: stopping {len(running)} running run(s) "
                 f"(up to {self.stop_timeout_s:.0f}s; Ctrl-C again to kill now)")
        first_count = self._signals_received
        for proc in running.values():
            if proc.poll() is None:
                try:
                    proc.send_signal(signum)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.stop_timeout_s
        while (any(p.poll() is None for p in running.values())
               and time.monotonic() < deadline and self._signals_received == first_count):
            time.sleep(0.1)
        for proc in running.values():
            if proc.poll() is None:
                self.log(f"[sweep] killing process group {proc.pid}")
            _kill_group(proc.pid)
            proc.wait()
        from alf_async.utils.shared_memory import sweep_stale_blocks

        sweep_stale_blocks()

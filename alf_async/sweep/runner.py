"""Running a sweep's trainings, each as its own ``alf_async.bin.train`` process.

Layout of a sweep directory::

    <root_dir>/sweep.json              the sweep's gin files, sweeps and bindings
    <root_dir>/machine.json            the machine (see ``machine.py``)
    <root_dir>/summary.csv, summary.md one row per run (written by ``sweep_summary``)
    <root_dir>/<run name>/             a normal run directory, plus:
        sweep_run.json                 status, exit code and train arguments
        train_output.txt               the train process's stdout and stderr

Each run is started as ``python -m alf_async.bin.train --root_dir=<run dir>
--gin_file=... --gin_param=...`` by a launcher (``launch.py``: a child process
of the sweep in its own session; ``ray_launch.py``: a Ray actor on a node of a
cluster), so that it has its own operative config and process tree, and a
terminal Ctrl-C reaches only the sweep; if the sweep itself dies, its runs
receive SIGTERM (a clean stop). Running the sweep again skips runs whose last
attempt finished (exit 0) with the same train arguments and resumes the others
(train resumes from the newest checkpoint). A run whose directory another
training holds (its run lock, ``utils.run_lock``) is not started: it is marked
"locked" and the sweep exits 1. A run whose Ray node is lost is started again
(from its last checkpoint where its directory is shared), at most
``MAX_NODE_LOSSES`` times.

Stopping: on SIGINT or SIGTERM the sweep starts no new run, forwards the signal
once to every running train process (which stops after its current iteration with
a final checkpoint), waits up to ``stop_timeout_s``, then kills what is left with
SIGKILL on its whole process group. A second Ctrl-C skips the wait.

``SweepRunner`` runs a fixed list of runs (the grid); ``search.SearchRunner``
extends it with runs drawn one at a time from a study and fed their metrics.
"""

from __future__ import annotations

import collections
import fcntl
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Sequence

from alf_async.sweep.grid import RunSpec
from alf_async.sweep.launch import LocalLauncher, TrialLost, TrialProcess
from alf_async.utils.exit_codes import ExitCode
from alf_async.utils import run_lock
from alf_async.utils.files import read_json, write_json

STATUS_FILE = "sweep_run.json"
OUTPUT_FILE = "train_output.txt"
LOCK_FILE = ".sweep.lock"
# Times one run is started again after losing its node before it counts as failed.
MAX_NODE_LOSSES = 3


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
    """A run's state after this invocation of the sweep."""

    spec: RunSpec
    run_dir: str
    # done | failed | interrupted | killed | pending | running | locked | pruned | paused
    status: str
    exit_code: Optional[int] = None
    elapsed_s: Optional[float] = None  # process time of the last attempt
    skipped: bool = False  # finished by an earlier invocation
    nodes: List[str] = field(default_factory=list)  # where it ran (Ray backend)


@dataclass
class ActiveRun:
    """A run whose train process is started: its process and bookkeeping."""

    spec: RunSpec
    process: TrialProcess
    started: float
    node_losses: int = 0
    stop_reason: str = ""  # set when the sweep stops it early (pruned)


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


def _tail(path: str, lines: int = 6) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(collections.deque(f, maxlen=lines)).rstrip()
    except OSError:
        return ""


class SweepRunner:
    """Runs the grid's runs, ``max_parallel`` at a time.

    Args:
        root_dir: the sweep directory.
        gin_files: gin files of every run (absolute paths).
        specs: the grid points (``grid.run_specs``).
        gin_params: bindings common to every run, applied before the swept ones.
        max_parallel: runs at a time (1: one after the other).
        stop_timeout_s: after forwarding Ctrl-C/SIGTERM, how long to wait for
            the runs to stop before killing them.
        log: prints a progress line.
        launcher: where the runs run (``launch.LocalLauncher``, the default, or
            ``ray_launch.RayLauncher``).
        resources: the CPUs a run reserves and the bindings that pin its
            "auto" settings to them (``trial_config.trial_resources``); used
            with a launcher that places runs on a cluster.
    """

    def __init__(self, root_dir: str, gin_files: Sequence[str], specs: Sequence[RunSpec],
                 gin_params: Sequence[str] = (), max_parallel: int = 1,
                 stop_timeout_s: float = 60.0,
                 log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
                 launcher=None, resources: Optional[Callable] = None):
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        self.root_dir = os.path.abspath(root_dir)
        self.gin_files = list(gin_files)
        self.specs = list(specs)
        self.gin_params = list(gin_params)
        self.max_parallel = max_parallel
        self.stop_timeout_s = stop_timeout_s
        self.log = log
        self.launcher = launcher or LocalLauncher()
        self._resources_of = resources
        self._resources: Dict[str, object] = {}
        self.stop_signal: Optional[int] = None
        self._signals_received = 0
        self.outcomes: Dict[str, RunOutcome] = {}
        self._queue: Deque[RunSpec] = collections.deque()
        self._launched = 0

    # -- paths and commands ---------------------------------------------------
    def run_dir(self, spec: RunSpec) -> str:
        return os.path.join(self.root_dir, spec.name)

    def _trial_resources(self, spec: RunSpec):
        if self._resources_of is None:
            return None
        if spec.name not in self._resources:
            self._resources[spec.name] = self._resources_of(
                self.gin_files, self.gin_params + spec.gin_params)
        return self._resources[spec.name]

    def arguments(self, spec: RunSpec) -> List[str]:
        resources = self._trial_resources(spec)
        pinned = list(resources.gin_params) if resources else []
        return train_arguments(self.gin_files, self.gin_params + spec.gin_params + pinned)

    def command(self, spec: RunSpec) -> List[str]:
        from alf_async.sweep.launch import train_command

        return train_command(self.run_dir(spec), self.arguments(spec))

    # -- signals --------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        self._signals_received += 1
        if self.stop_signal is None:
            self.stop_signal = signum

    # -- running --------------------------------------------------------------
    def run(self) -> List[RunOutcome]:
        """Run every unfinished run; returns the outcomes (grid order)."""
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

    # hooks a search overrides ---------------------------------------------------
    def _prepare(self) -> None:
        """Fill ``outcomes`` (every run, in table order) and the queue of runs
        to start; a finished run is skipped."""
        for spec in self.specs:
            run_dir = self.run_dir(spec)
            status = read_json(os.path.join(run_dir, STATUS_FILE))
            if is_finished(status, self.arguments(spec)):
                self.outcomes[spec.name] = RunOutcome(spec, run_dir, "done", 0,
                                                      status.get("elapsed_s"), skipped=True)
                self.log(f"[sweep] {spec.name}: finished earlier, skipped")
            else:
                self.outcomes[spec.name] = RunOutcome(spec, run_dir, "pending")
                self._queue.append(spec)

    def _total(self) -> int:
        """Runs this invocation starts (for the progress line)."""
        return len(self._queue)

    def _next_spec(self) -> Optional[RunSpec]:
        """The next run to start, or None when there is none now."""
        return self._queue.popleft() if self._queue else None

    def _more_to_come(self) -> bool:
        return bool(self._queue)

    def _on_metrics(self, active: ActiveRun, rows: str) -> None:
        """New metrics rows of a running run (a search feeds its pruner)."""

    def _on_finished(self, outcome: RunOutcome, active: ActiveRun) -> None:
        """A run's process ended (a search tells its study)."""

    def _on_started(self, spec: RunSpec) -> None:
        """A train process of the run starts (again): its metrics are read
        from the first row on."""

    # ------------------------------------------------------------------------------
    def _run_all(self) -> List[RunOutcome]:
        self._prepare()
        total = self._total()
        running: Dict[str, ActiveRun] = {}
        try:
            while self.stop_signal is None and (running or self._more_to_come()):
                while len(running) < self.max_parallel and self.stop_signal is None:
                    spec = self._next_spec()
                    if spec is None:
                        break
                    if self._locked_elsewhere(self.outcomes[spec.name]):
                        continue
                    self._launched += 1
                    running[spec.name] = self._launch(spec, self._launched,
                                                      max(total, self._launched))
                for name, active in list(running.items()):
                    if self._check(active):
                        del running[name]
                time.sleep(0.1)
            if running:
                self._stop(running)
        finally:
            for active in running.values():
                active.process.kill()
            self.launcher.close()
        return list(self.outcomes.values())

    def _check(self, active: ActiveRun) -> bool:
        """Poll one running run: feed its metrics, restart it if its node was
        lost, record its end. Returns whether it ended."""
        try:
            code = active.process.poll()
        except TrialLost as e:
            self._on_metrics(active, active.process.new_metrics())
            return self._restart_lost(active, str(e))
        rows = active.process.new_metrics()
        if rows:
            self._on_metrics(active, rows)
        if code is None:
            self._note_node(active)
            return False
        self._finish(active, code)
        return True

    def _note_node(self, active: ActiveRun) -> None:
        """Record in the run's status file a node it has started on (Ray)."""
        node = getattr(active.process, "node_id", None)
        outcome = self.outcomes[active.spec.name]
        if node and node not in outcome.nodes:
            outcome.nodes.append(node)
            path = os.path.join(outcome.run_dir, STATUS_FILE)
            record = read_json(path) or {}
            record["nodes"] = outcome.nodes
            write_json(path, record)

    def _restart_lost(self, active: ActiveRun, why: str) -> bool:
        """Start a run whose node was lost again (returns True if given up)."""
        outcome = self.outcomes[active.spec.name]
        active.node_losses += 1
        if active.node_losses > MAX_NODE_LOSSES:
            outcome.status, outcome.exit_code = "failed", None
            self.log(f"[sweep] {active.spec.name}: lost its node {active.node_losses} "
                     "times; marked failed")
            self._record(outcome, time.monotonic() - active.started)
            self._on_finished(outcome, active)
            return True
        shared = self.launcher.shared_directories
        if shared:  # the old process may still be writing its final checkpoint
            deadline = time.monotonic() + self.stop_timeout_s
            while run_lock.holder(outcome.run_dir) is not None \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
        if shared:
            from alf_async.training.launch import newest_checkpoint_file

            newest = newest_checkpoint_file(outcome.run_dir)
            how = (f"from its last checkpoint, {os.path.basename(newest)} (its run directory "
                   "is shared)" if newest else
                   "from the start: it had written no checkpoint yet")
        else:
            how = ("from its directory as the sweep directory holds it (from the start "
                   "unless an earlier sweep brought a checkpoint back)")
        self.log(f"[sweep] {active.spec.name}: lost its node ({why}) on "
                 f"{active.process.where}; running it again {how}")
        self._on_started(active.spec)
        active.process = self.launcher.start(
            outcome.run_dir, self.arguments(active.spec),
            os.path.join(outcome.run_dir, OUTPUT_FILE), self._cpus(active.spec))
        return False

    def _cpus(self, spec: RunSpec) -> int:
        resources = self._trial_resources(spec)
        return resources.cpus if resources else 1

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

    def _launch(self, spec: RunSpec, index: int, total: int) -> ActiveRun:
        run_dir = self.run_dir(spec)
        os.makedirs(run_dir, exist_ok=True)
        resuming = os.path.isdir(os.path.join(run_dir, "checkpoints"))
        write_json(os.path.join(run_dir, STATUS_FILE), {
            "name": spec.name, "params": spec.as_dict(), "status": "running",
            "exit_code": None, "train_arguments": self.arguments(spec),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        output_path = os.path.join(run_dir, OUTPUT_FILE)
        self._on_started(spec)
        process = self.launcher.start(run_dir, self.arguments(spec), output_path,
                                      self._cpus(spec))
        self.outcomes[spec.name].status = "running"
        self.log(f"[sweep] ({index}/{total}) {spec.name}: "
                 f"{'resumed' if resuming else 'started'} ({process.where}), "
                 f"output in {output_path}")
        return ActiveRun(spec, process, time.monotonic())

    def _finish(self, active: ActiveRun, code: int) -> None:
        outcome = self.outcomes[active.spec.name]
        outcome.exit_code = code
        outcome.status = "pruned" if active.stop_reason else status_of_exit(code)
        elapsed = time.monotonic() - active.started
        self._record(outcome, elapsed)
        message = f"[sweep] {outcome.spec.name}: {outcome.status} (exit code {code}) " \
                  f"after {elapsed:.1f}s"
        if active.stop_reason:
            message += f" ({active.stop_reason})"
        if outcome.status == "failed":
            tail = _tail(os.path.join(outcome.run_dir, OUTPUT_FILE))
            message += "; last output:\n    " + tail.replace("\n", "\n    ")
        self.log(message)
        self._on_finished(outcome, active)

    def _record(self, outcome: RunOutcome, elapsed: float) -> None:
        outcome.elapsed_s = elapsed
        path = os.path.join(outcome.run_dir, STATUS_FILE)
        record = read_json(path) or {}
        record.update({"status": outcome.status, "exit_code": outcome.exit_code,
                       "elapsed_s": elapsed, "nodes": outcome.nodes,
                       "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        write_json(path, record)

    def _stop(self, running: Dict[str, ActiveRun]) -> None:
        """Forward the stop signal, wait, then kill the remaining process groups."""
        signum = self.stop_signal or signal.SIGINT
        name = signal.Signals(signum).name
        self.log(f"[sweep] {name}: stopping {len(running)} running run(s) "
                 f"(up to {self.stop_timeout_s:.0f}s; Ctrl-C again to kill now)")
        first_count = self._signals_received
        for active in running.values():
            active.process.send_signal(signum)
        deadline = time.monotonic() + self.stop_timeout_s
        while running and time.monotonic() < deadline \
                and self._signals_received == first_count:
            for name_, active in list(running.items()):
                try:
                    code = active.process.poll()
                except TrialLost:
                    code = -signal.SIGKILL
                if code is not None:
                    active.process.new_metrics()
                    self._finish(active, code)
                    del running[name_]
            time.sleep(0.1)
        for name_, active in list(running.items()):
            self.log(f"[sweep] killing {name_} ({active.process.where})")
            active.process.kill()
            self._finish(active, -signal.SIGKILL)
            del running[name_]
        from alf_async.utils.shared_memory import sweep_stale_blocks

        sweep_stale_blocks()

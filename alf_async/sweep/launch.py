"""Where a sweep's trials run: one ``alf_async.bin.train`` process each.

A launcher starts a trial's train process and hands back a ``TrialProcess``,
which the sweep polls: its exit code, the metrics rows it wrote since the last
poll (the pruner reads them), a signal to stop it, SIGKILL. ``LocalLauncher``
runs the process on this machine (the default); ``ray_launch.RayLauncher``
places it on a Ray cluster (``alf-sweep --backend ray``).

A local train process starts in a new session (process group), so that it has
its own process tree and a terminal Ctrl-C reaches only the sweep; if the sweep
itself dies, it receives SIGTERM (a clean stop with a final checkpoint).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import List, Optional, Sequence

METRICS_FILE = "metrics.jsonl"


class TrialLost(RuntimeError):
    """The trial's process is gone with the machine it ran on (a Ray node lost)."""


def train_command(run_dir: str, arguments: Sequence[str],
                  python: Optional[str] = None) -> List[str]:
    """The train command of one trial."""
    return [python or sys.executable, "-m", "alf_async.bin.train",
            f"--root_dir={run_dir}"] + list(arguments)


def train_environment(package_root: str) -> dict:
    """This process's environment with ``package_root`` first on PYTHONPATH
    (the trial imports the same alf_async as the sweep)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group ``pid`` leads (gone already: nothing)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_with_parent() -> None:
    """In the child before exec: SIGTERM it (a clean stop) if its parent dies."""
    from alf_async.utils.process import set_parent_death_signal

    set_parent_death_signal(signal.SIGTERM)


def start_train_process(command: Sequence[str], output_path: str,
                        env: dict) -> subprocess.Popen:
    """Start ``command`` in a new session, its output appended to ``output_path``
    after a header line naming the command."""
    with open(output_path, "ab") as output:
        output.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} "
                     f"{' '.join(command)}\n".encode())
        output.flush()
        return subprocess.Popen(list(command), stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=stop_with_parent)


class MetricsTail:
    """The whole lines appended to a run's metrics file since the last read."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, METRICS_FILE)
        self.offset = 0

    def read(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return ""
        end = data.rfind(b"\n") + 1  # a row being written stays for the next read
        self.offset += end
        return data[:end].decode("utf-8", errors="replace")


class TrialProcess:
    """A started train process, as the sweep sees it.

    ``where``: a phrase for the log ("pid 123", "node 4f2a...").
    """

    where: str = ""

    def poll(self) -> Optional[int]:
        """The exit code once the process ended, else None; ``TrialLost`` if
        the machine it ran on is gone."""
        raise NotImplementedError

    def new_metrics(self) -> str:
        """Whole metrics rows (JSON lines) written since the last call."""
        raise NotImplementedError

    def send_signal(self, signum: int) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL the process and everything in its process group; wait for it."""
        raise NotImplementedError


class LocalTrial(TrialProcess):
    def __init__(self, proc: subprocess.Popen, run_dir: str):
        self.proc = proc
        self.where = f"pid {proc.pid}"
        self._metrics = MetricsTail(run_dir)

    def poll(self) -> Optional[int]:
        code = self.proc.poll()
        if code is not None:
            kill_group(self.proc.pid)  # anything the run left in its process group
        return code

    def new_metrics(self) -> str:
        return self._metrics.read()

    def send_signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        kill_group(self.proc.pid)
        self.proc.wait()


class LocalLauncher:
    """Runs each trial as a child process of the sweep, on this machine."""

    description = "this machine"
    shared_directories = True  # a trial writes its run directory where the sweep reads it

    def start(self, run_dir: str, arguments: Sequence[str], output_path: str,
              cpus: int = 1) -> TrialProcess:
        from alf_async.config import PACKAGE_ROOT

        proc = start_train_process(train_command(run_dir, arguments), output_path,
                                   train_environment(PACKAGE_ROOT))
        return LocalTrial(proc, run_dir)

    def close(self) -> None:
        pass

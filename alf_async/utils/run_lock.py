"""One training run per run directory: an exclusive lock on ``<root_dir>/run.lock``.

The lock is the operating system's (``fcntl.flock`` on the open lock file), so it
ends with the process that holds it, however that process ends (SIGKILL
included). The file also records who holds it, as one JSON object: pid, host,
start time (ISO 8601, local time) and the command line, so that a second
training on the same directory can name the holder.

- ``RunLock(root_dir).acquire()`` takes the lock or raises ``RunLockedError``
  (a ``ConfigError``: the train command exits 2) naming the holder and what to do.
- A lock file whose OS lock is free but whose record is not empty was left by a
  process that ended without releasing it (SIGKILL, a lost machine): the lock
  is taken over and ``acquire`` returns that record (``LockHolder``) so that the
  caller logs the takeover.
- ``release()`` empties the record and drops the OS lock; the file stays.
  ``discard()`` (a run refused before it started) removes the lock file, and
  the run directory if ``acquire`` made it and it is empty, so bad input
  leaves nothing behind. A lock taken on a file removed meanwhile is let go
  and the current file locked instead (its inode is checked), so two
  processes never both hold one directory.
- ``holder(root_dir)`` tells, without keeping anything, whether a live process
  holds the directory (for sweeps, which never start a run whose directory is
  locked).

Only this module's file descriptor holds the lock: Python opens it
non-inheritable, and the run's children are started by a forkserver or by
``subprocess`` (which closes inherited descriptors), so no child keeps a
directory locked after its trainer died.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import sys
import time
from typing import Optional

from alf_async.utils.validation import ConfigError

LOCK_FILE = "run.lock"


@dataclasses.dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) a run directory's lock."""

    pid: int
    host: str
    since: str  # ISO 8601 local time the holder took the lock
    command: str

    def describe(self) -> str:
        return (f"pid {self.pid} on host {self.host}, since {self.since}, running: "
                f"{self.command}")


class RunLockedError(ConfigError):
    """The run directory is held by another live training process."""

    def __init__(self, message: str, holder: Optional[LockHolder]):
        super().__init__(message)
        self.holder = holder


def _read_holder(fd: int) -> Optional[LockHolder]:
    """The record in the open lock file (None when empty or unreadable)."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    if not data.strip():
        return None
    try:
        record = json.loads(data.decode("utf-8"))
        return LockHolder(int(record["pid"]), str(record["host"]), str(record["since"]),
                          str(record["command"]))
    except (ValueError, KeyError, TypeError):
        # A record cut short by a crash mid-write: someone held the lock, but
        # who is no longer known.
        return LockHolder(-1, "unknown", "unknown", "unknown (unreadable lock record)")


def _lock_exclusive(fd: int, attempts: int = 5, pause_s: float = 0.1) -> bool:
    """Take the OS lock without waiting on a holder; a few short retries let a
    ``holder()`` probe's momentary shared lock pass (about half a second in all)."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(pause_s)
    return False


def _open(root_dir: str) -> int:
    return os.open(os.path.join(root_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)


class RunLock:
    """The exclusive lock of one run directory (see the module docstring)."""

    def __init__(self, root_dir: str):
        self.root_dir = os.path.abspath(root_dir)
        self.path = os.path.join(self.root_dir, LOCK_FILE)
        self._fd: Optional[int] = None
        self.created_dir = False  # acquire() made the run directory
        # The record of a dead holder whose lock ``acquire`` took over.
        self.taken_over: Optional[LockHolder] = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Optional[LockHolder]:
        """Take the lock (creating the directory if needed).

        Returns the record of a dead holder whose lock was taken over (None
        when the lock was free and clean). Raises ``RunLockedError`` when a live
        process holds it, and ``OSError`` when the lock file cannot be written.
        """
        if self._fd is not None:
            return None
        self.created_dir = not os.path.isdir(self.root_dir)
        os.makedirs(self.root_dir, exist_ok=True)
        fd = self._open_locked()
        try:
            previous = _read_holder(fd)
            record = {"pid": os.getpid(), "host": socket.gethostname(),
                      "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
                      # the command as typed (python -m ... included)
                      "command": " ".join(getattr(sys, "orig_argv", None) or sys.argv)}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.taken_over = previous
        return previous

    def takeover_note(self) -> Optional[str]:
        """The log line of a lock ``acquire`` took over from a dead holder
        (None when it took a free, clean one)."""
        if self.taken_over is None:
            return None
        return (f"took over the lock of {self.root_dir} left by "
                f"{self.taken_over.describe()}, which no longer holds it (it ended "
                "without releasing it: killed, or its machine was lost)")

    def _open_locked(self) -> int:
        """The lock file, open and locked. A holder may remove the file before
        it releases it (``discard``): a lock taken on the removed file is let
        go and the file opened anew, so that two processes never both hold
        "the" lock of one directory."""
        while True:
            fd = _open(self.root_dir)
            if not _lock_exclusive(fd):
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLockedError(self._locked_message(holder), holder)
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # locked the removed file: open the current one

    def discard(self) -> None:
        """Release the lock of a run that did not start (bad input), removing
        what ``acquire`` created: the lock file, and the run directory if
        ``acquire`` created it and nothing else is in it."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it (see _open_locked)
        except OSError:
            pass
        os.close(fd)
        if self.created_dir:
            try:
                os.rmdir(self.root_dir)
            except OSError:
                pass  # not empty: something else is in it now

    def release(self) -> None:
        """Empty the record and drop the lock (safe to call twice)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass  # a full or read-only disk: the OS lock still ends below
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _locked_message(self, holder: Optional[LockHolder]) -> str:
        who = holder.describe() if holder else "another process (its record is empty)"
        stop = (f"stop it (kill -TERM {holder.pid} on {holder.host}; it writes a final "
                "checkpoint), " if holder and holder.pid > 0 else "")
        return (f"run directory {self.root_dir} is in use by another training: {who}. "
                f"One directory holds one run: wait for that run to end, {stop}or give "
                f"another --root_dir. Reading the run (alf-play, alf_async.load, "
                f"TensorBoard) works while it trains.")


def holder(root_dir: str) -> Optional[LockHolder]:
    """The live holder of ``root_dir``'s lock, or None when no process holds it
    (no lock file, or a lock left by a process that has ended)."""
    path = os.path.join(os.path.abspath(root_dir), LOCK_FILE)
    if not os.path.isfile(path):
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd) or LockHolder(-1, "unknown", "unknown", "unknown")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)

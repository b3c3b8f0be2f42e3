"""Writing files so that a reader (or a crash) never sees half of one.

``atomic_write`` is the one way alf_async writes a file that must stay whole:
checkpoints, configs, metrics rewrites, reports. The data goes to a temporary file
in the same directory, is flushed and fsync'ed, then renamed over the target
(``os.replace`` is atomic on POSIX); on any error the temporary file is removed
and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import IO, Iterator, Optional

TEMPORARY_PREFIX = ".tmp-"
TEMPORARY_SUFFIX = ".partial"


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", fsync: bool = True) -> Iterator[IO]:
    """Open a temporary file for writing that replaces ``path`` when the block ends.

    Args:
        path: the file to (re)place.
        mode: "w" (text, UTF-8) or "wb" (binary).
        fsync: flush the data (and the directory entry) to disk before returning.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=TEMPORARY_PREFIX + os.path.basename(path) + ".",
                               suffix=TEMPORARY_SUFFIX, dir=directory)
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if fsync:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_text(path: str, text: str, fsync: bool = False) -> None:
    """Atomically replace ``path`` with ``text``."""
    with atomic_write(path, "w", fsync=fsync) as f:
        f.write(text)


def write_json(path: str, value: object, fsync: bool = False) -> None:
    """Atomically replace ``path`` with ``value`` as indented, key-sorted JSON."""
    with atomic_write(path, "w", fsync=fsync) as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def read_json(path: str) -> Optional[dict]:
    """The JSON object in ``path``, or None if it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def remove_temporary_files(directory: str) -> None:
    """Delete leftovers of ``atomic_write`` calls interrupted by a crash."""
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))

"""Writing files so that a reader (or a crash) never sees half of one.

``atomic_write`` is the one way alf_async writes a file that must stay whole:
checkpoints, configs, metrics rewrites, reports. The data goes to a temporary file
in the same directory, is flushed and fsync'ed, then renamed over the target
(``os.replace`` is atomic on POSIX) with the permissions a plain ``open``
would have given it (the target's own where it exists); on any error the temporary file is removed
and the target is left as it was, and an ``OSError`` (a full disk, a quota, a
read-only file system) names the target file, so that the caller's message can
say which file could not be written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from typing import IO, Iterator, List, Optional, Tuple

logger = logging.getLogger("alf_async")

TEMPORARY_PREFIX = ".tmp-"
TEMPORARY_SUFFIX = ".partial"


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", fsync: bool = True) -> Iterator[IO]:
    """Open a temporary file for writing that replaces ``path`` when the block ends.

    Args:
        path: the file to (re)place.
        mode: "w" (text, UTF-8) or "wb" (binary).
        fsync: flush the data (and the directory entry) to disk before returning.

    Raises:
        OSError: writing, flushing or renaming failed (e.g. ``errno.ENOSPC``); its
            ``filename`` is ``path`` when the failing call named no file. The
            temporary file is gone and ``path`` is unchanged.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=TEMPORARY_PREFIX + os.path.basename(path) + ".",
                               suffix=TEMPORARY_SUFFIX, dir=directory)
    try:
        # mkstemp makes the file 0600; the replaced file keeps the mode users expect
        os.fchmod(fd, _new_file_mode(path))
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:
            raise with_filename(e, path) from None
        raise
    if fsync:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _new_file_mode(path: str) -> int:
    """The permission bits of ``path`` where it exists, else those ``open``
    would give a new file (0666 less the process's umask)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def write_text(path: str, text: str, fsync: bool = False) -> None:
    """Atomically replace ``path`` with ``text``."""
    with atomic_write(path, "w", fsync=fsync) as f:
        f.write(text)


def write_json(path: str, value: object, fsync: bool = False) -> None:
    """Atomically replace ``path`` with ``value`` as indented, key-sorted JSON."""
    with atomic_write(path, "w", fsync=fsync) as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def append_line(path: str, line: str) -> None:
    """Append one line to ``path`` with a single write (a crash leaves the file's
    earlier lines whole)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line.rstrip("\n") + "\n")


def read_json(path: str) -> Optional[dict]:
    """The JSON object in ``path``, or None if it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def with_filename(error: OSError, path: str) -> OSError:
    """``error`` naming ``path``: the same errno and text (a new ``OSError`` of
    the errno's subclass) when ``error`` names no file, else ``error`` itself.

    A failed ``write``/``flush``/``fsync`` on an open file names no file
    ("[Errno 28] No space left on device"); this adds the one being written.
    """
    if error.filename is not None:
        return error
    if error.errno is None:
        return OSError(None, str(error) or type(error).__name__, path)
    return OSError(error.errno, error.strerror or os.strerror(error.errno), path)


def is_temporary_file(name: str) -> bool:
    """Whether ``name`` (a file name, no folder) is an ``atomic_write`` temporary file."""
    return name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX)


def remove_partial_file(path: str,
                        why: str = "a partial file left by an interrupted write"
                        ) -> Optional[int]:
    """Delete ``path``, a partial file, logging a WARNING with its path and size.

    Args:
        path: the file to delete.
        why: what the file was, for the log line.

    Returns:
        The file's size in bytes, or None if it was already gone.
    """
    try:
        size = os.stat(path).st_size
        os.unlink(path)
    except FileNotFoundError:
        return None
    logger.warning("removed %s (%d bytes): %s", path, size, why)
    return size


def remove_temporary_files(directory: str) -> List[Tuple[str, int]]:
    """Delete leftovers of ``atomic_write`` calls interrupted by a crash.

    Each removed file is logged (WARNING: its path and size in bytes).

    Returns:
        (path, size in bytes) of every removed file.
    """
    if not os.path.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        if is_temporary_file(name):
            path = os.path.join(directory, name)
            size = remove_partial_file(path)
            if size is not None:
                removed.append((path, size))
    return removed

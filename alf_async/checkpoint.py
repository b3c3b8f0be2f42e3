"""Checkpoints of a run: atomic writes, the last few kept, safe loading.

A checkpoint is one file ``ckpt-<iteration>.pt`` in ``<root_dir>/checkpoints``
holding only tensors and plain Python values (learner state, counters, RNG states).
It is written to a temporary file, flushed to disk and renamed, so a reader never
sees a half-written checkpoint. A write that fails (a full disk, a quota) raises
``OSError`` naming the checkpoint file and its errno (``errno.ENOSPC``), never
torch's ``RuntimeError``; the temporary file is removed and the older checkpoints
are left as they were. Loading uses ``torch.load(weights_only=True)``: a
file that holds arbitrary pickled objects is refused. If the newest checkpoint is
corrupt or truncated, ``load_latest`` warns, names it and falls back to the
previous one. A checkpoint records the layout it was written in (``format``,
``CHECKPOINT_FORMAT``); one from a newer alf_async is refused by name rather
than misread.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from typing import IO, Any, Dict, List, Optional, Tuple

import gin
import torch

from alf_async.utils.files import atomic_write, remove_partial_file, remove_temporary_files
from alf_async.utils.validation import check

logger = logging.getLogger("alf_async")
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")
#: The layout of the checkpoints this version writes (the ``format`` entry).
#: 1: no entry (alf_async 0.1); 2: the loop's state beside the learner's.
CHECKPOINT_FORMAT = 2


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names the file and the reason."""


class CorruptCheckpointError(CheckpointError):
    """The file is truncated, garbage or missing: an older checkpoint may serve."""


class NewerCheckpointError(CheckpointError):
    """The file was written by a newer alf_async, in a layout this one cannot read."""


class UnsafeCheckpointError(CheckpointError):
    """The file holds pickled objects other than tensors and plain values.

    alf_async never unpickles those (``weights_only=True``); a run refuses to
    start from such a file rather than fall back past it.
    """


def load_checkpoint_file(path: str) -> Dict[str, Any]:
    """Load one checkpoint safely (tensors and plain values only).

    Raises ``UnsafeCheckpointError`` if the file would need any other pickled
    global, ``CorruptCheckpointError`` if it cannot be read as a checkpoint,
    ``NewerCheckpointError`` if its ``format`` is newer than ``CHECKPOINT_FORMAT``.
    """
    if not os.path.isfile(path):
        raise CorruptCheckpointError(f"checkpoint {path} does not exist")
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as e:  # noqa: BLE001  (not a readable torch file)
        raise CorruptCheckpointError(f"cannot load checkpoint {path}: it is corrupt or "
                                     f"truncated ({_first_line(e)})") from None
    if unsafe:
        raise UnsafeCheckpointError(
            f"cannot load checkpoint {path}: it holds pickled Python objects other than "
            f"tensors and plain values ({', '.join(sorted(unsafe)[:3])}), which alf_async "
            "refuses to load (weights_only=True)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001  (torch raises many kinds)
        raise CorruptCheckpointError(f"cannot load checkpoint {path}: it is corrupt or "
                                     f"truncated ({_first_line(e)})") from None
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"cannot load checkpoint {path}: it holds a "
                                     f"{type(state).__name__}, not a checkpoint's dict")
    written_in = state.get("format", 1)
    if not isinstance(written_in, int) or written_in > CHECKPOINT_FORMAT:
        raise NewerCheckpointError(
            f"cannot load checkpoint {path}: it was written in checkpoint format "
            f"{written_in!r} by a newer alf_async; this version reads formats 1 to "
            f"{CHECKPOINT_FORMAT}. Upgrade alf_async to resume or play it")
    return state


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@gin.configurable
class Checkpointer:
    """Saves and restores checkpoints in ``<root_dir>/checkpoints``.

    Args:
        root_dir: the run directory.
        keep: how many of the newest checkpoints to keep (>= 1).
    """

    def __init__(self, root_dir: str, keep: int = 3):
        check("Checkpointer", "keep", keep, "int", low=1)
        self.directory = os.path.join(root_dir, "checkpoints")
        self.keep = keep
        os.makedirs(self.directory, exist_ok=True)

    def list(self) -> List[Tuple[int, str]]:
        """(iteration, path) of complete checkpoints, oldest first."""
        found = []
        for name in os.listdir(self.directory):
            m = _NAME.match(name)
            if m:
                found.append((int(m.group(1)), os.path.join(self.directory, name)))
        return sorted(found)

    def save(self, state: Dict[str, Any], iteration: int) -> str:
        """Write ``state`` atomically as checkpoint ``iteration``; prune old ones.

        The disk space of the state's tensors is reserved first, so a checkpoint
        that cannot fit fails before anything is written (where the file system
        can reserve space); the file is streamed, never held in memory whole.

        Raises:
            OSError: the file could not be written (e.g. ``errno.ENOSPC``, no
                space left on the device); ``filename`` is the checkpoint's path.
                No temporary file is left and the older checkpoints are intact.
        """
        path = os.path.join(self.directory, f"ckpt-{iteration}.pt")
        with atomic_write(path, "wb") as f:
            _reserve_space(f, _tensor_bytes(state))
            stream = _ErrorKeepingWriter(f)
            try:
                torch.save(state, stream)
            except Exception:
                # torch turns a failed write into "RuntimeError: [enforce fail at
                # inline_container.cc ...]"; the OSError it swallowed is the cause.
                if stream.error is not None:
                    raise stream.error from None
                raise
            f.truncate()  # the reserved space past the end of the data
        for _, old in self.list()[:-self.keep]:
            os.unlink(old)
        return path

    def load_latest(self) -> Optional[Tuple[Dict[str, Any], str]]:
        """The newest loadable checkpoint as (state, path), or None if there is none.

        Unloadable newer files are reported with a warning and skipped.
        """
        for _, path in reversed(self.list()):
            try:
                return load_checkpoint_file(path), path
            except CorruptCheckpointError as e:
                logger.warning("%s; falling back to the previous checkpoint", e)
        return None

    def remove_temporary_files(self) -> List[Tuple[str, int]]:
        """Delete leftovers of checkpoint writes interrupted by a crash.

        Each removed file is logged (WARNING: its path and size in bytes).

        Returns:
            (path, size in bytes) of every removed file.
        """
        removed = remove_temporary_files(self.directory)
        for name in sorted(os.listdir(self.directory)):  # written by alf_async <= 0.1
            if name.startswith(".ckpt-") and name.endswith(".tmp"):
                path = os.path.join(self.directory, name)
                size = remove_partial_file(path)
                if size is not None:
                    removed.append((path, size))
        return removed


class _ErrorKeepingWriter:
    """A binary file for ``torch.save`` that keeps the ``OSError`` of a failed
    write (torch's writer replaces it with a ``RuntimeError``)."""

    def __init__(self, file: IO[bytes]):
        self._file = file
        self.error: Optional[OSError] = None

    def write(self, data: bytes) -> int:
        try:
            return self._file.write(data)
        except OSError as e:
            if self.error is None:
                self.error = e
            raise

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as e:
            if self.error is None:
                self.error = e
            raise


def _tensor_bytes(value: Any) -> int:
    """Bytes of the distinct tensor storages in ``value`` (nested dicts, lists,
    tuples): a lower bound of the size of its ``torch.save`` file."""
    seen = set()
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            try:
                storage = item.untyped_storage()
            except (RuntimeError, NotImplementedError):  # sparse, nested: not counted
                continue
            key = (storage.data_ptr(), storage.nbytes())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


# posix_fallocate errors that only mean "this file system reserves no space"
_NO_RESERVATION = {errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, errno.ENODEV, errno.ESPIPE}


def _reserve_space(file: IO[bytes], nbytes: int) -> None:
    """Reserve ``nbytes`` bytes of disk for ``file`` (an empty file open for
    writing), so that a write that cannot fit fails now with ``ENOSPC`` rather
    than after filling the disk; a file system that cannot reserve space is
    written to without a reservation. The file's size grows to ``nbytes``: the
    caller truncates it after writing."""
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(file.fileno(), 0, nbytes)
    except OSError as e:
        if e.errno not in _NO_RESERVATION:
            raise

"""Checkpoints of a run: atomic writes, the last few kept, safe loading.

A checkpoint is one file ``ckpt-<iteration>.pt`` in ``<root_dir>/checkpoints``
holding only tensors and plain Python values (learner state, counters, RNG states).
It is written to a temporary file, flushed to disk and renamed, so a reader never
sees a half-written checkpoint. Loading uses ``torch.load(weights_only=True)``: a
file that holds arbitrary pickled objects is refused. If the newest checkpoint is
corrupt or truncated, ``load_latest`` warns, names it and falls back to the
previous one.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import gin
import torch

from alf_async.utils.files import atomic_write, remove_temporary_files
from alf_async.utils.validation import check

logger = logging.getLogger("alf_async")
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names the file and the reason."""


class CorruptCheckpointError(CheckpointError):
    """The file is truncated, garbage or missing: an older checkpoint may serve."""


class UnsafeCheckpointError(CheckpointError):
    """The file holds pickled objects other than tensors and plain values.

    alf_async never unpickles those (``weights_only=True``); a run refuses to
    start from such a file rather than fall back past it.
    """


def load_checkpoint_file(path: str) -> Dict[str, Any]:
    """Load one checkpoint safely (tensors and plain values only).

    Raises ``UnsafeCheckpointError`` if the file would need any other pickled
    global, ``CorruptCheckpointError`` if it cannot be read as a checkpoint.
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
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001  (torch raises many kinds)
        raise CorruptCheckpointError(f"cannot load checkpoint {path}: it is corrupt or "
                                     f"truncated ({_first_line(e)})") from None


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
        """Write ``state`` atomically as checkpoint ``iteration``; prune old ones."""
        path = os.path.join(self.directory, f"ckpt-{iteration}.pt")
        with atomic_write(path, "wb") as f:
            torch.save(state, f)
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

    def remove_temporary_files(self) -> None:
        """Delete leftovers of writes interrupted by a crash."""
        remove_temporary_files(self.directory)
        for name in os.listdir(self.directory):  # written by alf_async <= 0.1
            if name.startswith(".ckpt-") and name.endswith(".tmp"):
                os.unlink(os.path.join(self.directory, name))

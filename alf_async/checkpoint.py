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
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import gin
import torch

logger = logging.getLogger("alf_async")
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names the file and the reason."""


def load_checkpoint_file(path: str) -> Dict[str, Any]:
    """Load one checkpoint safely (tensors and plain values only)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist") from None
    except Exception as e:  # noqa: BLE001  (torch raises many kinds)
        text = str(e)
        # Only a disallowed global/class means "unsafe"; torch also says "Weights only
        # load failed" for plain garbage, which is corruption (fall back). A global of
        # a blocked module (os, ...) reads "unsupported GLOBAL posix.mkdir ...".
        if "unsupported global" in text.lower() or "Unsupported class" in text:
            reason = ("it holds pickled Python objects other than tensors and plain "
                      "values, which alf_async refuses to load (weights_only=True)")
        else:
            reason = f"it is corrupt or truncated ({type(e).__name__}: {text.splitlines()[0] if text else ''})"
        raise CheckpointError(f"cannot load checkpoint {path}: {reason}") from None


@gin.configurable
class Checkpointer:
    """Saves and restores checkpoints in ``<root_dir>/checkpoints``.

    Args:
        root_dir: the run directory.
        keep: how many of the newest checkpoints to keep (>= 1).
    """

    def __init__(self, root_dir: str, keep: int = 3):
        if keep < 1:
            raise ValueError(f"Checkpointer.keep must be >= 1, got {keep}")
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
        fd, tmp = tempfile.mkstemp(prefix=".ckpt-", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
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
            except CheckpointError as e:
                if "pickled Python objects" in str(e):
                    raise
                logger.warning("%s; falling back to the previous checkpoint", e)
        return None

    def remove_temporary_files(self) -> None:
        """Delete leftovers of writes interrupted by a crash."""
        for name in os.listdir(self.directory):
            if name.startswith(".ckpt-") and name.endswith(".tmp"):
                os.unlink(os.path.join(self.directory, name))

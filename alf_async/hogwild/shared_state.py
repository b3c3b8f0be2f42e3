"""The networks Hogwild workers share, and how a worker's learner binds to them.

``GlobalState.share(learner)`` moves the tensors a learner names in
``hogwild_tensors()`` (network parameters and buffers, SAC's log alpha) into
shared memory in place: the trainer's learner *is* the global model. For PPO it
also holds the observation normalizer's statistics, a float64 tensor
[1 + 2 O] = (count, mean [O], m2 [O]), since the networks are trained on
normalized inputs. The state is pickled to the worker processes (spawn), which
receive the same memory (torch's file-descriptor sharing), not a copy.

A worker binds its own learner with ``WorkerBinding``:

- "shared": each of the learner's tensors takes the global tensor's storage
  (``tensor.data = global``), so its optimizer steps the global parameters in
  place, without locks (Hogwild!, Recht et al. 2011), and every worker acts
  and trains with the newest values. Gradients and optimizer moments stay
  private to the worker.
- "synced": the learner keeps a private copy; every ``sync_interval`` updates
  it adds its change since the last sync to the global tensors (under a lock)
  and copies the result back (A3C style). Between syncs it sees no other
  worker's change.

The normalizer statistics follow the same rule (every update in "shared" mode,
at syncs in "synced" mode): the worker adds what its batches added since its
last pull (``subtract_statistics``) to the global statistics
(``merge_statistics``) and pulls the merged ones.

The lock only serializes syncs and checkpoints (never gradient steps). It is
an ``flock`` on a file of the run directory: the kernel releases it when its
holder dies, so a worker killed while syncing blocks nobody, and nothing is
left in /dev/shm by a run killed outright (a multiprocessing lock would leave
its named semaphore there).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch

from alf_async.algorithms.normalizer import merge_statistics, subtract_statistics
from alf_async.utils.validation import ConfigError



def _normalizer_of(learner: Any):
    """The learner's RunningNormalizer when it normalizes observations, else None."""
    if getattr(learner, "normalize_observations", False):
        return learner.normalizer
    return None


class GlobalState:
    """The global networks of a Hogwild run (shared memory), picklable to workers.

    Attributes:
        tensors: name -> shared tensor (detached views of the trainer's learner).
        normalizer: shared float64 [1 + 2 O] (count, mean, m2), or None.
        lock_path: the file whose ``flock`` serializes syncs ("synced" pushes,
            normalizer merges) and checkpoints.
    """

    def __init__(self, tensors: Dict[str, torch.Tensor], normalizer: Optional[torch.Tensor],
                 lock_path: str):
        self.tensors = tensors
        self.normalizer = normalizer
        self.lock_path = lock_path
        self._lock_fd: Optional[int] = None  # this process's open file (not pickled)

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_lock_fd": None}

    @classmethod
    def share(cls, learner: Any, lock_path: str) -> "GlobalState":
        """Move ``learner``'s shared tensors into shared memory (in place) and
        wrap them; the learner keeps training/serving the same values.
        ``lock_path``: the sync lock's file (created if missing)."""
        tensors = {}
        for name, tensor in learner.hogwild_tensors().items():
            tensor.share_memory_()
            tensors[name] = tensor.detach()
        normalizer = None
        norm = _normalizer_of(learner)
        if norm is not None:
            normalizer = torch.zeros(1 + 2 * norm.dim, dtype=torch.float64).share_memory_()
        state = cls(tensors, normalizer, lock_path)
        if norm is not None:
            state.write_normalizer(norm.state_arrays())
        return state

    # -- the normalizer's statistics -------------------------------------------
    def read_normalizer(self) -> Dict[str, np.ndarray]:
        """count [1], mean [O], m2 [O] (float64 copies)."""
        flat = self.normalizer.numpy().copy()
        dim = (flat.shape[0] - 1) // 2
        return {"count": flat[:1], "mean": flat[1:1 + dim], "m2": flat[1 + dim:]}

    def write_normalizer(self, stats: Dict[str, np.ndarray]) -> None:
        flat = np.concatenate([np.asarray(stats["count"], np.float64).reshape(1),
                               np.asarray(stats["mean"], np.float64).reshape(-1),
                               np.asarray(stats["m2"], np.float64).reshape(-1)])
        self.normalizer.copy_(torch.from_numpy(flat))

    def load_normalizer_into(self, learner: Any) -> None:
        """Give the trainer's learner the global statistics (before a
        checkpoint; the caller holds the lock)."""
        norm = _normalizer_of(learner)
        if norm is not None and self.normalizer is not None:
            norm.load_state_arrays(self.read_normalizer())

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the sync lock (waits while another process holds it)."""
        if self._lock_fd is None:
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close this process's lock file (the trainer also removes it)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


class WorkerBinding:
    """Binds a worker's learner to the global state (see the module docstring).

    Args:
        state: the run's ``GlobalState``.
        learner: the worker's own learner (same networks as the global ones).
        mode: "shared" or "synced".
        sync_interval: updates between two syncs ("synced").
    """

    def __init__(self, state: GlobalState, learner: Any, mode: str, sync_interval: int):
        self.state = state
        self.learner = learner
        self.mode = mode
        self.sync_interval = int(sync_interval)
        self.local = learner.hogwild_tensors()
        if set(self.local) != set(state.tensors) or any(
                self.local[k].shape != state.tensors[k].shape for k in self.local):
            raise ConfigError("a Hogwild worker's networks differ from the global ones "
                              f"({sorted(self.local)} vs {sorted(state.tensors)}); the "
                              "worker parsed another gin config than the trainer")
        self.updates = 0
        self.syncs = 0
        self._anchor: Dict[str, torch.Tensor] = {}
        with torch.no_grad():
            if mode == "shared":
                for name, tensor in self.local.items():
                    tensor.data = state.tensors[name]
            else:
                for name, tensor in self.local.items():
                    tensor.copy_(state.tensors[name])
                    self._anchor[name] = state.tensors[name].clone()
        self._norm = _normalizer_of(learner)
        self._pulled: Optional[Dict[str, np.ndarray]] = None
        if self._norm is not None:
            self._pulled = state.read_normalizer()
            self._norm.load_state_arrays(self._pulled)

    def after_update(self, count: int = 1) -> bool:
        """Count ``count`` learner updates; sync when due. Returns whether it synced."""
        before = self.updates
        self.updates += count
        if self.mode == "shared":
            if self._norm is not None:
                with self.state.locked():
                    self._sync_normalizer()
                self.syncs += 1
                return True
            return False
        if self.updates // self.sync_interval > before // self.sync_interval:
            self.sync()
            return True
        return False

    def sync(self) -> None:
        """Push this worker's change since the last sync, pull the global values."""
        with self.state.locked():
            if self.mode == "synced":
                with torch.no_grad():
                    for name, tensor in self.local.items():
                        glob, anchor = self.state.tensors[name], self._anchor[name]
                        glob.add_(tensor - anchor)
                        tensor.copy_(glob)
                        anchor.copy_(glob)
            if self._norm is not None:
                self._sync_normalizer()
        self.syncs += 1

    def _sync_normalizer(self) -> None:
        added = subtract_statistics(self._norm.state_arrays(), self._pulled)
        merged = merge_statistics(self.state.read_normalizer(), added)
        self.state.write_normalizer(merged)
        self._norm.load_state_arrays(merged)
        self._pulled = merged

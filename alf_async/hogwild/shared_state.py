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

The lock only serializes syncs and checkpoints (never gradient steps). Its
holder's pid is kept beside it: a process that waits more than LOCK_TIMEOUT_S
for a lock whose holder is dead (killed while syncing) releases it and takes it.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

import numpy as np
import torch

from alf_async.algorithms.normalizer import merge_statistics, subtract_statistics
from alf_async.utils.process import pid_alive
from alf_async.utils.validation import ConfigError

logger = logging.getLogger("alf_async")
LOCK_TIMEOUT_S = 5.0


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
        lock: serializes syncs ("synced" pushes, normalizer merges) and
            checkpoints.
        lock_holder: shared int, the pid holding ``lock`` (0: free).
    """

    def __init__(self, tensors: Dict[str, torch.Tensor], normalizer: Optional[torch.Tensor],
                 lock: Any, lock_holder: Any):
        self.tensors = tensors
        self.normalizer = normalizer
        self.lock = lock
        self.lock_holder = lock_holder

    @classmethod
    def share(cls, learner: Any, mp_context: Any) -> "GlobalState":
        """Move ``learner``'s shared tensors into shared memory (in place) and
        wrap them; the learner keeps training/serving the same values."""
        tensors = {}
        for name, tensor in learner.hogwild_tensors().items():
            tensor.share_memory_()
            tensors[name] = tensor.detach()
        normalizer = None
        norm = _normalizer_of(learner)
        if norm is not None:
            normalizer = torch.zeros(1 + 2 * norm.dim, dtype=torch.float64).share_memory_()
        state = cls(tensors, normalizer, mp_context.Lock(),
                    mp_context.Value("q", 0, lock=False))
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

    def locked(self) -> "_SyncLock":
        return _SyncLock(self)


class _SyncLock:
    """``with state.locked():`` takes the sync lock, taking it over from a dead
    holder; after LOCK_TIMEOUT_S with a live holder it goes ahead unlocked
    (logged: a race Hogwild tolerates)."""

    def __init__(self, state: GlobalState):
        self.state = state
        self.held = False

    def __enter__(self) -> "_SyncLock":
        lock, holder = self.state.lock, self.state.lock_holder
        self.held = bool(lock.acquire(timeout=LOCK_TIMEOUT_S))
        if not self.held:
            pid = int(holder.value)
            if pid and not pid_alive(pid):
                logger.warning("the Hogwild sync lock was held by process %d, which is gone; "
                               "taking it over", pid)
                try:
                    lock.release()
                except ValueError:
                    pass
                self.held = bool(lock.acquire(timeout=LOCK_TIMEOUT_S))
        if self.held:
            holder.value = os.getpid()
        else:
            logger.warning("the Hogwild sync lock was not free for %.0f s; syncing "
                           "without it", LOCK_TIMEOUT_S)
        return self

    def __exit__(self, *exc) -> None:
        if self.held:
            self.state.lock_holder.value = 0
            self.state.lock.release()
            self.held = False


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

"""The body of a Ray actor of ``RayActorPool`` (runtime.ray_pool): ``_RayActor``
(one ``Actor``: a policy copy, its envs and a private trajectory buffer, in a Ray
worker process on any node of the cluster), what it is constructed with
(``RayActorLaunch``) and the exception that stops its unroll (``_UnrollStopped``).

``_RayActor`` is a plain class at module level: the pool wraps it with
``ray.remote``, and Ray's workers import it from here by name.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from alf_async.config import gin_imports
from alf_async.runtime import messages
from alf_async.runtime.actor import Actor
from alf_async.runtime.actor_process import build_policy_factory, shorten_failures
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.settings import TrainerSettings
from alf_async.utils.process import limit_blas_threads
from alf_async.utils.shared_memory import sweep_stale_blocks


@dataclass
class RayActorLaunch:
    """What a Ray actor is constructed with (plain values and bytes, so that
    Ray can deserialize it before the user's modules are importable).

    Attributes:
        actor_id, generation, epoch: see ``runtime.actor.Actor``.
        settings: the run's settings.
        policy_factory: the policy factory, pickled; unpickled after
            ``sys_path`` is in place (it may live in the user's modules).
        gin_config: bindings parsed before the policy is built.
        sys_path: the driver's ``sys.path``; entries that exist on the actor's
            node are added to its own (user env modules, a project's folder).
    """

    actor_id: int
    generation: int
    epoch: int
    settings: TrainerSettings
    policy_factory: bytes
    gin_config: str
    sys_path: List[str]


class _UnrollStopped(Exception):
    """Raised inside an unroll that ``close()`` asked to stop."""


class _RayActor:
    """The body of a Ray actor: one ``Actor`` and a private trajectory buffer.

    ``unroll`` runs on the actor's default thread; ``seconds_since_progress``
    and ``close`` run on its "control" thread, so they are answered mid-unroll.
    ``close`` asks a running unroll to stop at its next step and waits for it
    before closing the envs (their pipes are not shared between threads).
    """

    def __init__(self, launch: RayActorLaunch):
        for entry in reversed(launch.sys_path):
            if entry not in sys.path and os.path.isdir(entry):
                sys.path.insert(0, entry)
        sweep_stale_blocks()  # blocks of actors killed on this node before
        limit_blas_threads()  # a Ray worker is not started by init_child_process
        s = launch.settings
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._last_progress = time.monotonic()
        self._idle_since = time.perf_counter()
        self.actor = Actor(launch.actor_id, s, build_policy_factory(
            launch.policy_factory, launch.gin_config), launch.epoch, launch.generation,
            env_modules=gin_imports(launch.gin_config))
        self.buffer = allocate_trajectory(s.unroll_length, s.num_envs,
                                          self.actor.env.observation_spec,
                                          self.actor.env.action_spec.dim,
                                          next_observation=s.off_policy,
                                          state_size=self.actor.state_size)

    def ready(self) -> Tuple[int, List[int], str]:
        """(pid, env-worker pids, node id), once the envs are built."""
        import ray

        return os.getpid(), list(self.actor.env.worker_pids), \
            ray.get_runtime_context().get_node_id()

    def _progress(self) -> None:
        if self._stop.is_set():
            raise _UnrollStopped("the pool is closing")
        self._last_progress = time.monotonic()

    def unroll(self, slot: int, version: int, weights: Mapping[str, np.ndarray],
               reseed_epoch: Optional[int]) -> Tuple[messages.BatchReady, Dict[str, np.ndarray]]:
        """Unroll T steps with weights ``version`` (loaded if newer than held)."""
        self._idle.clear()
        try:
            self._progress()
            if reseed_epoch is not None:
                self.actor.reseed(reseed_epoch)
            if version > self.actor.version:
                self.actor.load_weights(version, weights)
            wait_s = time.perf_counter() - self._idle_since
            record = self.actor.unroll(self.buffer, on_step=self._progress)
            shorten_failures(record)
            message = self.actor.batch_message(slot, wait_s, record)
            self._idle_since = time.perf_counter()
            return message, self.buffer  # copied into the object store by Ray
        finally:
            self._idle.set()

    def seconds_since_progress(self) -> float:
        """Seconds since the unroll last stepped (answered mid-unroll)."""
        return time.monotonic() - self._last_progress

    def close(self, wait_s: float = 5.0) -> None:
        """Stop a running unroll, then the env workers (their shared memory freed)."""
        self._stop.set()
        self._idle.wait(wait_s)
        self.actor.close()

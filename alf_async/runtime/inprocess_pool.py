"""One actor unrolling inside the learner's process (N = 1, synchronous).

The reference path of the runtime: the same ``Actor`` as the process pool, no
process and no shared memory, so tests can compare both and a debugger can step
through an unroll.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from alf_async.envs.spaces import ObservationSpec
from alf_async.runtime.actor import Actor
from alf_async.runtime.actor_pool import PoolStats
from alf_async.runtime.messages import BatchReady
from alf_async.runtime.policy import PolicyFactory
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.settings import TrainerSettings


class InProcessActorPool:
    """The ``ActorPool`` of ``Trainer.backend = "inprocess"`` (one actor)."""

    def __init__(self, settings: TrainerSettings, policy_factory: PolicyFactory,
                 observation: ObservationSpec, action_dim: int, epoch: int = 0,
                 env_modules: Sequence[str] = (), state_size: int = 0):
        self.settings = settings
        self.policy_factory = policy_factory
        self.epoch = epoch
        self.env_modules = tuple(env_modules)
        self.actor: Optional[Actor] = None
        self.buffer = allocate_trajectory(settings.unroll_length, settings.num_envs,
                                          observation, action_dim,
                                          next_observation=settings.off_policy,
                                          state_size=state_size)
        self._weights: Optional[Tuple[int, Dict[str, np.ndarray]]] = None

    def publish_weights(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        self._weights = (version, {k: np.array(v, copy=True) for k, v in arrays.items()})

    def start(self) -> None:
        self.actor = Actor(0, self.settings, self.policy_factory, self.epoch, 0,
                           env_modules=self.env_modules)

    @property
    def pids(self) -> List[int]:
        return list(self.actor.env.worker_pids) if self.actor else []

    def next_batch(self, timeout: Optional[float] = None
                   ) -> Optional[Tuple[BatchReady, Dict[str, np.ndarray]]]:
        """Unroll now (the actor runs in this process, so a batch is always
        ready; ``timeout`` is not needed)."""
        version, arrays = self._weights
        if version > self.actor.version:
            self.actor.load_weights(version, arrays)
        record = self.actor.unroll(self.buffer)
        return self.actor.batch_message(0, 0.0, record), self.buffer

    def release(self, message: BatchReady, reseed_epoch: Optional[int] = None) -> None:
        if reseed_epoch is not None:
            self.epoch = reseed_epoch
            self.actor.reseed(reseed_epoch)

    def restart_actor(self, actor_id: int, reason: str) -> None:
        raise NotImplementedError("the in-process actor is not restarted; use "
                                  "Trainer.backend='process' for fault tolerance")

    def stats(self) -> PoolStats:
        return PoolStats(queue_length=0, restarts=0, dropped_batches=0)

    def close(self) -> None:
        if self.actor is not None:
            self.actor.close()
            self.actor = None

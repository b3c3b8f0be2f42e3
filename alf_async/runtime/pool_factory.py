"""``make_actor_pool``: the ``ActorPool`` of a run's ``Trainer.backend``.

Kept apart from the interface (runtime.actor_pool), which every pool imports:
this module imports the pools, so it sits above them.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from alf_async.envs.spaces import ObservationSpec
from alf_async.runtime.actor_pool import ActorPool
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import TrainerSettings


def make_actor_pool(settings: TrainerSettings, policy_factory: PolicyFactory,
                    example_weights: Mapping[str, np.ndarray], observation: ObservationSpec,
                    action_dim: int, gin_config: str = "", epoch: int = 0,
                    state_size: int = 0) -> ActorPool:
    """The pool of ``settings.backend`` ("process", "inprocess" or "ray");
    ``state_size``: S of the actors' recurrent policy (0: feed-forward), which
    sizes the trajectories' ``initial_state``."""
    if settings.backend == "inprocess":
        from alf_async.runtime.inprocess_pool import InProcessActorPool

        from alf_async.config import gin_imports

        return InProcessActorPool(settings, policy_factory, observation, action_dim,
                                  epoch=epoch, env_modules=gin_imports(gin_config),
                                  state_size=state_size)
    if settings.backend == "ray":
        from alf_async.runtime.ray_pool import RayActorPool

        return RayActorPool(settings, policy_factory, observation, action_dim,
                            gin_config=gin_config, epoch=epoch)
    from alf_async.runtime.process_pool import ProcessActorPool

    return ProcessActorPool(settings, policy_factory, example_weights, observation,
                            action_dim, gin_config=gin_config, epoch=epoch,
                            state_size=state_size)

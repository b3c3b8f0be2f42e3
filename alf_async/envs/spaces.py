"""What alf_async can train: action and observation spaces, and one clear refusal.

``ActionSpec`` describes an env's action space for the networks and the runtime.
Actions are always stored as float32 rows of width ``dim`` (shared memory,
trajectories): a continuous action as its A values in [-1, 1]; a discrete action
as the index of the choice (0 .. n-1, exact in float32), one per dimension of a
MultiDiscrete space. The env wrapper (``gym_env``) turns a stored row into what
the env expects.

Observations: a ``Box`` of any shape is flattened; ``Dict``, ``Tuple``,
``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` observations are flattened by
gymnasium's own ``FlattenObservation``. Anything else (``Text``, ``Graph``,
``Sequence``, ...) raises ``UnsupportedSpaceError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple, Union

import numpy as np

CONTINUOUS = "continuous"
DISCRETE = "discrete"
MULTI_DISCRETE = "multi_discrete"


class UnsupportedSpaceError(ValueError):
    """An env's action or observation space that alf_async cannot train on."""


@dataclass(frozen=True)
class ActionSpec:
    """An action space as alf_async stores and samples it.

    Attributes:
        kind: "continuous" (Box), "discrete" (Discrete) or "multi_discrete".
        dim: width of a stored action row (A for Box, 1 for Discrete, D for a
            MultiDiscrete of D dimensions).
        nvec: number of choices per dimension (discrete kinds).
        start: the env's value of choice 0 per dimension (gymnasium's ``start``).
    """

    kind: str
    dim: int
    nvec: Tuple[int, ...] = ()
    start: Tuple[int, ...] = ()

    @property
    def discrete(self) -> bool:
        return self.kind != CONTINUOUS

    @classmethod
    def continuous(cls, dim: int) -> "ActionSpec":
        return cls(CONTINUOUS, int(dim))


def as_action_spec(spec_or_dim: Union[ActionSpec, int]) -> ActionSpec:
    """An ``ActionSpec``; a bare integer A means A continuous dimensions."""
    if isinstance(spec_or_dim, ActionSpec):
        return spec_or_dim
    return ActionSpec.continuous(int(spec_or_dim))


_SUPPORTED = ("Box (continuous, bounded), Discrete and MultiDiscrete actions; Box, Dict, "
              "Tuple, Discrete, MultiDiscrete and MultiBinary observations")


def action_spec(space: Any, env_name: str = "the env") -> ActionSpec:
    """The ``ActionSpec`` of a gymnasium action space, or ``UnsupportedSpaceError``."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box):
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise UnsupportedSpaceError(
                f"{env_name} has the unbounded action space {space}; alf_async maps "
                "continuous actions to the space's bounds, so they must be finite")
        return ActionSpec.continuous(int(np.prod(space.shape)))
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpec(DISCRETE, 1, (int(space.n),), (int(space.start),))
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        start = getattr(space, "start", np.zeros_like(space.nvec))
        return ActionSpec(MULTI_DISCRETE, int(space.nvec.size),
                          tuple(int(n) for n in space.nvec), tuple(int(s) for s in start))
    raise UnsupportedSpaceError(
        f"{env_name} has the action space {space}, which alf_async cannot train on; "
        f"supported: {_SUPPORTED}")


def needs_flattening(space: Any, env_name: str = "the env") -> bool:
    """Whether an observation space goes through ``FlattenObservation`` (False for
    Box); ``UnsupportedSpaceError`` for spaces that cannot be flattened to a vector."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box):
        return False
    flat = (gym.spaces.Dict, gym.spaces.Tuple, gym.spaces.Discrete,
            gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
    if isinstance(space, flat) and _all_flat(space):
        return True
    raise UnsupportedSpaceError(
        f"{env_name} has the observation space {space}, which alf_async cannot train on; "
        f"supported: {_SUPPORTED}")


def _all_flat(space: Any) -> bool:
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return all(_all_flat(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(_all_flat(s) for s in space.spaces)
    return isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                              gym.spaces.MultiBinary))

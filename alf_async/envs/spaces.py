"""What alf_async can train: action and observation spaces, and one clear refusal.

``ActionSpec`` describes an env's action space for the networks and the runtime.
Actions are always stored as float32 rows of width ``dim`` (shared memory,
trajectories): a continuous action as its A values in [-1, 1]; a discrete action
as the index of the choice (0 .. n-1, exact in float32), one per dimension of a
MultiDiscrete space. ``EnvActions`` turns stored rows into what the env expects
(the env wrapper ``gym_env.EnvAdapter`` and the Python API's ``Policy.predict``
use it).

``ObservationSpec`` describes an observation as it travels from the env to the
networks: its shape and dtype. An image (a ``Box`` of rank 3, (H, W, C) or
(C, H, W), or of rank 2, (H, W), with dtype uint8) keeps its shape, and uint8
stays uint8 in shared memory, trajectories and the replay buffer (the networks
turn it into floats / 255). Any other ``Box`` is flattened to a float32 vector
[O]; ``Dict``, ``Tuple``, ``Discrete``, ``MultiDiscrete`` and ``MultiBinary``
observations are flattened by gymnasium's own ``FlattenObservation``, also where
they hold images. Anything else (``Text``, ``Graph``, ``Sequence``, ...) raises
``UnsupportedSpaceError``.
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


@dataclass(frozen=True)
class ObservationSpec:
    """One observation as alf_async stores it.

    Attributes:
        shape: (O,) for a vector; (H, W, C), (C, H, W) or (H, W) for an image.
        dtype: "float32", or "uint8" for images of bytes.
    """

    shape: Tuple[int, ...]
    dtype: str = "float32"

    @property
    def dim(self) -> int:
        """Values in one observation (O for a vector, H * W * C for an image)."""
        return int(np.prod(self.shape))

    @property
    def is_image(self) -> bool:
        return len(self.shape) >= 2

    @property
    def nbytes(self) -> int:
        return self.dim * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{'x'.join(str(n) for n in self.shape)} {self.dtype}"


def as_observation_spec(spec_or_dim: Union[ObservationSpec, int]) -> ObservationSpec:
    """An ``ObservationSpec``; a bare integer O means a float32 vector [O]."""
    if isinstance(spec_or_dim, ObservationSpec):
        return spec_or_dim
    return ObservationSpec((int(spec_or_dim),), "float32")


def observation_spec(space: Any) -> ObservationSpec:
    """How an env's (Box) observation space is stored (see the module doc)."""
    shape = tuple(int(n) for n in space.shape)
    uint8 = np.dtype(space.dtype) == np.uint8
    if len(shape) == 3 or (len(shape) == 2 and uint8):
        return ObservationSpec(shape, "uint8" if uint8 else "float32")
    return ObservationSpec((int(np.prod(shape)),), "float32")


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


class EnvActions:
    """Stored action rows as the env takes them (what ``env.step`` gets).

    A continuous row (A values) is clipped to [-1, 1] and mapped affinely to
    the env's box, low + (u + 1) / 2 (high - low) in float64, then given the
    box's shape and dtype. A discrete row (choice indices) is rounded, clipped
    to [0, n - 1] and shifted by the space's ``start``, as int64: one index
    for a Discrete space, D of them for a MultiDiscrete one.

    Args:
        space: the env's gymnasium action space.
        spec: its ``ActionSpec`` (``action_spec(space)``).
    """

    def __init__(self, space: Any, spec: ActionSpec):
        self.spec = spec
        self.shape = tuple(int(n) for n in space.shape)  # () for Discrete
        self.dtype = np.dtype(space.dtype)
        if spec.discrete:
            self.last_choice = np.asarray(spec.nvec, np.int64) - 1  # [D]
            self.start = np.asarray(spec.start, np.int64)  # [D]
        else:  # the box's bounds, flat [A]
            self.low = np.asarray(space.low, np.float64).reshape(-1)
            self.high = np.asarray(space.high, np.float64).reshape(-1)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """rows [..., dim] -> actions [..., *space.shape]: the box's dtype for
        continuous actions, int64 choice indices for discrete ones."""
        lead = np.shape(rows)[:-1]
        if self.spec.discrete:
            index = np.clip(np.rint(np.asarray(rows, np.float64)).astype(np.int64), 0,
                            self.last_choice) + self.start
            return index.reshape(lead + self.shape)
        unit = np.clip(np.asarray(rows, dtype=np.float64), -1.0, 1.0)
        scaled = self.low + (unit + 1.0) * 0.5 * (self.high - self.low)
        return scaled.reshape(lead + self.shape).astype(self.dtype)


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

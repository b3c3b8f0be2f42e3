"""A ring buffer of transitions in shared memory, filled with whole trajectories.

Off-policy learners (SAC) train on transitions sampled uniformly from
everything the actors collected recently. The buffer holds C transitions
(``capacity``) in one shared-memory block, so that a process other than its
owner (a sampler, a Hogwild worker) can attach to it by name:

| field            | shape  | dtype   | meaning                                          |
|------------------|--------|---------|--------------------------------------------------|
| observation      | [C, *O]| O's     | raw s_t (the env's ObservationSpec)              |
| action           | [C, A] | float32 | a_t as the actor stored it                       |
| reward           | [C]    | float32 | r_t                                              |
| next_observation | [C, *O]| O's     | s_{t+1}; the episode's final observation when t  |
|                  |        |         | ended it (terminated or truncated)               |
| terminated       | [C]    | bool    | s_{t+1} is terminal: no bootstrap from it        |
| inserted_at      | [C]    | int64   | the learner's gradient steps when it was added   |
| cursor           | [2]    | int64   | (next write position, number of valid entries)   |

Bootstrapping: a transition that ended its episode by truncation (time limit)
keeps ``terminated = False`` and its real final observation, so a learner
bootstraps from it; only ``terminated`` stops the bootstrap.

Writes go in time-major order of a trajectory [T, K] (step t of every env, then
step t + 1), wrapping around to the oldest entries when the buffer is full.
One process writes; readers see a consistent ``size`` after each
``add_trajectory`` returns.
"""

from __future__ import annotations

from typing import Dict, Mapping, Union

import numpy as np

from alf_async.envs.spaces import ObservationSpec, as_observation_spec
from alf_async.utils.shared_memory import ArraySpec, SharedArrays, SharedBlockHolder

TRANSITION_FIELDS = ("observation", "action", "reward", "next_observation", "terminated")
STORED_FIELDS = TRANSITION_FIELDS + ("inserted_at",)


def replay_specs(capacity: int, observation: Union[ObservationSpec, int],
                 action_dim: int) -> Dict[str, ArraySpec]:
    """Array specs of a buffer of ``capacity`` transitions (observations in the
    env's ``ObservationSpec``; an int O: float32 vectors)."""
    obs = as_observation_spec(observation)
    return {
        "observation": ArraySpec((capacity,) + obs.shape, obs.dtype),
        "action": ArraySpec((capacity, action_dim), "float32"),
        "reward": ArraySpec((capacity,), "float32"),
        "next_observation": ArraySpec((capacity,) + obs.shape, obs.dtype),
        "terminated": ArraySpec((capacity,), "bool"),
        "inserted_at": ArraySpec((capacity,), "int64"),
        "cursor": ArraySpec((2,), "int64"),
    }


def replay_nbytes(capacity: int, observation: Union[ObservationSpec, int],
                  action_dim: int) -> int:
    """Bytes of a buffer of ``capacity`` transitions."""
    return sum(s.nbytes for s in replay_specs(capacity, observation, action_dim).values())


class ReplayBuffer(SharedBlockHolder):
    """C transitions in a shared-memory ring (see the module docstring).

    Use ``ReplayBuffer.create(capacity, O, A)`` in the owner (the writer) and
    ``ReplayBuffer.attach(name, specs)`` in readers; ``close()`` unmaps (and,
    in the owner, frees) the block.
    """

    def __init__(self, block: SharedArrays):
        super().__init__(block)
        self.capacity = block.arrays["reward"].shape[0]

    @classmethod
    def create(cls, capacity: int, observation: Union[ObservationSpec, int],
               action_dim: int) -> "ReplayBuffer":
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        return cls(SharedArrays.create(replay_specs(capacity, observation, action_dim),
                                       tag="replay"))

    @property
    def size(self) -> int:
        """Valid transitions (at most ``capacity``)."""
        return int(self.block.arrays["cursor"][1])

    @property
    def position(self) -> int:
        """Index the next transition is written to."""
        return int(self.block.arrays["cursor"][0])

    def add_trajectory(self, trajectory: Mapping[str, np.ndarray],
                       gradient_step: int = 0) -> int:
        """Append the T x K transitions of ``trajectory`` (arrays [T, K, ...] of
        ``TRANSITION_FIELDS``, and optionally ``inserted_at``), stamped with
        ``gradient_step``; returns how many were added. Steps marked in an
        ``env_failed`` [T, K] field (an env that failed and was recreated:
        reward 0 and no real next state) are left out."""
        a = self.block.arrays
        count = int(trajectory["reward"].size)
        keep = None
        if "env_failed" in trajectory:
            failed = np.asarray(trajectory["env_failed"]).reshape(count)
            if failed.any():
                keep = np.flatnonzero(~failed)
                count = int(keep.size)
        if count == 0:
            return 0

        def rows(key: str, tail: tuple) -> np.ndarray:
            flat = np.asarray(trajectory[key]).reshape((-1,) + tail)
            return flat if keep is None else flat[keep]

        position = self.position
        # Keep only the newest C transitions when one trajectory exceeds C.
        skip = max(0, count - self.capacity)
        index = (position + skip + np.arange(count - skip)) % self.capacity
        for key in TRANSITION_FIELDS:
            a[key][index] = rows(key, a[key].shape[1:])[skip:]
        if "inserted_at" in trajectory:
            a["inserted_at"][index] = rows("inserted_at", ())[skip:]
        else:
            a["inserted_at"][index] = gradient_step
        a["cursor"][0] = (position + count) % self.capacity
        a["cursor"][1] = min(self.capacity, self.size + count)
        return count

    def sample(self, batch_size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement: arrays
        [B, ...] of ``TRANSITION_FIELDS`` and ``inserted_at``."""
        size = self.size
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = rng.integers(0, size, batch_size)
        return {key: self.block.arrays[key][index] for key in STORED_FIELDS}

    # -- checkpoints ----------------------------------------------------------
    def state_arrays(self) -> Dict[str, np.ndarray]:
        """The valid transitions oldest first ([size, ...] copies), for a checkpoint."""
        size, position = self.size, self.position
        start = position - size if size < self.capacity else position
        order = (start + np.arange(size)) % self.capacity
        return {key: self.block.arrays[key][order].copy() for key in STORED_FIELDS}

    def load_state_arrays(self, state: Mapping[str, np.ndarray]) -> None:
        """Refill from ``state_arrays()`` of a buffer with the same O and A (the
        newest ``capacity`` transitions are kept if the old buffer was larger)."""
        a = self.block.arrays
        for key in TRANSITION_FIELDS:
            expected = a[key].shape[1:]
            if tuple(np.shape(state[key])[1:]) != expected:
                raise ValueError(f"replay buffer field {key!r} has rows of shape "
                                 f"{tuple(np.shape(state[key])[1:])} in the checkpoint, "
                                 f"expected {expected}")
        a["cursor"][:] = 0
        count = len(state["reward"])
        rows = {key: np.asarray(state[key]).reshape((count, 1) + a[key].shape[1:])
                for key in STORED_FIELDS if key in state}  # a trajectory of [count, 1]
        self.add_trajectory(rows)

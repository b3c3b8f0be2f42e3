"""The trajectory an actor hands to the learner, and its shared-memory slots.

One trajectory is an unroll of T steps on K envs (time-major):

| field            | shape      | dtype   | meaning                                    |
|------------------|------------|---------|--------------------------------------------|
| observation      | [T, K, *O] | O's     | raw observation s_t the policy acted on     |
| action           | [T, K, A]  | float32 | sampled action a_t (env gets it clipped)    |
| reward           | [T, K]     | float32 | r_t                                         |
| terminated       | [T, K]     | bool    | episode reached a terminal state at t       |
| truncated        | [T, K]     | bool    | episode hit its time limit at t             |
| log_prob         | [T, K]     | float32 | log mu(a_t | s_t) of the behaviour policy   |
| value            | [T, K]     | float32 | V(s_t) of the behaviour value network       |
| truncation_value | [T, K]     | float32 | V(final obs) where truncated, else 0        |
| bootstrap_value  | [K]        | float32 | V(s_T) after the last step                  |
| env_failed       | [T, K]     | bool    | the env failed at t and was recreated: not  |
|                  |            |         | a transition (reward 0, truncated)          |
| bootstrap_observation | [K, *O] | O's   | s_T, the observation after the last step    |
| final_observation | [R, K, *O] | O's    | the final observations of env k's first R   |
|                  |            |         | time-limit truncations in the unroll (rows  |
|                  |            |         | no truncation fills are 0)                  |
| behaviour_version | [T, K]   | int32   | the weights version that acted at t (the    |
|                  |            |         | same for the whole unroll unless            |
|                  |            |         | ``Trainer.weights_mid_unroll``)             |
| final_observation_row | [T, K] | int8   | the row of final_observation holding the    |
|                  |            |         | final observation of step t (truncated, not |
|                  |            |         | failed, among env k's first R), else -1     |
| next_observation | [T, K, *O] | O's     | s_{t+1}, the final observation where the    |
|                  |            |         | episode ended at t (off-policy runs only)   |
| initial_state    | [K, S]     | float32 | recurrent policies only (S > 0): the state  |
|                  |            |         | each env started the unroll with            |
| episode_start    | [T, K]     | bool    | recurrent policies only: an episode begins  |
|                  |            |         | at t (its state was reset to zero before t) |

*O and O's dtype: the env's ``ObservationSpec`` ([O] float32 for a vector; an
image keeps its shape, and uint8 frames stay uint8: 1 byte a pixel, not 4).

The bootstrap and final observations let a learner recompute the bootstrap and
truncation values with its own value network (``PPOLearner.recompute_values``)
without a second [T, K, *O] array: R = ``FINAL_OBSERVATION_ROWS`` final
observations per env and unroll (``envs.final_observations``), the extra
observation memory being (1 + R) / T of the observations'. A truncation past
env k's first R (or a failed step) keeps the actor's truncation value.

The policy version the unroll started with, timings and finished episodes travel
in the small message that announces the batch (``runtime.messages``).

``TrajectorySlots`` preallocates S slots of this layout in one shared-memory block;
slot s of field f is ``slots[f][s]``.
"""

from __future__ import annotations

from typing import Dict, Optional, Union

import numpy as np

from alf_async.envs.final_observations import FINAL_OBSERVATION_ROWS
from alf_async.envs.spaces import ObservationSpec, as_observation_spec
from alf_async.utils.shared_memory import ArraySpec, SharedArrays, SharedBlockHolder

_FIELDS = {
    "observation": ("obs", None),  # the ObservationSpec's shape and dtype
    "action": ("act", "float32"),
    "reward": ((), "float32"),
    "terminated": ((), "bool"),
    "truncated": ((), "bool"),
    "log_prob": ((), "float32"),
    "value": ((), "float32"),
    "truncation_value": ((), "float32"),
    "env_failed": ((), "bool"),
    "behaviour_version": ((), "int32"),
    "final_observation_row": ((), "int8"),
}


def trajectory_specs(unroll_length: int, num_envs: int,
                     observation: Union[ObservationSpec, int], action_dim: int,
                     num_slots: Optional[int] = None,
                     next_observation: bool = False, state_size: int = 0
                     ) -> Dict[str, ArraySpec]:
    """Array specs of a trajectory, with a leading slot dim if ``num_slots``
    (and the ``next_observation`` field if asked: off-policy runs; the
    ``initial_state`` and ``episode_start`` fields for a recurrent policy's
    ``state_size`` S > 0); ``observation``: the env's ``ObservationSpec`` (an
    int O: a float32 vector)."""
    obs = as_observation_spec(observation)
    lead = () if num_slots is None else (num_slots,)
    specs = {}
    for name, (extra, dtype) in _FIELDS.items():
        if extra == "obs":
            tail, dtype = obs.shape, obs.dtype
        else:
            tail = (action_dim,) if extra == "act" else extra
        specs[name] = ArraySpec(lead + (unroll_length, num_envs) + tuple(tail), dtype)
    specs["bootstrap_value"] = ArraySpec(lead + (num_envs,), "float32")
    specs["bootstrap_observation"] = ArraySpec(lead + (num_envs,) + obs.shape, obs.dtype)
    specs["final_observation"] = ArraySpec(
        lead + (FINAL_OBSERVATION_ROWS, num_envs) + obs.shape, obs.dtype)
    if next_observation:
        specs["next_observation"] = ArraySpec(
            lead + (unroll_length, num_envs) + obs.shape, obs.dtype)
    if state_size > 0:
        specs["initial_state"] = ArraySpec(lead + (num_envs, state_size), "float32")
        specs["episode_start"] = ArraySpec(lead + (unroll_length, num_envs), "bool")
    return specs


def trajectory_nbytes(unroll_length: int, num_envs: int,
                      observation: Union[ObservationSpec, int], action_dim: int,
                      next_observation: bool = False, state_size: int = 0) -> int:
    """Bytes of one trajectory."""
    return sum(s.nbytes for s in trajectory_specs(
        unroll_length, num_envs, observation, action_dim,
        next_observation=next_observation, state_size=state_size).values())


def allocate_trajectory(unroll_length: int, num_envs: int,
                        observation: Union[ObservationSpec, int], action_dim: int,
                        next_observation: bool = False, state_size: int = 0
                        ) -> Dict[str, np.ndarray]:
    """A private (non-shared) trajectory buffer."""
    return {k: np.zeros(s.shape, s.dtype) for k, s in trajectory_specs(
        unroll_length, num_envs, observation, action_dim,
        next_observation=next_observation, state_size=state_size).items()}


class TrajectorySlots(SharedBlockHolder):
    """S preallocated trajectory buffers in one shared-memory block."""

    def __init__(self, block: SharedArrays):
        super().__init__(block)
        self.num_slots = next(iter(block.arrays.values())).shape[0]

    @classmethod
    def create(cls, num_slots: int, unroll_length: int, num_envs: int,
               observation: Union[ObservationSpec, int], action_dim: int,
               next_observation: bool = False, state_size: int = 0) -> "TrajectorySlots":
        specs = trajectory_specs(unroll_length, num_envs, observation, action_dim,
                                 num_slots, next_observation=next_observation,
                                 state_size=state_size)
        return cls(SharedArrays.create(specs, tag="traj"))

    def slot(self, index: int) -> Dict[str, np.ndarray]:
        """Views [T, K, ...] of slot ``index`` (no copy)."""
        return {k: v[index] for k, v in self.block.arrays.items()}

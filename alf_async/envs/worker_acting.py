"""The env worker's side of acting env workers (``envs.acting_workers``): the
rollout block's layout, and ``WorkerActing``, which carries out the ACT_
commands in an env-worker process: it keeps the policy copy, attaches to the
rollout block and unrolls its envs into it.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

import numpy as np

from alf_async.envs.env_group import EnvGroup
from alf_async.envs.final_observations import FINAL_OBSERVATION_ROWS, keep_final_observations
from alf_async.envs.spaces import ObservationSpec
from alf_async.envs.worker_protocol import EnvCommand
from alf_async.utils.shared_memory import ArraySpec, SharedArrays

# The columns a rollout shares with a trajectory ([T, K, ...]; observation has T + 1 rows).
ROLLOUT_COLUMNS = ("observation", "action", "log_prob", "value", "reward", "terminated",
                   "truncated", "truncation_value", "env_failed", "final_observation_row")

# The commands an env worker hands to its ``WorkerActing``.
ACTING_COMMANDS = frozenset((EnvCommand.ACT_SETUP, EnvCommand.ACT_WEIGHTS,
                             EnvCommand.ACT_RESEED, EnvCommand.ACT_UNROLL))

# (the group's sampling stream, (split s, of S)) for each group a worker acts for
WorkerGroups = List[Tuple[int, Tuple[int, int]]]


def rollout_specs(unroll_length: int, num_envs: int, observation: ObservationSpec,
                  action_dim: int) -> Dict[str, ArraySpec]:
    """The arrays of a rollout block (module docstring)."""
    t, k = unroll_length, num_envs
    return {
        "observation": ArraySpec((t + 1, k) + observation.shape, observation.dtype),
        "final_observation": ArraySpec((FINAL_OBSERVATION_ROWS, k) + observation.shape,
                                       observation.dtype),
        "final_observation_row": ArraySpec((t, k), "int8"),
        "action": ArraySpec((t, k, action_dim), "float32"),
        "log_prob": ArraySpec((t, k), "float32"),
        "value": ArraySpec((t, k), "float32"),
        "reward": ArraySpec((t, k), "float32"),
        "truncation_value": ArraySpec((t, k), "float32"),
        "terminated": ArraySpec((t, k), "bool"),
        "truncated": ArraySpec((t, k), "bool"),
        "env_failed": ArraySpec((t, k), "bool"),
        "life_lost": ArraySpec((t, k), "bool"),
        "progress": ArraySpec((k,), "int64"),
        "act_s": ArraySpec((k,), "float64"),
    }


class WorkerActing:
    """An env worker's side: its policy, the rollout block and the unroll loop.

    Args:
        group: the worker's envs, stepping through the batch arrays.
    """

    def __init__(self, group: EnvGroup):
        self.group = group
        self.policy = None
        self.rollout: Optional[SharedArrays] = None
        self.groups: List[Tuple[int, Tuple[int, int], np.ndarray]] = []

    def run(self, command: EnvCommand, args: Tuple) -> List[Tuple[int, str]]:
        """Carry out an ACT_ command; returns the env failures it met."""
        if command is EnvCommand.ACT_SETUP:
            name, specs, groups, self.policy = args
            self.close()
            self.rollout = SharedArrays.attach(name, specs)
            self.groups = [(stream, split, np.array([k for k in self.group.indices
                                                     if k % split[1] == split[0]], np.int64))
                           for stream, split in groups]
            return []
        if command is EnvCommand.ACT_WEIGHTS:
            self.policy.load(*args)
            return []
        if command is EnvCommand.ACT_RESEED:
            self.policy.reseed(*args)
            return []
        if command is EnvCommand.ACT_UNROLL:
            return self.unroll(*args)
        raise ValueError(f"WorkerActing cannot run {command}")

    def unroll(self, t0: int, t1: int) -> List[Tuple[int, str]]:
        """Act and step rows t0 .. t1 - 1 of the rollout for the worker's envs."""
        r, a, policy = self.rollout.arrays, self.group.arrays, self.policy
        failures: List[Tuple[int, str]] = []
        act_s = 0.0
        for t in range(t0, t1):
            for stream, split, envs in self.groups:
                start = time.perf_counter()
                obs = a["observation"][envs]
                action, log_prob, value = policy.act(obs, envs, stream)
                act_s += time.perf_counter() - start
                r["action"][t, envs] = action
                r["log_prob"][t, envs] = log_prob
                r["value"][t, envs] = value
                a["action"][envs] = action
                failures += self.group.step(split)
                truncated = a["truncated"][envs]
                r["reward"][t, envs] = a["reward"][envs]
                r["terminated"][t, envs] = a["terminated"][envs]
                r["truncated"][t, envs] = truncated
                r["env_failed"][t, envs] = a["env_failed"][envs]
                r["life_lost"][t, envs] = a["life_lost"][envs]
                truncation_value = np.zeros(len(envs), np.float32)
                if truncated.any():
                    start = time.perf_counter()
                    idx = np.flatnonzero(truncated)
                    truncation_value[idx] = policy.value(a["final_observation"][envs[idx]])
                    act_s += time.perf_counter() - start
                r["truncation_value"][t, envs] = truncation_value
                keep_final_observations(r["final_observation"], r["final_observation_row"], t,
                                        envs, truncated & ~a["env_failed"][envs],
                                        a["final_observation"][envs])
                r["observation"][t + 1, envs] = a["observation"][envs]
            r["progress"][self.group.indices] = t + 1
        r["act_s"][self.group.indices[0]] = act_s
        return failures

    def close(self) -> None:
        if self.rollout is not None:
            self.rollout.close()
            self.rollout = None

"""What the runtime needs of a policy: numpy in, numpy out, CPU only.

An actor calls ``policy.act(obs)`` once per step of its batched env and
``policy.value(obs)`` for observations that ended an episode by truncation;
``load_weights`` takes the arrays the learner published. The runtime never builds
a policy itself: the pool gets a factory ``factory(observation_spec, action_spec,
seed) -> Policy`` (the env's ``envs.spaces.ObservationSpec`` and ``ActionSpec``)
(the learner's ``NeuralPolicy`` in training runs, scripted policies in the
runtime's tests).

A recurrent policy has ``state_size`` S > 0 and takes each env's state: the
actor calls ``act(obs, state)`` -> (action, log_prob, value, next state [K, S])
and ``value(obs, state)``, and keeps the states (``runtime.actor``).

A policy whose exploration noise is kept per env across steps (gSDE) says
``per_env_exploration = True``: the actor then also passes ``env_ids`` [K],
the indices in its batched env of the envs it acts for.

A policy that samples from one random stream per group of envs says
``sampling_streams = True``: the actor then passes ``stream`` g, the index of
the group it acts for (``BatchedEnv.splits``), and may serve the groups in the
order their env workers answer, since each group's actions then depend only on
its own envs and stream, not on that order. A policy that does not say is
called in the fixed group order (its actions may depend on the calls before).
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Protocol, Tuple

import numpy as np


class Policy(Protocol):
    def act(self, observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """observation [K, *O] -> (action [K, A] stored rows, log_prob [K], value [K])."""

    def value(self, observation: np.ndarray) -> np.ndarray:
        """observation [M, O] -> value [M]."""

    def load_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Take the learner's published arrays."""

    def reseed(self, seed: int) -> None:
        """Restart the policy's sampling randomness from ``seed``."""


PolicyFactory = Callable[[int, int, int], Policy]


def policy_state_size(policy: object) -> int:
    """S of a policy: its recurrent state's floats per env (0: feed-forward,
    also for policies that do not say)."""
    return int(getattr(policy, "state_size", 0))


def explores_per_env(policy: object) -> bool:
    """Whether ``policy.act`` takes the envs' indices (``env_ids``) because it
    keeps exploration noise per env (False for policies that do not say)."""
    return bool(getattr(policy, "per_env_exploration", False))


def has_sampling_streams(policy: object) -> bool:
    """Whether ``policy.act`` takes ``stream``, the group of envs it samples
    for (False for policies that do not say)."""
    return bool(getattr(policy, "sampling_streams", False))


def start_states(policy: object, batch: int) -> Optional[np.ndarray]:
    """The states [B, S] ``batch`` envs start an episode with (zeros), or None
    for a feed-forward policy."""
    size = policy_state_size(policy)
    return np.zeros((batch, size), np.float32) if size else None


def act_with_state(policy: Policy, observation: np.ndarray, state: Optional[np.ndarray]
                   ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """(actions [B, A], next states [B, S] or None) for observations [B, *O]
    and the envs' states (None: a feed-forward policy), for the loops that
    play episodes (evaluation, the play command)."""
    if state is None:
        return policy.act(observation)[0], None
    action, _, _, state = policy.act(observation, state)
    return action, state

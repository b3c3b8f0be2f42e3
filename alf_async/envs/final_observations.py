"""The final observations of time-limit truncations that an unroll keeps for
the learner (``PPOLearner.recompute_values`` recomputes V(s_final) from them).

A trajectory (``runtime.trajectory``) and an acting env workers' rollout block
(``envs.acting_workers``) both hold them as:

- final_observation [R, K, *O]: env k's i-th time-limit truncation of the
  unroll in row i (i < R = ``FINAL_OBSERVATION_ROWS``); rows no truncation
  fills are 0;
- final_observation_row [T, K] int8: the row holding step t's final
  observation (truncated by the time limit, not failed, among env k's first
  R), else -1.

R = 2 keeps every truncation of an unroll at most twice the time limit (every
shipped config) for (R / T) of the observations' memory, not the [T, K, *O] of
a full next-observation array (an 84x84x4 frame stack is 28 KB a step).
"""

from __future__ import annotations

import numpy as np

# R: final observations of time-limit truncations kept per env and unroll.
FINAL_OBSERVATION_ROWS = 2


def keep_final_observations(final_observation: np.ndarray, rows: np.ndarray, t: int,
                            envs: np.ndarray, keep: np.ndarray,
                            observations: np.ndarray) -> None:
    """Write row t of ``rows`` for ``envs`` and keep the final observations of
    their time-limit truncations at t.

    Args:
        final_observation: [R, K, *O], the kept final observations.
        rows: [T, K] int8, final_observation_row (rows before t already
            written in this unroll).
        t: the step.
        envs: [B] int, the envs of this step's group.
        keep: [B] bool, truncated at t by the time limit (not failed).
        observations: [B, *O], their final observations.
    """
    rows[t, envs] = -1
    if not keep.any():
        return
    which = np.flatnonzero(keep)
    ids = np.asarray(envs)[which]
    used = (rows[:t, ids] >= 0).sum(axis=0)  # env k's truncations kept before t
    fits = used < final_observation.shape[0]
    rows[t, ids[fits]] = used[fits]
    final_observation[used[fits], ids[fits]] = observations[which[fits]]

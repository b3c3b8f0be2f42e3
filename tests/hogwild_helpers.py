"""Helpers of tests/test_hogwild.py run in spawned processes; no tests here."""

from __future__ import annotations

import numpy as np

OBS, ACT, BATCH = 3, 2, 16


def sac_batch(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"observation": rng.normal(size=(BATCH, OBS)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(BATCH, ACT)).astype(np.float32),
            "reward": rng.normal(size=BATCH).astype(np.float32),
            "next_observation": rng.normal(size=(BATCH, OBS)).astype(np.float32),
            "terminated": np.zeros(BATCH, bool)}


def make_sac_learner(seed: int):
    from alf_async.algorithms.sac_learner import SACLearner

    return SACLearner(OBS, ACT, batch_size=BATCH, seed=seed)


def gradient_step_in_child(state, mode: str) -> None:
    """A worker process: bind a fresh learner to ``state`` and take one step."""
    import torch

    from alf_async.hogwild.shared_state import WorkerBinding

    torch.set_num_threads(1)
    learner = make_sac_learner(seed=7)
    binding = WorkerBinding(state, learner, mode, sync_interval=1)
    learner.train_step(sac_batch(3))
    binding.after_update(1)

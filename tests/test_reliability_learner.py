"""Reliability, case 4: the learner fails.

- A non-finite loss, produced for real by the train command: a run is resumed with
  ``PPOLearner.reward_scale=1e39`` (float32 rewards times 1e39 overflow to inf, so
  advantages and the loss become NaN at the first training iteration). The run
  stops with exit 1 and a message naming the iteration; no checkpoint is written
  after the failure, so the checkpoints of the run before are byte for byte what
  they were, and still load with ``weights_only=True``; every child ends.
- Any exception in the learner (an in-process ``Trainer`` whose learner raises
  after a few iterations): ``train()`` re-raises it after stopping every actor and
  releasing the shared memory (the autouse leak fixture checks), writes no final
  checkpoint, and restores the signal handlers it installed.
"""

from __future__ import annotations

import os
import signal

import gin
import pytest
import torch

from alf_async.config import parse_config
from alf_async.training.trainer import Trainer
from reliability_helpers import (DEMO_GIN, TrainRun, checkpoint_files, run_to_end,
                                   small_params)


def _snapshot(root: str):
    return {os.path.basename(p): open(p, "rb").read() for p in checkpoint_files(root)}


@pytest.mark.timeout(300)
def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    root = str(tmp_path / "run")
    rc, out, _ = run_to_end(root, small_params("Trainer.checkpoint_interval=2", iterations=4))
    assert rc == 0, out[-3000:]
    before = _snapshot(root)
    assert sorted(before) == ["ckpt-2.pt", "ckpt-4.pt"]

    params = small_params("Trainer.checkpoint_interval=1", "PPOLearner.reward_scale=1e39",
                          "PPOLearner.max_skipped_updates=0", iterations=10)
    # The resume changes what the run learns on purpose (a reward scale that
    # overflows the loss), which the resume check allows only when asked.
    with TrainRun(root, params, flags=["--allow_config_change"]) as run:
        rc = run.wait(180)
        run.assert_clean()
        out = run.output()
    assert rc == 1, out[-3000:]
    assert "resumed from" in out and "ckpt-4.pt at iteration 4" in out, out[-3000:]
    # The first iteration after the checkpoint (learner iteration 4) failed.
    assert "run stopped: non-finite loss at training iteration 4" in out, out[-3000:]
    assert "last good checkpoint" in out
    assert _snapshot(root) == before, "a checkpoint was written or changed after the failure"
    assert not [n for n in os.listdir(os.path.join(root, "checkpoints")) if n.endswith(".tmp")]
    state = torch.load(os.path.join(root, "checkpoints", "ckpt-4.pt"), weights_only=True)
    assert state["counters"]["iteration"] == 4
    for name, tensor in state["learner"]["model"].items():
        assert torch.isfinite(tensor).all(), name
    # No metrics line of a failed iteration.
    assert run.metrics()[-1]["iteration"] == 4


class LearnerBroke(RuntimeError):
    pass


@pytest.mark.timeout(180)
def test_learner_exception_stops_children_and_writes_no_checkpoint(tmp_path):
    root = str(tmp_path / "run")
    parse_config([DEMO_GIN], small_params("Trainer.checkpoint_interval=2",
                                          "Trainer.num_actors=2", iterations=50))
    sigint_before = signal.getsignal(signal.SIGINT)
    sigterm_before = signal.getsignal(signal.SIGTERM)
    try:
        trainer = Trainer(root_dir=root)
        real_train = trainer.learner.train
        seen = {}

        def failing_train(batch, *args):
            if trainer.learner.iteration == 5:
                seen["checkpoints"] = _snapshot(root)
                seen["pids"] = list(trainer.loop.batches.pool.pids)
                raise LearnerBroke("learner broke on purpose")
            return real_train(batch, *args)

        trainer.learner.train = failing_train
        with pytest.raises(LearnerBroke):
            trainer.train()
    finally:
        gin.clear_config()
    assert trainer.counters["iteration"] == 5
    assert sorted(seen["checkpoints"]) == ["ckpt-2.pt", "ckpt-4.pt"]
    assert _snapshot(root) == seen["checkpoints"]
    assert len(seen["pids"]) == 2
    assert signal.getsignal(signal.SIGINT) is sigint_before
    assert signal.getsignal(signal.SIGTERM) is sigterm_before


def _synthetic_batch(T=8, K=4, obs=3, act=2, reward=0.5):
    import numpy as np

    rng = np.random.default_rng(1)
    return {
        "observation": rng.standard_normal((T, K, obs)).astype(np.float32),
        "action": rng.uniform(-1, 1, (T, K, act)).astype(np.float32),
        "reward": np.full((T, K), reward, np.float32),
        "terminated": np.zeros((T, K), bool), "truncated": np.zeros((T, K), bool),
        "log_prob": np.full((T, K), -2.0, np.float32),
        "value": np.zeros((T, K), np.float32),
        "truncation_value": np.zeros((T, K), np.float32),
        "bootstrap_value": np.zeros(K, np.float32),
    }


def test_non_finite_update_is_skipped_counted_and_never_applied():
    from alf_async.algorithms.guarded_step import NonFiniteError
    from alf_async.algorithms.ppo_learner import PPOLearner

    learner = PPOLearner(3, 2, num_epochs=2, mini_batch_size=16, max_skipped_updates=5)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    stats = learner.train(_synthetic_batch(reward=float("inf")))
    assert stats["skipped_updates"] == 4 and stats["gradient_steps"] == 0
    for k, v in learner.model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed by a non-finite update"
    assert learner.all_finite()
    # A finite batch trains again (and resets the count of skips in a row).
    stats = learner.train(_synthetic_batch())
    assert stats["skipped_updates"] == 0 and stats["gradient_steps"] == 4
    assert any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())
    # Skips that keep happening stop training with a clear error.
    learner.train(_synthetic_batch(reward=float("nan")))  # 4 in a row: allowed
    with pytest.raises(NonFiniteError, match=r"6 non-finite updates in a row, more than "
                                             r"PPOLearner\.max_skipped_updates=5"):
        learner.train(_synthetic_batch(reward=float("nan")))

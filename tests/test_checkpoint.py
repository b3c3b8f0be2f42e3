"""Checkpoints restore a learner exactly, load safely, and are pruned and recovered.

Proves that:

- a PPOLearner trained one iteration on a small random batch, saved through
  ``Checkpointer`` and loaded into a fresh learner (different seed), has identical
  parameters, Adam state, observation-normalizer statistics, shuffling-generator
  state and iteration counter; and that both learners then train identically on
  a further batch (so nothing that matters was left out of the checkpoint);
- counters and the torch RNG state saved beside it come back unchanged;
- loading uses ``weights_only``: a file holding an arbitrary pickled object is
  refused with ``CheckpointError`` naming the file, and the object's code never
  runs; a missing file is a ``CheckpointError`` too;
- ``keep`` prunes all but the newest checkpoints;
- a truncated (or zero-filled) newest checkpoint makes ``load_latest`` fall back
  to the previous one (with a warning naming the bad file), and interrupted writes' temporary
  files are never listed and are removed by ``remove_temporary_files``;
- a checkpoint whose ``format`` is newer than this version's is refused by
  name (``NewerCheckpointError``), not skipped for an older one; a file that
  loads but is not a checkpoint's dict is corrupt.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.checkpoint import (CHECKPOINT_FORMAT, CheckpointError, Checkpointer,
                                  NewerCheckpointError, load_checkpoint_file)

OBS, ACT, T, K = 3, 2, 4, 4


def _batch(seed: int):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {
        "observation": rng.normal(size=(T, K, OBS)).astype(f32) * 3 + 1,
        "action": rng.uniform(-1, 1, size=(T, K, ACT)).astype(f32),
        "reward": rng.normal(size=(T, K)).astype(f32),
        "terminated": rng.random((T, K)) < 0.1,
        "truncated": rng.random((T, K)) < 0.1,
        "log_prob": rng.normal(-2.0, 0.3, size=(T, K)).astype(f32),
        "value": rng.normal(size=(T, K)).astype(f32),
        "truncation_value": rng.normal(size=(T, K)).astype(f32),
        "bootstrap_value": rng.normal(size=K).astype(f32),
    }


def _learner(seed: int) -> PPOLearner:
    return PPOLearner(OBS, ACT, num_epochs=2, mini_batch_size=6, learning_rate=1e-2,
                      seed=seed)


def _assert_same_tree(a, b, path="state"):
    """Recursively compare nested dicts/lists of tensors and plain values exactly."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {set(a)} != {set(b)}"
        for key in a:
            _assert_same_tree(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_tree(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a.cpu(), b.cpu()), f"{path} differs"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_learner_round_trip_through_checkpointer(tmp_path):
    learner = _learner(seed=0)
    learner.train(_batch(1))
    assert learner.iteration == 1
    counters = {"iteration": 1, "env_steps": T * K, "episodes": 3, "wall_time": 1.5}
    torch_rng = torch.get_rng_state()
    path = Checkpointer(str(tmp_path)).save(
        {"learner": learner.state_dict(), "counters": counters, "torch_rng": torch_rng},
        iteration=1)
    assert os.path.basename(path) == "ckpt-1.pt" and os.path.isfile(path)

    fresh = _learner(seed=123)
    # Sanity: the fresh learner really starts from a different state.
    assert any(not torch.equal(p, q) for p, q in zip(fresh.model.parameters(),
                                                     learner.model.parameters()))
    assert fresh.normalizer.count == 0 and fresh.iteration == 0
    state, loaded_path = Checkpointer(str(tmp_path)).load_latest()
    assert loaded_path == path
    fresh.load_state_dict(state["learner"])

    for (name, p), (_, q) in zip(learner.model.state_dict().items(),
                                 fresh.model.state_dict().items()):
        assert torch.equal(p, q), f"parameter {name} differs"
    _assert_same_tree(learner.optimizer.state_dict(), fresh.optimizer.state_dict(),
                      "optimizer")
    assert len(fresh.optimizer.state_dict()["state"]) > 0  # Adam moments came back
    assert fresh.normalizer.count == learner.normalizer.count == T * K
    np.testing.assert_array_equal(fresh.normalizer.mean, learner.normalizer.mean)
    np.testing.assert_array_equal(fresh.normalizer.m2, learner.normalizer.m2)
    assert torch.equal(fresh.generator.get_state(), learner.generator.get_state())
    assert fresh.iteration == learner.iteration == 1
    assert state["counters"] == counters
    assert torch.equal(state["torch_rng"], torch_rng)

    # Both continue identically: same shuffles, same Adam steps, same normalizer.
    stats_a = learner.train(_batch(2))
    stats_b = fresh.train(_batch(2))
    for p, q in zip(learner.model.parameters(), fresh.model.parameters()):
        assert torch.equal(p, q)
    assert stats_a["policy_loss"] == stats_b["policy_loss"]
    assert fresh.iteration == 2


def test_checkpoint_refuses_arbitrary_pickled_objects(tmp_path):
    marker = tmp_path / "code_ran"
    checkpoints = Checkpointer(str(tmp_path))
    bad = os.path.join(checkpoints.directory, "ckpt-7.pt")
    torch.save({"model": {"w": torch.zeros(2)}, "payload": _Evil(str(marker))}, bad)

    with pytest.raises(CheckpointError) as info:
        load_checkpoint_file(bad)
    assert bad in str(info.value)
    assert "weights_only" in str(info.value) or "pickled" in str(info.value)
    # load_latest does not silently skip an unsafe file: it refuses it.
    with pytest.raises(CheckpointError) as info:
        checkpoints.load_latest()
    assert bad in str(info.value)
    assert not marker.exists(), "the pickled object's code ran during loading"


class _Evil:
    """An object whose unpickling would create a file (if it were ever unpickled)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_missing_checkpoint_file_is_a_checkpoint_error(tmp_path):
    missing = str(tmp_path / "ckpt-1.pt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_file(missing)
    assert missing in str(info.value)


def test_a_newer_format_is_refused_not_skipped(tmp_path):
    checkpoints = Checkpointer(str(tmp_path))
    checkpoints.save({"x": torch.ones(1)}, 1)  # no format entry: alf_async 0.1
    checkpoints.save({"x": torch.ones(1), "format": CHECKPOINT_FORMAT}, 2)
    assert checkpoints.load_latest()[1].endswith("ckpt-2.pt")
    checkpoints.save({"x": torch.ones(1), "format": CHECKPOINT_FORMAT + 1}, 3)
    newest = os.path.join(checkpoints.directory, "ckpt-3.pt")
    with pytest.raises(NewerCheckpointError) as info:
        checkpoints.load_latest()
    message = str(info.value)
    assert newest in message and f"format {CHECKPOINT_FORMAT + 1}" in message
    assert f"formats 1 to {CHECKPOINT_FORMAT}" in message


def test_a_file_that_is_not_a_dict_is_corrupt(tmp_path):
    checkpoints = Checkpointer(str(tmp_path))
    checkpoints.save({"x": torch.ones(1)}, 1)
    torch.save([torch.ones(1)], os.path.join(checkpoints.directory, "ckpt-2.pt"))
    state, path = checkpoints.load_latest()  # falls back past the list
    assert path.endswith("ckpt-1.pt") and torch.equal(state["x"], torch.ones(1))


def test_keep_prunes_old_checkpoints(tmp_path):
    checkpoints = Checkpointer(str(tmp_path), keep=2)
    for it in (1, 2, 3, 5, 10):  # 10 after 5: numeric, not lexicographic order
        checkpoints.save({"iteration": it, "w": torch.full((3,), float(it))}, it)
    assert [it for it, _ in checkpoints.list()] == [5, 10]
    names = sorted(os.listdir(checkpoints.directory))
    assert names == ["ckpt-10.pt", "ckpt-5.pt"]
    state, path = checkpoints.load_latest()
    assert path.endswith("ckpt-10.pt") and state["iteration"] == 10
    assert torch.equal(state["w"], torch.full((3,), 10.0))


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        Checkpointer(str(tmp_path), keep=0)


@pytest.mark.parametrize("damage", ["truncate", "zero_fill"])
def test_damaged_newest_checkpoint_falls_back_to_previous(tmp_path, caplog, damage):
    checkpoints = Checkpointer(str(tmp_path), keep=3)
    learner = _learner(seed=0)
    for it in (1, 2, 3):
        learner.train(_batch(it))
        checkpoints.save({"learner": learner.state_dict(), "counters": {"iteration": it}},
                         it)
        if it == 2:
            params_at_2 = [p.detach().clone() for p in learner.model.parameters()]
    newest = os.path.join(checkpoints.directory, "ckpt-3.pt")
    size = os.path.getsize(newest)
    if damage == "truncate":  # a write cut short
        with open(newest, "r+b") as f:
            f.truncate(size // 2)
    else:  # blocks never written (e.g. power loss on some filesystems)
        with open(newest, "wb") as f:
            f.write(bytes(size))

    logger = logging.getLogger("alf_async")
    propagate = logger.propagate
    logger.propagate = True  # let caplog see the warning even if logging was set up
    try:
        with caplog.at_level(logging.WARNING, logger="alf_async"):
            state, path = checkpoints.load_latest()
    finally:
        logger.propagate = propagate
    assert path.endswith("ckpt-2.pt")
    assert state["counters"] == {"iteration": 2}
    restored = _learner(seed=9)
    restored.load_state_dict(state["learner"])
    assert restored.iteration == 2
    for p, q in zip(restored.model.parameters(), params_at_2):
        assert torch.equal(p, q)
    assert any(newest in record.getMessage() for record in caplog.records)


def test_load_latest_with_nothing_loadable(tmp_path):
    checkpoints = Checkpointer(str(tmp_path))
    assert checkpoints.load_latest() is None
    with open(os.path.join(checkpoints.directory, "ckpt-1.pt"), "wb") as f:
        f.write(b"not a checkpoint")
    assert checkpoints.load_latest() is None


def test_temporary_files_are_ignored_and_removed(tmp_path):
    checkpoints = Checkpointer(str(tmp_path))
    checkpoints.save({"x": torch.ones(1)}, 4)
    leftover = os.path.join(checkpoints.directory, ".ckpt-abc.tmp")
    with open(leftover, "wb") as f:
        f.write(b"half a checkpoint")
    assert [it for it, _ in checkpoints.list()] == [4]
    checkpoints.remove_temporary_files()
    assert not os.path.exists(leftover)
    assert os.listdir(checkpoints.directory) == ["ckpt-4.pt"]

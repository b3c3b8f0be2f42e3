"""A run written before observations kept their shape and dtype (issue 25:
commit 532ac55~1, a CartPole run of 2 iterations, tests/data) still plays and
resumes with today's code: flat observations and their checkpoints are
unchanged. The same run with its checkpoint marked as written by a newer
alf_async (a higher ``format``) is refused by train and play with an error
naming the file and the format, and the file is left as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from alf_async.checkpoint import CHECKPOINT_FORMAT
from alf_async.playback.player import PlayError, load_policy
from conftest import REPO_ROOT

OLD_RUN = os.path.join(os.path.dirname(__file__), "data", "cartpole_run_before_images")


def _copy(tmp_path) -> str:
    root = str(tmp_path / "run")
    shutil.copytree(OLD_RUN, root)
    return root


def test_a_checkpoint_from_before_images_loads_and_acts(tmp_path):
    policy, run_env, path = load_policy(_copy(tmp_path), None)
    assert run_env.env_name == "CartPole-v1" and path.endswith("ckpt-2.pt")
    action, log_prob, value = policy.act(np.zeros((3, 4), np.float32))
    assert set(action[:, 0].tolist()) <= {0.0, 1.0}
    assert np.all(np.isfinite(log_prob)) and np.all(np.isfinite(value))


def test_a_run_from_before_images_resumes(tmp_path):
    root = _copy(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root}",
         "--gin_param=Trainer.num_iterations=3"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ckpt-2.pt" in result.stderr  # resumed from the old checkpoint
    with open(os.path.join(root, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    assert [r["iteration"] for r in rows] == [3]


def _mark_newer(root: str) -> str:
    """Rewrite the run's checkpoint as if a newer alf_async had written it."""
    path = os.path.join(root, "checkpoints", "ckpt-2.pt")
    state = torch.load(path, weights_only=True)
    state["format"] = CHECKPOINT_FORMAT + 1
    torch.save(state, path)
    return path


def test_a_checkpoint_from_a_newer_version_is_refused_by_train(tmp_path):
    root = _copy(tmp_path)
    path = _mark_newer(root)
    with open(path, "rb") as f:
        before = f.read()
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root}",
         "--gin_param=Trainer.num_iterations=3"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"format {CHECKPOINT_FORMAT + 1}" in result.stderr and path in result.stderr
    assert "Traceback" not in result.stderr
    with open(path, "rb") as f:
        assert f.read() == before  # nothing the run wrote is lost
    assert not os.path.exists(os.path.join(root, "checkpoints", "ckpt-3.pt"))


def test_a_checkpoint_from_a_newer_version_is_refused_by_play(tmp_path):
    root = _copy(tmp_path)
    path = _mark_newer(root)
    with pytest.raises(PlayError, match="newer alf_async") as info:
        load_policy(root, None)
    assert path in str(info.value)

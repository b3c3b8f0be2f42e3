"""bench/run_archive.py: a stopped run packed with its newest checkpoint only,
unpacked elsewhere and resumed there by the train command, continuing its
iterations; a run a live process holds is not packed; an unpack never writes
over a run that has checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

from alf_async.utils.run_lock import RunLock
from bench import run_archive
from conftest import REPO_ROOT
from reliability_helpers import read_metrics, small_params, train_in_this_process


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> str:
    """A CartPole run stopped after 3 iterations, a checkpoint after each."""
    root = str(tmp_path_factory.mktemp("archive") / "cartpole_s0")
    params = small_params("Trainer.checkpoint_interval=1", iterations=3)
    assert train_in_this_process(root, ["ppo_cartpole.gin"], params) == 0
    assert sorted(os.listdir(os.path.join(root, "checkpoints"))) == [
        "ckpt-1.pt", "ckpt-2.pt", "ckpt-3.pt"]
    return root


def test_a_packed_run_resumes_where_it_is_unpacked(stopped_run, tmp_path):
    archive = str(tmp_path / "carried" / "cartpole_s0.tar.gz")
    assert run_archive.main(["pack", "--run_dir", stopped_run, "--archive", archive]) == 0
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "cartpole_s0/checkpoints/ckpt-3.pt" in names
    assert not any(n.endswith(("ckpt-1.pt", "ckpt-2.pt", "run.lock")) for n in names)
    assert {"cartpole_s0/config.gin", "cartpole_s0/metrics.jsonl"} <= set(names)
    assert not os.path.exists(archive + ".partial")

    elsewhere = str(tmp_path / "other_machine")
    assert run_archive.main(["unpack", "--archive", archive, "--root_dir", elsewhere]) == 0
    run_dir = os.path.join(elsewhere, "cartpole_s0")
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={run_dir}",
         "--gin_param=Trainer.num_iterations=5"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ckpt-3.pt" in result.stderr  # resumed from the carried checkpoint
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2, 3, 4, 5]
    # The original is untouched (its rows end at 3).
    assert [r["iteration"] for r in read_metrics(stopped_run)] == [1, 2, 3]

    # A second unpack would write over a run with checkpoints: refused.
    assert run_archive.main(["unpack", "--archive", archive, "--root_dir", elsewhere]) == 2
    assert [r["iteration"] for r in read_metrics(run_dir)][-1] == 5


def test_a_run_in_use_is_not_packed(stopped_run, tmp_path, capsys):
    archive = str(tmp_path / "busy.tar.gz")
    with RunLock(stopped_run):
        assert run_archive.main(["pack", "--run_dir", stopped_run,
                                 "--archive", archive]) == 2
    err = capsys.readouterr().err
    assert f"pid {os.getpid()}" in err and "stop the run" in err
    assert not os.path.exists(archive)
    # Released: it packs.
    assert run_archive.main(["pack", "--run_dir", stopped_run, "--archive", archive]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == "ckpt-3.pt"


def test_bad_input_is_named(tmp_path, capsys):
    assert run_archive.main(["pack", "--run_dir", str(tmp_path / "nowhere"),
                             "--archive", str(tmp_path / "a.tar.gz")]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    empty = tmp_path / "no_checkpoints"
    empty.mkdir()
    assert run_archive.main(["pack", "--run_dir", str(empty),
                             "--archive", str(tmp_path / "a.tar.gz")]) == 2
    assert "has no checkpoint" in capsys.readouterr().err
    assert run_archive.main(["unpack", "--archive", str(tmp_path / "missing.tar.gz"),
                             "--root_dir", str(tmp_path)]) == 2
    assert "missing.tar.gz does not exist" in capsys.readouterr().err

"""Bad run directories, a default run directory, start-up failures and write
failures: one paragraph, the right exit status, nothing left behind."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys

import gin

from conftest import REPO_ROOT
from reliability_helpers import DEMO_GIN, small_params


def run_cli(args, cwd, timeout=240):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "alf_async.bin.train", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def assert_one_paragraph_error(result, pattern):
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [l for l in result.stderr.splitlines() if l.startswith("alf_async: error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert re.search(pattern, errors[0]), errors[0]


def test_root_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("x")
    result = run_cli([f"--gin_file={DEMO_GIN}", f"--root_dir={path}"], tmp_path)
    assert_one_paragraph_error(result, r"--root_dir=.*a_file is a file, not a folder")
    result = run_cli([f"--gin_file={DEMO_GIN}", f"--root_dir={path}/run"], tmp_path)
    assert_one_paragraph_error(result, r"cannot be created: .*a_file is a file")


def test_without_root_dir_a_run_goes_to_runs_of_the_gin_stem(tmp_path):
    params = [f"--gin_param={p}" for p in small_params(iterations=2)]
    result = run_cli([f"--gin_file={DEMO_GIN}", *params], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = os.listdir(tmp_path / "runs")
    assert len(runs) == 1 and re.fullmatch(r"ppo_bullet_inverted_pendulum-\d{8}-\d{6}", runs[0])
    run_dir = tmp_path / "runs" / runs[0]
    assert (run_dir / "config.gin").is_file() and (run_dir / "metrics.jsonl").is_file()
    assert f"this run goes to {run_dir}" in result.stderr
    assert f"resume it with: python -m alf_async.bin.train --root_dir=runs/{runs[0]}" in (
        result.stderr)


def test_neither_gin_file_nor_root_dir_says_what_to_give(tmp_path):
    result = run_cli([], tmp_path)
    assert_one_paragraph_error(result, r"give --gin_file to start a run, or --root_dir")


def test_write_failure_during_a_run_is_one_paragraph(tmp_path, monkeypatch, capsys):
    """No space left while writing a checkpoint: exit 1, one paragraph naming the
    file, the last good checkpoint and how to resume; no traceback."""
    from alf_async import checkpoint
    from alf_async.bin.train import train

    save = checkpoint.Checkpointer.save

    def failing_save(self, state, iteration):
        if iteration >= 4:
            raise OSError(errno.ENOSPC, "No space left on device",
                          os.path.join(self.directory, f"ckpt-{iteration}.pt"))
        return save(self, state, iteration)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", failing_save)
    root = str(tmp_path / "run")
    try:
        rc = train(root, [DEMO_GIN], small_params("Trainer.checkpoint_interval=2",
                                                  iterations=6))
    finally:
        gin.clear_config()
    err = capsys.readouterr().err
    assert rc == 1, err[-3000:]
    assert "Traceback" not in err
    assert re.search(r"run stopped at iteration 4: could not write .*ckpt-4\.pt: No space "
                     r"left on device\. The newest checkpoint is .*ckpt-2\.pt; free space or "
                     r"make .* writable, then resume with: python -m alf_async\.bin\.train "
                     r"--root_dir=", err), err[-3000:]
    assert sorted(os.listdir(os.path.join(root, "checkpoints"))) == ["ckpt-2.pt"]

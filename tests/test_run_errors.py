"""Bad run directories, a default run directory and start-up failures: one
paragraph, the right exit status, nothing left behind. (Write failures during a
run, on a really full disk: tests/test_full_disk.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

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

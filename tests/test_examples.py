"""The examples in alf_async/examples run as documented and print what they claim."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=240)


def test_batched_env_random_example(tmp_path):
    out = _run(["alf_async.examples.batched_env_random", "-K", "4", "-W", "2",
                "--steps", "300"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "env steps/s with K=4, W=2" in out.stdout
    assert "episodes finished" in out.stdout


def test_train_in_python_example(tmp_path):
    root = tmp_path / "run"
    out = _run(["alf_async.examples.train_in_python", f"--root_dir={root}",
                "--iterations", "3"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "trained 3 iterations" in out.stdout
    lines = [json.loads(l) for l in open(os.path.join(root, "metrics.jsonl"))]
    assert [l["iteration"] for l in lines] == [1, 2, 3]
    assert {l["actor_id"] for l in lines} <= {0, 1}


def test_load_and_predict_example(tmp_path):
    root = tmp_path / "run"
    exported = tmp_path / "policy.pt"
    out = _run(["alf_async.examples.load_and_predict", f"--root_dir={root}",
                "--iterations", "2", "--episodes", "2", "--export", str(exported)], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "trained 2 iterations, 2048 env steps" in out.stdout
    assert f"loaded {root / 'checkpoints' / 'ckpt-2.pt'}" in out.stdout
    assert [line.split(":")[0] for line in out.stdout.splitlines()
            if line.startswith("episode ")] == ["episode 1", "episode 2"]
    assert "mean return over 2 episode(s): " in out.stdout
    assert f"exported to {exported}: the same actions as predict" in out.stdout
    assert exported.is_file()

"""bench/gpu_smoke.py, the script a GPU machine runs, runs on the CPU too:
every check it makes on a GPU passes on the CPU with tiny sizes, and it prints
its one JSON line (CI has no GPU; the real run is ``python -m bench.gpu_smoke``
on a machine with one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


@pytest.mark.timeout(600)
def test_gpu_smoke_runs_on_the_cpu():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO_ROOT, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "bench.gpu_smoke", "--device", "cpu", "--tiny",
         "--kinds", "ppo_gaussian,ppo_discrete,ppo_lstm,sac_vector", "--iterations", "1",
         "--speed_iterations", "1"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=580)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    out = json.loads(lines[0])
    assert out["bench"] == "gpu_smoke" and out["device"] == "cpu" and out["ok"] is True
    assert set(out["kinds"]) == {"ppo_gaussian", "ppo_discrete", "ppo_lstm", "sac_vector"}
    for kind, checks in out["kinds"].items():
        assert checks["published_weights_equal"] and checks["cpu_resume"], (kind, checks)
        assert checks["policy_max_abs_diff"] < 1e-3, (kind, checks)
    assert out["run"]["ok"] and out["run"]["iterations"] == 3
    assert not out["run"]["fallback_logged"]  # the CPU is everywhere: nothing to fall back from
    for config in ("pong", "humanoid"):
        speed = out["speed"][config]
        assert speed["device"]["gradient_steps_per_s"] > 0
        assert speed["device_over_cpu"] == pytest.approx(1.0)

"""What a user sees before the first training iteration.

- While the first unrolls run (a long one: the card's humanoid command takes
  100+ s on 2 cores), the console shows the actors' env steps from their
  heartbeats and an ETA to the first batch, instead of nothing.
- A run whose processes and envs would not fit in the available memory is
  refused before any process starts, with the estimate and the settings to change.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psutil

from alf_async.envs.latency import ENV_ID as SLOW_ENV
from conftest import REPO_ROOT
from memory_hungry_envs import BYTES_PER_ENV, ENV_ID as HUNGRY_ENV

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_train(root, params, timeout=240):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, REPO_ROOT]))
    args = [sys.executable, "-m", "alf_async.bin.train", "--gin_file=ppo_cartpole.gin",
            f"--root_dir={root}"] + [f"--gin_param={p}" for p in params]
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_first_unroll_shows_the_actors_progress(tmp_path):
    # 2 envs x 500 steps of 5 ms each (stepped one after the other): a first
    # unroll of about 5 s, with heartbeats every 2 s and a progress line a second.
    proc = run_train(tmp_path / "run", [
        f"Trainer.env_name='alf_async.envs.latency:{SLOW_ENV}'", "Trainer.num_envs=2",
        "Trainer.unroll_length=500", "Trainer.num_iterations=1", "Trainer.num_env_steps=0",
        "Trainer.num_env_workers=0", "PPOLearner.mini_batch_size=500",
        "PPOLearner.num_epochs=1", "MetricsRecorder.console_interval_s=1",
        "MetricsRecorder.tensorboard=False"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    progress = [i for i, line in enumerate(lines) if "first unroll: actors at" in line]
    assert progress, proc.stderr[-3000:]
    steps = [re.search(r"actors at ([0-9.]+k?) of 1.00k env steps", lines[i]) for i in progress]
    assert all(steps), [lines[i] for i in progress]
    moving = [i for i, m in zip(progress, steps) if m.group(1) not in ("0",)]
    assert moving, [lines[i] for i in progress]  # a heartbeat reported steps
    assert "ETA to the first batch" in lines[moving[-1]]
    first_iteration = next(i for i, line in enumerate(lines) if " it 1/1 " in line)
    assert max(progress) < first_iteration


def test_a_run_that_cannot_fit_in_memory_is_refused_before_it_starts(tmp_path):
    available = psutil.virtual_memory().available
    num_envs = 2 * available // BYTES_PER_ENV + 1  # twice what fits, in envs alone
    proc = run_train(tmp_path / "run", [
        f"Trainer.env_name='memory_hungry_envs:{HUNGRY_ENV}'", f"Trainer.num_envs={num_envs}",
        "Trainer.unroll_length=1", "PPOLearner.mini_batch_size=1"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    message = proc.stderr
    assert "would need about" in message and f"{num_envs} envs x 32." in message, message
    assert "Trainer.num_envs" in message and "Trainer.num_actors" in message, message
    assert not (tmp_path / "run").exists()  # refused before anything was written

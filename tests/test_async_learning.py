"""Asynchronous training learns: the async demo reaches the sync demo's bar.

Runs ``python -m alf_async.bin.train --gin_file=async_ppo_bullet_inverted_pendulum.gin``
(the synchronous demo ppo_bullet_inverted_pendulum.gin with N = 2 actors) within
the demo's own env-step budget and checks that the mean episode return the run
reports (``episode_return`` of metrics.jsonl, mean of the last 100 episodes)
reaches 950, the threshold the synchronous demo reaches (the maximum is 1000),
while every batch keeps lag <= 1 and both actors feed the learner. The run is
stopped with Ctrl-C as soon as the threshold is reached, to save time.

A minute or a few on 2 cores; not marked slow: it is the suite's check that
async training learns what sync does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from alf_async.reporting.run_metrics import gin_binding_text

from conftest import REPO_ROOT

THRESHOLD = 950.0
DEADLINE_S = 1500.0


def read_metrics(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def demo_budget(root) -> int:
    """Trainer.num_env_steps of the run in ``root`` (its operative_config.gin)."""
    with open(os.path.join(root, "operative_config.gin"), encoding="utf-8") as f:
        value = gin_binding_text(f.read(), "Trainer.num_env_steps")
    assert value, f"no Trainer.num_env_steps in {root}/operative_config.gin"
    return int(value)


def reached(lines) -> bool:
    return any((m.get("episode_return") or 0.0) >= THRESHOLD for m in lines)


@pytest.mark.timeout(DEADLINE_S + 120)
def test_async_demo_reaches_the_sync_threshold(train_cmd, tmp_path):
    root = tmp_path / "async_demo"
    metrics_path = os.path.join(root, "metrics.jsonl")
    log_path = tmp_path / "output.txt"
    cmd = train_cmd + [f"--root_dir={root}",
                       "--gin_file=async_ppo_bullet_inverted_pendulum.gin",
                       "--gin_param=MetricsRecorder.tensorboard=False"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while proc.poll() is None and time.monotonic() < deadline:
                if reached(read_metrics(metrics_path)):
                    os.killpg(proc.pid, signal.SIGINT)
                    break
                time.sleep(1.0)
            rc = proc.wait(timeout=max(60.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10.0)
    output = log_path.read_text(errors="replace")[-4000:]
    lines = read_metrics(metrics_path)
    assert rc in (0, 130), output
    assert lines, output
    returns = [m["episode_return"] for m in lines if m.get("episode_return") is not None]
    assert reached(lines), (
        f"best mean return {max(returns, default=float('nan')):.1f} < {THRESHOLD} after "
        f"{lines[-1]['env_steps']} env steps")
    # It was the asynchronous configuration, and it stayed within its lag bound.
    assert all(m["num_actors"] == 2 for m in lines)
    assert {m["actor_id"] for m in lines} == {0, 1}
    assert all(0 <= m["lag"] <= 1 for m in lines)
    assert any(m["lag"] == 1 for m in lines)
    # Within the demo's own budget (the run ends by itself there), read from
    # the run's operative config so that the two cannot drift apart.
    assert lines[-1]["env_steps"] <= demo_budget(root)

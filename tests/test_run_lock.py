"""One run per run directory: the train command locks its directory
(``alf_async.utils.run_lock``) before it reads or writes anything of the run.

With real train processes: a second training on a running run's directory is
refused with exit status 2 naming the holder; a SIGKILLed trainer's lock is
taken over (and the takeover logged); alf-play reads a run while it trains; a
sweep never starts a run whose directory another process holds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, wait_until
from reliability_helpers import DEMO_GIN, SLOW_ENV_PARAM, TrainRun, small_params

from alf_async.utils.run_lock import LOCK_FILE, RunLock, RunLockedError, holder


def _train(root_dir, *params, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root_dir}",
                           f"--gin_file={DEMO_GIN}", *(f"--gin_param={p}" for p in params)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_a_second_lock_on_the_same_directory_is_refused_and_a_released_one_is_clean(tmp_path):
    first = RunLock(str(tmp_path))
    assert first.acquire() is None  # a fresh directory: nothing taken over
    with pytest.raises(RunLockedError) as refused:
        RunLock(str(tmp_path)).acquire()
    assert refused.value.holder.pid == os.getpid()
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in str(refused.value)
    assert holder(str(tmp_path)).pid == os.getpid()
    first.release()
    assert holder(str(tmp_path)) is None
    assert (tmp_path / LOCK_FILE).read_text() == ""  # released cleanly: no record
    again = RunLock(str(tmp_path))
    assert again.acquire() is None
    again.release()


def test_a_record_left_without_its_os_lock_is_taken_over(tmp_path):
    """What a SIGKILLed holder leaves: its record, but no OS lock."""
    (tmp_path / LOCK_FILE).write_text(json.dumps(
        {"pid": 4242, "host": "lost-node", "since": "2026-01-01T00:00:00",
         "command": "alf-train --root_dir=x"}))
    assert holder(str(tmp_path)) is None  # nobody holds it now
    lock = RunLock(str(tmp_path))
    previous = lock.acquire()
    try:
        assert (previous.pid, previous.host) == (4242, "lost-node")
        record = json.loads((tmp_path / LOCK_FILE).read_text())
        assert record["pid"] == os.getpid()
    finally:
        lock.release()


def test_a_second_training_on_a_running_run_exits_2_naming_the_holder(tmp_path):
    root = str(tmp_path / "run")
    run = TrainRun(root, small_params(SLOW_ENV_PARAM, iterations=100000))
    try:
        run.wait_for_iteration(1)
        second = _train(root, *small_params(iterations=3))
        assert second.returncode == 2, second.stderr[-3000:]
        message = second.stderr.strip().splitlines()[-1]
        assert f"pid {run.pid} on host {socket.gethostname()}" in message, message
        assert "alf_async.bin.train" in message and "--root_dir" in message, message
        assert "another --root_dir" in message, message
        assert "Traceback" not in second.stderr
        assert run.running()
        # Read-only tools work beside the training (a checkpoint exists by then).
        run.wait_for(lambda: os.listdir(os.path.join(root, "checkpoints"))
                     if os.path.isdir(os.path.join(root, "checkpoints")) else None,
                     60, "a checkpoint")
        play = subprocess.run([sys.executable, "-m", "alf_async.bin.play", f"--root_dir={root}",
                               "--num_episodes=1", "--max_steps=5"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120)
        assert play.returncode == 0, play.stderr[-3000:]
        run.signal(signal.SIGTERM)
        assert run.wait(60) == 143
    finally:
        if run.running():
            run.kill_group()
    assert holder(root) is None
    run.assert_clean()


def test_the_lock_of_a_killed_trainer_is_taken_over_and_logged(tmp_path):
    root = str(tmp_path / "run")
    run = TrainRun(root, small_params(SLOW_ENV_PARAM, iterations=100000))
    try:
        run.wait_for_iteration(1)
        assert holder(root).pid == run.pid
    finally:
        run.kill_group()  # SIGKILL: the trainer never releases its lock
    assert wait_until(lambda: holder(root) is None, 30)
    assert json.loads(open(os.path.join(root, LOCK_FILE)).read())["pid"] == run.pid
    resumed = _train(root, *small_params(iterations=2))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = open(os.path.join(root, "log.txt"), encoding="utf-8").read()
    assert f"took over the lock of {root} left by pid {run.pid}" in log, log[-3000:]
    assert open(os.path.join(root, LOCK_FILE)).read() == ""


def test_a_sweep_never_starts_a_run_whose_directory_is_locked(tmp_path):
    sweep_dir = tmp_path / "sweep"
    run_dir = sweep_dir / "num_envs=2"
    with RunLock(str(run_dir)):
        result = subprocess.run(
            [sys.executable, "-m", "alf_async.bin.sweep", f"--gin_file={DEMO_GIN}",
             f"--root_dir={sweep_dir}", "--sweep=Trainer.num_envs=[2]",
             *(f"--gin_param={p}" for p in small_params(iterations=2))],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "not started" in output and f"pid {os.getpid()}" in output, output[-3000:]
    assert not (run_dir / "train_output.txt").exists()
    assert not (run_dir / "metrics.jsonl").exists()


def test_a_run_refused_before_it_starts_leaves_nothing_behind(tmp_path):
    """Bad input: the lock file goes, and the directory the lock made."""
    fresh = tmp_path / "new_run"
    lock = RunLock(str(fresh))
    lock.acquire()
    lock.discard()
    assert not fresh.exists()
    existing = tmp_path / "old_run"
    existing.mkdir()
    (existing / "metrics.jsonl").write_text("{}\n")
    lock = RunLock(str(existing))
    lock.acquire()
    lock.discard()
    assert sorted(os.listdir(existing)) == ["metrics.jsonl"]
    again = RunLock(str(existing))  # the lock file is made anew
    assert again.acquire() is None
    again.release()

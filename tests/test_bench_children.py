"""How bench scripts run their children (bench/children.py): a
benchmark stopped with ``kill`` (SIGTERM) stops the training run it waits on
first, so no trainer outlives the bench that started it; a peer library's run
gives back its JSON line, or a failure that names it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from alf_async.utils.shared_memory import shm_directory
from bench import children
from conftest import REPO_ROOT, wait_until

# A CartPole run far longer than the test, started the way bench scripts
# start every run (benchlib.run_train: the train command in a child process).
BENCH = """
import json, sys
sys.path.insert(0, {repo!r})
from bench import benchlib
status = benchlib.run_train(["ppo_cartpole.gin"], ["Trainer.num_iterations=100000",
    "Trainer.num_env_steps=0", "Trainer.num_env_workers=0",
    "MetricsRecorder.tensorboard=False"], {root!r})
print(json.dumps(status))
"""


def _metrics_rows(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for line in f if line.startswith("{"))
    except FileNotFoundError:
        return 0


def _kill_leftovers(bench: subprocess.Popen, procs) -> None:
    """What a failed test leaves: the bench, if still running, and ``procs``."""
    if bench.poll() is None:
        bench.kill()
        bench.communicate()
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _assert_sigterm_ends_quietly(bench: subprocess.Popen, log_path, procs) -> None:
    """SIGTERM ``bench``: it exits 143 with nothing on stdout and no traceback
    in its log, and none of ``procs`` (its processes) is left."""
    bench.send_signal(signal.SIGTERM)
    out, _ = bench.communicate(timeout=120)
    log_text = log_path.read_text()
    assert bench.returncode == 128 + signal.SIGTERM, log_text[-3000:]
    assert out == ""
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert alive == [], f"left running after the bench was killed: {alive}"
    assert "Traceback" not in log_text, log_text[-3000:]


def test_a_bench_killed_with_sigterm_stops_its_training_run(tmp_path):
    root = str(tmp_path / "run")
    log_path = tmp_path / "bench.log"  # the bench's and its run's console (not a pipe to fill)
    with open(log_path, "w") as log:
        bench = subprocess.Popen([sys.executable, "-c", BENCH.format(repo=REPO_ROOT, root=root)],
                                 cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
    run_tree = []
    try:
        # The trainer is training: its first metrics row is there.
        metrics = os.path.join(root, "metrics.jsonl")
        wait_until(lambda: _metrics_rows(metrics) >= 1 or bench.poll() is not None,
                   timeout=180, interval=0.2)
        assert _metrics_rows(metrics) >= 1 and bench.poll() is None, \
            log_path.read_text()[-3000:]
        run_tree = psutil.Process(bench.pid).children(recursive=True)
        trainers = [p for p in run_tree if "alf_async.bin.train" in " ".join(p.cmdline())]
        assert len(trainers) == 1, [p.cmdline() for p in run_tree]

        bench.send_signal(signal.SIGTERM)
        out, _ = bench.communicate(timeout=120)
        # The bench stopped its run (SIGTERM: the trainer checkpoints) and exited
        # 128 + SIGTERM, without printing a result.
        assert bench.returncode == 128 + signal.SIGTERM, log_path.read_text()[-3000:]
        assert out == ""
        for proc in run_tree:  # the trainer and everything it started
            assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE, \
                f"left running after its bench was killed: {proc.pid} {proc.cmdline()}"
        assert os.listdir(os.path.join(root, "checkpoints")), "no final checkpoint"
    finally:  # what a failed test leaves is killed: not for the next tests to meet
        _kill_leftovers(bench, run_tree)


def _stepping_processes(pid: int):
    """The multiprocessing children of ``pid`` (bench/raw_env.py's stepping
    processes), without the resource tracker."""
    try:
        procs = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in procs:
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmdline:
            found.append(proc)
    return found


def test_a_suite_killed_while_its_envs_step_alone_ends_them_quietly(tmp_path):
    """A suite paused with SIGTERM during its envs-alone measurement (the
    stepping processes of both modes' layouts stepping, a measurement far
    longer than the test) exits 143 having ended them: none is left and none
    prints a traceback about a broken pipe."""
    from bench.suite import envs_alone_layout

    expected = sum(envs_alone_layout("hopper", mode, [])["processes"]
                   for mode in ("sync", "async"))
    log_path = tmp_path / "suite.log"
    cmd = [sys.executable, "-m", "bench.suite", "--envs", "hopper", "--modes", "sync",
           "--seeds", "0", "--envs_alone_steps", "10000000", "--envs_alone_repeats", "1",
           "--root_dir", str(tmp_path / "runs"), "--results", str(tmp_path / "r.jsonl")]
    with open(log_path, "w") as log:
        bench = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log,
                                 text=True)
    steppers = []
    try:
        # The measurement has begun (its log line): every process is stepping.
        assert wait_until(lambda: "measuring" in log_path.read_text()
                          or bench.poll() is not None, timeout=120, interval=0.2)
        steppers = _stepping_processes(bench.pid)
        assert len(steppers) == expected and bench.poll() is None, \
            log_path.read_text()[-3000:]
        _assert_sigterm_ends_quietly(bench, log_path, steppers)
        assert not os.path.exists(tmp_path / "runs" / "hopper_sync_s0"), "no run was to start"
    finally:  # found before the suite is killed: orphans would step on for long
        if bench.poll() is None and not steppers:
            steppers = _stepping_processes(bench.pid)
        _kill_leftovers(bench, steppers)


def test_a_sampler_bench_killed_mid_measurement_ends_its_env_processes(tmp_path):
    """bench.sampler_efficiency paused with SIGTERM while its actor's env worker
    and the raw stepping process both exist (interleaved cycles far longer than
    the test) exits 143 having ended both, without a traceback."""
    log_path = tmp_path / "sampler.log"
    cmd = [sys.executable, "-m", "bench.sampler_efficiency", "--gin_file",
           "ppo_bullet_hopper.gin", "--num_envs", "2", "--workers", "1", "--splits", "1",
           "--unroll_length", "16", "--raw_unrolls", "1", "--cycles", "1000000"]
    with open(log_path, "w") as log:
        bench = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log,
                                 text=True)
    procs = []
    try:
        # One env worker (W = 1) and one stepping process: the cycles have begun.
        assert wait_until(lambda: len(_stepping_processes(bench.pid)) == 2
                          or bench.poll() is not None, timeout=120, interval=0.2)
        procs = _stepping_processes(bench.pid)
        assert len(procs) == 2 and bench.poll() is None, log_path.read_text()[-3000:]
        _assert_sigterm_ends_quietly(bench, log_path, procs)
    finally:
        if bench.poll() is None and not procs:
            procs = _stepping_processes(bench.pid)
        _kill_leftovers(bench, procs)


def test_a_peer_run_gives_its_last_json_line_and_a_failed_one_is_named():
    script = "print('setting up'); print('{\"steps\": 1}'); print('{\"steps\": 2}')"
    assert children.run_peer_json([sys.executable, "-c", script]) == {"steps": 2}
    with pytest.raises(SystemExit, match=r"-c failed \(exit 3\)"):
        children.run_peer_json([sys.executable, "-c", "print('{}'); raise SystemExit(3)"])
    with pytest.raises(SystemExit, match="no JSON line"):
        children.run_peer_json([sys.executable, "-c", "print('done')"])
    with pytest.raises(SystemExit, match=r"stopped after 1 s"):
        children.run_peer_json([sys.executable, "-c", "import time; time.sleep(60)"],
                               timeout_s=1)


# A parent that starts a child holding a shared-memory block, writes the
# child's pid once the block exists, then waits to be killed.
TREE = """
import subprocess, sys, time
sys.path.insert(0, {repo!r})
child = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
with open({ready!r} + ".tmp", "w") as f:
    f.write(str(child.pid))
import os
os.replace({ready!r} + ".tmp", {ready!r})
time.sleep(600)
"""
CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from alf_async.utils.shared_memory import ArraySpec, SharedArrays
block = SharedArrays.create({{"x": ArraySpec((4,), "float32")}}, tag="watch")
print(block.name, flush=True)
time.sleep(600)
"""


def test_a_descendant_watch_finds_what_a_killed_run_left(tmp_path):
    ready = str(tmp_path / "ready")
    root = subprocess.Popen([sys.executable, "-c", TREE.format(
        repo=REPO_ROOT, ready=ready, child=CHILD.format(repo=REPO_ROOT))])
    watch = children.DescendantWatch(root.pid)
    try:
        assert wait_until(lambda: os.path.exists(ready), timeout=60), "the child made no block"
        watch.record()
        with open(ready, encoding="utf-8") as f:
            child_pid = int(f.read())
        assert child_pid in watch.seen
        root.kill()  # the child is orphaned, with its block
        root.wait()
        # The child outlives it (and so does the resource tracker the child's
        # block started).
        assert child_pid in watch.wait_gone(timeout_s=0.5)
        blocks = watch.leftover_blocks()
        assert len(blocks) == 1 and blocks[0].startswith(f"alfa_{child_pid}_watch_")
        watch.kill_alive()
        assert watch.wait_gone(timeout_s=30) == []
    finally:
        if root.poll() is None:
            root.kill()
        watch.kill_alive()
        for name in watch.leftover_blocks():  # its owner was killed: ours to remove
            os.unlink(os.path.join(shm_directory(), name))

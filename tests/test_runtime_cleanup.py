"""No child process and no shared memory outlive a run, however it ends.

Runs the train command as a user does (``python -m alf_async.bin.train`` in its
own session) with N = 2 actors and one env-worker process per actor, records
every descendant of the trainer (pid and start time, with psutil) while it runs,
and after the trainer exits checks that each one is gone and that no
``/dev/shm/alfa_*`` block owned by the trainer or one of its descendants is left:

- after a normal end (exit 0, final checkpoint);
- after an exception in the learner (a gin binding that makes the loss
  non-finite in the 2nd iteration): exit 1 with the error reported, and also in
  this process with ``PPOLearner.train`` patched to raise in the 2nd iteration
  (the exception reaches the caller; actors and env workers are stopped);
- after Ctrl-C (SIGINT to the process group): exit 130 and a final checkpoint of
  the last completed iteration;
- after SIGTERM to the trainer: exit 143 and a final checkpoint.

Every wait has a deadline, so a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Callable, Dict, List, Optional, Tuple

import gin
import psutil
import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.config import register_configurables
from alf_async.utils.shared_memory import list_blocks
from alf_async.training.trainer import Trainer

from conftest import REPO_ROOT, wait_until

NUM_ACTORS = 2
SMALL_RUN = [
    "Trainer.env_name='InvertedPendulumBulletEnv-v0'",
    f"Trainer.num_actors={NUM_ACTORS}",
    "Trainer.num_env_workers=1",
    "Trainer.num_envs=2",
    "Trainer.unroll_length=32",
    "Trainer.num_env_steps=0",
    "Trainer.checkpoint_interval=100000",
    "PPOLearner.mini_batch_size=64",
    "PPOLearner.num_epochs=1",
    "MetricsRecorder.tensorboard=False",
]
RUN_DEADLINE_S = 240.0

Proc = Tuple[int, float]  # pid, create_time


def _identity(p: psutil.Process) -> Optional[Proc]:
    try:
        return p.pid, p.create_time()
    except psutil.Error:
        return None


def still_running(proc: Proc) -> bool:
    """Is this very process (not a later one with the same pid) still alive?"""
    pid, created = proc
    try:
        p = psutil.Process(pid)
        return p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def metrics_lines(root_dir) -> List[Dict]:
    path = os.path.join(root_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def checkpoints(root_dir) -> Dict[int, str]:
    directory = os.path.join(root_dir, "checkpoints")
    if not os.path.isdir(directory):
        return {}
    found = {}
    for name in os.listdir(directory):
        if name.startswith("ckpt-") and name.endswith(".pt"):
            found[int(name[len("ckpt-"):-len(".pt")])] = os.path.join(directory, name)
    return found


class TrainerRun:
    """A train command in its own session, watched until it exits."""

    def __init__(self, train_cmd, root_dir, gin_params):
        self.root_dir = str(root_dir)
        self.log_path = os.path.join(str(root_dir) + "_output.txt")
        cmd = train_cmd + [f"--root_dir={self.root_dir}",
                           "--gin_file=ppo_bullet_inverted_pendulum.gin"]
        cmd += [f"--gin_param={p}" for p in gin_params]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.trainer = _identity(psutil.Process(self.proc.pid))
        self.descendants: Dict[int, Proc] = {}

    def _collect(self) -> None:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            ident = _identity(child)
            if ident is not None:
                self.descendants.setdefault(ident[0], ident)

    def watch(self, until: Optional[Callable[[], bool]] = None,
              timeout: float = RUN_DEADLINE_S) -> bool:
        """Record descendants until the trainer exits or ``until()`` holds.

        Returns True if ``until()`` held (the trainer still running)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self._collect()
            if until is not None and until():
                self._collect()
                return True
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"the trainer did not get there within {timeout:.0f} s:\n"
                            + self.output())
            time.sleep(0.1)
        return False

    def wait(self, timeout: float = 120.0) -> int:
        """Wait for the exit (recording descendants meanwhile); fail on a hang."""
        self.watch(timeout=timeout)
        return self.proc.wait(5.0)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for proc in self.descendants.values():
            if still_running(proc):
                try:
                    os.kill(proc[0], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait(10.0)

    def output(self) -> str:
        self.log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-6000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.log.close()

    def assert_nothing_left(self) -> None:
        """After the exit: every process of the run gone, every block released."""
        assert self.proc.poll() is not None
        # Actors and env workers (and nothing else of ours is expected): we
        # really watched the process tree, so the checks below are not vacuous.
        assert len(self.descendants) >= 2 * NUM_ACTORS, self.descendants
        survivors = lambda: [p for p in self.descendants.values() if still_running(p)]
        wait_until(lambda: not survivors(), timeout=10.0)
        assert not survivors(), f"processes of the run still alive: {survivors()}"
        owners = {self.trainer[0]} | set(self.descendants)
        left = [b for owner in owners for b in list_blocks(owner)]
        assert not left, f"shared-memory blocks left behind: {left}"


@pytest.fixture
def launch(train_cmd, tmp_path):
    runs: List[TrainerRun] = []

    def start(name: str, extra_params=()) -> TrainerRun:
        run = TrainerRun(train_cmd, tmp_path / name, SMALL_RUN + list(extra_params))
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()


def load_checkpoint(path: str) -> Dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_normal_end(launch):
    run = launch("normal", ["Trainer.num_iterations=3"])
    rc = run.wait()
    assert rc == 0, run.output()
    run.assert_nothing_left()
    assert len(metrics_lines(run.root_dir)) == 3
    assert 3 in checkpoints(run.root_dir), run.output()


def test_learner_exception_in_train_command(launch):
    """An absurd learning rate makes the 2nd iteration's loss non-finite."""
    run = launch("blowup", ["Trainer.num_iterations=50", "PPOLearner.learning_rate=1e30",
                            "PPOLearner.max_skipped_updates=0"])
    rc = run.wait()
    out = run.output()
    assert rc == 1, out
    assert "non-finite" in out
    run.assert_nothing_left()
    assert len(metrics_lines(run.root_dir)) == 1  # the 1st iteration completed
    # No checkpoint of a half-trained learner.
    assert not checkpoints(run.root_dir)


def test_learner_exception_in_process(tmp_path):
    """The same in this process: the exception reaches the caller of train()
    and the actors and env workers seen during the run are all gone."""
    gin.clear_config()
    register_configurables()
    gin.parse_config("\n".join(SMALL_RUN + ["Trainer.num_iterations=50"]))
    seen: List[Proc] = []
    calls = []
    original = PPOLearner.train

    class LearnerBroke(RuntimeError):
        pass

    def failing_train(self, batch, *args):
        calls.append(1)
        for pid in trainer.loop.batches.pool.pids:
            seen.append(_identity(psutil.Process(pid)))
        if len(calls) == 2:
            raise LearnerBroke("learner failed on purpose")
        return original(self, batch, *args)

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(PPOLearner, "train", failing_train)
            trainer = Trainer(root_dir=str(tmp_path))
            with pytest.raises(LearnerBroke):
                trainer.train()
    finally:
        gin.clear_config()
    assert len(calls) == 2
    procs = set(seen)
    # Two actor processes and their env workers were running.
    assert len(procs) >= 2 * NUM_ACTORS
    wait_until(lambda: not any(still_running(p) for p in procs), timeout=10.0)
    assert not [p for p in procs if still_running(p)]
    owners = {os.getpid()} | {pid for pid, _ in procs}
    assert not [b for owner in owners for b in list_blocks(owner)]
    assert len(metrics_lines(tmp_path)) == 1
    assert not checkpoints(tmp_path)


@pytest.mark.parametrize("how", ["sigint", "sigterm"])
def test_interrupted_run(launch, how):
    run = launch(how, ["Trainer.num_iterations=1000000"])
    # Interrupt once the run is training with all its actors and env workers.
    started = run.watch(until=lambda: (len(metrics_lines(run.root_dir)) >= 1
                                       and len(run.descendants) >= 2 * NUM_ACTORS))
    assert started, f"the run ended before it was interrupted:\n{run.output()}"
    if how == "sigint":
        os.killpg(run.proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole group
        expected = 130
    else:
        run.proc.send_signal(signal.SIGTERM)
        expected = 143
    rc = run.wait(timeout=120.0)
    out = run.output()
    assert rc == expected, out
    run.assert_nothing_left()
    # A final checkpoint of the last completed iteration.
    done = len(metrics_lines(run.root_dir))
    found = checkpoints(run.root_dir)
    assert list(found) == [done], (found, done, out)
    state = load_checkpoint(found[done])
    assert int(state["counters"]["iteration"]) == done

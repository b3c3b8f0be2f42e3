"""A full disk, for real: a run whose files cannot be written stops with one
paragraph, keeps its data safe and resumes once space is freed.

Each test mounts a small tmpfs (``mount -t tmpfs``; skipped with the reason
where the machine does not allow it), starts the train command as a user does
with its run directory (or its TensorBoard folder) on it, waits for an event of
the run (the first checkpoint file, a metrics row), then fills the tmpfs with a
file that leaves less free space than the run's next write needs. Proves that:

- a checkpoint that does not fit (PPO), and a SAC checkpoint grown by its replay
  buffer, stop the run with exit status 1 and one paragraph naming the
  checkpoint file, "No space left on device", the newest intact checkpoint and
  the command that resumes the run; no traceback; no temporary file is left;
  the older checkpoints are intact; after the filler is removed the resume
  command resumes from the intact checkpoint (with its replay buffer) and
  finishes;
- the same for ``metrics.jsonl`` (which keeps whole rows only) and for the
  TensorBoard event file (whose writer thread's error is reported once, on the
  trainer's thread, without the thread's traceback);
- ``Checkpointer.save`` raises ``OSError(ENOSPC)`` naming the checkpoint, never
  torch's ``RuntimeError``, whether the space reservation or the write itself
  finds the disk full; and resuming logs each partial file it removes (path and
  size).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from typing import Iterator, List, Tuple

import pytest
import torch

from alf_async.checkpoint import Checkpointer, load_checkpoint_file
from alf_async.utils.exit_codes import ExitCode
from alf_async.utils.files import TEMPORARY_PREFIX, TEMPORARY_SUFFIX
from conftest import REPO_ROOT, wait_until
from reliability_helpers import checkpoint_files, checkpoint_iteration, read_metrics

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
SAC_ENV = "sac_test_envs:AlfAsyncPointMass-v0"

# PPO on CartPole, small and fast; networks of 256 units make a checkpoint of
# about 1 MB, far more than the rows and log lines of a few iterations.
PPO_PARAMS = (
    "Trainer.num_envs=2",
    "Trainer.unroll_length=32",
    "Trainer.num_env_steps=0",
    "PPOLearner.mini_batch_size=64",
    "PPOLearner.num_epochs=1",
    "ActorNetwork.hidden_sizes=(256, 256)",
    "ValueNetwork.hidden_sizes=(256, 256)",
)
# A budget no test run reaches before its disk is full (it stops on the error).
ENDLESS = "Trainer.num_iterations=1000000"
RUN_END_TIMEOUT_S = 240.0

PARAGRAPH = re.compile(
    r"run stopped at iteration (?P<iteration>\d+): could not write (?P<file>\S+): No space "
    r"left on device\. The newest intact checkpoint is (?P<intact>\S+/ckpt-(?P<intact_it>\d+)"
    r"\.pt); free space on the device holding (?P<folder>\S+) \(df -h \S+\), then resume "
    r"with: (?P<resume>python -m alf_async\.bin\.train --root_dir=\S+)$", re.MULTILINE)


# -- a small file system -----------------------------------------------------------
@contextlib.contextmanager
def small_tmpfs(path: str, size: str) -> Iterator[str]:
    """A tmpfs of ``size`` (e.g. "16m") mounted at ``path`` for the block;
    skips the test (with the reason) where mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command here, so no small file system to fill")
    try:
        result = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                                capture_output=True, text=True, timeout=30)
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot run mount to make a small file system: {e}")
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): "
                    f"{(result.stderr or result.stdout).strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)


def newest_checkpoint_size(root: str) -> int:
    """Bytes of the run's newest checkpoint (the run may prune one meanwhile)."""
    while True:
        try:
            return os.path.getsize(checkpoint_files(root)[-1])
        except FileNotFoundError:
            continue


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(mount_point: str, leave: int) -> str:
    """Write a filler file that leaves at most ``leave`` bytes free (a page
    more where the file system rounds); returns its path. The run may write or
    remove files meanwhile, so the filler grows until the free space, measured
    after each step, is down to that."""
    path = os.path.join(mount_point, "filler")
    page = os.statvfs(mount_point).f_frsize
    filled = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for _ in range(1000):
            excess = free_bytes(mount_point) - leave
            if excess <= page:
                break
            grow = excess // page * page
            try:
                os.posix_fallocate(fd, filled, grow)
                filled += grow
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                # The run wrote meanwhile: measure again (a page less at worst).
                if grow <= page:
                    break
    finally:
        os.close(fd)
    assert free_bytes(mount_point) <= leave + page, (free_bytes(mount_point), leave)
    return path


# -- the train command -------------------------------------------------------------
class Run:
    """The train command, its stdout and stderr in ``log_path`` (not on the
    small file system)."""

    def __init__(self, args: List[str], log_path: str):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [REPO_ROOT, TESTS_DIR, os.environ.get("PYTHONPATH", "")]))
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "alf_async.bin.train", *args],
                                     cwd=REPO_ROOT, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def wait_for(self, predicate, what: str) -> None:
        """Until ``predicate()`` holds; fails if the run ends first."""
        ok = wait_until(lambda: predicate() or self.proc.poll() is not None,
                        timeout=RUN_END_TIMEOUT_S)
        assert ok and predicate(), f"the run ended or timed out before {what}:\n" + (
            self.output()[-3000:])

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=RUN_END_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()

    def output(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def train(args: List[str], log_path: str) -> subprocess.CompletedProcess:
    run = Run(args, log_path)
    rc = run.finish()
    return subprocess.CompletedProcess(args, rc, run.output(), "")


def ppo_args(root: str, *params: str) -> List[str]:
    return ["--gin_file=ppo_cartpole.gin", f"--root_dir={root}",
            *[f"--gin_param={p}" for p in (*PPO_PARAMS, *params)]]


def assert_full_disk_paragraph(out: str, rc: int, root: str, failed_file: str) -> re.Match:
    """Exit 1, no traceback, one paragraph naming ``failed_file`` (a regex), the
    newest checkpoint left (intact, loadable) and the resume command."""
    assert rc == ExitCode.FAILED, f"exit status {rc}:\n{out[-3000:]}"
    assert "Traceback" not in out, out[-4000:]
    assert len(re.findall("run stopped at iteration", out)) == 1, out[-3000:]
    match = PARAGRAPH.search(out)
    assert match, out[-3000:]
    assert re.fullmatch(failed_file, match["file"]), match["file"]
    assert match["folder"] == os.path.dirname(match["file"])  # its device is full
    assert match["resume"].endswith(f"--root_dir={root}")
    left = checkpoint_files(root)
    assert left and match["intact"] == left[-1], (match["intact"], left)
    load_checkpoint_file(left[-1])  # intact
    names = os.listdir(os.path.join(root, "checkpoints"))
    assert all(re.fullmatch(r"ckpt-\d+\.pt", n) for n in names), names  # no temporary file
    return match


def resume(match: re.Match, budget: str, log_path: str) -> str:
    """The paragraph's resume command (with ``budget``, a binding that ends the
    run soon): it must resume from the intact checkpoint and finish."""
    command = match["resume"].split()
    assert command[:3] == ["python", "-m", "alf_async.bin.train"], command
    result = train([*command[3:], f"--gin_param={budget}"], log_path)
    assert result.returncode == ExitCode.OK, result.stdout[-3000:]
    assert f"resumed from {match['intact']} at iteration {match['intact_it']}" in (
        result.stdout), result.stdout[-3000:]
    assert "Traceback" not in result.stdout
    return result.stdout


def assert_whole_metrics_rows(root: str, last_iteration: int) -> None:
    """metrics.jsonl: whole lines only, iterations 1.. ``last_iteration`` in order."""
    with open(os.path.join(root, "metrics.jsonl"), encoding="utf-8") as f:
        text = f.read()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, last_iteration + 1))


def stopped_at_a_checkpoint(args: List[str], disk: str, root: str,
                            log_path: str) -> Tuple[re.Match, str]:
    """Run the train command until its first checkpoint, then leave half a
    checkpoint free on ``disk`` (rows and log lines fit, the next checkpoint
    not); returns the full-disk paragraph of the run's end and the filler's path.

    The run keeps every checkpoint: with the default of 3, the removal of an
    old one right after the filler was written could free room for the next,
    and a later small write (TensorBoard's) would meet the full disk first."""
    run = Run([*args, "--gin_param=Checkpointer.keep=1000"], log_path)
    try:
        run.wait_for(lambda: checkpoint_files(root), "its first checkpoint")
        filler = fill(disk, leave=newest_checkpoint_size(root) // 2)
    finally:
        rc = run.finish()
    out = run.output()
    return assert_full_disk_paragraph(out, rc, root, r".*/checkpoints/ckpt-\d+\.pt"), filler


# -- the run's files on a full disk ------------------------------------------------------
def test_checkpoint_on_a_full_disk_is_one_paragraph_and_resumes(tmp_path):
    with small_tmpfs(str(tmp_path / "disk"), "16m") as disk:
        root = os.path.join(disk, "run")
        match, filler = stopped_at_a_checkpoint(
            ppo_args(root, ENDLESS, "Trainer.checkpoint_interval=2"), disk, root,
            str(tmp_path / "run.log"))
        stopped = int(match["iteration"])
        assert match["file"].endswith(f"/ckpt-{stopped}.pt")
        assert int(match["intact_it"]) == stopped - 2
        os.unlink(filler)
        intact = int(match["intact_it"])
        resume(match, f"Trainer.num_iterations={intact + 2}", str(tmp_path / "resume.log"))
        assert checkpoint_iteration(checkpoint_files(root)[-1]) == intact + 2
        assert_whole_metrics_rows(root, intact + 2)


def test_sac_checkpoint_grown_by_its_replay_buffer_on_a_full_disk(tmp_path):
    """The replay buffer is saved inside the checkpoint, so each checkpoint is
    larger than the one before: the next cannot fit in what the first left."""
    steps_per_iteration = 16 * 64
    with small_tmpfs(str(tmp_path / "disk"), "16m") as disk:
        root = os.path.join(disk, "run")
        params = (f"Trainer.env_name='{SAC_ENV}'", "Trainer.num_envs=16",
                  "Trainer.unroll_length=64", "Trainer.num_env_steps=1000000000",
                  "Trainer.checkpoint_interval=4", "Replay.capacity=200000",
                  "Replay.learning_starts=1024", "Replay.env_steps_per_gradient_step=16",
                  "Replay.save_replay_buffer=True",
                  "SquashedGaussianActor.hidden_sizes=(32, 32)",
                  "TwinQNetwork.hidden_sizes=(32, 32)", "SACLearner.batch_size=32")
        match, filler = stopped_at_a_checkpoint(
            ["--gin_file=sac_bullet_half_cheetah.gin", f"--root_dir={root}",
             *[f"--gin_param={p}" for p in params]], disk, root, str(tmp_path / "run.log"))
        intact = int(match["intact_it"])
        saved = load_checkpoint_file(match["intact"])["replay_buffer"]
        assert len(saved["reward"]) == intact * steps_per_iteration
        os.unlink(filler)
        out = resume(match, f"Trainer.num_env_steps={(intact + 1) * steps_per_iteration}",
                     str(tmp_path / "resume.log"))
        assert f"replay buffer restored: {intact * steps_per_iteration} transitions" in out
        assert_whole_metrics_rows(root, intact + 1)


def test_metrics_file_on_a_full_disk_keeps_whole_rows_and_resumes(tmp_path):
    """A first run ends with a checkpoint; the second (same run directory)
    appends rows to metrics.jsonl and writes no checkpoint until the disk is
    full. Resuming also logs the partial checkpoint a crash left (path, size)."""
    with small_tmpfs(str(tmp_path / "disk"), "8m") as disk:
        root = os.path.join(disk, "run")
        no_tensorboard = "MetricsRecorder.tensorboard=False"
        first = train(ppo_args(root, "Trainer.num_iterations=2", no_tensorboard),
                      str(tmp_path / "first.log"))
        assert first.returncode == ExitCode.OK, first.stdout[-3000:]
        partial = os.path.join(root, "checkpoints",
                               f"{TEMPORARY_PREFIX}ckpt-4.pt.crashed{TEMPORARY_SUFFIX}")
        with open(partial, "wb") as f:
            f.write(b"\0" * 1234)
        run = Run(ppo_args(root, ENDLESS, "Trainer.checkpoint_interval=1000000",
                           no_tensorboard), str(tmp_path / "run.log"))
        try:
            run.wait_for(lambda: len(read_metrics(root)) >= 3, "a metrics row of its own")
            filler = fill(disk, leave=0)
        finally:
            rc = run.finish()
        out = run.output()
        assert f"removed {partial} (1234 bytes)" in out, out[-3000:]
        match = assert_full_disk_paragraph(out, rc, root, re.escape(
            os.path.join(root, "metrics.jsonl")))
        assert match["intact"].endswith("/ckpt-2.pt")
        assert_whole_metrics_rows(root, int(match["iteration"]) - 1)
        os.unlink(filler)
        resume(match, "Trainer.num_iterations=4", str(tmp_path / "resume.log"))
        assert_whole_metrics_rows(root, 4)


def test_tensorboard_file_on_a_full_disk_is_one_paragraph_and_resumes(tmp_path):
    """TensorBoard's folder on the small file system, the rest of the run on
    the test's disk: the writer thread's failure stops the run with the
    paragraph naming the event file."""
    root = str(tmp_path / "run")
    tensorboard = os.path.join(root, "tensorboard")
    with small_tmpfs(tensorboard, "2m"):
        run = Run(ppo_args(root, ENDLESS, "Trainer.checkpoint_interval=2"),
                  str(tmp_path / "run.log"))
        try:
            run.wait_for(lambda: checkpoint_files(root), "its first checkpoint")
            filler = fill(tensorboard, leave=0)
        finally:
            rc = run.finish()
        out = run.output()
        match = assert_full_disk_paragraph(
            out, rc, root, re.escape(tensorboard) + r"/events\.out\.tfevents\.\S+")
        assert "Exception in thread" not in out
        os.unlink(filler)
        intact = int(match["intact_it"])
        resume(match, f"Trainer.num_iterations={intact + 2}", str(tmp_path / "resume.log"))
        assert_whole_metrics_rows(root, intact + 2)


# -- Checkpointer.save and the partial files a resume removes ------------------------------
def _listing(directory: str) -> List[str]:
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("state", [
    {"x": torch.zeros(1_000_000)},  # 4 MB of tensors: the reservation fails
    {"x": list(range(1_000_000))},  # no tensor, ~5 MB of pickle: the write fails
], ids=["reserved", "streamed"])
def test_a_checkpoint_that_does_not_fit_raises_enospc_naming_it(tmp_path, state):
    with small_tmpfs(str(tmp_path / "disk"), "1m") as disk:
        checkpoints = Checkpointer(disk)
        checkpoints.save({"x": torch.ones(3)}, 1)
        with pytest.raises(OSError) as raised:
            checkpoints.save(state, 2)
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == os.path.join(checkpoints.directory, "ckpt-2.pt")
        assert _listing(checkpoints.directory) == ["ckpt-1.pt"]  # no temporary file
        assert torch.equal(load_checkpoint_file(os.path.join(checkpoints.directory,
                                                             "ckpt-1.pt"))["x"], torch.ones(3))
        checkpoints.save({"x": torch.zeros(10)}, 2)  # a checkpoint that fits still does
        assert _listing(checkpoints.directory) == ["ckpt-1.pt", "ckpt-2.pt"]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def test_removing_partial_checkpoint_files_logs_each_with_its_size(tmp_path):
    checkpoints = Checkpointer(str(tmp_path))
    checkpoints.save({"x": torch.ones(1)}, 4)
    partial = os.path.join(checkpoints.directory,
                           f"{TEMPORARY_PREFIX}ckpt-6.pt.abc{TEMPORARY_SUFFIX}")
    legacy = os.path.join(checkpoints.directory, ".ckpt-7.tmp")  # alf_async <= 0.1
    for path, size in ((partial, 1000), (legacy, 7)):
        with open(path, "wb") as f:
            f.write(b"\0" * size)
    records = _Records()
    logger = logging.getLogger("alf_async")
    logger.addHandler(records)
    try:
        removed = checkpoints.remove_temporary_files()
    finally:
        logger.removeHandler(records)
    assert sorted(removed) == sorted([(partial, 1000), (legacy, 7)])
    assert _listing(checkpoints.directory) == ["ckpt-4.pt"]
    assert f"WARNING removed {partial} (1000 bytes): a partial file left by an " \
           "interrupted write" in records.lines, records.lines
    assert any(line.startswith(f"WARNING removed {legacy} (7 bytes)")
               for line in records.lines), records.lines

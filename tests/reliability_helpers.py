"""Helpers of the reliability tests (tests/test_reliability_*.py); no tests here.

``TrainRun`` starts the train command as a user does (its own session, so that a
signal or SIGKILL can reach its whole process group), records every descendant
process it ever has while it runs (a background sampler over psutil), and checks
after it ends that none of them is left and that no shared-memory block owned by
any of them remains.

Runs use a small config: the demo pendulum gin file with K = 2, unroll_length 32,
minibatches of 64 and one epoch, so that an iteration takes well under a second
and most of a run's time is process start-up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import psutil

from conftest import is_multiprocessing_service

from alf_async.envs.latency import ENV_ID as LATENCY_ENV_ID
from alf_async.utils.process import (ACTOR_PROCESS_NAME, ENV_WORKER_PROCESS_NAME,
                                     HOGWILD_WORKER_PROCESS_NAME)
from alf_async.utils.shared_memory import block_owner_pid, list_blocks, shm_directory

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_GIN = "ppo_bullet_inverted_pendulum.gin"

# A tiny, fast config on top of the demo gin file.
SMALL = (
    "Trainer.num_envs=2",
    "Trainer.unroll_length=32",
    "Trainer.num_env_steps=0",
    "Trainer.learner_num_threads=1",
    "PPOLearner.mini_batch_size=64",
    "PPOLearner.num_epochs=1",
    "MetricsRecorder.tensorboard=False",
    "MetricsRecorder.console_interval_s=0",
)

# Runs on an env that sleeps 5 ms a step (alf_async.envs.latency), for tests that
# act on a run mid-training and need seconds of training left after they act,
# however fast the machine runs the rest.
SLOW_ENV_PARAM = f'Trainer.env_name="alf_async.envs.latency:{LATENCY_ENV_ID}"'

# Seconds every child of a run gets to end after the run's trainer has ended.
CHILD_EXIT_S = 15.0


def small_params(*extra: str, iterations: int = 6) -> List[str]:
    return list(SMALL) + [f"Trainer.num_iterations={iterations}"] + list(extra)


def train_in_this_process(root_dir: str, gin_files: Sequence[str],
                          gin_params: Sequence[str], **options) -> int:
    """The train command's body (``alf_async.bin.train.train``) run in this
    process; gin's bindings and the logging it set up are undone afterwards.
    For runs refused before anything starts (what it printed: capsys).
    ``options``: train's keyword arguments (allow_config_change)."""
    import gin

    from alf_async.bin.train import train

    logger = logging.getLogger("alf_async")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    try:
        return train(root_dir, list(gin_files), list(gin_params), **options)
    finally:
        gin.clear_config()
        for handler in list(logger.handlers):  # train() set up the run's logging
            if handler not in saved[0]:
                logger.removeHandler(handler)
                handler.close()
        logger.propagate, logger.level = saved[1], saved[2]


def read_metrics(root_dir: str) -> List[Dict]:
    """Rows of <root_dir>/metrics.jsonl; a torn last line is ignored."""
    path = os.path.join(root_dir, "metrics.jsonl")
    rows = []
    if not os.path.isfile(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def checkpoint_files(root_dir: str) -> List[str]:
    """Paths of ckpt-<i>.pt in the run's checkpoints/, by iteration."""
    directory = os.path.join(root_dir, "checkpoints")
    if not os.path.isdir(directory):
        return []
    names = [n for n in os.listdir(directory) if n.startswith("ckpt-") and n.endswith(".pt")]
    names.sort(key=lambda n: int(n[len("ckpt-"):-len(".pt")]))
    return [os.path.join(directory, n) for n in names]


def checkpoint_iteration(path: str) -> int:
    return int(os.path.basename(path)[len("ckpt-"):-len(".pt")])


def is_env_worker(proc: psutil.Process) -> bool:
    """An env worker (forked or spawned by its actor: named by the library)."""
    try:
        return proc.name() == ENV_WORKER_PROCESS_NAME
    except psutil.Error:
        return False


def _actor_processes(proc: psutil.Process) -> List[psutil.Process]:
    """The actors and Hogwild workers ``proc`` started (through its forkserver,
    or spawned): its descendants named so by the library, not its evaluator
    or env probe."""
    actors = []
    for child in proc.children(recursive=True):
        try:
            if child.name() in (ACTOR_PROCESS_NAME, HOGWILD_WORKER_PROCESS_NAME):
                actors.append(child)
        except psutil.Error:
            pass
    return actors


def _gone(pid: int, create_time: float) -> bool:
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > 0.01:
            return True  # the pid was reused by another process
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class TrainRun:
    """The train command in its own session, watched while it runs.

    Args:
        root_dir: the run directory.
        params: --gin_param bindings.
        gin_file: --gin_file (None resumes from the run's saved config).
        log_path: where the run's stdout and stderr go.
        flags: further flags of the train command (``--allow_config_change``).
    """

    def __init__(self, root_dir: str, params: Sequence[str] = (),
                 gin_file: Optional[str] = DEMO_GIN, log_path: Optional[str] = None,
                 flags: Sequence[str] = ()):
        self.root_dir = str(root_dir)
        self.cmd = [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root_dir}"]
        if gin_file:
            self.cmd.append(f"--gin_file={gin_file}")
        self.cmd += [f"--gin_param={p}" for p in params] + list(flags)
        self.log_path = log_path or os.path.join(self.root_dir + ".log")
        self.seen: Dict[int, float] = {}  # pid -> create_time of every descendant
        self.services: Set[int] = set()  # multiprocessing's forkserver and tracker
        self.blocks_seen: Set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, cwd=REPO_ROOT, env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    # -- watching ---------------------------------------------------------------
    def descendants(self) -> List[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    def _sample_once(self) -> None:
        found, services = {}, set()
        for p in self.descendants():
            try:
                found[p.pid] = p.create_time()
            except psutil.Error:
                continue
            if is_multiprocessing_service(p):
                services.add(p.pid)
        owners = set(found) | {self.pid}
        blocks = {b for b in list_blocks() if block_owner_pid(b) in owners}
        with self._lock:
            self.seen.update(found)
            self.services |= services
            self.blocks_seen |= blocks

    def _sample(self) -> None:
        while not self._stop.is_set() and self.proc.poll() is None:
            self._sample_once()
            time.sleep(0.05)

    def run_processes_seen(self) -> Dict[int, float]:
        """The descendants seen that did the run's work (actors, workers, env
        workers, the evaluator): every one but multiprocessing's forkserver and
        resource tracker, which the train command may start before it checks
        its configuration (the server imports torch beside the trainer)."""
        with self._lock:
            return {pid: t for pid, t in self.seen.items() if pid not in self.services}

    def actors(self) -> List[psutil.Process]:
        """The actor (or Hogwild worker) processes of the run."""
        try:
            return _actor_processes(psutil.Process(self.pid))
        except psutil.Error:
            return []

    def env_workers(self) -> List[psutil.Process]:
        """The env-worker processes: children of the actors."""
        workers = []
        for actor in self.actors():
            try:
                workers += [p for p in actor.children() if is_env_worker(p)]
            except psutil.Error:
                pass
        return workers

    def running(self) -> bool:
        return self.proc.poll() is None

    def metrics(self) -> List[Dict]:
        return read_metrics(self.root_dir)

    def wait_for(self, predicate: Callable[[], object], timeout: float,
                 what: str = "condition") -> object:
        """Poll ``predicate`` until true; fails if the run ends or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if not self.running():
                value = predicate()
                if value:
                    return value
                raise AssertionError(f"run ended (rc {self.proc.returncode}) before "
                                     f"{what}:\n{self.output()[-4000:]}")
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {timeout:.0f} s:\n{self.output()[-4000:]}")

    def wait_for_iteration(self, iteration: int, timeout: float = 120.0) -> List[Dict]:
        return self.wait_for(
            lambda: (lambda rows: rows if rows and rows[-1]["iteration"] >= iteration
                     else None)(self.metrics()),
            timeout, f"metrics line of iteration {iteration}")

    def wait(self, timeout: float) -> int:
        """The exit status; a run still going after ``timeout`` s is killed and fails."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise AssertionError(f"run did not end within {timeout:.0f} s (hang):\n"
                                 f"{self.output()[-4000:]}") from None
        self._stop.set()
        self._sampler.join(5.0)
        return rc

    def output(self) -> str:
        self._log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    # -- signals ------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def signal_group(self, sig: int) -> None:
        os.killpg(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the run's process group and everything it ever started."""
        self._sample_once()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid, created in list(self.seen.items()):
            if not _gone(pid, created):
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._stop.set()
        self.remove_blocks()

    def remove_blocks(self) -> None:
        """Unlink the blocks of the run whose owner is gone (after a kill)."""
        for name in self.leftover_blocks():
            if not psutil.pid_exists(block_owner_pid(name)):
                try:
                    os.unlink(os.path.join(shm_directory(), name))
                except OSError:
                    pass

    # -- checks after the end ---------------------------------------------------------
    def leftover_processes(self) -> List[Tuple[int, str]]:
        left = []
        for pid, created in list(self.seen.items()):
            if not _gone(pid, created):
                try:
                    left.append((pid, " ".join(psutil.Process(pid).cmdline())))
                except psutil.Error:
                    pass
        return left

    def leftover_blocks(self) -> List[str]:
        owners = set(self.seen) | {self.pid}
        return [b for b in list_blocks() if block_owner_pid(b) in owners]

    def assert_clean(self, timeout: float = CHILD_EXIT_S) -> None:
        """Every descendant ever seen has ended and none of their blocks remain."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (self.leftover_processes()
                                               or self.leftover_blocks()):
            time.sleep(0.1)
        assert not self.leftover_processes(), (
            f"orphan processes of the run: {self.leftover_processes()}")
        assert not self.leftover_blocks(), (
            f"shared-memory blocks of the run left: {self.leftover_blocks()}")

    def close(self) -> None:
        """Last resort for a failing test: nothing of the run may survive it."""
        if self.running() or self.leftover_processes():
            self.kill_group()
        self._stop.set()
        self._log.close()

    def __enter__(self) -> "TrainRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_to_end(root_dir: str, params: Sequence[str], timeout: float = 180.0,
               gin_file: Optional[str] = DEMO_GIN) -> Tuple[int, str, "TrainRun"]:
    """Run the train command to its end; checks it left nothing behind."""
    with TrainRun(root_dir, params, gin_file=gin_file) as run:
        rc = run.wait(timeout)
        run.assert_clean()
        return rc, run.output(), run


def assert_counters_monotonic(rows: Iterable[Dict]) -> None:
    """Iterations go up by one and env steps never go backward."""
    rows = list(rows)
    iterations = [r["iteration"] for r in rows]
    assert iterations == list(range(iterations[0], iterations[0] + len(iterations))), (
        f"iterations not consecutive: {iterations}")
    steps = [r["env_steps"] for r in rows]
    assert all(b > a for a, b in zip(steps, steps[1:])), f"env_steps went backward: {steps}"


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def alf_async_log(level: int = logging.INFO):
    """Records of the 'alf_async' logger, caught on the logger itself (the train
    command's logging set-up turns its propagation to the root logger off)."""
    logger = logging.getLogger("alf_async")
    handler = _ListHandler()
    saved_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved_level)


def kill_and_wait(pid: int) -> None:
    """SIGKILL an env worker (a child of this process or of an actor) and wait
    until it is gone, so that the next command sent to it finds it dead
    whatever the timing."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # not reaped here: its parent does that
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)

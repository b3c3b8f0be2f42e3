"""Shared fixtures: every test is checked for leaked processes and shared memory.

``no_leaks`` (autouse) records the test process's children and the alf_async
shared-memory blocks before a test and fails the test if new ones are still there
a few seconds after it ends (a block left by a dead process counts in the pytest
worker whose process tree the process was in: ``TreeWatcher``).

Tests marked ``slow`` are skipped unless ``--slow`` (or a ``-m`` expression) is
given: ``pytest_collection_modifyitems``.
"""

from __future__ import annotations

import os
import sys
import time

# Ray clusters started by the tests (and the train command's local instance)
# listen on loopback only; Ray reads this when it is imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Ray workers (actors) at the tests' own priority, not Ray's default nice 15.
os.environ.setdefault("RAY_worker_niceness", "0")

import psutil
import pytest

from alf_async.utils.shared_memory import block_owner_pid, list_blocks

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _children():
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE}


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class TreeWatcher:
    """The pids that have been in this process's tree (itself and its
    descendants) since the test session began: a daemon thread samples the tree
    every ``interval`` seconds. A process that dies without releasing its
    shared memory (a SIGKILLed trainer) is still known afterwards as ours or
    not, so a block it left counts as a leak only in the pytest worker that
    started it, not in another worker whose test happens to end while the
    block is there."""

    def __init__(self, interval: float = 0.25):
        import threading

        self._seen = {os.getpid()}
        self._lock = threading.Lock()
        self._interval = interval
        threading.Thread(target=self._run, name="tree-watcher", daemon=True).start()

    def sample(self) -> set:
        """The tree now (also added to what was seen)."""
        try:
            now = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
        except psutil.Error:
            now = {os.getpid()}
        with self._lock:
            self._seen |= now
        return now

    def seen(self, pid: int) -> bool:
        with self._lock:
            return pid in self._seen

    def _run(self) -> None:
        while True:
            self.sample()
            time.sleep(self._interval)


_tree: "TreeWatcher | None" = None


def process_tree() -> TreeWatcher:
    global _tree
    if _tree is None:
        _tree = TreeWatcher()
    return _tree


def _new_blocks_of_this_test(blocks_before):
    """New blocks whose owner (the pid in the name) is this process or one of
    its descendants, or is gone after having been one of them.

    Other test runs and trainings on the same machine (another pytest worker
    included) create and orphan blocks of their own while a test runs; those
    are not this test's leaks. A block without an owner in its name counts.
    """
    tree = process_tree()
    ours = tree.sample()
    leaked = set()
    for name in set(list_blocks()) - blocks_before:
        owner = block_owner_pid(name)
        if owner is None or owner in ours or (not psutil.pid_exists(owner)
                                              and tree.seen(owner)):
            leaked.add(name)
    return leaked


def is_multiprocessing_service(proc: psutil.Process) -> bool:
    """Whether ``proc`` is one of multiprocessing's long-lived helpers of this
    process tree: the resource tracker, or the forkserver itself (the server, not
    the actors and workers forked from it, whose command line is the server's)."""
    try:
        cmd = " ".join(proc.cmdline())
        if "resource_tracker" in cmd:
            return True
        if "forkserver" not in cmd:
            return False
        parent = proc.parent()
        return parent is None or "forkserver" not in " ".join(parent.cmdline())
    except psutil.Error:
        return False


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the long end-to-end tests marked slow (skipped "
                          "otherwise; -m slow runs them alone)")


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked slow unless --slow is given or a ``-m`` expression
    chooses by marks itself (``-m slow``: the slow tests alone). The suite the
    README runs then keeps to its time budget; each slow test runs at full
    length a feature that faster tests of the suite also exercise."""
    if config.getoption("--slow") or config.option.markexpr:
        return
    skip = pytest.mark.skip(reason="a long end-to-end test (marked slow): run it "
                                   "with --slow, or -m slow for the slow tests alone")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_gin_config():
    """Each test starts and ends with no gin bindings: a test that parsed a
    run's config in this process (``config.parse_config``, a ``Trainer`` built
    from bindings, e.g. ``Trainer.algorithm = 'sac'``) must not configure the
    next test that runs in the same worker."""
    import gin

    gin.clear_config()
    yield
    gin.clear_config()


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail a test that leaves child processes or shared-memory blocks behind."""
    process_tree()  # watching from the first test on
    children_before = _children()
    blocks_before = set(list_blocks())
    yield
    # The resource tracker and the forkserver are legitimate long-lived children.
    def leftover_children():
        extra = set()
        for pid in _children() - children_before:
            try:
                proc = psutil.Process(pid)
                cmd = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if is_multiprocessing_service(proc):
                continue
            # Idle workers a Ray node keeps for reuse belong to the node (a test
            # cluster outlives its tests); actors show as "ray::_RayActor".
            if cmd.startswith("ray::IDLE"):
                continue
            extra.add((pid, cmd))
        return extra

    wait_until(lambda: not leftover_children(), timeout=10.0)
    assert not leftover_children(), f"child processes left behind: {leftover_children()}"
    wait_until(lambda: not _new_blocks_of_this_test(blocks_before), timeout=5.0)
    leaked = _new_blocks_of_this_test(blocks_before)
    assert not leaked, f"shared-memory blocks left behind: {sorted(leaked)}"


@pytest.fixture
def train_cmd():
    """The train command as a user runs it, for subprocess tests."""
    return [sys.executable, "-m", "alf_async.bin.train"]

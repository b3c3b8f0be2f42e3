"""Shared fixtures: every test is checked for leaked processes and shared memory.

``no_leaks`` (autouse) records the test process's children and the alf_async
shared-memory blocks before a test and fails the test if new ones are still there
a few seconds after it ends.
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


def _new_blocks_of_this_test(blocks_before):
    """New blocks, except those owned by a live process outside this process tree.

    Other test runs and trainings on the same machine create their own blocks while
    a test runs; those are not this test's leaks. A block counts if its owner
    (the pid in its name) is this process, one of its descendants, or gone.
    """
    ours = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
    leaked = set()
    for name in set(list_blocks()) - blocks_before:
        owner = block_owner_pid(name)
        if owner is None or owner in ours or not psutil.pid_exists(owner):
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


@pytest.fixture(autouse=True)
def fresh_gin_config():
    """Each test starts and ends with no gin bindings: a test that parsed a
    run's config in this process (``playback.player.load_policy`` binds the
    run's, e.g. ``Trainer.algorithm = 'sac'``) must not configure the next
    test that runs in the same worker."""
    import gin

    gin.clear_config()
    yield
    gin.clear_config()


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail a test that leaves child processes or shared-memory blocks behind."""
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

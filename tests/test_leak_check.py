"""The leak check of conftest.py: a shared-memory block left by a dead process
is this test's leak only if the process was in this pytest worker's tree."""

import contextlib
import os
import subprocess
import sys

import psutil

from alf_async.utils.shared_memory import BLOCK_PREFIX, shm_directory
from conftest import _new_blocks_of_this_test, process_tree, wait_until


def _unused_pid() -> int:
    """A pid no process has now (and none of this tree had)."""
    pid = 4_190_000
    while psutil.pid_exists(pid) or process_tree().seen(pid):
        pid -= 1
    return pid


def _dead_childs_blocks() -> "tuple[set, str, str] | None":
    """Blocks named for a child of this tree and for a stranger pid; the
    child is killed; returns (what the leak check counts after its death,
    the child's block, the stranger's), or None when a trainer in another
    pytest worker unlinked either dead owner's block before the check was
    read (``sweep_stale_blocks`` removes every dead owner's block, as it should)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    paths = []
    try:
        assert wait_until(lambda: process_tree().seen(child.pid), timeout=10.0)
        mine = f"{BLOCK_PREFIX}{child.pid}_leakcheck"
        stranger = f"{BLOCK_PREFIX}{_unused_pid()}_leakcheck"
        for name in (mine, stranger):
            paths.append(os.path.join(shm_directory(), name))
            with open(paths[-1], "wb") as f:
                f.write(b"\0" * 8)
        assert _new_blocks_of_this_test(set()) >= {mine}  # alive and ours
        child.kill()
        child.wait(10.0)
        leaked = _new_blocks_of_this_test(set())
        if not all(os.path.exists(path) for path in paths):
            return None
        return leaked, mine, stranger
    finally:
        child.kill()
        child.wait(10.0)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def test_a_dead_childs_block_counts_and_a_strangers_does_not():
    for _ in range(5):  # another worker's trainer may sweep the dead owners' blocks
        seen = _dead_childs_blocks()
        if seen is not None:
            break
    assert seen is not None, "another worker swept the blocks five times running"
    leaked, mine, stranger = seen
    assert mine in leaked  # its owner died in this tree: a leak
    assert stranger not in leaked  # dead, but never ours: another worker's

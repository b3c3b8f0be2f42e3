"""How alf_async starts the children that run torch (utils/process.py).

Actors and Hogwild workers are forked from multiprocessing's forkserver, a
process started once; these tests pin what a child gets all the same: the
parent's environment variables as they are at the child's launch (not as they
were when the server started), and a parent check that sees through the server.
"""

from __future__ import annotations

import os

from alf_async.utils.process import (start_child, started_by, torch_child_context,
                                     warm_up_torch_children)


def _report(path: str, parent_pid: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{os.environ.get('ALF_ASYNC_TEST_CHILD_VALUE')}\n"
                f"{started_by(parent_pid)}\n{started_by(os.getpid())}\n"
                f"{'torch' in __import__('sys').modules}\n")


def test_a_forked_child_sees_the_environment_at_its_launch(tmp_path, monkeypatch):
    warm_up_torch_children()  # the server starts before the variable is set
    ctx = torch_child_context()
    monkeypatch.setenv("ALF_ASYNC_TEST_CHILD_VALUE", "set after the server started")
    out = tmp_path / "child.txt"
    child = start_child(ctx, _report, (str(out), os.getpid()), name="alf_async-test-child")
    child.join(60)
    assert child.exitcode == 0
    value, by_parent, by_itself, has_torch = out.read_text().splitlines()
    assert value == "set after the server started"
    assert by_parent == "True"  # the parent is the server, a child of this process
    assert by_itself == "False"
    assert has_torch == "True"  # imported by the server, not paid by the child


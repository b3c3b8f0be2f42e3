"""How alf_async starts its children (utils/process.py).

Actors and Hogwild workers are forked from multiprocessing's forkserver, a
process started once; these tests pin what a child gets all the same: the
parent's environment variables as they are at the child's launch (not as they
were when the server started), and a parent check that sees through the server.
Env workers are forked by such a child (single-threaded: threads do not survive
a fork) and spawned by a process with other threads. Every child, however
started, runs BLAS (numpy's OpenBLAS) on one thread.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from alf_async.utils.process import (ACTOR_PROCESS_NAME, env_worker_context,
                                     init_child_process, start_child, started_by,
                                     torch_child_context, warm_up_torch_children)


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


def _report_env_workers(path: str) -> None:
    """In a forkserver child, as in an actor: how env workers start, before
    and after this process has a second thread."""
    import threading

    import psutil

    from alf_async.envs.batched_env import BatchedEnv
    from alf_async.utils.process import env_worker_context

    lines = [env_worker_context().get_start_method()]
    env = BatchedEnv("CartPole-v1", 4, num_workers=2, seed=0)
    try:
        env.reset()
        workers = psutil.Process().children()
        lines.append(",".join(sorted(p.name() for p in workers)))
        lines.append(str(all(p.cmdline() == psutil.Process().cmdline() for p in workers)))
    finally:
        env.close()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    lines.append(env_worker_context().get_start_method())
    stop.set()
    thread.join()
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def test_env_workers_are_forked_only_by_a_single_threaded_process(tmp_path):
    """An actor (a forkserver child, single-threaded) forks its env workers,
    named alf-env-worker; a process with another thread spawns them (a fork
    could inherit a lock that thread holds)."""
    out = tmp_path / "workers.txt"
    child = start_child(torch_child_context(), _report_env_workers, (str(out),),
                        name="alf_async-test-child")
    child.join(120)
    assert child.exitcode == 0
    single, names, same_cmdline, threaded = out.read_text().splitlines()
    assert single == "fork"
    assert names == "alf-env-worker,alf-env-worker"
    assert same_cmdline == "True"  # a forked worker keeps its parent's command line
    assert threaded == "spawn"


def test_a_runs_children_show_their_roles_as_process_names(tmp_path):
    """Actors, the evaluator and env workers are all forked from one server, with
    one command line: their names tell them apart, so that what looks for "an
    actor" (a fault test, bench/fault_injection.py) never takes the evaluator."""
    import psutil

    from alf_async.utils.process import (ACTOR_PROCESS_NAME, ENV_WORKER_PROCESS_NAME,
                                         EVALUATOR_PROCESS_NAME)
    from reliability_helpers import SLOW_ENV_PARAM, TrainRun, small_params

    def names():
        found = []
        for p in run.descendants():
            try:
                found.append(p.name())
            except psutil.Error:  # ended meanwhile
                pass
        return sorted(found)

    def roles_up():
        now = names()
        return now if (now.count(ACTOR_PROCESS_NAME) == 2 and EVALUATOR_PROCESS_NAME in now
                       and now.count(ENV_WORKER_PROCESS_NAME) == 2) else None

    params = small_params("Trainer.num_actors=2", "Trainer.num_env_workers=1",
                          "Trainer.eval_interval_env_steps=128", "Trainer.eval_episodes=1",
                          SLOW_ENV_PARAM, iterations=12)
    with TrainRun(str(tmp_path / "run"), params) as run:
        run.wait_for(roles_up, 120, "two actors, two env workers and the evaluator")
        actors = run.actors()
        assert len(actors) == 2
        assert {p.name() for p in actors} == {ACTOR_PROCESS_NAME}
        # Looked up again, as each actor's child: a moment after the snapshot
        # above, so waited for (a loaded machine may list a child late).
        run.wait_for(lambda: len(run.env_workers()) == 2, 60, "each actor's env worker")
        rc = run.wait(180)
        run.assert_clean()
    assert rc == 0, run.output()[-3000:]


def _report_blas_threads(path: str) -> None:
    import numpy  # noqa: F401  (loads OpenBLAS, as every child has)

    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    init_child_process(name=ACTOR_PROCESS_NAME)
    after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{','.join(map(str, before))}\n{','.join(map(str, after))}\n")


@pytest.mark.parametrize("context", ["forkserver", "env_worker", "spawn"])
def test_a_child_runs_blas_on_one_thread(tmp_path, context):
    """With the parent's BLAS at 2 threads (one per core on this machine), a
    child started any of alf_async's ways runs it on one after its set-up."""
    ctx = {"forkserver": torch_child_context, "env_worker": env_worker_context,
           "spawn": lambda: mp.get_context("spawn")}[context]()
    out = tmp_path / "child.txt"
    with threadpool_limits(limits=2, user_api="blas"):
        child = start_child(ctx, _report_blas_threads, (str(out),), name="alf_async-test-child")
        child.join(60)
    assert child.exitcode == 0
    before, after = (line.split(",") if line else [] for line in
                     out.read_text().split("\n")[:2])
    assert before, "numpy's BLAS was not found in the child"
    assert after == ["1"] * len(before)


def _blocked_on_a_pipe(native_thread_id: int) -> bool:
    """Whether a thread of this process sleeps in a pipe read (the kernel
    function it waits in, /proc/self/task/<tid>/wchan)."""
    with open(f"/proc/self/task/{native_thread_id}/wchan", encoding="ascii") as f:
        return "pipe_read" in f.read()


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux's /proc")
def test_a_child_starts_when_the_forkserver_dies_during_the_request(tmp_path):
    """The real fault: the forkserver is killed while a child is being asked
    of it (the request sent, its reply awaited). multiprocessing then raises
    EOFError; start_child waits for the dead server, has a new one started and
    asks again."""
    import signal
    import threading
    from multiprocessing import forkserver

    ctx = torch_child_context()
    forkserver.ensure_running()
    server = forkserver._forkserver._forkserver_pid
    out = tmp_path / "child.txt"
    asking, children, failed = threading.Event(), [], []
    thread_id = []

    def ask() -> None:
        thread_id.append(threading.get_native_id())
        asking.set()
        try:
            children.append(start_child(ctx, _report, (str(out), os.getpid()),
                                        name="alf_async-test-child"))
        except BaseException as error:  # reported to the test below
            failed.append(error)

    os.kill(server, signal.SIGSTOP)  # the request waits in the server's socket
    thread = threading.Thread(target=ask)
    try:
        thread.start()
        assert asking.wait(60)
        # The request is sent once the asking thread waits for the reply (the
        # child's pid) on a pipe: the event this waits for, read from the kernel.
        deadline = time.monotonic() + 60
        while (thread.is_alive() and not _blocked_on_a_pipe(thread_id[0])
               and time.monotonic() < deadline):
            time.sleep(0.001)
        assert _blocked_on_a_pipe(thread_id[0])
    finally:
        os.kill(server, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive()
    assert not failed, failed
    child = children[0]
    child.join(60)
    assert child.exitcode == 0
    assert forkserver._forkserver._forkserver_pid != server  # a new server forked it
    assert out.read_text().splitlines()[1] == "True"  # its parent is that server

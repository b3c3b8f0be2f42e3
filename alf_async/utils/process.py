"""Helpers for the child processes alf_async starts.

Three ways of starting a child:

- ``torch_child_context()`` for the children that run a policy (actors, Hogwild
  workers): multiprocessing's forkserver, which imports ``TORCH_CHILD_MODULES``
  once and forks each child from there, so that a child does not pay torch's
  import (2-3 s of CPU on a small machine) again. ``warm_up_torch_children()``
  starts that server early, beside the trainer's own imports.
- ``env_worker_context()`` for env workers, which never use torch: forked
  from their parent where that process runs a single thread (an actor,
  forked from the forkserver, does: threads do not survive a fork), so
  that a worker starts in milliseconds with the parent's imports (numpy,
  gymnasium, the env's modules; a spawned worker imports them again, about 0.3
  s of a 2-core machine's start-up, on the critical path of every run's
  start); spawned otherwise: a process with other threads (the trainer's
  in-process backend, a test runner) may be forked while one of them holds a
  lock the child would wait for forever. The worker restores SIGTERM's
  default action (``init_child_process``).
- ``mp_context()`` (spawn) where a fresh interpreter is wanted.

Each gives a child whose arguments are pickled (spawn,
forkserver) or inherited (fork), its ``sys.path`` and working folder the
parent's. ``start_child`` also hands the parent's environment
variables over as they are at launch (a forkserver child would otherwise see
them as they were when the server started).

Every child calls ``init_child_process()`` first: it ignores SIGINT (Ctrl-C
reaches the whole process group; the parent decides how to stop), restores
SIGTERM's default action, limits BLAS to one thread (``limit_blas_threads``)
and asks Linux
to send ``death_signal`` when its parent dies, so that no child outlives a
parent killed with SIGKILL. A forkserver child's parent is the server; the child
leaves the server's client count, so that the server ends with the trainer and
the signal still comes.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

logger = logging.getLogger("alf_async")

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1
# The names the library's children show in ps, top and psutil's ``name()`` (a
# forked child's command line is its parent's, so the name is what tells them
# apart; at most 15 bytes on Linux).
ENV_WORKER_PROCESS_NAME = "alf-env-worker"
ACTOR_PROCESS_NAME = "alf-actor"
HOGWILD_WORKER_PROCESS_NAME = "alf-hogwild"
EVALUATOR_PROCESS_NAME = "alf-evaluator"
ENV_PROBE_PROCESS_NAME = "alf-env-probe"

# Imported once by the server the policy-running children are forked from
# (gymnasium: every actor's envs, and the env workers forked from the actor).
TORCH_CHILD_MODULES = ("torch", "gin", "gymnasium", "alf_async.runtime.actor_process",
                       "alf_async.hogwild.worker", "alf_async.algorithms.policy",
                       "alf_async.algorithms.sac_policy", "alf_async.training.evaluator_process")


def set_parent_death_signal(sig: int) -> bool:
    """Deliver ``sig`` to this process when its parent exits (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except OSError:
        return False


def set_process_name(name: str) -> None:
    """Name this process as ps, top and psutil's ``name()`` show it (Linux: at
    most 15 bytes are kept; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except OSError:
        pass


def init_child_process(death_signal: int = signal.SIGKILL,
                       expected_parent: Optional[int] = None,
                       name: Optional[str] = None) -> None:
    """Common set-up for every child process of alf_async; ``name`` (one of
    the ``*_PROCESS_NAME`` above) is the process name it shows."""
    if name is not None:
        set_process_name(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked child inherits its parent's handler (an actor's raises
    # SystemExit); it starts from the default, like a spawned one.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    limit_blas_threads()
    set_parent_death_signal(death_signal)
    _leave_forkserver_clients()
    # The parent may have died before prctl took effect.
    if expected_parent is not None and not started_by(expected_parent):
        os._exit(1)


def limit_blas_threads() -> None:
    """Let BLAS (numpy's OpenBLAS) use one thread in this process.

    A run already gives every core a process of its own (N actors or W env
    workers, and the learner), and the children's policies run on numpy
    (``networks/numpy_inference.py``). OpenBLAS, which starts a thread per core
    by default and spins them while it waits, then fights the run's other
    processes: on 2 cores, two actors' (256, 256) policies on 16 envs took
    about 50x as long per call as with one thread (1.2-1.7 s of a 6 s unroll
    on Ant against 0.05 s in the sync trainer). torch's own threads are set
    where torch runs (``torch.set_num_threads``).
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def _leave_forkserver_clients() -> None:
    """Close this child's copy of the forkserver's "alive" pipe (a no-op in a
    spawned child). The server runs until every holder has closed it; held by
    the trainer alone, it ends when the trainer dies, and its children get their
    death signal."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None and mp.parent_process() is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def _proc_stat(pid: object) -> List[bytes]:
    """The fields of /proc/<pid>/stat after the command name, from "state" on
    (field 3 of proc(5) is index 0). Raises OSError if there is no such file."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return stat[stat.rindex(b")") + 2:].split()


def _parent_of(pid: int) -> Optional[int]:
    """The parent pid of process ``pid`` (None if it is gone)."""
    try:
        return int(_proc_stat(pid)[1])
    except OSError:
        return None


def started_by(pid: int) -> bool:
    """Whether this process's parent is ``pid``, or a forkserver child of ``pid``
    (false once ``pid`` has died: its children are re-parented)."""
    parent = os.getppid()
    return parent == pid or _parent_of(parent) == pid


def mp_context() -> mp.context.BaseContext:
    """A context whose children start a fresh interpreter: spawn."""
    return mp.get_context("spawn")


def single_threaded() -> bool:
    """Whether this process runs one thread, native threads included (Linux;
    False where that cannot be read)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def env_worker_context() -> mp.context.BaseContext:
    """The context of env workers: fork where this process is single-threaded
    (Linux), else spawn (see the module docstring)."""
    if sys.platform.startswith("linux") and single_threaded():
        return mp.get_context("fork")
    return mp.get_context("spawn")


def torch_child_context() -> mp.context.BaseContext:
    """The context of the children that run a policy (actors, Hogwild workers):
    forked from a server that has imported ``TORCH_CHILD_MODULES`` once."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(TORCH_CHILD_MODULES))
    return ctx


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def warm_up_torch_children() -> None:
    """Start the server of ``torch_child_context`` now, so that its imports run
    beside the caller's own (the first actor then starts at once). Only with two
    cores or more: on one core the two imports would only slow each other.

    The server ends when this process exits, also when no child was ever forked
    (a run refused for its configuration) or the server is still importing."""
    if usable_cores() < 2:
        return
    from multiprocessing import forkserver

    torch_child_context()
    forkserver.ensure_running()
    atexit.unregister(_end_forkserver)  # once, however often this is called
    atexit.register(_end_forkserver)


def _end_forkserver() -> None:
    """Kill the forkserver at this process's exit. Every child forked from it has
    been stopped by then (the pools' and loops' ``close``); on its own the server
    would only end once its imports are done, seconds after a quick exit."""
    pid = _forkserver_pid()
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _child_main(environ: Dict[str, str], target: Callable[..., Any],
                args: Sequence[Any]) -> None:
    os.environ.clear()
    os.environ.update(environ)
    target(*args)


def start_child(ctx: mp.context.BaseContext, target: Callable[..., Any],
                args: Sequence[Any], name: str) -> mp.process.BaseProcess:
    """Start ``target(*args)`` in a child process of ``ctx`` (not a daemon: it
    may start env workers) that sees this process's environment variables as
    they are now.

    A forkserver that dies while it is asked for the child (killed, or out of
    memory: the request then reads an end of file) is replaced once: this waits
    until the dead server has exited, so that multiprocessing starts a new one,
    and asks again. A second failure is raised, naming the child and the
    server."""
    for attempt in (1, 2):
        process = ctx.Process(target=_child_main, args=(dict(os.environ), target, tuple(args)),
                              name=name, daemon=False)
        try:
            process.start()
            return process
        except (EOFError, ConnectionError) as error:
            if ctx.get_start_method() != "forkserver":
                raise
            server_pid = _forkserver_pid()
            if attempt == 2 or not _wait_exited(server_pid, timeout_s=10.0):
                raise RuntimeError(
                    f"could not start {name}: multiprocessing's forkserver (pid {server_pid}) "
                    f"broke off the request ({type(error).__name__}: {error})") from error
            logger.warning("the forkserver (pid %s) died while starting %s; starting it again",
                           server_pid, name)
    raise AssertionError("unreachable")


def _forkserver_pid() -> Optional[int]:
    """The pid of this process's forkserver (None before it was started)."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)  # no public accessor


def _wait_exited(pid: Optional[int], timeout_s: float) -> bool:
    """Wait until process ``pid`` has exited (gone, or a zombie not yet reaped);
    whether it did within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while pid is not None:
        try:
            if _proc_stat(pid)[0] in (b"Z", b"X"):
                return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def stop_processes(processes: Iterable[mp.process.BaseProcess],
                   grace_s: float = 5.0) -> None:
    """Join processes, escalating to SIGTERM and then SIGKILL after ``grace_s``.

    The caller should already have asked them to stop (an event or a message).
    """
    processes = [p for p in processes if p is not None and p.pid is not None]
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join(2.0)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def seconds_since_process_start() -> float:
    """Seconds since this process was started (its interpreter launched).

    On Linux from the kernel's start time of the process and its boot-time clock
    (10 ms resolution); elsewhere from psutil (whose boot time is rounded to the
    second).
    """
    try:
        started = int(_proc_stat("self")[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, AttributeError):
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


def describe_exit(exitcode: Optional[int]) -> str:
    """'exit code 3' or 'signal SIGKILL' for a process's exit code."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"

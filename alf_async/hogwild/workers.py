"""The Hogwild worker processes as the trainer sees them: start, talk, replace, stop.

``WorkerGroup`` starts worker ``w`` (``hogwild.worker.worker_process_main``) with
one pipe each, waits until it has built its envs (``WorkerReady``), reads what the
workers send, tells dead or silent workers apart, replaces a worker by a new
generation, and ends every process on every path. What the messages mean (grants,
progress, checkpoints) is the Hogwild loop's business (``training.hogwild_loop``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from alf_async.hogwild import messages
from alf_async.hogwild.shared_state import GlobalState
from alf_async.hogwild.worker import WorkerLaunch, to_bytes, worker_process_main
from alf_async.runtime.actor_pool import ActorPoolError, ActorStartupError, last_line
from alf_async.settings import HogwildSettings, ReplaySettings, TrainerSettings
from alf_async.utils.process import (describe_exit, start_child, stop_processes,
                                     torch_child_context)
from alf_async.utils.shared_memory import sweep_stale_blocks

STARTUP_TIMEOUT_S = 300.0


@dataclass
class WorkerHandle:
    """One worker process, its pipe, and what the trainer knows of it."""

    process: Any
    conn: Any
    generation: int
    ready: bool = False
    pid: int = 0
    env_worker_pids: List[int] = field(default_factory=list)
    last_message: float = 0.0  # monotonic time of the last message (or grant)

    def take_ready(self, message: Any, worker: int, error: type) -> bool:
        """Handle a message received before the worker was ready: True when it is
        ``WorkerReady``; raises ``error`` for ``WorkerFailed``."""
        if isinstance(message, messages.WorkerReady):
            self.ready, self.pid = True, message.pid
            self.env_worker_pids = list(message.env_worker_pids)
            self.last_message = time.monotonic()
            return True
        if isinstance(message, messages.WorkerFailed):
            raise error(f"Hogwild worker {worker} failed to start: "
                        f"{last_line(message.traceback)}")
        return False


class WorkerGroup:
    """The N worker processes of a Hogwild run.

    Args:
        settings, replay, hogwild: the run's settings (``replay`` None for PPO).
        global_state: the shared networks every worker binds to.
        gin_config: the operative gin text the workers parse.
    """

    def __init__(self, settings: TrainerSettings, replay: Optional[ReplaySettings],
                 hogwild: HogwildSettings, global_state: GlobalState, gin_config: str):
        self.settings, self.replay, self.hogwild = settings, replay, hogwild
        self.global_state, self.gin_config = global_state, gin_config
        self.handles: Dict[int, WorkerHandle] = {}

    def spawn(self, w: int, generation: int, epoch: int,
              local_state: Optional[Dict[str, Any]]) -> WorkerHandle:
        """Start worker ``w`` (not waiting for it to be ready)."""
        launch = WorkerLaunch(
            worker_id=w, generation=generation, epoch=epoch, settings=self.settings,
            replay=self.replay, hogwild=self.hogwild, gin_config=self.gin_config,
            state=self.global_state,
            local_state=None if local_state is None else to_bytes(local_state),
            parent_pid=os.getpid())
        ctx = torch_child_context()
        parent_conn, child_conn = ctx.Pipe()
        process = start_child(ctx, worker_process_main, (launch, child_conn),
                              name=f"alf_async-hogwild-{w}")
        child_conn.close()
        self.handles[w] = handle = WorkerHandle(process, parent_conn, generation,
                                                last_message=time.monotonic())
        return handle

    def wait_until_ready(self) -> None:
        """Block until every worker has built its envs (``ActorStartupError`` if
        one fails or dies first, or after ``STARTUP_TIMEOUT_S``)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(h.ready for h in self.handles.values()):
            for w, h in list(self.handles.items()):
                if h.ready:
                    continue
                if h.conn.poll(0.05):
                    try:
                        message = h.conn.recv()
                    except (EOFError, OSError):
                        h.process.join(2.0)
                        raise ActorStartupError(
                            f"Hogwild worker {w} died during start-up "
                            f"({describe_exit(h.process.exitcode)})") from None
                    if h.take_ready(message, w, ActorStartupError):
                        continue
                if not h.process.is_alive() and not h.conn.poll():
                    raise ActorStartupError(f"Hogwild worker {w} died during start-up "
                                            f"({describe_exit(h.process.exitcode)})")
            if time.monotonic() > deadline:
                raise ActorStartupError(f"Hogwild workers not ready after "
                                        f"{STARTUP_TIMEOUT_S:.0f} s")

    def replace(self, w: int, epoch: int, local_state: Optional[Dict[str, Any]]) -> None:
        """Stop worker ``w`` and start its next generation; returns once the new
        one is ready (``ActorPoolError`` if it fails)."""
        old = self.handles[w]  # tracked until stopped: close() sees it if interrupted
        stop_processes([old.process], grace_s=2.0)
        old.conn.close()
        del self.handles[w]
        sweep_stale_blocks()  # the dead worker's replay buffer
        handle = self.spawn(w, old.generation + 1, epoch, local_state)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not handle.ready:
            if handle.conn.poll(0.1):
                try:
                    message = handle.conn.recv()
                except (EOFError, OSError):
                    handle.process.join(2.0)
                    raise ActorPoolError(f"Hogwild worker {w} died while restarting "
                                         f"({describe_exit(handle.process.exitcode)})") from None
                handle.take_ready(message, w, ActorPoolError)
            elif not handle.process.is_alive() or time.monotonic() > deadline:
                raise ActorPoolError(f"Hogwild worker {w} failed to restart "
                                     f"({describe_exit(handle.process.exitcode)})")

    def send(self, w: int, message: Any) -> bool:
        """Send ``message`` to ready worker ``w``; False if it is gone."""
        h = self.handles.get(w)
        if h is None or not h.ready:
            return False
        try:
            h.conn.send(message)
        except (OSError, ValueError):
            return False
        return True

    def readable(self, workers: Optional[Set[int]] = None, timeout: float = 1.0) -> List[int]:
        """Ready workers (of ``workers``; default all) with something to ``read``
        (a message or the end of their pipe) within ``timeout`` seconds."""
        by_conn = {h.conn: w for w, h in self.handles.items()
                   if h.ready and (workers is None or w in workers)}
        return [by_conn[conn] for conn in wait(list(by_conn), timeout=timeout)]

    def read(self, w: int) -> Any:
        """The next message of worker ``w``; None if its pipe closed (the process
        is gone)."""
        h = self.handles[w]
        try:
            message = h.conn.recv()
        except (EOFError, OSError):
            return None
        h.last_message = time.monotonic()
        return message

    def failed(self, busy: Set[int], timeout_s: Optional[float]) -> List[Tuple[int, str]]:
        """(worker, why) for each worker whose process died, or that is ``busy``
        and has sent nothing for ``timeout_s`` seconds (taken as hung)."""
        now = time.monotonic()
        found = []
        for w, h in self.handles.items():
            if h.conn.poll():
                continue  # what it said first (or its end) is read before
            if not h.process.is_alive():
                found.append((w, f"Hogwild worker {w} (pid {h.process.pid}) died "
                                 f"({describe_exit(h.process.exitcode)})"))
            elif w in busy and timeout_s and now - h.last_message > timeout_s:
                found.append((w, f"Hogwild worker {w} (pid {h.pid}) sent nothing for "
                                 f"{now - h.last_message:.0f} s (Trainer.actor_timeout_s="
                                 f"{timeout_s:g}): taken as hung"))
        return found

    def drain(self, pending: Set[int], timeout_s: float,
              handle: Callable[[int, Any], bool]) -> None:
        """Read messages of ``pending`` workers for up to ``timeout_s`` seconds;
        ``handle(w, message)`` returns True when ``w`` has said its last word.
        A worker whose process ends (and whose pipe is empty) is done too."""
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for w in self.readable(pending, timeout=0.5):
                message = self.read(w)
                if message is None or handle(w, message):
                    pending.discard(w)
            pending = {w for w in pending if self.handles[w].process.is_alive()
                       or self.handles[w].conn.poll()}

    @property
    def pids(self) -> Dict[int, int]:
        """Worker id -> pid of its running process (ready workers)."""
        return {w: h.pid for w, h in self.handles.items() if h.ready}

    def alive(self) -> List[int]:
        """Ready workers whose process runs."""
        return [w for w, h in self.handles.items() if h.ready and h.process.is_alive()]

    def close(self) -> None:
        """End every worker process (SIGTERM, then SIGKILL) and close the pipes."""
        stop_processes([h.process for h in self.handles.values()], grace_s=5.0)
        for h in self.handles.values():
            try:
                h.conn.close()
            except OSError:
                pass
        self.handles = {}

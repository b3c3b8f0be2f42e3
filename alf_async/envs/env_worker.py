"""The env-worker process: its entry point ``_worker_main``, which serves the
commands of a ``BatchedEnv`` with an ``EnvGroup`` of its envs, and ``_Worker``,
the batch's handle on one such process.

``_worker_main`` is a process target of 'fork' and 'spawn' contexts
(``utils.process.env_worker_context``), so it stays a module-level function.
"""

from __future__ import annotations

import os
import select
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from alf_async.envs.worker_acting import ACTING_COMMANDS, WorkerActing
from alf_async.envs.env_errors import EnvError, _WorkerLost
from alf_async.envs.env_group import EnvGroup
from alf_async.envs.gym_env import import_env_modules
from alf_async.envs.worker_protocol import (EnvCommand, decode_reply, decode_request,
                                            encode_reply, encode_request)
from alf_async.utils.process import (ENV_WORKER_PROCESS_NAME, describe_exit,
                                     env_worker_context, init_child_process,
                                     stop_processes)
from alf_async.utils.shared_memory import ArraySpec, SharedArrays


def _worker_main(conn, block_name: str, specs: Dict[str, ArraySpec], env_name: str,
                 indices: List[int], seed: int, max_episode_steps: Optional[int],
                 time_feature: bool, terminal_on_life_loss: bool, fatal_env_errors: bool,
                 parent_pid: int, env_modules: Sequence[str]) -> None:
    """Entry point of an env-worker process: serve commands until ``CLOSE``.

    A request is (EnvCommand, args); the reply is ("ok", failures) or
    ("error", EnvError), both in the wire format of ``encode_request`` /
    ``encode_reply``.
    """
    init_child_process(signal.SIGKILL, expected_parent=parent_pid, name=ENV_WORKER_PROCESS_NAME)
    block = SharedArrays.attach(block_name, specs)
    group = acting = None
    try:
        try:
            try:
                import_env_modules(env_modules)
            except Exception:
                raise EnvError(env_name, None, traceback.format_exc()) from None
            group = EnvGroup(env_name, indices, seed, block.arrays, max_episode_steps,
                             fatal_env_errors, time_feature, terminal_on_life_loss)
            acting = WorkerActing(group)
            conn.send_bytes(encode_reply([]))
        except EnvError as e:
            conn.send(("error", e))
            return
        while True:
            try:
                command, args = decode_request(conn.recv_bytes())
            except EOFError:
                return
            if command is EnvCommand.CLOSE:
                return
            try:
                runner = acting if command in ACTING_COMMANDS else group
                conn.send_bytes(encode_reply(runner.run(command, args)))
            except EnvError as e:
                conn.send(("error", e))
    finally:
        if acting is not None:
            acting.close()
        if group is not None:
            group.close()
        block.close()
        conn.close()


@dataclass
class _Worker:
    """The batch's handle on one env-worker process: the process, its pipe and
    the envs (global indices) it steps."""

    process: object
    conn: object
    indices: List[int]
    seed: int
    # When this worker replaced a dead one: the splits that were in flight (no
    # reply will come for them), the splits whose envs it reset while the
    # caller held their observations (their next step drops the episode), and
    # why its predecessor died.
    lost_splits: Set[int] = field(default_factory=set)
    reset_splits: Set[int] = field(default_factory=set)
    lost_reason: str = ""
    _poller: Optional[select.poll] = None

    def readable(self, timeout_s: float) -> bool:
        """Whether a reply is waiting in the pipe, waiting up to ``timeout_s``
        (``conn.poll`` without building a selector on every call: the batch
        asks this once per group and step)."""
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.conn.fileno(), select.POLLIN)
        return bool(self._poller.poll(int(timeout_s * 1000)))

    @classmethod
    def start(cls, block: SharedArrays, specs: Dict[str, ArraySpec], env_name: str,
              indices: List[int], seed: int, max_episode_steps: Optional[int],
              time_feature: bool, terminal_on_life_loss: bool, fatal_env_errors: bool,
              env_modules: Sequence[str]) -> "_Worker":
        """Start an env-worker process for envs ``indices`` of ``block``; its
        first reply (``receive``) says whether it built its envs."""
        ctx = env_worker_context()
        parent_conn, child_conn = ctx.Pipe()
        proc = ctx.Process(
            target=_worker_main, daemon=True, name="alf_async-env-worker",
            args=(child_conn, block.name, specs, env_name, indices, seed, max_episode_steps,
                  time_feature, terminal_on_life_loss, fatal_env_errors, os.getpid(),
                  tuple(env_modules)))
        proc.start()
        child_conn.close()
        return cls(proc, parent_conn, indices, seed)

    def receive(self, env_name: str, timeout_s: float) -> List[Tuple[int, str]]:
        """The worker's reply: the (env index, reason) failures of its envs.
        Raises the worker's ``EnvError``, or ``_WorkerLost`` if the process
        died, closed its pipe or gave no answer within ``timeout_s`` seconds."""
        proc, conn, indices = self.process, self.conn, self.indices
        deadline = time.monotonic() + timeout_s
        where = f"env-worker process {proc.pid} (envs {indices[0]}..{indices[-1]})"
        while not self.readable(0.2):
            if not proc.is_alive():
                raise _WorkerLost(env_name, None,
                                  f"{where} died with {describe_exit(proc.exitcode)}")
            if time.monotonic() > deadline:
                raise _WorkerLost(env_name, None,
                                  f"{where} gave no answer in {timeout_s:.0f} s")
        try:
            status, payload = decode_reply(conn.recv_bytes())
        except (EOFError, ConnectionResetError, OSError):
            proc.join(1.0)
            raise _WorkerLost(env_name, None,
                              f"{where} closed its pipe ({describe_exit(proc.exitcode)})"
                              ) from None
        if status == "error":
            raise payload
        return payload


def stop_workers(workers: Sequence[_Worker], grace_s: float) -> None:
    """Ask ``workers`` to close, give them ``grace_s`` seconds to exit (then
    terminate or kill them) and close their pipes."""
    for worker in workers:
        try:
            worker.conn.send_bytes(encode_request(EnvCommand.CLOSE))
        except (BrokenPipeError, OSError):
            pass
    if workers:
        stop_processes([w.process for w in workers], grace_s=grace_s)
        for worker in workers:
            worker.conn.close()

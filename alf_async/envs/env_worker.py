"""The env-worker process: its entry point ``_worker_main``, which serves the
commands of a ``BatchedEnv`` with an ``EnvGroup`` of its envs, and ``_Worker``,
the batch's handle on one such process.

``_worker_main`` is a process target of 'fork' and 'spawn' contexts
(``utils.process.env_worker_context``), so it stays a module-level function.
"""

from __future__ import annotations

import select
import signal
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set

from alf_async.envs.env_errors import EnvError
from alf_async.envs.env_group import EnvGroup
from alf_async.envs.gym_env import import_env_modules
from alf_async.envs.worker_protocol import EnvCommand, decode_request, encode_reply
from alf_async.utils.process import ENV_WORKER_PROCESS_NAME, init_child_process
from alf_async.utils.shared_memory import ArraySpec, SharedArrays


def _worker_main(conn, block_name: str, specs: Dict[str, ArraySpec], env_name: str,
                 indices: List[int], seed: int, max_episode_steps: Optional[int],
                 time_feature: bool, fatal_env_errors: bool, parent_pid: int,
                 env_modules: Sequence[str]) -> None:
    """Entry point of an env-worker process: serve commands until ``CLOSE``.

    A request is (EnvCommand, args); the reply is ("ok", failures) or
    ("error", EnvError), both in the wire format of ``encode_request`` /
    ``encode_reply``.
    """
    init_child_process(signal.SIGKILL, expected_parent=parent_pid, name=ENV_WORKER_PROCESS_NAME)
    block = SharedArrays.attach(block_name, specs)
    group = None
    try:
        try:
            try:
                import_env_modules(env_modules)
            except Exception:
                raise EnvError(env_name, None, traceback.format_exc()) from None
            group = EnvGroup(env_name, indices, seed, block.arrays, max_episode_steps,
                             fatal_env_errors, time_feature)
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
                conn.send_bytes(encode_reply(group.run(command, args)))
            except EnvError as e:
                conn.send(("error", e))
    finally:
        if group is not None:
            group.close()
        block.close()
        conn.close()


@dataclass
class _Worker:
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

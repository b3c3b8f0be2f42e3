"""A batch of K environments with auto-reset, stepped in-process or in W workers.

``BatchedEnv`` steps K copies of one gymnasium env. With ``num_workers = 0`` it
steps them in the calling process; with W >= 1 it splits them into W contiguous
groups, each stepped by an env-worker process. Observations, actions, rewards and
done flags are exchanged through one shared-memory block; the pipes to the workers
carry only one-word commands and short replies. Both paths run the same
``EnvGroup`` code, so they give identical results for the same seeds and actions.

Auto-reset: when env k terminates or is truncated at a step, the step returns the
observation that ended the episode in ``final_observation[k]`` and the first
observation of the next episode in ``observation[k]``. Env k is seeded with
``seed + k`` at its first reset and continues its own RNG after that.

Shapes: K = num_envs, O = observation_dim, A = action_dim.
"""

from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from alf_async.envs.gym_env import env_dims, make_env, quiet_stdout
from alf_async.runtime.shared_memory import ArraySpec, SharedArrays
from alf_async.utils.process import describe_exit, init_child_process, mp_context


class EnvError(RuntimeError):
    """An environment raised in step or reset, or its worker process died.

    Attributes:
        env_name: the gymnasium id.
        env_index: index k of the failing env inside the batch (None if unknown).
        details: the env's traceback or the worker's exit status.
    """

    def __init__(self, env_name: str, env_index: Optional[int], details: str):
        self.env_name = env_name
        self.env_index = env_index
        self.details = details
        where = f"env {env_index}" if env_index is not None else "an env"
        super().__init__(f"{where} of {env_name} failed:\n{details}")

    def __reduce__(self):
        return (EnvError, (self.env_name, self.env_index, self.details))


@dataclass
class StepResult:
    """What one batched step returns (copies, safe to keep).

    observation: [K, O] float32, first observation of a new episode where done.
    reward: [K] float32.
    terminated: [K] bool, the episode ended in a terminal state.
    truncated: [K] bool, the episode was cut by a time limit (and not terminated).
    final_observation: [K, O] float32, the last observation of the finished
        episode where ``terminated | truncated``; unspecified elsewhere.
    """

    observation: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_observation: np.ndarray


def batch_specs(num_envs: int, obs_dim: int, action_dim: int) -> Dict[str, ArraySpec]:
    """Specs of the arrays a BatchedEnv shares with its workers."""
    return {
        "observation": ArraySpec((num_envs, obs_dim), "float32"),
        "final_observation": ArraySpec((num_envs, obs_dim), "float32"),
        "action": ArraySpec((num_envs, action_dim), "float32"),
        "reward": ArraySpec((num_envs,), "float32"),
        "terminated": ArraySpec((num_envs,), "bool"),
        "truncated": ArraySpec((num_envs,), "bool"),
    }


class EnvGroup:
    """Envs ``indices`` of a batch, reading actions from and writing results to
    the batch arrays (shared or private). Used by workers and by W = 0."""

    def __init__(self, env_name: str, indices: Sequence[int], seed: int,
                 arrays: Dict[str, np.ndarray], max_episode_steps: Optional[int] = None):
        self.env_name = env_name
        self.indices = list(indices)
        self.seed = seed
        self.arrays = arrays
        self.max_episode_steps = max_episode_steps
        self.envs = {}
        for k in self.indices:
            self.envs[k] = self._guard(k, lambda: make_env(env_name, max_episode_steps=max_episode_steps))

    def _guard(self, k: int, fn):
        try:
            return fn()
        except Exception:
            raise EnvError(self.env_name, k, traceback.format_exc()) from None

    def reset(self) -> None:
        obs = self.arrays["observation"]
        with quiet_stdout():  # PyBullet prints 'argv[0]=' when it connects
            for k, env in self.envs.items():
                obs[k] = self._guard(k, lambda: env.reset(seed=self.seed + k))
        self.arrays["terminated"][self.indices] = False
        self.arrays["truncated"][self.indices] = False

    def step(self) -> None:
        a = self.arrays
        for k, env in self.envs.items():
            o, r, term, trunc, _ = self._guard(k, lambda: env.step(a["action"][k]))
            a["reward"][k] = r
            a["terminated"][k] = term
            a["truncated"][k] = trunc and not term
            if term or trunc:
                a["final_observation"][k] = o
                o = self._guard(k, env.reset)
            a["observation"][k] = o

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:
                pass
        self.envs = {}


def _worker_main(conn, block_name: str, specs: Dict[str, ArraySpec], env_name: str,
                 indices: List[int], seed: int, max_episode_steps: Optional[int],
                 parent_pid: int) -> None:
    """Entry point of an env-worker process: serve commands until 'close'."""
    init_child_process(signal.SIGKILL, expected_parent=parent_pid)
    block = SharedArrays.attach(block_name, specs)
    group = None
    try:
        try:
            group = EnvGroup(env_name, indices, seed, block.arrays, max_episode_steps)
            conn.send(("ok", None))
        except EnvError as e:
            conn.send(("error", e))
            return
        while True:
            try:
                command = conn.recv()
            except EOFError:
                return
            if command == "close":
                return
            try:
                getattr(group, command)()
                conn.send(("ok", None))
            except EnvError as e:
                conn.send(("error", e))
    finally:
        if group is not None:
            group.close()
        block.close()
        conn.close()


class BatchedEnv:
    """K envs of one id behind one batched step.

    Args:
        env_name: gymnasium id.
        num_envs: K >= 1.
        num_workers: W env-worker processes (0 steps the envs in this process).
            W may not exceed K.
        seed: env k is seeded with ``seed + k`` at its first reset.
        max_episode_steps: override of the id's time limit (None keeps it).
        worker_timeout_s: a worker that neither answers nor dies within this many
            seconds of a command is reported as hung.
    """

    def __init__(self, env_name: str, num_envs: int, num_workers: int = 0,
                 seed: int = 0, max_episode_steps: Optional[int] = None,
                 worker_timeout_s: float = 300.0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if not 0 <= num_workers <= num_envs:
            raise ValueError(
                f"num_workers must be in [0, num_envs={num_envs}], got {num_workers}")
        self.env_name = env_name
        self.num_envs = num_envs
        self.num_workers = num_workers
        self.seed = seed
        self.worker_timeout_s = worker_timeout_s
        obs_dim, action_dim, limit = env_dims(env_name)
        self.observation_dim = obs_dim
        self.action_dim = action_dim
        self.max_episode_steps = max_episode_steps or limit
        specs = batch_specs(num_envs, obs_dim, action_dim)
        self._block: Optional[SharedArrays] = None
        self._group: Optional[EnvGroup] = None
        self._workers: List[Tuple[object, object, List[int]]] = []
        self._episode_return = np.zeros(num_envs, np.float64)
        self._episode_length = np.zeros(num_envs, np.int64)
        self._finished: List[Tuple[float, int]] = []
        try:
            if num_workers == 0:
                self.arrays = {k: np.zeros(s.shape, s.dtype) for k, s in specs.items()}
                self._group = EnvGroup(env_name, range(num_envs), seed, self.arrays,
                                       max_episode_steps)
            else:
                self._block = SharedArrays.create(specs, tag="env")
                self.arrays = self._block.arrays
                self._start_workers(specs, max_episode_steps)
        except BaseException:
            self.close()
            raise

    def _start_workers(self, specs, max_episode_steps) -> None:
        import os

        ctx = mp_context()
        groups = np.array_split(np.arange(self.num_envs), self.num_workers)
        for indices in groups:
            parent_conn, child_conn = ctx.Pipe()
            proc = ctx.Process(
                target=_worker_main, daemon=True, name=f"alf_async-env-worker",
                args=(child_conn, self._block.name, specs, self.env_name,
                      [int(i) for i in indices], self.seed, max_episode_steps,
                      os.getpid()))
            proc.start()
            child_conn.close()
            self._workers.append((proc, parent_conn, [int(i) for i in indices]))
        for worker in self._workers:
            self._receive(worker)

    @property
    def worker_pids(self) -> List[int]:
        return [proc.pid for proc, _, _ in self._workers]

    def _receive(self, worker) -> None:
        proc, conn, indices = worker
        deadline = time.monotonic() + self.worker_timeout_s
        while not conn.poll(0.5):
            if not proc.is_alive():
                raise EnvError(self.env_name, None,
                               f"env-worker process {proc.pid} (envs {indices[0]}.."
                               f"{indices[-1]}) died with {describe_exit(proc.exitcode)}")
            if time.monotonic() > deadline:
                raise EnvError(self.env_name, None,
                               f"env-worker process {proc.pid} gave no answer in "
                               f"{self.worker_timeout_s:.0f} s")
        try:
            status, payload = conn.recv()
        except (EOFError, ConnectionResetError):
            proc.join(1.0)
            raise EnvError(self.env_name, None,
                           f"env-worker process {proc.pid} closed its pipe "
                           f"({describe_exit(proc.exitcode)})") from None
        if status == "error":
            raise payload

    def _run(self, command: str) -> None:
        if self._group is not None:
            getattr(self._group, command)()
            return
        for _, conn, _ in self._workers:
            try:
                conn.send(command)
            except (BrokenPipeError, OSError):
                pass  # _receive reports the dead worker
        for worker in self._workers:
            self._receive(worker)

    def reset(self) -> np.ndarray:
        """Reset all envs with their seeds; returns observation [K, O]."""
        self._run("reset")
        self._episode_return[:] = 0
        self._episode_length[:] = 0
        return self.arrays["observation"].copy()

    def step(self, action: np.ndarray) -> StepResult:
        """Step all envs with ``action`` [K, A] in [-1, 1] (clipped)."""
        self.arrays["action"][:] = action
        self._run("step")
        a = self.arrays
        reward = a["reward"].copy()
        terminated = a["terminated"].copy()
        truncated = a["truncated"].copy()
        self._episode_return += reward
        self._episode_length += 1
        for k in np.flatnonzero(terminated | truncated):
            self._finished.append((float(self._episode_return[k]),
                                   int(self._episode_length[k])))
            self._episode_return[k] = 0.0
            self._episode_length[k] = 0
        return StepResult(a["observation"].copy(), reward, terminated, truncated,
                          a["final_observation"].copy())

    def pop_finished_episodes(self) -> List[Tuple[float, int]]:
        """(return, length) of the episodes finished since the last call."""
        finished, self._finished = self._finished, []
        return finished

    def close(self) -> None:
        """End the workers and release the shared memory. Safe to call twice."""
        if self._group is not None:
            self._group.close()
            self._group = None
        for proc, conn, _ in self._workers:
            try:
                conn.send("close")
            except (BrokenPipeError, OSError):
                pass
        if self._workers:
            from alf_async.utils.process import stop_processes

            stop_processes([w[0] for w in self._workers], grace_s=3.0)
            for _, conn, _ in self._workers:
                conn.close()
        self._workers = []
        if self._block is not None:
            self._block.close()
            self._block = None

    def __enter__(self) -> "BatchedEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

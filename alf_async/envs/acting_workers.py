"""Env workers that act for their own envs: one request per unroll, not per step.

With ``Trainer.acting_env_workers`` (the default) an actor with W >= 1 env
workers and a policy that has a numpy copy (``NeuralPolicy.acting_copy``:
feed-forward networks on vector observations) hands each worker that copy
(``algorithms.acting_policy.ActingPolicy``; new weights once per weights
version) and, per unroll, one request: "unroll rows t0 .. T - 1". The worker
then acts for its envs, steps them and writes every step into a shared rollout
block, group by group, without a message to the actor until it is done. On a
machine with as many cores as workers, the actor no longer takes a core's time
slices from the workers at every step (its wake-ups, pipe round trips and
inference ran beside the two workers on 2 cores: three busy processes on two
cores), so sync sampling comes close to the machine's raw stepping rate
(docs/async_guide.md).

A worker acts for its groups of envs (``BatchedEnv.splits``: with S >= 2 its
envs in each split) from the groups' sampling streams, the same calls the actor
would make, so the trajectories are the same as when the actor acts
(tests/test_acting_workers.py) wherever each group is one worker's (W = 1, or
S >= 2). With S = 1 and W >= 2 a group spans workers; each worker then samples
its part from a stream of its own.

The rollout block (``worker_acting.rollout_specs``; T = unroll_length, K = num_envs):

- observation [T + 1, K, *O]: row t the observation acted on at step t; the
  batch writes row t0 before a request, the worker row t + 1 after each step;
- final_observation [R, K, *O] and final_observation_row [T, K] int8: the
  final observations of time-limit truncations, as in a trajectory
  (``runtime.trajectory``);
- action [T, K, A], log_prob, value, reward, truncation_value [T, K] float32
  (truncation_value: V(final observation) where truncated, else 0);
- terminated, truncated, env_failed, life_lost [T, K] bool;
- progress [K] int64: the rows of env k written in this unroll;
- act_s [K] float64: seconds worker w spent in its policy this unroll, at the
  index of its first env (0 elsewhere).

Failures: an env that raises is recreated by the worker as in a plain step (a
failed truncation, reported with the reply). A worker that dies or makes no
progress for ``worker_timeout_s`` is replaced: its envs' step in progress
becomes a failed truncation (reward 0, acted on by the batch's own copy of the
policy), the new worker's envs start new episodes at the next row, and it
unrolls the rows that are left.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

import numpy as np

from alf_async.envs.env_errors import EnvError, _WorkerLost
from alf_async.envs.step_groups import AnswerPoller
from alf_async.envs.worker_acting import WorkerGroups, rollout_specs
from alf_async.envs.worker_protocol import EnvCommand, encode_request
from alf_async.utils.shared_memory import SharedArrays

if TYPE_CHECKING:  # for type hints only
    from alf_async.envs.batched_env import BatchedEnv


class ActingWorkers:
    """The batch's side: the rollout block and the unroll requests to the
    workers of ``env`` (a ``BatchedEnv`` with W >= 1; its package-internal
    worker handles are used directly).

    Args:
        env: the batch whose workers act.
        unroll_length: T, rows per unroll.
        policy: the ``algorithms.acting_policy.ActingPolicy`` the workers act
            with (copied to each; this layer only calls its ``act``, ``value``,
            ``load`` and ``reseed``); the batch keeps it to act for the envs of
            a worker that died mid-step.
    """

    def __init__(self, env: "BatchedEnv", unroll_length: int, policy):
        if env.num_workers < 1:
            raise ValueError("acting env workers need num_workers >= 1")
        self.env = env
        self.unroll_length = unroll_length
        self.policy = policy
        self._specs = rollout_specs(unroll_length, env.num_envs, env.observation_spec,
                                    env.action_dim)
        self.block = SharedArrays.create(self._specs, tag="rollout")
        self._answers = AnswerPoller()
        num_groups = len(env._groups)
        self._groups: List[WorkerGroups] = [[] for _ in env._workers]
        for g, (positions, split) in enumerate(env._groups):
            for p in positions:
                stream = g if len(positions) == 1 else num_groups + p * env.num_splits + split
                self._groups[p].append((stream, (split, env.num_splits)))
        self._envs = [np.asarray(w.indices, np.int64) for w in env._workers]
        self._unrolling = False  # requests out (the workers read no other command)
        try:
            for p in range(len(env._workers)):
                self._setup(p)
        except BaseException:
            self.close()
            raise

    @property
    def arrays(self) -> Dict[str, np.ndarray]:
        return self.block.arrays

    def _request(self, position: int, command: EnvCommand, *args) -> None:
        try:
            self.env._workers[position].conn.send_bytes(encode_request(command, args))
        except (BrokenPipeError, OSError):
            pass  # reported when its reply is collected

    def _setup(self, position: int) -> None:
        self._request(position, EnvCommand.ACT_SETUP, self.block.name, self._specs,
                      self._groups[position], self.policy)
        self.env._receive(self.env._workers[position])

    def _everyone(self, command: EnvCommand, *args) -> None:
        """Send ``command`` to every worker and collect the replies; a worker
        found dead is replaced (its envs' episodes dropped)."""
        for p in range(len(self.env._workers)):
            self._request(p, command, *args)
        for p, worker in enumerate(list(self.env._workers)):
            try:
                self.env._receive(worker)
            except _WorkerLost as e:
                self._fail_or_replace(p, e)

    def _fail_or_replace(self, position: int, error: _WorkerLost) -> None:
        if self.env.fatal_env_errors:
            raise EnvError(error.env_name, error.env_index, error.details) from None
        self.env._note_failures(self.env._replace_worker(position, error))
        self._setup(position)

    def load_weights(self, weights) -> None:
        """New weights (``ActingWeights``) for every worker's policy copy."""
        self.policy.load(weights)
        self._everyone(EnvCommand.ACT_WEIGHTS, weights)

    def reseed(self, seed: int) -> None:
        """Restart the sampling streams of every worker's policy from ``seed``."""
        self.policy.reseed(seed)
        self._everyone(EnvCommand.ACT_RESEED, seed)

    def unroll(self, on_wait: Optional[Callable[[], None]] = None
               ) -> Tuple[Dict[str, np.ndarray], float]:
        """Have every worker unroll all T rows; returns the rollout arrays (the
        block's, valid until the next call) and the workers' mean seconds in
        their policies. The batch's episode statistics, failures and last
        observations are updated as by T plain steps. ``on_wait`` is called
        at least every 0.2 s while the workers run."""
        env, r, T = self.env, self.block.arrays, self.unroll_length
        r["progress"][:] = 0
        r["act_s"][:] = 0.0
        r["final_observation"][:] = 0  # rows no truncation fills stay 0
        r["observation"][0] = env.arrays["observation"]
        pending: Dict[int, Tuple[int, float]] = {}  # position -> (progress, when it moved)
        failures: List[Tuple[int, str]] = []
        self._unrolling = True
        for p in range(len(env._workers)):
            self._request(p, EnvCommand.ACT_UNROLL, 0, T)
            pending[p] = (0, time.monotonic())
        while pending:
            workers = env._workers
            for p in self._answers.answered(workers, 0.2) & set(pending):
                del pending[p]
                try:
                    failures += env._receive(workers[p])
                except _WorkerLost as e:
                    self._resume_after_loss(p, e, pending, failures)
            now = time.monotonic()
            for p, (seen, since) in list(pending.items()):
                done = int(r["progress"][self._envs[p][0]])
                if done != seen:
                    pending[p] = (done, now)
                elif now - since > env.worker_timeout_s:
                    worker = env._workers[p]
                    del pending[p]
                    self._resume_after_loss(p, _WorkerLost(
                        env.env_name, None,
                        f"env-worker process {worker.process.pid} (envs {worker.indices[0]}.."
                        f"{worker.indices[-1]}) made no progress in "
                        f"{env.worker_timeout_s:.0f} s"), pending, failures)
            if on_wait is not None:
                on_wait()
        self._unrolling = False
        env.record_unroll(r["reward"], r["terminated"], r["truncated"], r["env_failed"],
                          r["life_lost"], r["observation"][T], failures)
        return r, float(r["act_s"].sum()) / len(env._workers)

    def _resume_after_loss(self, position: int, error: _WorkerLost,
                           pending: Dict[int, Tuple[int, float]],
                           failures: List[Tuple[int, str]]) -> None:
        """The worker at ``position`` died (or hung) during the unroll: its
        envs' step in progress becomes a failed truncation, a new worker
        takes over and unrolls the rows that are left."""
        env, r, T = self.env, self.block.arrays, self.unroll_length
        if env.fatal_env_errors:
            raise EnvError(error.env_name, error.env_index, error.details) from None
        envs = self._envs[position]
        t = min(int(r["progress"][envs].min()), T - 1)
        obs = r["observation"][t, envs]  # the last good observation of each env
        action, log_prob, value = self.policy.act(obs, envs, self._groups[position][0][0])
        r["action"][t, envs], r["log_prob"][t, envs], r["value"][t, envs] = \
            action, log_prob, value
        r["reward"][t, envs] = 0.0
        r["terminated"][t, envs] = False
        r["truncated"][t, envs] = True
        r["env_failed"][t, envs] = True
        r["life_lost"][t, envs] = False
        r["truncation_value"][t, envs] = self.policy.value(obs)
        r["final_observation_row"][t, envs] = -1  # a failed step: no final observation
        failures += env._replace_worker(position, error)
        r["observation"][t + 1, envs] = env.arrays["observation"][envs]
        r["progress"][envs] = t + 1
        self._setup(position)
        if t + 1 < T:
            self._request(position, EnvCommand.ACT_UNROLL, t + 1, T)
            pending[position] = (t + 1, time.monotonic())

    def close(self) -> None:
        """Release the rollout block (the workers detach when they end); call
        before the batch's ``close``. Workers still unrolling (the actor was
        stopped or failed mid-unroll) get SIGTERM now: they would read the
        batch's CLOSE only after their last row. Safe to call twice."""
        if self._unrolling:
            for worker in self.env._workers:
                if worker.process.is_alive():
                    worker.process.terminate()
            self._unrolling = False
        if self.block is not None:
            self.block.close()
            self.block = None

"""A batch of K environments with auto-reset, stepped in-process or in W workers.

``BatchedEnv`` steps K copies of one gymnasium env. With ``num_workers = 0`` it
steps them in the calling process; with W >= 1 it splits them into W contiguous
groups, each stepped by an env-worker process. Observations, actions, rewards and
done flags are exchanged through one shared-memory block; the pipes to the workers
carry only commands and short replies (a step is three bytes out and one back). Both paths run the same
``EnvGroup`` code, so they give identical results for the same seeds and actions.

Auto-reset: when env k terminates or is truncated at a step, the step returns the
observation that ended the episode in ``final_observation[k]`` and the first
observation of the next episode in ``observation[k]``. Env k is seeded with
``seed + k`` at its first reset and continues its own RNG after that.

Failures: if an env raises in step or reset, or an env-worker process dies or
hangs (found during a step, a reset or a reseed), the affected envs are
recreated (a dead worker is restarted) with fresh seeds and their current
episodes are dropped: the failing step is returned as a
truncation with reward 0 whose final observation is the last good one, the
episode is not reported in ``pop_finished_episodes``, and the failure (env index
and traceback) is reported by ``pop_failures``. With ``fatal_env_errors`` the
failure raises ``EnvError`` instead.

Shapes: K = num_envs, O = the observation's shape (``observation_spec``), A = action_dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from alf_async.envs.env_errors import EnvError, _WorkerLost
from alf_async.envs.env_group import EnvGroup
from alf_async.envs.env_worker import _Worker, stop_workers
from alf_async.envs.episode_book import EpisodeBook
from alf_async.envs.gym_env import env_spec, import_env_modules
from alf_async.envs.step_groups import AnswerPoller, first_ready, split_groups
from alf_async.envs.worker_protocol import EnvCommand, batch_specs, encode_request
from alf_async.utils.shared_memory import SharedArrays
from alf_async.utils.seeding import derive_seed


@dataclass
class StepResult:
    """What one batched step returns (copies, safe to keep).

    observation: [K, *O] (``ObservationSpec``), first observation of a new
        episode where done.
    reward: [K] float32.
    terminated: [K] bool, the episode ended in a terminal state.
    truncated: [K] bool, the episode was cut by a time limit (and not terminated).
    final_observation: [K, *O], the last observation of the finished
        episode where ``terminated | truncated``; unspecified elsewhere.
    env_failed: [K] bool, the env failed in this step and was recreated: the
        step is not a real transition (reward 0, truncated, final observation
        the last good one).
    """

    observation: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_observation: np.ndarray
    env_failed: np.ndarray


# The commands during which a worker found dead is replaced (when env errors
# are not fatal): a step, and the resets, after which every env starts a new
# episode anyway (a worker killed between a step and a reseed is found there).
_REPLACEABLE_DURING = frozenset({EnvCommand.STEP, EnvCommand.RESET, EnvCommand.SET_SEED})


class BatchedEnv:
    """K envs of one id behind one batched step.

    Args:
        env_name: gymnasium id.
        num_envs: K >= 1.
        num_workers: W env-worker processes (0 steps the envs in this process).
            W may not exceed K.
        seed: env k is seeded with ``seed + k`` at its first reset.
        max_episode_steps: override of the id's time limit (None keeps it).
        time_feature: append t / time limit to each observation (see
            ``gym_env.make_env``).
        terminal_on_life_loss: an Atari game's lost life ends the episode for
            the learner (``terminated``) but not for the episode statistics,
            which count whole games (see ``gym_env.make_env``).
        fatal_env_errors: raise ``EnvError`` when an env fails instead of
            recreating it and dropping its episode.
        worker_timeout_s: a worker that neither answers nor dies within this many
            seconds of a command is treated as dead.
        env_modules: modules the env-worker processes import before making their
            envs (modules that register the env id, e.g. a gin config's imports).
        num_splits: S >= 1: split s holds the envs k with k % S == s, so every
            worker holds envs of every split (each worker needs at least S
            envs). The caller steps the envs group by group (``splits``, laid
            out by ``split_groups``; ``step_send`` / ``step_receive``) and
            computes a group's next actions as soon as its worker answers,
            while the workers step their other groups: no worker waits for
            another (double-buffered sampling). ``step`` steps every env at once.
        wait_for_workers: return only once every env worker has built its envs
            (True), or at once, leaving that wait to ``wait_for_workers()`` or
            the first command, so that the caller can do its own start-up work
            while the workers start.
    """

    def __init__(self, env_name: str, num_envs: int, num_workers: int = 0,
                 seed: int = 0, max_episode_steps: Optional[int] = None,
                 fatal_env_errors: bool = False, worker_timeout_s: float = 60.0,
                 time_feature: bool = False, terminal_on_life_loss: bool = False,
                 env_modules: Sequence[str] = (), num_splits: int = 1,
                 wait_for_workers: bool = True):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if not 0 <= num_workers <= num_envs:
            raise ValueError(
                f"num_workers must be in [0, num_envs={num_envs}], got {num_workers}")
        if num_splits < 1 or num_envs // max(num_workers, 1) < num_splits:
            raise ValueError(
                f"num_splits={num_splits} needs at least that many envs per env worker "
                f"(num_envs={num_envs}, num_workers={num_workers})")
        self.num_splits = num_splits
        self.splits, self._groups = split_groups(num_envs, num_workers, num_splits)
        ranges = np.array_split(np.arange(num_envs), max(num_workers, 1))
        self._in_flight: Dict[int, bool] = {}  # groups sent and not yet received
        self._answers = AnswerPoller()  # which workers have answered (next_ready)
        self._starting = False  # workers started, their envs not yet confirmed built
        self._group_failures: Dict[int, List[Tuple[int, str]]] = {}  # W = 0
        self.env_name = env_name
        self.num_envs = num_envs
        self.num_workers = num_workers
        self.seed = seed
        self.fatal_env_errors = fatal_env_errors
        self.time_feature = time_feature
        self.terminal_on_life_loss = terminal_on_life_loss
        self.worker_timeout_s = worker_timeout_s
        self.env_modules = tuple(env_modules)
        import_env_modules(self.env_modules)
        obs, self.action_spec, limit = env_spec(env_name, max_episode_steps, time_feature,
                                                terminal_on_life_loss)
        action_dim = self.action_spec.dim
        self.observation_spec = obs
        self.observation_dim = obs.dim
        self.action_dim = action_dim
        self.max_episode_steps = max_episode_steps or limit
        self._max_episode_steps_override = max_episode_steps
        self._specs = batch_specs(num_envs, obs, action_dim)
        self._block: Optional[SharedArrays] = None
        self._group: Optional[EnvGroup] = None
        self._workers: List[_Worker] = []
        self._worker_restarts = 0
        self.episodes = EpisodeBook(num_envs)
        self._last_observation = np.zeros((num_envs,) + obs.shape, obs.dtype)
        try:
            if num_workers == 0:
                self.arrays = {k: np.zeros(v.shape, v.dtype) for k, v in self._specs.items()}
                self._group = EnvGroup(env_name, range(num_envs), seed, self.arrays,
                                       max_episode_steps, fatal_env_errors, time_feature,
                                       terminal_on_life_loss)
            else:
                self._block = SharedArrays.create(self._specs, tag="env")
                self.arrays = self._block.arrays
                self._workers = [self._start_worker([int(i) for i in g], seed) for g in ranges]
                self._starting = True
                if wait_for_workers:
                    self.wait_for_workers()
        except BaseException:
            self.close()
            raise

    def wait_for_workers(self) -> None:
        """Wait until every env worker has built its envs (raises EnvError if one
        failed). Done by the constructor unless ``wait_for_workers=False``, and
        by the first command otherwise."""
        if self._starting:
            for worker in self._workers:
                self._receive(worker)
            self._starting = False

    # -- workers --------------------------------------------------------------
    def _start_worker(self, indices: List[int], seed: int) -> _Worker:
        return _Worker.start(self._block, self._specs, self.env_name, indices, seed,
                             self._max_episode_steps_override, self.time_feature,
                             self.terminal_on_life_loss, self.fatal_env_errors, self.env_modules)

    @property
    def worker_pids(self) -> List[int]:
        return [w.process.pid for w in self._workers]

    def _receive(self, worker: _Worker) -> List[Tuple[int, str]]:
        """The reply of ``worker``; raises EnvError if it died, hung or failed."""
        return worker.receive(self.env_name, self.worker_timeout_s)

    def _replace_worker(self, position: int, error: EnvError, split: Optional[int] = None,
                        other_splits: Sequence[int] = ()) -> List[Tuple[int, str]]:
        """Restart a lost worker with fresh seeds; its envs' episodes are dropped.

        The replacement resets all its envs. The envs of ``split`` (all of the
        worker's envs if None) are returned as failed truncations now; those of
        ``other_splits`` (also in flight when the worker died) when their split
        is collected; those of the remaining splits (between a step_receive and
        the next step_send, so the caller holds their old observations) at
        their next step.
        """
        old = self._workers[position]
        stop_workers([old], grace_s=0.5)
        self._worker_restarts += 1
        seed = derive_seed(self.seed, old.indices[0], 1_000_000 + self._worker_restarts)
        worker = self._start_worker(old.indices, seed)
        self._workers[position] = worker
        self._receive(worker)
        worker.conn.send_bytes(encode_request(EnvCommand.RESET))
        self._receive(worker)
        worker.lost_splits = set(other_splits)
        if split is not None:
            worker.reset_splits = set(range(self.num_splits)) - {split} - worker.lost_splits
        worker.lost_reason = error.details
        return self._mark_lost(old.indices, split, error.details)

    def _mark_lost(self, indices: List[int], split: Optional[int], reason: str
                   ) -> List[Tuple[int, str]]:
        """Report envs ``indices`` (those of ``split`` if given) as failed
        truncations at their last good observation."""
        idx = [k for k in indices if split is None or k % self.num_splits == split]
        a = self.arrays
        a["final_observation"][idx] = self._last_observation[idx]
        a["reward"][idx] = 0.0
        a["terminated"][idx] = False
        a["truncated"][idx] = True
        a["env_failed"][idx] = True
        a["life_lost"][idx] = False
        return [(k, reason) for k in idx]

    def _send(self, command: EnvCommand, *args,
              positions: Optional[Sequence[int]] = None) -> None:
        """Send ``command`` to the workers at ``positions`` (all when None); a
        dead worker is reported when its reply is collected."""
        self.wait_for_workers()
        request = encode_request(command, args)
        for position in range(len(self._workers)) if positions is None else positions:
            try:
                self._workers[position].conn.send_bytes(request)
            except (BrokenPipeError, OSError):
                pass

    def _collect(self, command: EnvCommand) -> List[Tuple[int, str]]:
        """Every worker's reply to ``command`` (sent for all envs)."""
        failures = []
        for position in range(len(self._workers)):
            failures += self._collect_one(position, command)
        return failures

    def _collect_one(self, position: int, command: EnvCommand, split: Optional[int] = None
                     ) -> List[Tuple[int, str]]:
        """The reply of the worker at ``position`` to ``command`` (sent for
        ``split``, or for all its envs when None); a worker lost during a step
        is replaced."""
        worker = self._workers[position]
        if split is not None and split in worker.lost_splits:
            # Its predecessor died with this split in flight: no reply comes.
            worker.lost_splits.discard(split)
            return self._mark_lost(worker.indices, split, worker.lost_reason)
        try:
            failures = self._receive(worker)
            if split is not None and split in worker.reset_splits:
                # These envs were reset when the worker was replaced, after the
                # caller had their old observations: the episode is dropped at
                # this step.
                worker.reset_splits.discard(split)
                failures += self._mark_lost(worker.indices, split, worker.lost_reason)
            return failures
        except _WorkerLost as e:
            if self.fatal_env_errors or command not in _REPLACEABLE_DURING:
                raise EnvError(e.env_name, e.env_index, e.details) from None
            # The worker's other splits still in flight: no reply will come.
            others = {self._groups[g][1] for g in self._in_flight
                      if position in self._groups[g][0]} - {split}
            return self._replace_worker(position, e, split, others)

    def _run(self, command: EnvCommand, *args) -> List[Tuple[int, str]]:
        if self._in_flight:
            raise RuntimeError(f"{command.value} while split groups {sorted(self._in_flight)} "
                               "are being stepped; call step_receive first")
        if self._group is not None:
            return self._group.run(command, args)
        self._send(command, *args)
        return self._collect(command)

    # -- the env interface ----------------------------------------------------
    def _note_failures(self, failures: List[Tuple[int, str]]) -> None:
        self.episodes.note_failures(failures)

    def reset(self) -> np.ndarray:
        """Reset all envs with their seeds; returns observation [K, O]."""
        self._note_failures(self._run(EnvCommand.RESET))
        self.episodes.restart()
        self._last_observation = self.arrays["observation"].copy()
        return self._last_observation.copy()

    def reseed(self, seed: int) -> np.ndarray:
        """Seed env k with ``seed + k`` and reset all envs (running episodes are
        dropped); returns observation [K, O]."""
        self.seed = seed
        self._note_failures(self._run(EnvCommand.SET_SEED, seed))
        self.episodes.restart()
        self._last_observation = self.arrays["observation"].copy()
        return self._last_observation.copy()

    def step(self, action: np.ndarray) -> StepResult:
        """Step all envs with ``action`` [K, A] in [-1, 1] (clipped)."""
        self.arrays["action"][:] = action
        return self._result(slice(None), self._run(EnvCommand.STEP))

    def step_send(self, group: int, action: np.ndarray) -> None:
        """Start stepping the envs of ``group`` (``self.splits[group]``, G of
        them) with ``action`` [G, A]; ``step_receive(group)`` returns the
        result. With W >= 1 this returns at once (the group's worker steps
        while the caller works; the first command also waits for the workers'
        start-up if the constructor did not); with W = 0 the envs are stepped
        here."""
        if group in self._in_flight:
            raise RuntimeError(f"split group {group} is already being stepped")
        self.arrays["action"][self.splits[group]] = action
        self._in_flight[group] = True
        positions, split = self._groups[group]
        if self._group is not None:
            self._group_failures[group] = self._group.step((split, self.num_splits))
            return
        self._send(EnvCommand.STEP, (split, self.num_splits), positions=positions)

    def next_ready(self) -> int:
        """The group in flight whose ``step_receive`` can return first, waiting
        for one if no worker has answered (``step_groups.first_ready``)."""
        if not self._in_flight:
            raise RuntimeError("no split group is being stepped (step_send first)")
        if self._group is not None:  # W = 0: stepped in step_send, in that order
            return next(iter(self._in_flight))
        return first_ready(list(self._in_flight), self._groups, self._workers,
                           self._answers, self.worker_timeout_s)

    def step_receive(self, group: int) -> StepResult:
        """Wait for the step of ``group`` started by ``step_send``; the result's
        arrays are [G, ...] in the order of ``self.splits[group]``."""
        if group not in self._in_flight:
            raise RuntimeError(f"split group {group} was not sent (step_send first)")
        positions, split = self._groups[group]
        if self._group is not None:
            failures = self._group_failures.pop(group)
        else:
            failures = []
            for position in positions:
                failures += self._collect_one(position, EnvCommand.STEP, split)
        del self._in_flight[group]
        return self._result(self.splits[group], failures)

    def _result(self, envs: slice, failures: List[Tuple[int, str]]) -> StepResult:
        """Book-keeping of a finished step of ``envs``; their StepResult."""
        a = self.arrays
        reward = a["reward"][envs].copy()
        terminated = a["terminated"][envs].copy()
        truncated = a["truncated"][envs].copy()
        failed = a["env_failed"][envs].copy()
        self.episodes.count_step(envs, reward, terminated, truncated, failed,
                                 a["life_lost"][envs])
        if failures:
            self._note_failures(failures)
        self._last_observation[envs] = a["observation"][envs]
        return StepResult(self._last_observation[envs].copy(), reward, terminated, truncated,
                          a["final_observation"][envs].copy(), failed)

    def record_unroll(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                      env_failed: np.ndarray, life_lost: np.ndarray,
                      last_observation: np.ndarray,
                      failures: List[Tuple[int, str]]) -> None:
        """The book-keeping of T steps that env workers took by themselves
        (``acting_workers``): rows [T, K] of each step's results, the
        observation [K, *O] after the last one and the failures met (each
        already a failed step in the rows)."""
        self.episodes.count_steps(reward, terminated, truncated, env_failed, life_lost)
        self.episodes.note_failures(failures, drop=False)
        self._last_observation[:] = last_observation

    def pop_finished_episodes(self) -> List[Tuple[float, int]]:
        """(return, length) of the episodes finished since the last call."""
        return self.episodes.pop_finished_episodes()

    def pop_failures(self) -> List[Tuple[int, str]]:
        """(env index, traceback or reason) of env failures since the last call."""
        return self.episodes.pop_failures()

    def close(self) -> None:
        """End the workers and release the shared memory. Safe to call twice."""
        if self._group is not None:
            self._group.close()
            self._group = None
        stop_workers(self._workers, grace_s=3.0)
        self._workers = []
        if self._block is not None:
            self._block.close()
            self._block = None

    def __enter__(self) -> "BatchedEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


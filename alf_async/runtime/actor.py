"""Actors: a policy copy unrolling a BatchedEnv into trajectory buffers.

``Actor`` does the work and is the same object whether it runs inside the
learner's process (``InProcessActorPool``) or in its own process
(``actor_process_main``, started by ``ProcessActorPool``), so both paths produce the
same trajectories for the same seeds.

The actor-process loop (ALF semantics with ``slots_per_actor = 1``):

1. wait for a free slot (the learner frees a slot after training on it and
   publishing new weights: ``ReleaseSlot``);
2. load the newest weights if their version is newer than the ones held;
3. unroll ``unroll_length`` steps of the batched env into the slot;
4. send a ``BatchReady`` message and go to 1.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from alf_async.config import gin_imports
from alf_async.envs.acting_workers import ActingWorkers
from alf_async.envs.batched_env import BatchedEnv
from alf_async.envs.env_errors import EnvError
from alf_async.envs.worker_acting import ROLLOUT_COLUMNS
from alf_async.runtime import messages
from alf_async.runtime.policy import (PolicyFactory, explores_per_env, has_sampling_streams,
                                     policy_state_size)
from alf_async.runtime.weight_store import weights_digest
from alf_async.settings import TrainerSettings
from alf_async.utils.shared_memory import ArraySpec
from alf_async.utils.process import started_by

# Seconds between heartbeats of a busy actor (see TrainerSettings.actor_timeout_s).
HEARTBEAT_INTERVAL_S = 2.0


class Actor:
    """A policy and a BatchedEnv, unrolling trajectories of [T, K].

    Args:
        actor_id: i in [0, N).
        settings: the run's settings (env, K, W, T, seeds).
        policy_factory: ``factory(observation_spec, action_spec, seed) -> Policy``.
        epoch: iteration of the checkpoint the actor's seeds derive from.
        generation: how many times actor i was restarted (seeding).
        env_modules: modules that register env ids, imported by the env workers
            too (the gin config's ``import`` lines).
    """

    def __init__(self, actor_id: int, settings: TrainerSettings,
                 policy_factory: PolicyFactory, epoch: int = 0, generation: int = 0,
                 env_modules: Sequence[str] = ()):
        self.actor_id = actor_id
        self.settings = settings
        self.generation = generation
        self.unroll_steps = 0  # env steps taken in the current unroll (t x K)
        s = settings
        # The env workers start (and import, and build their envs) while this
        # process builds its policy: the two heaviest start-up steps overlap.
        self.env = BatchedEnv(s.env_name, s.num_envs, s.num_env_workers,
                              seed=s.env_seed(actor_id, epoch, generation),
                              max_episode_steps=s.max_episode_steps,
                              time_feature=s.time_feature,
                              fatal_env_errors=s.fatal_env_errors, env_modules=env_modules,
                              num_splits=s.env_splits, wait_for_workers=False)
        try:
            self.policy = policy_factory(self.env.observation_spec, self.env.action_spec,
                                         s.policy_seed(actor_id, epoch, generation))
            self.env.wait_for_workers()
            self.version = -1
            self.digest = 0
            self._observation = self.env.reset()
            # A recurrent policy's state per env [K, S] (S = 0: feed-forward),
            # and which envs begin an episode at the next step.
            self.state_size = policy_state_size(self.policy)
            self._state = np.zeros((s.num_envs, self.state_size), np.float32)
            self._episode_start = np.ones(s.num_envs, bool)
            self._acting = self._acting_workers()
        except BaseException:
            self.env.close()
            raise

    def _acting_workers(self) -> Optional[ActingWorkers]:
        """The env workers' side of the unroll where they can act
        (``Trainer.acting_env_workers``, W >= 1, a policy with a numpy copy)."""
        s = self.settings
        if not (s.acting_env_workers and s.num_env_workers > 0 and self.state_size == 0):
            return None
        make_copy = getattr(self.policy, "acting_copy", None)
        copy = make_copy() if make_copy is not None else None
        return None if copy is None else ActingWorkers(self.env, s.unroll_length, copy)

    def reseed(self, epoch: int) -> None:
        """Reseed envs and sampling from (seed, actor, epoch) and reset the envs.

        Episodes in progress are dropped. Called at checkpoints, so that a run
        resumed from one continues exactly like the uninterrupted run.
        """
        s = self.settings
        self._observation = self.env.reseed(s.env_seed(self.actor_id, epoch, self.generation))
        self._state[:] = 0.0
        self._episode_start[:] = True
        self.env.pop_finished_episodes()
        self.policy.reseed(s.policy_seed(self.actor_id, epoch, self.generation))
        if self._acting is not None:
            self._acting.reseed(s.policy_seed(self.actor_id, epoch, self.generation))

    def load_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        self.policy.load_weights(arrays)
        if self._acting is not None:
            self._acting.load_weights(self.policy.acting_weights())
        self.version = version
        self.digest = weights_digest(arrays)

    def unroll(self, out: Dict[str, np.ndarray],
               on_step: Optional[Callable[[], None]] = None) -> messages.UnrollRecord:
        """Fill trajectory arrays ``out`` ([T, K, ...], see runtime.trajectory).

        The envs are stepped group by group (``BatchedEnv.splits``: with W >= 1
        and ``env_splits`` = S >= 2 the envs of one worker in one split, W x S
        groups; otherwise the S splits): the actions of a group for its step
        t + 1 are computed as soon as its worker has answered step t, while the
        workers step the other groups, so with W >= 1 and S >= 2 the policy's
        inference overlaps the envs' stepping, every worker always has a step
        queued and no worker waits for another. S = 1 is the plain
        act-then-step loop. A policy with sampling streams
        (``runtime.policy.has_sampling_streams``; one stream per group) is
        served in the order the workers answer (``BatchedEnv.next_ready``: a
        slow or preempted worker holds up no other group; a group may run a
        step ahead of another); any other policy in the fixed group order.
        Either way the trajectories do not depend on the workers' timing.
        ``inference_s`` is the time spent in the policy, ``env_s`` the time spent
        waiting for the envs (with S >= 2, less than their stepping time).

        ``on_step`` is called before every group's step is received;
        ``unroll_steps`` is then the env steps received so far.

        A recurrent policy (``state_size`` S > 0) acts with each env's state,
        which is zeroed where an episode ends (terminated, truncated, or the
        env failed and was recreated); the unroll's ``initial_state`` [K, S] is
        the state each env started it with and ``episode_start`` [T, K] marks
        the steps that begin an episode (the state was zero before them).
        """
        if self._acting is not None and "next_observation" not in out:
            return self._unroll_in_workers(out, on_step)
        start = time.perf_counter()
        timing = {"inference": 0.0, "env": 0.0}
        obs = self._observation  # [K, *O], updated group by group
        env, policy = self.env, self.policy
        last = self.settings.unroll_length - 1
        next_obs = out.get("next_observation")
        state = self._state  # [K, S], updated group by group
        recurrent = self.state_size > 0
        num_groups = len(env.splits)
        ready_order = has_sampling_streams(policy)
        # per group: the envs' indices (a policy that keeps exploration noise
        # per env) and the sampling stream
        call_args = [{} for _ in env.splits]
        for group, envs in enumerate(env.splits):
            if explores_per_env(policy):
                call_args[group]["env_ids"] = np.arange(self.settings.num_envs)[envs]
            if ready_order:
                call_args[group]["stream"] = group
        group_sizes = [len(range(self.settings.num_envs)[envs]) for envs in env.splits]
        if recurrent:
            out["initial_state"][:] = state
            out["episode_start"][0] = self._episode_start

        def act_and_send(group: int, t: int) -> None:
            envs = env.splits[group]
            t0 = time.perf_counter()
            split_obs = np.ascontiguousarray(obs[envs])
            if recurrent:
                action, log_prob, value, state[envs] = policy.act(split_obs, state[envs],
                                                                  **call_args[group])
            else:
                action, log_prob, value = policy.act(split_obs, **call_args[group])
            out["observation"][t, envs] = split_obs
            out["action"][t, envs] = action
            out["log_prob"][t, envs] = log_prob
            out["value"][t, envs] = value
            timing["inference"] += time.perf_counter() - t0
            env.step_send(group, action)

        for group in range(num_groups):
            act_and_send(group, 0)
        received = [0] * num_groups  # steps of each group received so far
        self.unroll_steps = 0
        for turn in range(num_groups * (last + 1)):
            if on_step is not None:
                on_step()
            t0 = time.perf_counter()
            group = env.next_ready() if ready_order else turn % num_groups
            envs, t = env.splits[group], received[group]
            result = env.step_receive(group)
            t1 = time.perf_counter()
            timing["env"] += t1 - t0
            received[group] += 1
            self.unroll_steps += group_sizes[group]
            out["reward"][t, envs] = result.reward
            out["terminated"][t, envs] = result.terminated
            out["truncated"][t, envs] = result.truncated
            truncation_value = np.zeros(len(result.reward), np.float32)
            if result.truncated.any():
                idx = np.flatnonzero(result.truncated)
                if recurrent:  # the state after acting at t, before its reset
                    truncation_value[idx] = policy.value(
                        result.final_observation[idx], state[envs][idx])
                else:
                    truncation_value[idx] = policy.value(result.final_observation[idx])
            out["truncation_value"][t, envs] = truncation_value
            if recurrent:
                ended = result.terminated | result.truncated
                state[envs] *= ~ended[:, None]
                self._episode_start[envs] = ended
                if t < last:
                    out["episode_start"][t + 1, envs] = ended
            if next_obs is not None:  # off-policy: s_{t+1} of this episode
                done = result.terminated | result.truncated
                done = done.reshape(done.shape + (1,) * (result.observation.ndim - 1))
                next_obs[t, envs] = np.where(done, result.final_observation,
                                             result.observation)
                out["env_failed"][t, envs] = result.env_failed  # not a transition
            obs[envs] = result.observation
            timing["inference"] += time.perf_counter() - t1
            if t < last:
                act_and_send(group, t + 1)
        t0 = time.perf_counter()
        out["bootstrap_value"][:] = policy.value(obs, state) if recurrent else policy.value(obs)
        timing["inference"] += time.perf_counter() - t0
        self._observation = obs
        self.unroll_steps = 0
        return messages.UnrollRecord(time.perf_counter() - start, timing["inference"],
                                     timing["env"], self.settings.steps_per_batch,
                                     self.env.pop_finished_episodes(), self.env.pop_failures())

    def _unroll_in_workers(self, out: Dict[str, np.ndarray],
                           on_step: Optional[Callable[[], None]]) -> messages.UnrollRecord:
        """``unroll`` by acting env workers (``envs.acting_workers``): they
        fill the rollout block; then it is copied into ``out``."""
        start = time.perf_counter()
        progress = self._acting.arrays["progress"]

        def on_wait() -> None:
            self.unroll_steps = int(progress.sum())
            if on_step is not None:
                on_step()

        rollout, inference_s = self._acting.unroll(on_wait)
        env_s = time.perf_counter() - start - inference_s
        last = self.settings.unroll_length
        for name in ROLLOUT_COLUMNS:
            out[name][:] = rollout[name][:last]
        self._observation = rollout["observation"][last].copy()
        out["bootstrap_value"][:] = self.policy.value(self._observation)
        self.unroll_steps = 0
        return messages.UnrollRecord(time.perf_counter() - start, inference_s, env_s,
                                     self.settings.steps_per_batch,
                                     self.env.pop_finished_episodes(), self.env.pop_failures(),
                                     acting_env_workers=True)

    def batch_message(self, slot: int, wait_s: float,
                      record: messages.UnrollRecord) -> messages.BatchReady:
        """The ``BatchReady`` announcing this actor's unroll ``record`` in ``slot``."""
        return messages.BatchReady(self.actor_id, self.generation, slot, self.version,
                                   self.digest, wait_s, time.monotonic(), record)

    def close(self) -> None:
        try:
            if self._acting is not None:
                self._acting.close()
        finally:
            self.env.close()


@dataclass
class ActorLaunch:
    """Everything an actor process is started with (picklable for spawn).

    Attributes:
        actor_id, generation, epoch: see ``Actor``.
        settings: the run's settings.
        policy_factory: builds the actor's policy, pickled (``pickle.dumps``):
            unpickling it imports its module (torch, the networks), which the
            process does only after starting its env workers.
        gin_config: gin bindings the process parses before building the policy
            (so that its networks match the learner's).
        slots_name, slot_specs: the shared trajectory slots to attach to.
        slot_indices: the slots this actor owns.
        store_name, store_specs: the weight store to attach to.
        parent_pid: the trainer's pid (the actor exits if it is gone).
    """

    actor_id: int
    generation: int
    epoch: int
    settings: TrainerSettings
    policy_factory: bytes
    gin_config: str
    slots_name: str
    slot_specs: Dict[str, ArraySpec]
    slot_indices: List[int]
    store_name: str
    store_specs: Dict[str, ArraySpec]
    parent_pid: int


def shorten_failures(record: messages.UnrollRecord, limit: int = 4000) -> None:
    """Cut the failures' tracebacks to their last ``limit`` characters."""
    record.env_failures = [(k, text[-limit:]) for k, text in record.env_failures]


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


def _wait_for_slot(conn, free: List[int], parent_pid: int, heartbeat: Callable[[], None]
                   ) -> Tuple[bool, Optional[int]]:
    """Serve learner messages until a slot is free and none is pending.

    Returns (keep running, epoch to reseed at or None).
    """
    reseed_epoch = None
    while not free or conn.poll():
        heartbeat()
        if not conn.poll(1.0):
            if not started_by(parent_pid):
                return False, None
            continue
        message = conn.recv()
        if isinstance(message, messages.StopActor):
            return False, None
        if isinstance(message, messages.ReleaseSlot):
            free.append(message.slot)
            if message.reseed_epoch is not None:
                reseed_epoch = message.reseed_epoch
    return True, reseed_epoch


def build_policy_factory(pickled_factory: bytes, gin_config: str) -> PolicyFactory:
    """A policy factory for an actor process (or Ray actor), loaded when the
    Actor first calls it (after it started its env workers): unpickle it
    (importing torch and the networks), then parse the run's gin bindings so
    that the networks match the learner's."""

    def build(observation_spec, action_spec, seed):
        import torch

        torch.set_num_threads(1)
        factory = pickle.loads(pickled_factory)
        if gin_config:
            import gin

            # Bindings of configurables this process never imports (the
            # learner, the metrics) are skipped; the networks were registered
            # by the factory's module, imported by the unpickling above.
            gin.parse_config(gin_config, skip_unknown=True)
        return factory(observation_spec, action_spec, seed)

    return build


def actor_process_main(launch: ActorLaunch, conn) -> None:
    """Entry point of an actor process; see the module docstring for the loop."""
    from alf_async.utils.process import ACTOR_PROCESS_NAME, init_child_process

    # SIGTERM (from the trainer, or when the trainer dies) ends the loop through
    # the finally clauses, which stop env workers and release shared memory.
    init_child_process(signal.SIGTERM, expected_parent=launch.parent_pid,
                       name=ACTOR_PROCESS_NAME)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    from alf_async.runtime.trajectory import TrajectorySlots
    from alf_async.runtime.weight_store import WeightStore

    actor_id, generation = launch.actor_id, launch.generation
    actor = slots = store = None
    try:
        slots = TrajectorySlots.attach(launch.slots_name, launch.slot_specs)
        store = WeightStore.attach(launch.store_name, launch.store_specs)
        actor = Actor(actor_id, launch.settings,
                      build_policy_factory(launch.policy_factory, launch.gin_config), launch.epoch,
                      generation, env_modules=gin_imports(launch.gin_config))
        conn.send(messages.ActorReady(actor_id, generation, os.getpid(),
                                      actor.env.worker_pids))
        free = list(launch.slot_indices)
        last_heartbeat = [time.monotonic()]

        def heartbeat() -> None:
            now = time.monotonic()
            if now - last_heartbeat[0] >= HEARTBEAT_INTERVAL_S:
                last_heartbeat[0] = now
                conn.send(messages.Heartbeat(actor_id, generation,
                                             actor.unroll_steps if actor else 0))

        while True:
            wait_start = time.perf_counter()
            running, reseed_epoch = _wait_for_slot(conn, free, launch.parent_pid, heartbeat)
            if not running:
                return
            slot = free.pop(0)
            if reseed_epoch is not None:
                actor.reseed(reseed_epoch)
            newer = store.read_newer(actor.version,
                                     timeout_s=None if actor.version >= 0 else 60.0)
            while newer is None and actor.version < 0:
                newer = store.read_newer(actor.version, timeout_s=60.0)
            if newer is not None:
                actor.load_weights(*newer)
            wait_s = time.perf_counter() - wait_start
            record = actor.unroll(slots.slot(slot), on_step=heartbeat)
            shorten_failures(record)
            conn.send(actor.batch_message(slot, wait_s, record))
    except (SystemExit, KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except BaseException as e:  # report every failure with its traceback
        env_index = e.env_index if isinstance(e, EnvError) else None
        try:
            conn.send(messages.ActorFailed(actor_id, generation, traceback.format_exc(),
                                           env_index))
        except (OSError, ValueError):
            print(traceback.format_exc(), file=sys.stderr)
        sys.exit(1)
    finally:
        # A SIGTERM now (the trainer stops an actor with a message and a
        # SIGTERM) must not cut the clean-up short: env workers and their
        # shared memory are released below.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for resource in (actor, slots, store):
            if resource is not None:
                try:
                    resource.close()
                except Exception:
                    pass

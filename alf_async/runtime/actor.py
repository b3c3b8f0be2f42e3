"""Actors: a policy copy unrolling a BatchedEnv into trajectory buffers.

``Actor`` does the work and is the same object whether it runs inside the
learner's process (``InProcessActorPool``), in its own process
(``runtime.actor_process``, started by ``ProcessActorPool``) or in a Ray actor
(``runtime.ray_actor``), so every path produces the same trajectories for the
same seeds.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from alf_async.envs.acting_workers import ActingWorkers
from alf_async.envs.batched_env import BatchedEnv
from alf_async.envs.final_observations import keep_final_observations
from alf_async.envs.worker_acting import ROLLOUT_COLUMNS
from alf_async.runtime import messages
from alf_async.runtime.policy import (PolicyFactory, explores_per_env, has_sampling_streams,
                                     policy_state_size)
from alf_async.runtime.weight_store import weights_digest
from alf_async.settings import TrainerSettings


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
                              terminal_on_life_loss=s.terminal_on_life_loss,
                              fatal_env_errors=s.fatal_env_errors, env_modules=env_modules,
                              num_splits=s.env_splits, wait_for_workers=False)
        try:
            self.policy = policy_factory(self.env.observation_spec, self.env.action_spec,
                                         s.policy_seed(actor_id, epoch, generation))
            self.env.wait_for_workers()
            self.version = -1
            self.digest = 0
            # (version, digest) the current or last unroll started with: its
            # batch's version (weights loaded during it come later)
            self.unroll_weights = (-1, 0)
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

    @property
    def acts_itself(self) -> bool:
        """Whether this actor acts for every step (no acting env workers)."""
        return self._acting is None

    def load_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        self.policy.load_weights(arrays)
        if self._acting is not None:
            weights = self.policy.acting_weights()
            if weights is None:  # weights the numpy copy cannot run (bfloat16)
                self._acting.close()  # this actor acts itself from now on
                self._acting = None
            else:
                self._acting.load_weights(weights)
        self.version = version
        self.digest = weights_digest(arrays)

    def unroll(self, out: Dict[str, np.ndarray],
               on_step: Optional[Callable[[], None]] = None,
               refresh: Optional[Callable[[], None]] = None) -> messages.UnrollRecord:
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
        ``unroll_steps`` is then the env steps received so far. ``refresh``
        (``Trainer.weights_mid_unroll``) is called before every group acts
        after the first step and may ``load_weights``: each step's
        ``behaviour_version`` [T, K] is the version that acted. Acting env
        workers take no weights during their unroll (``refresh`` is not
        called): their batch is one version.

        A recurrent policy (``state_size`` S > 0) acts with each env's state,
        which is zeroed where an episode ends (terminated, truncated, or the
        env failed and was recreated); the unroll's ``initial_state`` [K, S] is
        the state each env started it with and ``episode_start`` [T, K] marks
        the steps that begin an episode (the state was zero before them).
        """
        self.unroll_weights = (self.version, self.digest)
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
        env_ids = [np.arange(self.settings.num_envs)[envs] for envs in env.splits]
        group_sizes = [len(ids) for ids in env_ids]
        # per group: the envs' indices (a policy that keeps exploration noise
        # per env) and the sampling stream
        call_args = [{} for _ in env.splits]
        for group in range(len(env.splits)):
            if explores_per_env(policy):
                call_args[group]["env_ids"] = env_ids[group]
            if ready_order:
                call_args[group]["stream"] = group
        out["final_observation"][:] = 0  # rows no truncation fills stay 0
        out["behaviour_version"][:] = self.version  # per step only with ``refresh``
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
            if refresh is not None:  # the version may change between steps
                out["behaviour_version"][t, envs] = self.version
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
            out["env_failed"][t, envs] = result.env_failed  # not a transition
            keep_final_observations(out["final_observation"], out["final_observation_row"], t,
                                    env_ids[group], result.truncated & ~result.env_failed,
                                    result.final_observation)
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
            obs[envs] = result.observation
            timing["inference"] += time.perf_counter() - t1
            if t < last:
                if refresh is not None:
                    refresh()
                act_and_send(group, t + 1)
        t0 = time.perf_counter()
        out["bootstrap_observation"][:] = obs
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
        out["behaviour_version"][:] = self.version
        out["final_observation"][:] = rollout["final_observation"]
        self._observation = rollout["observation"][last].copy()
        out["bootstrap_observation"][:] = self._observation
        out["bootstrap_value"][:] = self.policy.value(self._observation)
        self.unroll_steps = 0
        return messages.UnrollRecord(time.perf_counter() - start, inference_s, env_s,
                                     self.settings.steps_per_batch,
                                     self.env.pop_finished_episodes(), self.env.pop_failures(),
                                     acting_env_workers=True)

    def batch_message(self, slot: int, wait_s: float,
                      record: messages.UnrollRecord) -> messages.BatchReady:
        """The ``BatchReady`` announcing this actor's unroll ``record`` in
        ``slot``, with the version the unroll started with (the oldest of its
        steps, ``behaviour_version``)."""
        version, digest = self.unroll_weights
        return messages.BatchReady(self.actor_id, self.generation, slot, version,
                                   digest, wait_s, time.monotonic(), record)

    def close(self) -> None:
        try:
            if self._acting is not None:
                self._acting.close()
        finally:
            self.env.close()

"""Actors: a policy copy unrolling a BatchedEnv into trajectory buffers.

``Actor`` does the work and is the same object whether it runs inside the
learner's process (``InProcessActorPool``) or in its own process
(``actor_process_main``, started by ``ProcessActorPool``), so both paths produce the
same trajectories for the same seeds.

The actor-process loop (ALF semantics with ``slots_per_actor = 1``):

1. wait for a free slot (the learner frees a slot after training on it and
   publishing new weights);
2. load the newest weights if their version is newer than the ones held;
3. unroll ``unroll_length`` steps of the batched env into the slot;
4. send a ``BatchReady`` message and go to 1.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from alf_async.envs.batched_env import BatchedEnv, EnvError, derive_seed
from alf_async.runtime import messages
from alf_async.runtime.weight_store import weights_digest


@dataclass
class ActorConfig:
    """Everything an actor needs; picklable so that it can cross to a process.

    Attributes:
        env_name: gymnasium id.
        num_envs: K, envs per actor.
        num_env_workers: W, env-worker processes per actor (0 = in the actor).
        unroll_length: T, steps per trajectory.
        seed: base seed. Actor i's envs and sampling RNG are seeded from
            (seed, i, epoch, generation): epoch is the iteration of the last
            checkpoint (actors reseed there, which makes a resumed synchronous
            run replay the uninterrupted one), generation counts restarts.
        num_actors: N.
        fatal_env_errors: an env failure ends the actor (and the run) instead of
            recreating the env and dropping its episode.
        max_episode_steps: overrides the env id's time limit when set.
        policy_factory: ``factory(observation_dim, action_dim, seed) -> Policy``.
        gin_config: gin bindings the actor process parses before building the
            policy (so networks match the learner's).
    """

    env_name: str
    num_envs: int
    num_env_workers: int
    unroll_length: int
    seed: int = 0
    num_actors: int = 1
    max_episode_steps: Optional[int] = None
    fatal_env_errors: bool = False
    policy_factory: Callable = None
    gin_config: str = ""

    def env_seed(self, actor_id: int, epoch: int, generation: int) -> int:
        return derive_seed(self.seed, actor_id, epoch, generation, 1)

    def policy_seed(self, actor_id: int, epoch: int, generation: int) -> int:
        return derive_seed(self.seed, actor_id, epoch, generation, 2)


@dataclass
class UnrollInfo:
    """Timings (s) and episodes of one unroll."""

    unroll_s: float
    inference_s: float
    env_s: float
    env_steps: int
    episodes: List[Tuple[float, int]] = field(default_factory=list)
    env_failures: List[Tuple[int, str]] = field(default_factory=list)


class Actor:
    """A policy and a BatchedEnv, unrolling trajectories of [T, K].

    Args:
        actor_id: i in [0, N).
        config: see ActorConfig.
        epoch: iteration of the checkpoint the run starts from (seeding).
        generation: how many times actor i was restarted (seeding).
    """

    def __init__(self, actor_id: int, config: ActorConfig, epoch: int = 0,
                 generation: int = 0):
        from alf_async.runtime.policy import NeuralPolicy

        self.actor_id = actor_id
        self.config = config
        self.generation = generation
        self.env = BatchedEnv(config.env_name, config.num_envs, config.num_env_workers,
                              seed=config.env_seed(actor_id, epoch, generation),
                              max_episode_steps=config.max_episode_steps,
                              fatal_env_errors=config.fatal_env_errors)
        try:
            factory = config.policy_factory or NeuralPolicy
            self.policy = factory(self.env.observation_dim, self.env.action_dim,
                                  config.policy_seed(actor_id, epoch, generation))
            self.version = -1
            self.digest = 0
            self._observation = self.env.reset()
        except BaseException:
            self.env.close()
            raise

    def reseed(self, epoch: int) -> None:
        """Reseed envs and sampling from (seed, actor, epoch) and reset the envs.

        Episodes in progress are dropped. Called at checkpoints, so that a run
        resumed from one continues exactly like the uninterrupted run.
        """
        c = self.config
        self._observation = self.env.reseed(c.env_seed(self.actor_id, epoch, self.generation))
        self.env.pop_finished_episodes()
        self.policy.reseed(c.policy_seed(self.actor_id, epoch, self.generation))

    def load_weights(self, version: int, arrays: Dict[str, np.ndarray]) -> None:
        self.policy.load_weights(arrays)
        self.version = version
        self.digest = weights_digest(arrays)

    def unroll(self, out: Dict[str, np.ndarray],
               on_step: Optional[Callable[[], None]] = None) -> UnrollInfo:
        """Fill trajectory arrays ``out`` ([T, K, ...], see runtime.trajectory).

        ``on_step`` is called before every step (the actor process uses it to
        send heartbeats).
        """
        start = time.perf_counter()
        inference_s = env_s = 0.0
        obs = self._observation
        for t in range(self.config.unroll_length):
            if on_step is not None:
                on_step()
            t0 = time.perf_counter()
            action, log_prob, value = self.policy.act(obs)
            t1 = time.perf_counter()
            result = self.env.step(action)
            t2 = time.perf_counter()
            out["observation"][t] = obs
            out["action"][t] = action
            out["log_prob"][t] = log_prob
            out["value"][t] = value
            out["reward"][t] = result.reward
            out["terminated"][t] = result.terminated
            out["truncated"][t] = result.truncated
            truncation_value = out["truncation_value"][t]
            truncation_value[:] = 0.0
            if result.truncated.any():
                idx = np.flatnonzero(result.truncated)
                truncation_value[idx] = self.policy.value(result.final_observation[idx])
            obs = result.observation
            inference_s += t1 - t0 + time.perf_counter() - t2
            env_s += t2 - t1
        t0 = time.perf_counter()
        out["bootstrap_value"][:] = self.policy.value(obs)
        inference_s += time.perf_counter() - t0
        self._observation = obs
        return UnrollInfo(time.perf_counter() - start, inference_s, env_s,
                          self.config.unroll_length * self.config.num_envs,
                          self.env.pop_finished_episodes(), self.env.pop_failures())

    def close(self) -> None:
        self.env.close()


# Seconds between heartbeats of a busy actor (see ProcessActorPool.actor_timeout_s).
HEARTBEAT_INTERVAL_S = 2.0


def _short_failures(failures: List[Tuple[int, str]], limit: int = 4000
                    ) -> List[Tuple[int, str]]:
    """Failures with tracebacks cut to their last ``limit`` characters."""
    return [(k, text[-limit:]) for k, text in failures]


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


def actor_process_main(actor_id: int, epoch: int, generation: int, config: ActorConfig, conn,
                       slots_name: str, slot_specs, slot_indices: List[int],
                       store_name: str, store_specs, parent_pid: int) -> None:
    """Entry point of an actor process; see the module docstring for the loop."""
    from alf_async.utils.process import init_child_process

    # SIGTERM (from the trainer, or when the trainer dies) ends the loop through
    # the finally clauses, which stop env workers and release shared memory.
    init_child_process(signal.SIGTERM, expected_parent=parent_pid)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    import torch

    torch.set_num_threads(1)
    from alf_async.runtime.trajectory import TrajectorySlots
    from alf_async.runtime.weight_store import WeightStore

    actor = slots = store = None
    try:
        if config.gin_config:
            import gin

            from alf_async.config import register_configurables

            register_configurables()
            gin.parse_config(config.gin_config)
        slots = TrajectorySlots.attach(slots_name, slot_specs)
        store = WeightStore.attach(store_name, store_specs)
        actor = Actor(actor_id, config, epoch, generation)
        conn.send(messages.ActorReady(actor_id, generation, os.getpid(),
                                      actor.env.worker_pids))
        free = list(slot_indices)
        reseed_epoch = None
        last_heartbeat = [time.monotonic()]

        def heartbeat() -> None:
            now = time.monotonic()
            if now - last_heartbeat[0] >= HEARTBEAT_INTERVAL_S:
                last_heartbeat[0] = now
                conn.send(messages.Heartbeat(actor_id, generation))

        while True:
            wait_start = time.perf_counter()
            while not free or conn.poll():
                heartbeat()
                if not conn.poll(1.0):
                    if os.getppid() != parent_pid:
                        return
                    continue
                kind, payload = conn.recv()
                if kind == messages.STOP:
                    return
                if kind == messages.RELEASE:
                    released, epoch_to_reseed = payload
                    free.append(released)
                    if epoch_to_reseed is not None:
                        reseed_epoch = epoch_to_reseed
            slot = free.pop(0)
            if reseed_epoch is not None:
                actor.reseed(reseed_epoch)
                reseed_epoch = None
            newer = store.read_newer(actor.version, timeout_s=None if actor.version >= 0 else 60.0)
            while newer is None and actor.version < 0:
                newer = store.read_newer(actor.version, timeout_s=60.0)
            if newer is not None:
                actor.load_weights(*newer)
            wait_s = time.perf_counter() - wait_start
            info = actor.unroll(slots.slot(slot), on_step=heartbeat)
            conn.send(messages.BatchReady(
                actor_id, generation, slot, actor.version, actor.digest, info.env_steps,
                info.unroll_s, wait_s, info.inference_s, info.env_s, time.monotonic(),
                info.episodes, _short_failures(info.env_failures)))
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
        for resource in (actor, slots, store):
            if resource is not None:
                try:
                    resource.close()
                except Exception:
                    pass

"""The off-policy loop: actor batches fill a replay buffer, SAC samples it.

Each actor batch ([T, K] transitions, with ``next_observation``) is copied into
the shared-memory ``ReplayBuffer``; its slot goes back to the actor when the
env-steps : gradient-steps contract (``runtime.step_ratio``) allows the actors
to collect more, and is held otherwise. Between batches the learner takes the
gradient steps the collected env steps have paid for, publishing new weights
every ``Replay.publish_interval`` steps, and waits for data only when none is
due. With N = 1 and ``Replay.strict`` the sequence is exactly "collect a batch,
take its gradient steps" (sync SAC). Actors do not reseed at checkpoints: a
resumed SAC run continues the same algorithm, not the same random stream.

An iteration (the metrics row, ``Trainer.num_iterations``, checkpoints) is one
actor batch received. T is the time between two batches, EPS = K / T as for
PPO. Each row also carries: gradient_steps (taken since the previous row),
gradient_steps_total, ratio_recent (env steps / gradient steps since the
previous row) and ratio_overall (since learning started), buffer_fill
(fraction of the capacity in use), learner_throttled_s (the learner waiting for
data with no gradient step due), actors_throttled_s (slots held back since the
previous row, summed over slots), data_age (mean gradient steps between a
sampled transition's insertion and its use), and the SAC losses.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import time
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import torch

from alf_async.envs.spaces import ObservationSpec
from alf_async.iteration_record import IterationRecord
from alf_async.runtime.messages import BatchReady
from alf_async.runtime.policy import PolicyFactory
from alf_async.runtime.replay_buffer import ReplayBuffer
from alf_async.runtime.step_ratio import StepRatio
from alf_async.settings import ReplaySettings, TrainerSettings
from alf_async.training.actor_batches import ActorBatches
from alf_async.training.loop import RunContext
from alf_async.utils.seeding import derive_seed

logger = logging.getLogger("alf_async")


class OffPolicyLoop:
    """Trains a ``SACLearner`` from actor batches through a replay buffer (a
    ``TrainingLoop``); ``replay``: the buffer and ratio settings, the other
    arguments are ``ActorBatches``'."""

    def __init__(self, settings: TrainerSettings, learner: Any,
                 policy_factory: PolicyFactory, replay: ReplaySettings,
                 observation: ObservationSpec, action_dim: int):
        self.settings, self.learner, self.replay_settings = settings, learner, replay
        self.observation, self.action_dim = observation, action_dim
        self.batches = ActorBatches(settings, learner, policy_factory, observation,
                                    action_dim)
        self.buffer: Optional[ReplayBuffer] = None
        self.rng = np.random.default_rng(derive_seed(settings.seed, 0, 0, 0, 3))
        self._restored_buffer: Optional[Dict[str, np.ndarray]] = None
        self._ratio_offsets = (0, 0)  # (env steps, gradient steps) the contract starts at
        self.ratio: Optional[StepRatio] = None
        self._held: Deque[Tuple[BatchReady, float]] = collections.deque()

    def updates(self) -> int:
        return int(self.learner.gradient_steps)

    # -- checkpoints ----------------------------------------------------------
    @contextlib.contextmanager
    def checkpoint_state(self) -> Iterator[Dict[str, Any]]:
        state: Dict[str, Any] = {"replay_offsets": list(self._ratio_offsets)}
        if self.replay_settings.save_replay_buffer and self.buffer is not None:
            state["replay_buffer"] = {k: torch.from_numpy(v)
                                      for k, v in self.buffer.state_arrays().items()}
        yield state

    def restore(self, state: Mapping[str, Any], counters: Mapping[str, float]) -> None:
        saved = state.get("replay_buffer")
        if saved is not None and self.replay_settings.save_replay_buffer:
            self._restored_buffer = {k: v.numpy() for k, v in saved.items()}
            self._ratio_offsets = tuple(int(v) for v in state.get("replay_offsets", (0, 0)))
        else:
            # The contract restarts here: learning_starts steps refill the buffer.
            self._ratio_offsets = (int(counters["env_steps"]),
                                   int(self.learner.gradient_steps))
            logger.info("the checkpoint holds no replay buffer (Replay.save_replay_buffer="
                        "False when it was written): the buffer starts empty and the "
                        "learner waits until it holds Replay.learning_starts=%d new steps",
                        self.replay_settings.learning_starts)

    # -- start and end ----------------------------------------------------------
    def start(self, run: RunContext) -> None:
        self.buffer = ReplayBuffer.create(self.replay_settings.capacity,
                                          self.observation, self.action_dim)
        if self._restored_buffer is not None:
            self.buffer.load_state_arrays(self._restored_buffer)
            logger.info("replay buffer restored: %d transitions", self.buffer.size)
            self._restored_buffer = None
        self.batches.start(run, int(self.learner.gradient_steps))

    def stop(self, run: RunContext) -> None:
        self._release_held(self._held)

    def close(self) -> None:
        try:
            self.batches.close()
        finally:
            if self.buffer is not None:
                self.buffer.close()
                self.buffer = None

    # -- the loop -------------------------------------------------------------
    def run(self, run: RunContext) -> None:
        s, c, r = self.settings, run.counters, self.replay_settings
        learner, buffer, pool = self.learner, self.buffer, self.batches.pool
        b = s.steps_per_batch
        self.ratio = ratio = StepRatio(r.env_steps_per_gradient_step, r.learning_starts,
                                       r.lead(s.num_actors, b, s.slots_per_actor),
                                       *self._ratio_offsets)
        held = self._held
        slots = s.num_actors * s.slots_per_actor
        in_flight = slots * b  # every slot is out at start
        restarts_seen = pool.stats().restarts
        row = _RowAccumulator(c["env_steps"], learner.gradient_steps)
        run.start_clock()
        last_end = time.monotonic()
        record: Optional[IterationRecord] = None
        while not run.budget_reached():
            stats = pool.stats()
            if stats.restarts != restarts_seen:
                # A restarted actor unrolls into all its slots again, also
                # those held here (their messages are stale now): hand every
                # held slot back and count what is out again. The actors may
                # get up to one batch each ahead of the ratio, once.
                restarts_seen = stats.restarts
                self._release_held(held)
                in_flight = slots * b  # queued batches are received later
            due = ratio.gradient_steps_due(int(c["env_steps"]), learner.gradient_steps)
            wait_start = time.monotonic()
            # Ask for a batch only while one is being collected (an
            # in-process actor unrolls when asked); wait only if no
            # gradient step is due.
            got = (self.batches.next_batch(run, None if due == 0 else 0.0)
                   if in_flight > 0 else None)
            waited = time.monotonic() - wait_start
            if due == 0:
                row.learner_throttled_s += waited
            if got is not None:
                message, batch = got
                in_flight -= message.unroll.env_steps
                with run.iteration():
                    buffer.add_trajectory(batch, gradient_step=learner.gradient_steps)
                    held.append((message, time.monotonic()))
                    c["iteration"] += 1
                    self.batches.received(run, message)
                    end = time.monotonic()
                    run.update_wall_time(end)
                    record = self._off_policy_record(run, message, row, end - last_end,
                                                     waited)
                    run.console(record)
                    last_end = end
                    row = _RowAccumulator(c["env_steps"], learner.gradient_steps)
                    if c["iteration"] % s.checkpoint_interval == 0:
                        run.save_checkpoint()
            in_flight += self._release_allowed(c, held, in_flight, row)
            due = ratio.gradient_steps_due(int(c["env_steps"]), learner.gradient_steps)
            if due and buffer.size:
                with run.iteration():
                    self._train(min(due, r.publish_interval), row)
                in_flight += self._release_allowed(c, held, in_flight, row)
        # The budget's last env steps are trained on too, so that the run
        # ends on the ratio (the sync loop's "collect, then train").
        due = ratio.gradient_steps_due(int(c["env_steps"]), learner.gradient_steps)
        if due and buffer.size:
            with run.iteration():
                self._train(due, row)
        logger.info("env steps per gradient step: %.3f (target %g), %d gradient steps",
                    ratio.achieved(int(c["env_steps"]), learner.gradient_steps),
                    r.env_steps_per_gradient_step, learner.gradient_steps)
        if record is not None:
            run.console(record, force=True)

    def _train(self, steps: int, row: "_RowAccumulator") -> None:
        """``steps`` gradient steps on uniform samples, then publish the weights."""
        learner, buffer = self.learner, self.buffer
        train_start = time.monotonic()
        for _ in range(steps):
            sample = buffer.sample(learner.batch_size, self.rng)
            age = learner.gradient_steps - float(np.mean(sample["inserted_at"]))
            row.add(learner.train_step(sample), age)
        self.batches.publish(int(learner.gradient_steps))
        row.train_s += time.monotonic() - train_start

    def _release_allowed(self, c: Mapping[str, float], held: Deque[Tuple[BatchReady, float]],
                         in_flight: int, row: "_RowAccumulator") -> int:
        """Hand back held slots while the contract lets actors collect; returns
        the env steps newly in flight (``c``: the run's counters)."""
        ratio = self.ratio
        released = 0
        g = self.learner.gradient_steps
        while held:
            committed = int(c["env_steps"]) + in_flight + released
            message, since = held[0]
            steps = message.unroll.env_steps
            # Also when the learner would have nothing to do even with the steps
            # in flight: it needs data, so holding a slot would stall the run.
            if not (ratio.may_collect(committed, steps, g)
                    or ratio.gradient_steps_due(committed, g) == 0):
                break
            held.popleft()
            row.actors_throttled_s += time.monotonic() - since
            self.batches.pool.release(message)
            released += steps
        return released

    def _release_held(self, held: Deque[Tuple[BatchReady, float]]) -> None:
        while held:
            with contextlib.suppress(Exception):  # the pool may be closing anyway
                self.batches.pool.release(held.popleft()[0])

    def _off_policy_record(self, run: RunContext, message: BatchReady,
                           row: "_RowAccumulator", T: float,
                           learner_wait_s: float) -> IterationRecord:
        c, r = run.counters, self.replay_settings
        g = self.learner.gradient_steps
        stats = row.means()
        grads = g - row.gradient_steps_start
        stats.update({
            "gradient_steps": float(grads), "gradient_steps_total": float(g),
            "ratio_recent": ((c["env_steps"] - row.env_steps_start) / grads
                             if grads else math.nan),
            "ratio_overall": self.ratio.achieved(int(c["env_steps"]), g),
            "buffer_fill": self.buffer.size / r.capacity,
            "learner_throttled_s": row.learner_throttled_s,
            "actors_throttled_s": row.actors_throttled_s})
        return self.batches.record(run, message, stats, g, T, learner_wait_s, row.train_s)


class _RowAccumulator:
    """What happened since the previous metrics row (times in seconds)."""

    def __init__(self, env_steps: float, gradient_steps: int):
        self.env_steps_start, self.gradient_steps_start = env_steps, gradient_steps
        self.learner_throttled_s = self.actors_throttled_s = self.train_s = 0.0
        self._stats: Dict[str, List[float]] = collections.defaultdict(list)

    def add(self, stats: Dict[str, float], data_age: float) -> None:
        for k, v in stats.items():
            self._stats[k].append(v)
        self._stats["data_age"].append(data_age)

    def means(self) -> Dict[str, float]:
        return {k: float(np.mean(v)) for k, v in self._stats.items()}

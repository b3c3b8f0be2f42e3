"""The actor pool as the on- and off-policy loops use it.

``ActorBatches`` starts the pool of ``Trainer.backend``, publishes versioned
weights (remembering each version's digest, which actors report back), counts
env failures, and turns a received batch into the run's ``IterationRecord``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from alf_async.env_failure_log import EnvFailureReporter, log_env_failures
from alf_async.envs.spaces import ObservationSpec
from alf_async.iteration_record import IterationRecord
from alf_async.runtime.actor_pool import ActorPool
from alf_async.runtime.messages import BatchReady
from alf_async.runtime.policy import PolicyFactory
from alf_async.runtime.pool_factory import make_actor_pool
from alf_async.runtime.weight_store import weights_digest
from alf_async.settings import TrainerSettings
from alf_async.training.loop import RunContext
from alf_async.utils.formatting import format_count, format_duration
from alf_async.utils.process import seconds_since_process_start

logger = logging.getLogger("alf_async")


class ActorBatches:
    """The actor pool of a run and the bookkeeping around its batches: the
    ``learner``'s ``weight_arrays()`` are published to actors running
    ``policy_factory``'s policy; O and A size the trajectory slots."""

    def __init__(self, settings: TrainerSettings, learner: Any,
                 policy_factory: PolicyFactory, observation: ObservationSpec,
                 action_dim: int):
        self.settings, self.learner, self.policy_factory = settings, learner, policy_factory
        self.observation, self.action_dim = observation, action_dim
        self.pool: Optional[ActorPool] = None
        self.published_digests: Dict[int, int] = {}  # version -> weights digest
        self.env_failures = 0
        self.failure_log = EnvFailureReporter()  # the log lines of env failures
        self.dropped_stale_batches = 0  # by Trainer.max_lag
        self.dropped_stale_env_steps = 0
        self._bytes_moved_before = 0  # the pool's bytes_moved at the previous record
        self._first_received = False  # a batch arrived since this process started
        self._started_at = time.monotonic()  # every actor ready

    def start(self, run: RunContext, version: int) -> None:
        """Create the pool, publish weights ``version`` and start every actor."""
        s = self.settings
        self.pool = make_actor_pool(s, self.policy_factory, self.learner.weight_arrays(),
                                    self.observation, self.action_dim, run.gin_config,
                                    epoch=int(run.counters["iteration"]),
                                    state_size=getattr(self.learner, "state_size", 0))
        self.publish(version)
        logger.info("starting %d actor(s) x %d envs (%s backend, %d env workers and %d "
                    "env split(s) each), unroll_length %d%s", s.num_actors, s.num_envs,
                    s.backend, s.num_env_workers, s.env_splits, s.unroll_length,
                    ", resumed" if run.resumed else "")
        self.pool.start()
        self._started_at = time.monotonic()
        run.startup_s = seconds_since_process_start()
        logger.info("start-up took %.1f s (launch of this process until every actor was "
                    "ready to unroll)", run.startup_s)

    def next_batch(self, run: RunContext, timeout: Optional[float] = None
                   ) -> Optional[Tuple[BatchReady, Dict[str, np.ndarray]]]:
        """The pool's next batch (see ``ActorPool.next_batch``). Until this
        process has received its first batch, a wait without ``timeout`` prints a
        progress line every ``MetricsRecorder.console_interval_s`` from the
        actors' heartbeats, so a long first unroll is not a silent one."""
        if timeout is not None or self._first_received:
            return self.pool.next_batch(timeout)
        interval = max(run.metrics.console_interval_s, 1.0)
        while True:
            got = self.pool.next_batch(interval)
            if got is not None:
                self._first_received = True
                if got[0].unroll.acting_env_workers:
                    logger.info("the env workers act for their envs and unroll them by "
                                "themselves (Trainer.acting_env_workers; one request per "
                                "unroll)")
                return got
            print(first_batch_progress(self.pool.stats().unroll_steps,
                                       self.settings.steps_per_batch,
                                       time.monotonic() - self._started_at),
                  file=sys.stderr, flush=True)

    def publish(self, version: int) -> None:
        """Publish the learner's current weights as ``version``."""
        arrays = self.learner.weight_arrays()
        self.pool.publish_weights(arrays, version)
        self.published_digests[version] = weights_digest(arrays)

    def received(self, run: RunContext, message: BatchReady) -> None:
        """Count a batch that is used (trained on or stored): counters, episodes,
        env failures (logged)."""
        c, u = run.counters, message.unroll
        c["env_steps"] += u.env_steps
        c["episodes"] += len(u.episodes)
        self.env_failures += log_env_failures(message, self.settings.env_name,
                                              self.failure_log)
        run.metrics.add_episodes(u.episodes)

    def drop_stale(self, counters: Dict[str, float], message: BatchReady) -> bool:
        """Release untrained a batch older than ``Trainer.max_lag`` versions."""
        lag = int(counters["iteration"]) - message.version
        if self.settings.max_lag is None or lag <= self.settings.max_lag:
            return False
        self.pool.release(message)
        self.dropped_stale_batches += 1
        self.dropped_stale_env_steps += message.unroll.env_steps
        return True

    def record(self, run: RunContext, message: BatchReady, stats: Dict[str, float],
               version: int, T: float, learner_wait_s: float,
               learner_train_s: float) -> IterationRecord:
        """Record the metrics row of ``message`` (``version``: the learner's
        version when it took the batch; T: seconds since the previous row)."""
        u = message.unroll
        pool = self.pool.stats()
        bytes_moved = pool.bytes_moved - self._bytes_moved_before
        self._bytes_moved_before = pool.bytes_moved
        return run.record(
            T, u.env_steps, learner_train_s=learner_train_s, learner_wait_s=learner_wait_s,
            actor_id=message.actor_id, actor_unroll_s=u.unroll_s,
            actor_wait_s=message.wait_s, actor_inference_s=u.inference_s,
            actor_env_s=u.env_s, queue_length=pool.queue_length,
            behaviour_version=message.version, behaviour_digest=message.weights_digest,
            lag=version - message.version, episodes_finished=len(u.episodes),
            actor_restarts=pool.restarts, env_failures=self.env_failures,
            dropped_batches=pool.dropped_batches + self.dropped_stale_batches,
            dropped_env_steps=self.dropped_stale_env_steps,
            actor_node=pool.actor_nodes.get(message.actor_id, ""), bytes_moved=bytes_moved,
            learner=dict(stats))

    def close(self) -> None:
        """Stop every actor and release the pool's shared memory (twice is safe)."""
        self.failure_log.flush()  # the failures held back since the last summary
        if self.pool is not None:
            self.pool.close()


def first_batch_progress(unroll_steps: Mapping[int, int], steps_per_batch: int,
                         elapsed_s: float) -> str:
    """The progress line shown while the first batch is unrolled.

    unroll_steps: actor id -> env steps into its current unroll (heartbeats);
    steps_per_batch: K x unroll_length; elapsed_s: seconds since the actors
    started unrolling. The ETA is the leading actor's time to finish its batch at
    its rate so far (the first training iteration follows it).
    """
    if not unroll_steps:  # a pool without step counts (Ray, in-process)
        return (f"[alf_async] first unroll: waiting for the first batch of "
                f"{format_count(steps_per_batch)} env steps ({format_duration(elapsed_s)} "
                "so far)")
    done = [unroll_steps[a] for a in sorted(unroll_steps)]
    lead = max(done)
    per_actor = ", ".join(format_count(d) for d in done)
    eta = (steps_per_batch - lead) * elapsed_s / lead if lead > 0 else float("nan")
    return (f"[alf_async] first unroll: actors at {per_actor} of "
            f"{format_count(steps_per_batch)} env steps | "
            f"{format_count(sum(done) / max(elapsed_s, 1e-9))} env steps/s | "
            f"ETA to the first batch {format_duration(eta, missing='?')}")

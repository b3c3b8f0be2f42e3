"""The on-policy loop: every actor batch is trained on once (PPO2).

Each iteration takes the next actor batch from the pool (oldest version first,
lag <= N - 1; ``runtime.scheduler``), trains the learner on it, publishes the
new weights as the next version, hands the slot back to its actor and records
one ``IterationRecord``. A batch older than ``Trainer.max_lag`` versions is
released untrained. N = 1 with one slot per actor is exactly synchronous.
At a periodic checkpoint the released actor reseeds its envs from (seed,
actor, iteration), so a resumed sync run repeats the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ContextManager, Dict, Mapping, Optional

from alf_async.envs.spaces import ObservationSpec
from alf_async.iteration_record import IterationRecord
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import TrainerSettings
from alf_async.training.actor_batches import ActorBatches
from alf_async.training.loop import RunContext


class OnPolicyLoop:
    """Trains a ``PPOLearner`` on actor batches (a ``TrainingLoop``); the
    arguments are ``ActorBatches``'."""

    def __init__(self, settings: TrainerSettings, learner: Any,
                 policy_factory: PolicyFactory, observation: ObservationSpec,
                 action_dim: int):
        self.settings, self.learner = settings, learner
        self.batches = ActorBatches(settings, learner, policy_factory, observation,
                                    action_dim)

    def restore(self, state: Mapping[str, Any], counters: Mapping[str, float]) -> None:
        pass  # the learner block is all there is

    def checkpoint_state(self) -> ContextManager[Dict[str, Any]]:
        return contextlib.nullcontext({})  # nothing beside the learner block

    def updates(self) -> int:
        return int(self.learner.iteration)

    def start(self, run: RunContext) -> None:
        self.batches.start(run, int(run.counters["iteration"]))

    def run(self, run: RunContext) -> None:
        s, c, batches = self.settings, run.counters, self.batches
        run.start_clock()
        last_end = time.monotonic()
        record: Optional[IterationRecord] = None
        while not run.budget_reached():
            wait_start = time.monotonic()
            message, batch = batches.next_batch(run)
            if batches.drop_stale(c, message):
                continue
            with run.iteration():
                train_start = time.monotonic()
                version = int(c["iteration"])
                stats = self.learner.train(batch, message.version, run.progress())
                c["iteration"] += 1
                batches.publish(int(c["iteration"]))
                checkpoint_now = c["iteration"] % s.checkpoint_interval == 0
                # Actors reseed at checkpoints so that resuming replays exactly.
                reseed = checkpoint_now and s.reseed_at_checkpoints
                batches.pool.release(message, int(c["iteration"]) if reseed else None)
                end = time.monotonic()
                batches.received(run, message)
                run.update_wall_time(end)
                record = batches.record(run, message, stats, version, end - last_end,
                                        train_start - wait_start, end - train_start)
                run.console(record)
                last_end = end
                if checkpoint_now:
                    run.save_checkpoint()
        if record is not None:
            run.console(record, force=True)

    def stop(self, run: RunContext) -> None:
        pass  # nothing is held between iterations

    def close(self) -> None:
        self.batches.close()

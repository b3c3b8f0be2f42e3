"""The actor process: an ``Actor`` in a process of its own, started by
``ProcessActorPool`` and talking to the learner over a pipe.

The loop (ALF semantics with ``slots_per_actor = 1``):

1. wait for a free slot (the learner frees a slot after training on it and
   publishing new weights: ``ReleaseSlot``);
2. load the newest weights if their version is newer than the ones held;
3. unroll ``unroll_length`` steps of the batched env into the slot (with
   ``Trainer.weights_mid_unroll``, loading weights the learner publishes
   meanwhile before the next step);
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
from typing import Callable, Dict, List, Optional, Tuple

from alf_async.config import gin_imports
from alf_async.envs.env_errors import EnvError
from alf_async.runtime import messages
from alf_async.runtime.actor import Actor
from alf_async.runtime.messages import HEARTBEAT_INTERVAL_S
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import TrainerSettings
from alf_async.utils.process import started_by
from alf_async.utils.shared_memory import ArraySpec


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

        refresh = None
        if launch.settings.weights_mid_unroll:
            def refresh() -> None:  # newer weights, if the learner published any
                if actor.acts_itself and store.version > actor.version:
                    newer = store.read_newer(actor.version, timeout_s=0.0)
                    if newer is not None:
                        actor.load_weights(*newer)

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
            record = actor.unroll(slots.slot(slot), on_step=heartbeat, refresh=refresh)
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

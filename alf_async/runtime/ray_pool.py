"""``RayActorPool``: N Ray actors feeding one learner (``Trainer.backend = "ray"``).

Each Ray actor (runtime.ray_actor's ``_RayActor``, one per ``Trainer.num_actors``)
owns an ``Actor`` (a policy copy and a ``BatchedEnv`` of K envs with its own W
env-worker processes on its node), as an actor process does; the learner stays
in the driver. Weights cross the cluster as one object per version (``ray.put``
once; each node fetches a version once), trajectories as one object per unroll
call (``BatchReady`` and its [T, K, ...] arrays), fetched when the scheduler
picks the batch. Importing Ray, the connection and the placement are
runtime.ray_cluster's (``RayConnection``, the pool's ``cluster``); this module
keeps the batch bookkeeping.

The contract is the process pool's (runtime.actor_pool): ``slots_per_actor``
unroll calls in flight per actor (call tokens, no shared memory), N = 1 exactly
synchronous, the same ``LagScheduler`` (oldest version first, lag <= N - 1),
the same restart budget, and an actor starts with the version current when its
slot is handed out. An actor that dies (its process or its node) fails its calls
with a Ray actor error: its pending and in-flight batches are dropped (counted)
and a fresh actor replaces it, as one whose unroll makes no progress for
``actor_timeout_s`` is (asked every few seconds through a separate concurrency
group, so that the question is answered mid-unroll).
"""

from __future__ import annotations

import logging
import pickle
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from alf_async.envs.env_errors import EnvError
from alf_async.envs.spaces import ObservationSpec
from alf_async.runtime import messages
from alf_async.runtime.messages import HEARTBEAT_INTERVAL_S
from alf_async.runtime.actor_pool import (ActorPoolError, ActorStartupError, PoolStats,
                                         check_restart_allowed, last_line, wait_for_batch)
from alf_async.runtime.policy import PolicyFactory
from alf_async.runtime.ray_actor import RayActorLaunch, _RayActor
from alf_async.runtime.ray_cluster import (RayConnection, _collect_stopped,
                                          _describe_ray_error, _wait_for_exit)
from alf_async.runtime.scheduler import LagScheduler
from alf_async.ray_settings import RayBackendSettings
from alf_async.settings import TrainerSettings
from alf_async.utils.shared_memory import sweep_stale_blocks

logger = logging.getLogger("alf_async")


@dataclass
class _Handle:
    actor_id: int
    generation: int
    remote: Any  # the Ray actor handle
    ready_ref: Any
    ready: bool = False
    spawned_at: float = field(default_factory=time.monotonic)
    pid: Optional[int] = None
    env_worker_pids: Tuple[int, ...] = ()
    node_id: str = ""
    busy_since: Optional[float] = None  # monotonic time its oldest call was handed out
    probe_ref: Any = None
    probe_sent: float = 0.0
    last_progress: float = field(default_factory=time.monotonic)


@dataclass
class _Call:
    """An unroll call in flight."""

    actor_id: int
    generation: int
    slot: int


class RayActorPool:
    """The ``ActorPool`` of ``Trainer.backend = "ray"`` (see the module docstring).

    Args:
        settings: the run's settings (N, K, W, slots_per_actor, fault knobs).
        policy_factory: builds each actor's policy (in the Ray actor).
        observation, action_dim: the env's ObservationSpec (an int O: a float32 vector) and A.
        gin_config: bindings each actor parses (network sizes, env modules).
        epoch: iteration the run starts from (seeds the actors).
        ray_settings: the cluster and placement (default: gin's ``RayBackend.*``).
        startup_timeout_s: time an actor may take to build its envs once placed.
    """

    def __init__(self, settings: TrainerSettings, policy_factory: PolicyFactory,
                 observation: ObservationSpec, action_dim: int, gin_config: str = "",
                 epoch: int = 0, ray_settings: Optional[RayBackendSettings] = None,
                 startup_timeout_s: float = 120.0):
        self.settings = settings
        self.ray_settings = rs = ray_settings or RayBackendSettings()
        self.gin_config = gin_config
        self.epoch = epoch
        self.startup_timeout_s = startup_timeout_s
        self.restarts = 0
        self.dropped_batches = 0
        self.bytes_moved = 0
        self._policy_factory = pickle.dumps(policy_factory)
        self._scheduler = LagScheduler(settings.num_actors, settings.slots_per_actor,
                                       enforce_lag=not settings.off_policy)
        self._handles: Dict[int, _Handle] = {}
        self._calls: Dict[Any, _Call] = {}  # object ref -> call
        self._arrived: Dict[int, Dict[str, np.ndarray]] = {}  # slot -> arrays
        self._weights: Optional[Tuple[int, Any, int]] = None  # (version, ref, nbytes)
        self._started = False
        self._closed = False
        self._trajectory_bytes = None
        self._weights_fetched: set = set()  # (node id, version) pairs counted
        self.cluster = RayConnection(settings, rs)
        self.ray = self.cluster.ray
        try:
            # "control": progress questions and close, answered mid-unroll.
            self._remote_class = self.ray.remote(
                concurrency_groups={"control": 1})(_RayActor)
            self.cluster.make_placement()
        except BaseException:
            self.close()
            raise

    # -- actors -----------------------------------------------------------------
    def _spawn(self, actor_id: int, generation: int, node_id: Optional[str] = None) -> None:
        launch = RayActorLaunch(actor_id, generation, self.epoch, self.settings,
                                self._policy_factory, self.gin_config, list(sys.path))
        options = self.cluster.actor_options(actor_id, node_id)
        remote = self._remote_class.options(**options).remote(launch)
        handle = _Handle(actor_id, generation, remote, remote.ready.remote())
        self._handles[actor_id] = handle
        first = actor_id * self.settings.slots_per_actor
        for slot in range(first, first + self.settings.slots_per_actor):
            self._hand_out(handle, slot, None)

    def _hand_out(self, handle: _Handle, slot: int, reseed_epoch: Optional[int]) -> None:
        """Start an unroll call of ``handle`` into ``slot`` with the newest weights."""
        version, weights_ref, nbytes = self._weights
        self._scheduler.handed_out(slot, version)
        ref = handle.remote.unroll.remote(slot, version, weights_ref, reseed_epoch)
        self._calls[ref] = _Call(handle.actor_id, handle.generation, slot)
        node = handle.node_id or f"actor {handle.actor_id}"  # not placed yet
        if (node, version) not in self._weights_fetched:
            self._weights_fetched.add((node, version))  # a node fetches a version once
            self.bytes_moved += nbytes
        if handle.busy_since is None:
            handle.busy_since = time.monotonic()
            handle.last_progress = handle.busy_since

    def publish_weights(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        """One object per version: ``ray.put`` once, every actor fetches it by ref."""
        payload = {k: np.array(v, copy=True) for k, v in arrays.items()}
        nbytes = sum(v.nbytes for v in payload.values())
        self._weights = (version, self.ray.put(payload), nbytes)
        self._weights_fetched = {k for k in self._weights_fetched if k[1] >= version - 1}

    def start(self) -> None:
        """Start every actor and wait until each has built its envs."""
        for actor_id in range(self.settings.num_actors):
            self._spawn(actor_id, 0)
        limit_s = self.startup_timeout_s + self.ray_settings.connect_timeout_s
        deadline = time.monotonic() + limit_s
        while not all(h.ready for h in self._handles.values()):
            if time.monotonic() > deadline:
                late = [h.actor_id for h in self._handles.values() if not h.ready]
                raise ActorStartupError(
                    f"Ray actors {late} were not ready within {limit_s:.0f} s: the cluster may "
                    f"lack {self.cluster.actor_resources()} per actor (cluster resources: "
                    f"{self.ray.cluster_resources()})")
            self._poll(1.0)
        self._started = True

    @property
    def pids(self) -> List[int]:
        """Pids of the Ray actor processes and their env workers (any node)."""
        pids: List[int] = []
        for h in self._handles.values():
            if h.pid is not None:
                pids.append(h.pid)
            pids.extend(h.env_worker_pids)
        return pids

    @property
    def actor_nodes(self) -> Dict[int, str]:
        """Actor id -> Ray node id of the node it runs on ("" before it is ready)."""
        return {h.actor_id: h.node_id for h in self._handles.values()}

    def actor_handle(self, actor_id: int):
        """The Ray actor handle of actor ``actor_id`` (tests kill it)."""
        return self._handles[actor_id].remote

    # -- failures -----------------------------------------------------------------
    def _kill(self, handle: _Handle) -> None:
        try:
            self.ray.kill(handle.remote, no_restart=True)
        except Exception:  # noqa: BLE001
            pass

    def _forget_calls(self, actor_id: int) -> int:
        """Drop the in-flight calls and arrived batches of ``actor_id``; how many."""
        refs = [ref for ref, call in self._calls.items() if call.actor_id == actor_id]
        for ref in refs:
            del self._calls[ref]
        dropped = len(refs) + self._scheduler.drop_actor(actor_id)
        first = actor_id * self.settings.slots_per_actor
        for slot in range(first, first + self.settings.slots_per_actor):
            self._arrived.pop(slot, None)
        return dropped

    def restart_actor(self, actor_id: int, reason: str, fatal: bool = False) -> None:
        """Kill actor ``actor_id``, drop its batches, start a fresh one."""
        handle = self._handles[actor_id]
        if not handle.ready:
            self._kill(handle)
            raise ActorStartupError(f"actor {actor_id} could not start: {last_line(reason)}")
        where = f"pid {handle.pid}, node {handle.node_id[:12]}"
        message = f"actor {actor_id} ({where}) failed: {reason}"
        logger.error(message)
        self.dropped_batches += self._forget_calls(actor_id)
        self._kill(handle)
        if handle.pid and _wait_for_exit([handle.pid], 5.0):
            sweep_stale_blocks()  # its env workers' blocks, when it ran on this machine
        check_restart_allowed(message, fatal, self.restarts, self.settings.max_actor_restarts)
        self.restarts += 1
        logger.warning("restarting actor %d with fresh envs (restart %d of %d)", actor_id,
                       self.restarts, self.settings.max_actor_restarts)
        others = {a: n for a, n in self.actor_nodes.items() if a != actor_id and n}
        self._spawn(actor_id, handle.generation + 1, self.cluster.least_used_node(others))

    def _check_unplaced_actors(self) -> None:
        """Stop the run if a (re)started actor is not ready within the start-up
        limit: the cluster has no room for it (a node was removed, resources are
        taken), and waiting would block the learner for ever."""
        if not self._started:
            return  # start() has its own limit (ActorStartupError, exit 2)
        limit_s = self.startup_timeout_s + self.ray_settings.connect_timeout_s
        now = time.monotonic()
        for handle in self._handles.values():
            if not handle.ready and now - handle.spawned_at > limit_s:
                raise ActorPoolError(
                    f"Ray actor {handle.actor_id} was not ready {limit_s:.0f} s after it was "
                    f"started: the cluster may lack {self.cluster.actor_resources()} for it "
                    f"(available: {self.ray.available_resources()}); stopping the run")

    def _probe_hung_actors(self) -> None:
        """Ask busy actors how long ago their unroll last stepped; restart silent ones."""
        timeout = self.settings.actor_timeout_s
        if not timeout:
            return
        now = time.monotonic()
        for handle in list(self._handles.values()):
            if not handle.ready or handle.busy_since is None:
                continue
            if handle.probe_ref is None and now - handle.probe_sent >= HEARTBEAT_INTERVAL_S:
                handle.probe_ref = handle.remote.seconds_since_progress.options(
                    concurrency_group="control").remote()
                handle.probe_sent = now
            silent = now - max(handle.last_progress, handle.busy_since)
            if silent > timeout:
                self.restart_actor(handle.actor_id, f"no progress for {silent:.0f} s "
                                                    f"(hung); killed")

    # -- results ------------------------------------------------------------------
    def _handle_of(self, actor_id: int, generation: int) -> Optional[_Handle]:
        handle = self._handles.get(actor_id)
        return handle if handle is not None and handle.generation == generation else None

    def _on_ready(self, handle: _Handle) -> None:
        try:
            pid, worker_pids, node_id = self.ray.get(handle.ready_ref)
        except self.ray.exceptions.RayError as e:
            self.restart_actor(handle.actor_id, _describe_ray_error(e))
            return
        handle.ready, handle.pid, handle.node_id = True, pid, node_id
        handle.env_worker_pids = tuple(worker_pids)
        handle.ready_ref = None
        # Silence is counted from here: waiting for a node and starting up are not hangs.
        handle.last_progress = time.monotonic()
        if handle.busy_since is not None:
            handle.busy_since = handle.last_progress
        logger.info("actor %d ready on node %s (pid %d)", handle.actor_id, node_id[:12], pid)

    def _on_result(self, ref: Any) -> None:
        call = self._calls.pop(ref)
        handle = self._handle_of(call.actor_id, call.generation)
        if handle is None:
            return  # a call of a replaced actor
        try:
            message, arrays = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:
            env_index = e.cause.env_index if isinstance(e.cause, EnvError) else None
            where = f" (env index {env_index})" if env_index is not None else ""
            self.restart_actor(call.actor_id, f"exception{where}:\n{_describe_ray_error(e)}",
                               fatal=self.settings.fatal_env_errors and env_index is not None)
            return
        except self.ray.exceptions.RayError as e:
            self.restart_actor(call.actor_id, _describe_ray_error(e))
            return
        # Writable copies: the learner may convert them to tensors in place.
        batch = {k: np.array(v, copy=True) for k, v in arrays.items()}
        if self._trajectory_bytes is None:
            self._trajectory_bytes = sum(v.nbytes for v in batch.values())
        self.bytes_moved += self._trajectory_bytes
        self._arrived[message.slot] = batch
        message.sent_at = time.monotonic()  # arrival at the learner (clocks differ by node)
        self._scheduler.arrived(message)
        handle.last_progress = time.monotonic()
        if not any(c.actor_id == handle.actor_id for c in self._calls.values()):
            handle.busy_since = None

    def _on_probe(self, handle: _Handle) -> None:
        ref, handle.probe_ref = handle.probe_ref, None
        try:
            seconds = float(self.ray.get(ref))
        except self.ray.exceptions.RayError:
            return  # the actor's death reaches us through its unroll call
        handle.last_progress = max(handle.last_progress, time.monotonic() - seconds)

    def _poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for any call to finish and handle what finished."""
        # Ready answers first: an actor's first unroll may fail in the same poll.
        waiting: Dict[Any, Tuple[str, Any]] = {}
        for h in self._handles.values():
            if h.ready_ref is not None:
                waiting[h.ready_ref] = ("ready", h)
        for h in self._handles.values():
            if h.probe_ref is not None:
                waiting[h.probe_ref] = ("probe", h)
        waiting.update({ref: ("unroll", ref) for ref in self._calls})
        done = []
        if waiting:
            done, _ = self.ray.wait(list(waiting), num_returns=1, timeout=timeout)
            more, _ = self.ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            finished = set(done) | set(more)
            done = [ref for ref in waiting if ref in finished]  # in the order above
        else:
            time.sleep(timeout)
        for ref in done:
            kind, what = waiting[ref]
            if kind == "unroll":
                if ref in self._calls:
                    self._on_result(ref)
            elif kind == "ready":
                if self._handles.get(what.actor_id) is what and what.ready_ref is ref:
                    self._on_ready(what)
            elif self._handles.get(what.actor_id) is what and what.probe_ref is ref:
                self._on_probe(what)
        self._check_unplaced_actors()
        self._probe_hung_actors()

    def next_batch(self, timeout: Optional[float] = None
                   ) -> Optional[Tuple[messages.BatchReady, Dict[str, np.ndarray]]]:
        """Wait until the scheduler picks a batch; returns its message and
        arrays, or None if none is ready within ``timeout`` seconds (None: wait)."""
        def take():
            message = self._scheduler.next(self._weights[0])
            return None if message is None else (message, self._arrived[message.slot])

        return wait_for_batch(take, self._poll, timeout)

    def release(self, message: messages.BatchReady, reseed_epoch: Optional[int] = None) -> None:
        """Hand the slot back: the actor's next unroll call starts with the newest weights."""
        if reseed_epoch is not None:
            self.epoch = reseed_epoch
        self._arrived.pop(message.slot, None)
        handle = self._handle_of(message.actor_id, message.generation)
        if handle is None:
            return
        self._hand_out(handle, message.slot, reseed_epoch)

    def stats(self) -> PoolStats:
        return PoolStats(len(self._scheduler), self.restarts, self.dropped_batches,
                         bytes_moved=self.bytes_moved, actor_nodes=self.actor_nodes)

    def close(self) -> None:
        """Stop every actor (env workers first), then Ray if this pool started it."""
        if self._closed:
            return
        self._closed = True
        ray = self.ray
        handles = list(self._handles.values())
        closing = []
        for h in handles:
            try:
                closing.append(h.remote.close.options(concurrency_group="control").remote())
            except Exception:  # noqa: BLE001
                pass
        if closing:
            try:
                ray.wait(closing, num_returns=len(closing), timeout=10)
            except Exception:  # noqa: BLE001
                pass
        _collect_stopped(ray, list(self._calls))
        for h in handles:
            self._kill(h)
        _wait_for_exit([p for h in handles for p in ((h.pid,) if h.pid else ())], 10.0)
        self._handles, self._calls, self._arrived = {}, {}, {}
        self._weights = None
        self.cluster.close()
        sweep_stale_blocks()

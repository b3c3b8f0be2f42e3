"""Ray below the pool's bookkeeping: importing Ray, connecting to (or starting) a
Ray instance, placing the actors on the cluster, and reading Ray's answers when
actors fail or stop.

- ``import_ray``: ``import ray``, with the loopback and worker-niceness switches
  of a local instance set first;
- ``wait_for_cluster_address``: before ``ray.init`` joins a cluster by
  "host:port" (or "ray://host:port"), wait a bounded time for something to
  listen where Ray will connect, and fail naming the address (``ray.init`` itself
  retries for minutes without a word);
- ``init_ray``: ``ray.init`` for a driver (the train command's pool, the Ray
  sweep): the address waited for, the caller's SIGINT/SIGTERM handlers kept,
  a failure as one ``ActorStartupError`` that says what to do;
- ``RayConnection``: held by ``RayActorPool`` (runtime.ray_pool); owns the
  connection and the placement: ``ray.init`` (a local instance, or the cluster at
  ``RayBackend.address``), the PACK placement group or SPREAD scheduling, the
  resources each actor reserves;
- ``_describe_ray_error``, ``_wait_for_exit``, ``_collect_stopped``: a Ray error as
  the user needs it, waiting for killed actor processes, the answers of stopped calls.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from alf_async.runtime.actor_pool import ActorStartupError, last_line
from alf_async.ray_settings import RayBackendSettings
from alf_async.settings import TrainerSettings

logger = logging.getLogger("alf_async")


# Ray decides a node's address from its default route unless told otherwise; a
# local instance started for one run serves this machine only, so it listens on
# loopback (Ray's switch for that is this variable, read when ray is imported).
_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Ray runs its workers at nice 15 by default; on the learner's own machine the
# actors then starve whenever the learner (nice 0) trains. A local instance runs
# them at the learner's priority, as the process backend does.
_WORKER_NICENESS = "RAY_worker_niceness"


def import_ray(local_instance: bool):
    """``import ray``; for a local instance, first make it bind to loopback and
    run its workers at normal priority (both read by Ray from the environment)."""
    if local_instance:
        os.environ.setdefault(_WORKER_NICENESS, "0")
        if "ray" not in sys.modules:
            os.environ.setdefault(_LOOPBACK_SWITCH, "0")
    import ray

    return ray


def _host_port(address: str) -> Optional[Tuple[str, int]]:
    """(host, port) of a "host:port" or "ray://host:port" address; None for
    "auto", "local" or anything without a numeric port."""
    text = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listening(host: str, port: int, deadline: float, quiet: bool = False
               ) -> Optional[OSError]:
    """None once a TCP connection to host:port succeeds (tried about once a
    second until ``deadline``, time.monotonic()); else the last error. Logs
    once that it waits, unless ``quiet``."""
    waiting = quiet
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(
                    5.0, max(0.1, deadline - time.monotonic()))):
                return None
        except OSError as e:
            if time.monotonic() + 1.0 > deadline:
                return e
            if not waiting:
                logger.info("waiting for the Ray cluster at %s:%d (%s) for up to %.0f s",
                            host, port, e.strerror or e, deadline - time.monotonic())
                waiting = True
            time.sleep(1.0)


def _auth_hint(error: BaseException) -> str:
    """What to do when ``ray.init`` failed on the cluster's token
    authentication (Ray 2.60's ``ray start`` turns it on by default; a driver
    joining by "host:port" then needs it named, "auto" finds it alone)."""
    seen = error
    while seen is not None:
        if "InvalidAuthToken" in str(seen) or "AuthenticationError" in str(seen):
            return (". The cluster uses token authentication: set RAY_AUTH_MODE=token in "
                    "this command's environment (the token is read from "
                    "~/.ray/auth_token, or RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH)")
        seen = seen.__cause__ or seen.__context__
    return ""


def wait_for_cluster_address(ray: Any, address: Optional[str], timeout_s: float,
                             binding: str) -> None:
    """Raise ``ActorStartupError`` naming ``binding`` unless something accepts
    TCP connections at ``address`` within ``timeout_s`` seconds (a head still
    starting gets that long). Nothing to check for None, "auto" or "local".

    Ray replaces a loopback host (127.0.0.1, localhost) with this machine's own
    address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` was set when it was
    imported; a cluster started on loopback (``ray start --head
    --node-ip-address=127.0.0.1``) is then out of the driver's reach, and the
    error says which variable to set."""
    host_port = None if address is None else _host_port(address)
    if host_port is None:
        return
    host, port = host_port
    deadline = time.monotonic() + timeout_s
    error = _listening(host, port, deadline)
    if error is not None:
        raise ActorStartupError(
            f"nothing listens at {binding}={address!r} ({host}:{port}: "
            f"{error.strerror or error}; waited {timeout_s:g} s). Start the head there "
            f"(ray start --head --port={port}) or correct the address")
    if not _is_loopback(host) or "://" in address:
        return
    node_ip = ray.util.get_node_ip_address()
    if _is_loopback(node_ip) or _listening(
            node_ip, port, time.monotonic() + min(timeout_s, 3.0), quiet=True) is None:
        return
    raise ActorStartupError(
        f"the Ray cluster at {binding}={address!r} listens on loopback only, and Ray "
        f"turns that address into this machine's {node_ip}:{port}, where nothing "
        f"listens. Set {_LOOPBACK_SWITCH}=0 in the environment of this command, as "
        "for the cluster's `ray start`")


def init_ray(ray: Any, kwargs: Dict[str, Any], address: Optional[str], timeout_s: float,
             binding: str) -> None:
    """``ray.init(**kwargs)``, after ``wait_for_cluster_address``. ray.init
    installs SIGINT/SIGTERM handlers that exit at once; the caller's (a final
    checkpoint, exit 143; the sweep's orderly stop) stay in charge. Raises
    ``ActorStartupError`` naming the local instance or ``binding``=``address``
    when Ray cannot start or be reached."""
    wait_for_cluster_address(ray, address, timeout_s, binding)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "a local Ray instance" if address is None else \
            f"the Ray cluster at {binding}={address!r}"
        raise ActorStartupError(f"could not start or reach {where}: "
                                f"{last_line(e)}{_auth_hint(e)}") from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in handlers.items():
                if handler is not None:
                    signal.signal(signum, handler)


class RayConnection:
    """This driver's Ray, for ``RayActorPool``: connected (or a local instance
    started) when built, the actors' placement (a PACK placement group, or SPREAD
    scheduling) and the resources each actor reserves; ``close`` removes the
    placement group and shuts Ray down if this driver started or joined it.

    Args:
        settings: the run's settings (N, W).
        ray_settings: the cluster and placement (``RayBackend.*``).
    """

    def __init__(self, settings: TrainerSettings, ray_settings: RayBackendSettings):
        self.settings, self.ray_settings = settings, ray_settings
        self._placement_group: Any = None
        self._owns_ray = False
        self.ray = import_ray(local_instance=ray_settings.address is None
                              and not self._connected())
        self._connect()

    # -- connection -------------------------------------------------------------
    @staticmethod
    def _connected() -> bool:
        ray = sys.modules.get("ray")
        return bool(ray is not None and ray.is_initialized())

    def _connect(self) -> None:
        ray, rs = self.ray, self.ray_settings
        if ray.is_initialized():
            return  # the user (or a test) connected this driver already
        kwargs: Dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
        if rs.address is None:
            # "local": a new instance even where RAY_ADDRESS names a cluster.
            kwargs.update(address="local", include_dashboard=False,
                          num_cpus=rs.num_cpus or self._local_cpus(),
                          _node_ip_address="127.0.0.1")
            if rs.object_store_memory_mb:
                kwargs["object_store_memory"] = rs.object_store_memory_mb * 1024 ** 2
        else:
            kwargs["address"] = rs.address
        init_ray(ray, kwargs, rs.address, rs.connect_timeout_s, "RayBackend.address")
        self._owns_ray = True
        logger.info("Ray: %s, %d node(s), %s CPUs", "local instance started"
                    if rs.address is None else f"connected to {rs.address}",
                    len([n for n in ray.nodes() if n.get("Alive")]),
                    ray.cluster_resources().get("CPU", 0))

    def _local_cpus(self) -> int:
        """Logical CPUs of a local instance: the machine's, or enough for all N
        actors' reservations if more (on one machine the actors share its cores,
        as actor processes of the process backend do)."""
        needed = self.settings.num_actors * self.ray_settings.actor_cpus(
            self.settings.num_env_workers)
        return max(os.cpu_count() or 1, int(-(-needed // 1)))

    def make_placement(self) -> None:
        """PACK: a placement group with one bundle per actor."""
        if self.ray_settings.placement_strategy != "PACK":
            return
        from ray.util.placement_group import placement_group

        bundles = [self.actor_resources() for _ in range(self.settings.num_actors)]
        self._placement_group = placement_group(bundles, strategy="PACK")
        if not self.wait([self._placement_group.ready()], self.ray_settings.connect_timeout_s):
            raise ActorStartupError(
                f"the Ray cluster could not place {self.settings.num_actors} actors of "
                f"{bundles[0]} within RayBackend.connect_timeout_s="
                f"{self.ray_settings.connect_timeout_s:g} s (cluster resources: "
                f"{self.ray.cluster_resources()})")

    def wait(self, refs: Sequence[Any], timeout: float) -> bool:
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        return len(ready) == len(refs)

    def actor_resources(self) -> Dict[str, float]:
        resources = {"CPU": self.ray_settings.actor_cpus(self.settings.num_env_workers)}
        resources.update(self.ray_settings.resources_per_actor)
        return resources

    def least_used_node(self, actor_nodes: Dict[int, str]) -> Optional[str]:
        """Where a restarted actor should go (``least_used_node`` of the module,
        on this cluster's nodes now)."""
        return least_used_node(self.ray.nodes(), actor_nodes,
                               self.actor_resources()["CPU"])

    def actor_options(self, actor_id: int, node_id: Optional[str] = None) -> Dict[str, Any]:
        """Ray options of actor ``actor_id``: its resources and placement (its
        bundle of the PACK group; else SPREAD, or ``node_id`` preferred)."""
        rs = self.ray_settings
        options: Dict[str, Any] = {
            "num_cpus": rs.actor_cpus(self.settings.num_env_workers),
            "resources": dict(rs.resources_per_actor),
            "name": None, "max_restarts": 0, "max_task_retries": 0,
        }
        if self._placement_group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self._placement_group, placement_group_bundle_index=actor_id)
        elif node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
        else:
            options["scheduling_strategy"] = "SPREAD"
        return options

    def close(self) -> None:
        """Remove the placement group; shut Ray down if this driver started it."""
        if self._placement_group is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._placement_group)
            except Exception:  # noqa: BLE001
                pass
            self._placement_group = None
        if self._owns_ray:
            self._owns_ray = False
            self.ray.shutdown()


def least_used_node(nodes: Sequence[Dict[str, Any]], actor_nodes: Dict[int, str],
                    cpus_per_actor: float) -> Optional[str]:
    """The alive node, among those with CPUs left for one more actor, that runs
    the fewest of the pool's actors (ties: the most CPUs); None if none has room.

    nodes: ``ray.nodes()`` entries ("NodeID", "Alive", "Resources"); actor_nodes:
    actor id -> node id of the pool's live actors. SPREAD placement spreads the
    actors started together, but a lone restart does not look at where the others
    run: after a node is lost, the restarted actor should go to an idle node.
    """
    counts: Dict[str, int] = {}
    for node in actor_nodes.values():
        counts[node] = counts.get(node, 0) + 1
    candidates = []
    for node in nodes:
        used = counts.get(node["NodeID"], 0)
        cpus = float(node.get("Resources", {}).get("CPU", 0))
        if node.get("Alive") and cpus - used * cpus_per_actor >= cpus_per_actor:
            candidates.append((used, -cpus, node["NodeID"]))
    return min(candidates)[2] if candidates else None


def _collect_stopped(ray, refs: Sequence[Any]) -> None:
    """Take the answers of unroll calls that ``close`` stopped, so Ray does not
    log their ``_UnrollStopped`` as an unhandled error when the refs are freed."""
    if not refs:
        return
    try:
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=2.0)
    except Exception:  # noqa: BLE001
        return
    for ref in done:
        try:
            ray.get(ref, timeout=0)
        except Exception:  # noqa: BLE001 - stopped or failed: either way, done with
            pass


def _wait_for_exit(pids: Sequence[int], timeout_s: float) -> bool:
    """Wait until the Ray actor processes ``pids`` that run on this machine have
    exited (``ray.kill`` returns before they have); True if none is left."""
    import psutil

    def local_actor(pid: int) -> bool:
        try:
            return psutil.Process(pid).name().startswith("ray::") or any(
                "ray::" in part for part in psutil.Process(pid).cmdline()[:1])
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if local_actor(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if local_actor(p)]
    return not left


def _describe_ray_error(error: Exception) -> str:
    """A Ray error as the user needs it: the actor's traceback, or why it died."""
    cause = getattr(error, "cause", None)
    if cause is not None and not isinstance(cause, type(error)):
        text = str(error)
        return text[-4000:]
    return f"{type(error).__name__}: {last_line(str(error))}"

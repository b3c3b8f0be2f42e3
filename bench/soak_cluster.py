"""The local two-node Ray cluster of ``bench/soak.py --backend ray``: a head
and one worker node on loopback (Ray's ``cluster_utils.Cluster``, as
bench/ray_scaling.py and tests/test_ray_backend.py start theirs), with the
worker node removed and a new one added during the soak."""

from __future__ import annotations

import logging
import os
from typing import Dict, Iterable, Optional

logger = logging.getLogger("soak")

NODE_OBJECT_STORE_BYTES = 100 * 1024 ** 2  # each node's object store
# Ray's switch that makes its nodes (and drivers) use 127.0.0.1 as their address.
_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class SoakCluster:
    """Head node with room for every actor (``head_cpus``) and one worker node
    (``node_cpus``), so that an actor whose node is removed has somewhere to
    restart; the processes are children of this process.

    Args:
        head_cpus: logical CPUs of the head node.
        node_cpus: logical CPUs of the worker node (and of the one added back).
    """

    def __init__(self, head_cpus: int, node_cpus: int):
        os.environ.setdefault(_LOOPBACK_SWITCH, "0")  # loopback only
        os.environ.setdefault("RAY_worker_niceness", "0")  # actors at the learner's priority
        from ray.cluster_utils import Cluster

        self.node_cpus = node_cpus
        self.cluster = Cluster(initialize_head=True, connect=False, head_node_args={
            "num_cpus": head_cpus, "object_store_memory": NODE_OBJECT_STORE_BYTES,
            "include_dashboard": False})
        self.add_node()
        logger.info("local Ray cluster at %s", self.address)

    @property
    def address(self) -> str:
        return self.cluster.address

    @staticmethod
    def driver_environment() -> Dict[str, str]:
        """What a driver process (the train command) needs in its environment
        to join this cluster: the loopback switch its nodes were started with.
        Without it Ray turns the address 127.0.0.1 into the machine's own
        address, where nothing listens, and ``ray.init`` retries for minutes."""
        return {_LOOPBACK_SWITCH: os.environ[_LOOPBACK_SWITCH]}

    def add_node(self) -> None:
        """Start a worker node and wait until the cluster sees it."""
        self.cluster.add_node(num_cpus=self.node_cpus,
                              object_store_memory=NODE_OBJECT_STORE_BYTES)
        self.cluster.wait_for_nodes()

    def remove_node_hosting(self, node_ids: Iterable[str]) -> Optional[str]:
        """Remove the worker node whose id is in ``node_ids`` (the nodes that
        run actors); its id, or None when no worker node runs one."""
        wanted = set(node_ids)
        for node in list(self.cluster.worker_nodes):
            if node.node_id in wanted:
                self.cluster.remove_node(node)
                logger.info("removed Ray node %s", node.node_id)
                return node.node_id
        return None

    def nodes_alive(self) -> int:
        """Nodes of the cluster running now (the head included)."""
        return 1 + sum(1 for node in self.cluster.worker_nodes if node.remaining_processes_alive())

    def shutdown(self) -> None:
        self.cluster.shutdown()

"""The settings only the Ray backend reads (gin ``RayBackend.*``): where the
cluster is and what each Ray actor asks of it; and whether Ray is installed."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Optional

import gin

from alf_async.utils.validation import ConfigError, rule, validate_fields

RAY_GIN_NAME = "RayBackend"
# How long a driver waits for a cluster to answer (and the actors for room on
# it): RayBackend.connect_timeout_s's default, and alf-sweep's wait for --address.
DEFAULT_CONNECT_TIMEOUT_S = 120.0
PLACEMENT_STRATEGIES = ("SPREAD", "PACK")
# The Ray versions the "ray" extra of setup.py admits (tested with 2.60).
RAY_REQUIREMENT = "ray>=2.40,<3"


def ray_installed() -> bool:
    """Whether ``import ray`` can succeed (without importing it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["ray"] is None
        return False


@gin.configurable(RAY_GIN_NAME)
@dataclass(frozen=True)
class RayBackendSettings:
    """Where the Ray backend finds its cluster and what each Ray actor asks of it.

    Read only when ``Trainer.backend = "ray"``; bound in gin as
    ``RayBackend.<name>``.

    Args:
        address: the Ray cluster to use. None starts a local Ray instance for
            the run (listening on loopback only) and shuts it down at the end;
            "auto" joins the cluster running on this machine (``ray start
            --head`` here, or ``ray start --address=...`` to join this machine to
            one); "ray://host:port" connects through Ray Client; "host:port"
            joins that cluster's GCS. A driver already connected (``ray.init``
            called by the user) is used as it is.
        num_cpus_per_actor: CPUs each Ray actor reserves on its node (None:
            1 + Trainer.num_env_workers, the actor process and its env
            workers).
        resources_per_actor: custom resources each actor asks for, e.g.
            ``{"simulator": 1}`` to place actors on nodes started with
            ``ray start --resources='{"simulator": 4}'``.
        placement_strategy: "SPREAD" (actors go to different nodes where they
            fit: the envs of N actors get N nodes' cores) or "PACK" (actors fill
            one node before the next: a placement group with one bundle per
            actor; a restarted actor goes back to its bundle).
        num_cpus: logical CPUs of a local instance (address None; None: the
            machine's cores, or N x the actors' CPUs if more, so that every
            actor fits; the actors then share the cores as actor processes do).
        object_store_memory_mb: object-store size of a local instance in MiB
            (None: Ray's default, 30% of the memory).
        connect_timeout_s: seconds to wait for the cluster at ``address`` to
            answer (a head still starting), and for the actors' resources to
            become available, before the run fails naming what it waited for.
    """

    gin_name: ClassVar[str] = RAY_GIN_NAME

    address: Optional[str] = field(default=None, metadata=rule("str", optional=True))
    num_cpus_per_actor: Optional[float] = field(default=None, metadata=rule(
        "number", low=0, optional=True))
    resources_per_actor: Mapping[str, float] = field(default_factory=dict)
    placement_strategy: str = field(default="SPREAD", metadata=rule(
        "choice", choices=PLACEMENT_STRATEGIES))
    num_cpus: Optional[int] = field(default=None, metadata=rule("int", low=1, optional=True))
    object_store_memory_mb: Optional[int] = field(default=None, metadata=rule(
        "int", low=80, optional=True))
    connect_timeout_s: float = field(default=DEFAULT_CONNECT_TIMEOUT_S, metadata=rule(
        "number", low=0, low_open=True))

    def __post_init__(self) -> None:
        validate_fields(self, RAY_GIN_NAME)
        resources = self.resources_per_actor
        if not isinstance(resources, Mapping) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                and v >= 0 for k, v in resources.items()):
            raise ConfigError(f"RayBackend.resources_per_actor must map resource names to "
                              f"amounts >= 0, e.g. {{'simulator': 1}}; got {resources!r}")
        reserved = sorted(set(resources) & {"CPU", "GPU", "memory", "object_store_memory"})
        if reserved:
            raise ConfigError(f"RayBackend.resources_per_actor takes custom resources only; "
                              f"set CPUs with RayBackend.num_cpus_per_actor (got {reserved})")
        if (self.placement_strategy == "PACK" and self.num_cpus_per_actor == 0
                and not any(resources.values())):
            raise ConfigError("RayBackend.placement_strategy='PACK' needs a positive amount "
                              "per actor: RayBackend.num_cpus_per_actor > 0 or a custom "
                              "resource in RayBackend.resources_per_actor")

    def actor_cpus(self, num_env_workers: int) -> float:
        """CPUs one actor reserves: the knob, or 1 + W."""
        if self.num_cpus_per_actor is not None:
            return float(self.num_cpus_per_actor)
        return 1.0 + num_env_workers

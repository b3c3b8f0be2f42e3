"""What bench/soak.py samples of a run every ``--sample_interval_s`` seconds:
resident memory, open file descriptors and threads of each process of the run
summed per role, the bytes of the run's shared-memory blocks in /dev/shm, and
the number of processes. Not a benchmark; the soak's verdicts on these figures
are in bench/soak_verdicts.py.

Roles: ``trainer`` (the train command's process), ``actors`` (processes named
``ACTOR_PROCESS_NAME``, or the Ray workers that host an actor),
``env_workers`` (processes named ``ENV_WORKER_PROCESS_NAME``), ``helpers``
(the trainer's other descendants: multiprocessing's forkserver and resource
tracker, the evaluator) and, with the Ray backend, ``ray`` (the local
cluster's own processes: GCS, raylets, idle workers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set

import psutil

from alf_async.utils.process import (ACTOR_PROCESS_NAME, ENV_WORKER_PROCESS_NAME,
                                     HOGWILD_WORKER_PROCESS_NAME)
from alf_async.utils.shared_memory import block_owner_pid, list_blocks, shm_directory

ROLES = ("trainer", "actors", "env_workers", "helpers", "ray")
FIGURES = ("rss_mib", "fds", "threads")
# What a Ray worker hosting an alf_async actor shows in its process title.
RAY_ACTOR_TITLE = "_RayActor"


@dataclass
class ResourceSample:
    """One sample of the run.

    t_s: seconds since the soak started.
    roles: role -> {"rss_mib": MiB, "fds": count, "threads": count,
        "processes": count}, summed over the role's processes.
    shm_bytes: bytes of the shared-memory blocks whose owner is a process of
        the run (any process ever seen, so that blocks a dead one left count).
    processes: every process of the run (the trainer and its descendants, the
        Ray cluster's processes).
    pids: pid -> role of the processes sampled.
    """

    t_s: float
    roles: Dict[str, Dict[str, float]] = field(default_factory=dict)
    shm_bytes: int = 0
    processes: int = 0
    pids: Dict[int, str] = field(default_factory=dict)

    def total(self, figure: str) -> float:
        """``figure`` summed over every role."""
        return sum(r[figure] for r in self.roles.values())

    def to_json(self) -> Dict:
        return {"t_s": self.t_s, "processes": self.processes, "shm_bytes": self.shm_bytes,
                "total": {f: self.total(f) for f in FIGURES}, **self.roles}


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""


def _title(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _descendants(pid: Optional[int]) -> List[psutil.Process]:
    if pid is None:
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def classify(trainer_pid: Optional[int], cluster_pid: Optional[int]) -> Dict[int, str]:
    """pid -> role of every process of the run now: the trainer's process
    tree and, when ``cluster_pid`` is given (the process that started the local
    Ray cluster), the cluster's processes below it (the trainer's tree, which
    may also be below it, excepted)."""
    roles: Dict[int, str] = {}
    trainer_tree = _descendants(trainer_pid)
    if trainer_pid is not None and psutil.pid_exists(trainer_pid):
        roles[trainer_pid] = "trainer"
    for proc in trainer_tree:
        name = _name(proc)
        roles[proc.pid] = ("actors" if name in (ACTOR_PROCESS_NAME, HOGWILD_WORKER_PROCESS_NAME)
                           else "env_workers" if name == ENV_WORKER_PROCESS_NAME
                           else "helpers")
    for proc in _descendants(cluster_pid):
        if proc.pid in roles:
            continue
        roles[proc.pid] = ("env_workers" if _name(proc) == ENV_WORKER_PROCESS_NAME
                           else "actors" if RAY_ACTOR_TITLE in _title(proc)
                           else "ray")
    return roles


def shm_bytes(owners: Iterable[int]) -> int:
    """Bytes of the blocks in /dev/shm whose owner pid is in ``owners``."""
    owners = set(owners)
    total = 0
    for name in list_blocks():
        if block_owner_pid(name) in owners:
            try:
                total += os.stat(os.path.join(shm_directory(), name)).st_size
            except OSError:
                pass
    return total


def take_sample(t_s: float, trainer_pid: Optional[int], cluster_pid: Optional[int],
                owners_seen: Set[int]) -> ResourceSample:
    """Sample the run now. ``owners_seen``: the pids seen so far (this
    sample's are added), whose blocks count in ``shm_bytes``."""
    sample = ResourceSample(t_s=round(t_s, 1))
    sample.roles = {role: {f: 0.0 for f in FIGURES} | {"processes": 0} for role in ROLES}
    pids = classify(trainer_pid, cluster_pid)
    for pid, role in pids.items():
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                rss, fds, threads = proc.memory_info().rss, proc.num_fds(), proc.num_threads()
        except psutil.Error:
            continue
        entry = sample.roles[role]
        entry["rss_mib"] += rss / 2 ** 20
        entry["fds"] += fds
        entry["threads"] += threads
        entry["processes"] += 1
        sample.pids[pid] = role
    owners_seen.update(sample.pids)
    if trainer_pid is not None:
        owners_seen.add(trainer_pid)
    sample.shm_bytes = shm_bytes(owners_seen)
    sample.processes = len(sample.pids)
    return sample

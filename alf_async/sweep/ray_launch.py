"""Trials on a Ray cluster (``alf-sweep --backend ray``): each trial is a Ray
actor (``TrialHost``) that reserves the trial's CPUs on a node and runs the
ordinary train command there as its child process.

Plain Ray actors, not Ray Tune: a trial is a train process with its own
process tree, signal handling, checkpoints and run directory, which the sweep
already knows how to start, stop, resume and tabulate; Tune's trial model
(a Python function or class run inside Tune's worker, reporting through Tune,
checkpointing through Tune's storage) would have wrapped that process rather
than replaced it, and brings pandas and pyarrow (the "ray[tune]" extra) for
nothing the sweep lacks: the search and pruning are Optuna's in both cases,
and the study lives in the sweep directory's study.db either way.

Run directories:

- shared (``--shared_dir``): the sweep directory is on storage every node
  sees at the same path (NFS, or one machine). The trial writes its run
  directory there; a trial whose node is lost is re-run from its last
  checkpoint (the train process was SIGTERMed with its node's Ray worker, or
  the newest periodic checkpoint otherwise).
- copied (the default): the driver ships the trial's run directory (as it is
  in the sweep directory: empty, or what an earlier attempt left) to the node,
  the trial runs in a temporary directory there, and the directory comes back
  into the sweep directory when the process ends. Metrics rows reach the
  driver as the trial trains (the pruner reads them). A trial whose node is
  lost is re-run from the directory as the sweep directory holds it: from the
  start, or from the checkpoint an earlier invocation brought back.

A trial's process gets SIGTERM (a clean stop) if its Ray worker dies; the
sweep stops it by signal through its actor, and kills the actor at the end.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tarfile
import tempfile
from typing import Any, Dict, Optional, Sequence, Tuple

from alf_async.ray_settings import DEFAULT_CONNECT_TIMEOUT_S
from alf_async.sweep.launch import (
    MetricsTail, TrialLost, TrialProcess, kill_group, start_train_process,
    train_command, train_environment)

# How often a running trial is asked for its state (seconds).
POLL_INTERVAL_S = 0.5


def pack_directory(path: str) -> bytes:
    """The directory's files as an uncompressed tar archive (b"" if it is absent)."""
    if not os.path.isdir(path):
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in sorted(os.listdir(path)):
            if name != "run.lock":
                tar.add(os.path.join(path, name), arcname=name)
    return buffer.getvalue()


def unpack_directory(archive: bytes, path: str) -> None:
    """Extract ``pack_directory``'s archive into ``path`` (files replaced)."""
    os.makedirs(path, exist_ok=True)
    if archive:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            tar.extractall(path, filter="data")


class TrialHost:
    """The Ray actor of one trial: starts its train process on this node and
    answers the driver's polls (wrapped by ``ray.remote`` in ``RayLauncher``)."""

    def __init__(self) -> None:
        self.proc = None
        self.run_dir = ""
        self.copied = False
        self.metrics: Optional[MetricsTail] = None

    def start(self, run_dir: Optional[str], name: str, archive: bytes,
              arguments: Sequence[str], package_root: str) -> str:
        """Start the train process; ``run_dir`` None: run in a temporary copy of
        ``archive``. Returns this node's id ("" outside Ray)."""
        import ray

        if run_dir is None:
            self.copied = True
            run_dir = os.path.join(tempfile.mkdtemp(prefix="alf_sweep_"), name)
            unpack_directory(archive, run_dir)
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self.metrics = MetricsTail(run_dir)
        self.proc = start_train_process(
            train_command(run_dir, arguments), os.path.join(run_dir, "train_output.txt"),
            train_environment(package_root))
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""

    def poll(self) -> Tuple[Optional[int], str, bytes]:
        """(exit code or None, new metrics rows, the run directory's archive
        once the process ended in a copied directory)."""
        code = self.proc.poll()
        rows = self.metrics.read()
        if code is None:
            return None, rows, b""
        kill_group(self.proc.pid)
        rows += self.metrics.read()
        archive = b""
        if self.copied:
            archive = pack_directory(self.run_dir)
            shutil.rmtree(os.path.dirname(self.run_dir), ignore_errors=True)
        return code, rows, archive

    def send_signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc.pid)
            self.proc.wait()


class RayTrial(TrialProcess):
    """A trial's actor as the sweep polls it (one poll in flight at a time)."""

    def __init__(self, ray: Any, actor: Any, started: Any, run_dir: str, copied: bool):
        self.ray, self.actor, self.run_dir, self.copied = ray, actor, run_dir, copied
        self._started = started  # ObjectRef of start(): the node id
        self._poll_ref: Any = None
        self._rows = ""
        self.where = "waiting for a node with its CPUs"
        self.node_id: Optional[str] = None
        self._exit_code: Optional[int] = None

    def _get(self, ref: Any) -> Any:
        from ray import exceptions

        try:
            return self.ray.get(ref)
        except (exceptions.RayActorError, exceptions.NodeDiedError,
                exceptions.ObjectLostError, exceptions.OwnerDiedError) as e:
            raise TrialLost(f"its Ray actor died ({type(e).__name__})") from None

    def poll(self) -> Optional[int]:
        if self._exit_code is not None:
            return self._exit_code
        if self.node_id is None:
            if not self.ray.wait([self._started], timeout=0)[0]:
                return None
            self.node_id = self._get(self._started)
            self.where = f"node {self.node_id[:12]}"
        if self._poll_ref is None:
            self._poll_ref = self.actor.poll.remote()
        if not self.ray.wait([self._poll_ref], timeout=0)[0]:
            return None
        code, rows, archive = self._get(self._poll_ref)
        self._poll_ref = None
        self._rows += rows
        if code is not None:
            if self.copied:
                unpack_directory(archive, self.run_dir)
            self._exit_code = code
            self.ray.kill(self.actor)
        return code

    def new_metrics(self) -> str:
        rows, self._rows = self._rows, ""
        return rows

    def send_signal(self, signum: int) -> None:
        self.actor.send_signal.remote(signum)

    def kill(self) -> None:
        from ray import exceptions

        try:
            self.ray.get(self.actor.kill.remote(), timeout=30)
        except (exceptions.RayError, TimeoutError):
            pass
        self.ray.kill(self.actor)


class RayLauncher:
    """Places each trial on a Ray cluster as a ``TrialHost`` actor reserving
    its CPUs.

    Args:
        address: the cluster ("auto", "host:port", "ray://..."); None starts a
            local Ray instance on this machine for the sweep.
        shared_dir: whether the sweep directory is on storage every node sees
            at the same path (see the module docstring).
    """

    def __init__(self, address: Optional[str], shared_dir: bool):
        from alf_async.runtime.ray_cluster import import_ray, init_ray

        self.ray = import_ray(local_instance=address is None)
        self.shared_directories = shared_dir
        self._owns_ray = False
        if not self.ray.is_initialized():
            kwargs: Dict[str, Any] = {"logging_level": logging.WARNING,
                                      "log_to_driver": False}
            if address is None:
                kwargs.update(address="local", include_dashboard=False,
                              _node_ip_address="127.0.0.1")
            else:
                kwargs["address"] = address
            init_ray(self.ray, kwargs, address, DEFAULT_CONNECT_TIMEOUT_S, "--address")
            self._owns_ray = True
        self._host = self.ray.remote(max_restarts=0, max_task_retries=0)(TrialHost)
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        cpus = self.ray.cluster_resources().get("CPU", 0)
        self.description = (f"the Ray cluster at {address}" if address else
                            "a local Ray instance") + f" ({len(nodes)} node(s), {cpus:g} CPUs)"
        self.total_cpus = cpus

    def start(self, run_dir: str, arguments: Sequence[str], output_path: str,
              cpus: int = 1) -> TrialProcess:
        from alf_async.config import PACKAGE_ROOT

        actor = self._host.options(num_cpus=cpus).remote()
        name = os.path.basename(run_dir)
        if self.shared_directories:
            started = actor.start.remote(run_dir, name, b"", list(arguments), PACKAGE_ROOT)
        else:
            started = actor.start.remote(None, name, pack_directory(run_dir),
                                         list(arguments), PACKAGE_ROOT)
        return RayTrial(self.ray, actor, started, run_dir, not self.shared_directories)

    def close(self) -> None:
        if self._owns_ray:
            self.ray.shutdown()
            self._owns_ray = False

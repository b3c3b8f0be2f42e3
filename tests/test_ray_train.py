"""The train command with ``Trainer.backend="ray"``, as a user runs it.

- The run starts its own local Ray instance (``RayBackend.address`` None), trains
  with N = 2 Ray actors (each with an env-worker process), records the node of each batch's actor and the bytes
  moved; Ctrl-C (SIGINT to the process group) writes the final checkpoint, exits
  130 and leaves no Ray actor, no raylet / GCS / worker and no env worker behind.
- The checkpoint resumes on the process backend, and that one back on Ray, where
  SIGTERM to the trainer alone also writes the final checkpoint (exit 143).
- ``backend="ray"`` without Ray installed exits 2 saying how to install it, and
  the library imports without Ray.
- An address where nothing listens exits 2 naming ``RayBackend.address`` after
  ``connect_timeout_s`` (``ray.init`` alone retries for minutes); a loopback
  address is checked where Ray will really connect (a head on every interface
  passes; one on loopback only is named, with the variable to set).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Set, Tuple

import psutil
import pytest

from reliability_helpers import REPO_ROOT, TrainRun, checkpoint_files, small_params

# One Ray cluster at a time: every test of these modules on one xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

RAY = ("Trainer.backend='ray'",)  # a local instance sized by the run (N x (1 + W) CPUs)
LONG = 100000  # iterations: the run only ends through the signal

# Processes of a Ray instance (by name or command line).
RAY_PROCESS_MARKS = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard",
                     "log_monitor.py", "monitor.py", "runtime_env", "ray/_private")


def _cmdline(p: psutil.Process):
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def ray_processes() -> Set[Tuple[int, float]]:
    """(pid, create time) of every Ray process on this machine."""
    found = set()
    for p in psutil.process_iter(["pid", "name", "cmdline", "create_time"]):
        text = " ".join([p.info["name"] or ""] + (p.info["cmdline"] or []))
        if any(mark in text for mark in RAY_PROCESS_MARKS) and p.info["pid"] != os.getpid():
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.add((p.info["pid"], p.info["create_time"]))
            except psutil.Error:
                pass
    return found


def new_ray_processes(before: Set[Tuple[int, float]], timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        left = ray_processes() - before
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.timeout(420)
def test_ray_run_ctrl_c_cleanup_and_resume_across_backends(tmp_path):
    root = str(tmp_path / "run")
    before = ray_processes()
    params = small_params("Trainer.num_actors=2", "Trainer.num_env_workers=1",
                          "Trainer.checkpoint_interval=1000", *RAY, iterations=LONG)
    with TrainRun(root, params) as run:
        run.wait_for_iteration(3, timeout=240)
        workers = [p for p in run.descendants() if "spawn_main" in " ".join(_cmdline(p))]
        assert len(workers) == 2, "one env worker per Ray actor, under the run"
        run.signal_group(signal.SIGINT)
        rc = run.wait(90)
        run.assert_clean(timeout=20)
        out = run.output()
    assert rc == 130, out[-4000:]
    assert "final checkpoint written" in out, out[-4000:]
    assert not new_ray_processes(before), "Ray processes left after Ctrl-C"
    # Every batch names the node of the actor that unrolled it, and bytes moved.
    rows = run.metrics()
    assert all(r["actor_node"] for r in rows)
    assert all(r["bytes_moved"] > 0 for r in rows)
    assert {r["actor_id"] for r in rows} == {0, 1}
    stopped_at = rows[-1]["iteration"]

    # The Ray run's checkpoint resumes on the process backend ...
    with TrainRun(root, ["Trainer.backend='process'", f"Trainer.num_iterations={stopped_at + 2}"],
                  gin_file=None) as run:
        assert run.wait(180) == 0, run.output()[-4000:]
        run.assert_clean()
        out = run.output()
    assert "resumed from" in out and "backend 'ray' -> 'process'" in out, out[-4000:]
    rows = run.metrics()
    assert rows[-1]["iteration"] == stopped_at + 2 and rows[-1]["actor_node"] == ""

    # ... and that one back on Ray, stopped by SIGTERM to the trainer alone (as a
    # service manager or a sweep does): final checkpoint, exit 143, nothing left.
    with TrainRun(root, [*RAY, f"Trainer.num_iterations={LONG}"], gin_file=None) as run:
        run.wait_for_iteration(stopped_at + 4, timeout=240)
        run.signal(signal.SIGTERM)
        rc = run.wait(90)
        run.assert_clean(timeout=20)
        out = run.output()
    assert rc == 143, out[-4000:]
    assert "final checkpoint written" in out, out[-4000:]
    last = run.metrics()[-1]["iteration"]
    assert checkpoint_files(root)[-1].endswith(f"ckpt-{last}.pt")
    assert not new_ray_processes(before), "Ray processes left after the resumed run"


def test_backend_ray_without_ray_exits_2(tmp_path):
    code = ("import sys; sys.modules['ray'] = None; "
            "from alf_async.bin.train import run_main; run_main()")
    proc = subprocess.run(
        [sys.executable, "-c", code, f"--root_dir={tmp_path / 'run'}",
         "--gin_file=ppo_bullet_inverted_pendulum.gin", "--gin_param=Trainer.backend='ray'"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Trainer.backend='ray' needs Ray" in proc.stderr
    assert 'pip install -e ".[ray]"' in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # a config error leaves no run directory


def test_the_library_does_not_import_ray():
    code = ("import sys; import alf_async.training.trainer, alf_async.bin.train, alf_async.bin.sweep, "
            "alf_async.runtime.actor_pool; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("changes, named", [
    ({"placement_strategy": "RANDOM"}, "RayBackend.placement_strategy"),
    ({"resources_per_actor": {"simulator": -1}}, "RayBackend.resources_per_actor"),
    ({"num_cpus_per_actor": -1}, "RayBackend.num_cpus_per_actor"),
    ({"object_store_memory_mb": 10}, "RayBackend.object_store_memory_mb"),
    ({"resources_per_actor": {"CPU": 2}}, "RayBackend.resources_per_actor"),
    ({"placement_strategy": "PACK", "num_cpus_per_actor": 0}, "RayBackend.placement_strategy"),
])
def test_bad_ray_settings_name_the_parameter(changes, named):
    from alf_async.ray_settings import RayBackendSettings
    from alf_async.utils.validation import ConfigError

    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        RayBackendSettings(**changes)


def test_actor_cpus_default_to_one_plus_env_workers():
    from alf_async.ray_settings import RayBackendSettings

    assert RayBackendSettings().actor_cpus(2) == 3.0
    assert RayBackendSettings(num_cpus_per_actor=0.5).actor_cpus(2) == 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_nothing_listens_exits_2_naming_it(tmp_path, train_cmd):
    """ray.init retries for minutes at an address where nothing listens; the
    run waits RayBackend.connect_timeout_s and names the address."""
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.run(
        train_cmd + [f"--root_dir={tmp_path / 'run'}",
                     "--gin_file=ppo_bullet_inverted_pendulum.gin",
                     "--gin_param=Trainer.backend='ray'",
                     f"--gin_param=RayBackend.address='{address}'",
                     "--gin_param=RayBackend.connect_timeout_s=2"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"nothing listens at RayBackend.address='{address}'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# Run with Ray imported as a user's shell imports it: without the loopback switch.
_PROBE = """
import socket, sys
import ray
from alf_async.runtime.actor_pool import ActorStartupError
from alf_async.runtime.ray_cluster import wait_for_cluster_address
if ray.util.get_node_ip_address().startswith("127."):
    print("no-route"); sys.exit(0)
server = socket.socket()
server.bind((sys.argv[1], 0)); server.listen()
address = "127.0.0.1:%d" % server.getsockname()[1]
try:
    wait_for_cluster_address(ray, address, 5.0, "RayBackend.address")
    print("reachable")
except ActorStartupError as e:
    print(e)
"""


@pytest.mark.parametrize("bind, expected", [
    ("0.0.0.0", "reachable"),  # a head started as usual listens on every interface
    ("127.0.0.1", "listens on loopback only"),  # one started with --node-ip-address=127.0.0.1
])
def test_a_loopback_address_is_checked_where_ray_will_connect(bind, expected):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    out = subprocess.run([sys.executable, "-c", _PROBE, bind], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    if out.strip() == "no-route":
        pytest.skip("this machine has no address but loopback: Ray keeps 127.0.0.1 as it is")
    assert expected in out, out
    if bind == "127.0.0.1":
        assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in out, out

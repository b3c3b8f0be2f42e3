"""What the sweep tests share: running the sweep command and reading its summary."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from typing import Dict, List

from conftest import REPO_ROOT

SWEEP_COMMAND = [sys.executable, "-m", "alf_async.bin.sweep"]


def run(cmd: List[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository root, its output captured."""
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def read_summary(root: str) -> Dict[str, Dict[str, str]]:
    """summary.csv of the sweep directory ``root``: run name -> its row."""
    with open(os.path.join(root, "summary.csv"), newline="") as f:
        return {row["run"]: row for row in csv.DictReader(f)}


def wait_for_training(run_dir: str, what: str, timeout: float = 120) -> None:
    """Wait until the run in ``run_dir`` has written a metrics row (its first
    iteration is done); fail naming ``what`` if it has not within ``timeout`` s."""
    from conftest import wait_until

    metrics = os.path.join(run_dir, "metrics.jsonl")
    assert wait_until(lambda: os.path.exists(metrics) and os.path.getsize(metrics) > 0,
                      timeout=timeout), f"{what} did not start training"


def interrupt_once_training(cmd: List[str], run_dir: str, what: str,
                            timeout: float = 120) -> subprocess.CompletedProcess:
    """Start the sweep ``cmd``, send it Ctrl-C (SIGINT) once the run in
    ``run_dir`` has trained an iteration, and wait for it to exit."""
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_training(run_dir, what)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

"""Reliability, cases 7, 9 and 10: checkpoints on resume.

- Case 7: a corrupt or truncated newest checkpoint makes the resumed run warn,
  naming the file, and fall back to the previous one; the run then completes
  with counters that never go backward.
- Case 9: a checkpoint holding an arbitrary pickled object, placed as the newest,
  is refused with a clear message and exit 2, and its payload is never executed
  (it would create a directory if unpickled without ``weights_only``).
- Case 10: a synchronous run (N = 1, fixed seed, checkpoints every 4 iterations,
  12 iterations) killed with SIGKILL after its checkpoint at iteration 4 (or 8)
  and resumed repeats the uninterrupted run exactly: identical per-iteration
  losses and acting weights from the checkpoint on.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time

import pytest
import torch

from alf_async.checkpoint import CheckpointError, Checkpointer
from reliability_helpers import (TrainRun, alf_async_log, assert_counters_monotonic,
                                   checkpoint_files, checkpoint_iteration, read_metrics,
                                   run_to_end, small_params)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run of 6 iterations with checkpoints at 2, 4 and 6 (a template to copy)."""
    root = str(tmp_path_factory.mktemp("template") / "run")
    rc, out, _ = run_to_end(root, small_params("Trainer.checkpoint_interval=2",
                                               iterations=6))
    assert rc == 0, out[-3000:]
    assert [checkpoint_iteration(p) for p in checkpoint_files(root)] == [2, 4, 6]
    return root


def _copy_run(template: str, tmp_path) -> str:
    root = str(tmp_path / "run")
    shutil.copytree(template, root)
    return root


def _corrupt(path: str, how: str) -> None:
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        if how == "truncated":
            f.write(data[: len(data) // 2])
        elif how == "garbage":
            f.write(os.urandom(len(data)))
        elif how == "empty":
            pass


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_corrupt_newest_checkpoint_falls_back_to_the_previous(finished_run, tmp_path, how):
    root = _copy_run(finished_run, tmp_path)
    newest = os.path.join(root, "checkpoints", "ckpt-6.pt")
    _corrupt(newest, how)
    params = small_params("Trainer.checkpoint_interval=2", iterations=8)
    rc, out, run = run_to_end(root, params)
    assert rc == 0, out[-3000:]
    assert f"cannot load checkpoint {newest}: it is corrupt or truncated" in out, out[-3000:]
    assert "falling back to the previous checkpoint" in out
    assert "ckpt-4.pt at iteration 4" in out, out[-3000:]
    rows = read_metrics(root)
    assert [r["iteration"] for r in rows] == list(range(1, 9))
    assert_counters_monotonic(rows)
    # ckpt-6.pt was written again, whole.
    for path in checkpoint_files(root):
        state = torch.load(path, weights_only=True)
        assert state["counters"]["iteration"] == checkpoint_iteration(path)


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_checkpointer_skips_unloadable_newest_with_a_warning(tmp_path, how):
    checkpointer = Checkpointer(str(tmp_path))
    for i in (1, 2, 3):
        checkpointer.save({"counters": {"iteration": i}, "w": torch.full((64,), float(i))}, i)
    _corrupt(os.path.join(checkpointer.directory, "ckpt-3.pt"), how)
    with alf_async_log(logging.WARNING) as records:
        state, path = checkpointer.load_latest()
    assert path.endswith("ckpt-2.pt") and state["counters"]["iteration"] == 2
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ckpt-3.pt" in warnings[0], warnings
    assert "corrupt or truncated" in warnings[0]


class Payload:
    """Unpickling this (without weights_only) creates the directory ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


@pytest.mark.timeout(180)
def test_checkpoint_with_pickled_objects_is_refused(finished_run, tmp_path):
    root = _copy_run(finished_run, tmp_path)
    marker = str(tmp_path / "payload_ran")
    evil = os.path.join(root, "checkpoints", "ckpt-99.pt")
    torch.save({"counters": {"iteration": 99}, "x": Payload(marker)}, evil)
    # The payload is real: an unsafe load would run it.
    probe = str(tmp_path / "probe_ran")
    torch.save({"x": Payload(probe)}, str(tmp_path / "probe.pt"))
    torch.load(str(tmp_path / "probe.pt"), weights_only=False)
    assert os.path.isdir(probe)
    metrics_before = open(os.path.join(root, "metrics.jsonl"), "rb").read()

    with TrainRun(root, small_params(iterations=8)) as run:
        rc = run.wait(120)
        run.assert_clean()
        out = run.output()
    assert rc == 2, out[-3000:]
    assert (f"alf_async: error: cannot load checkpoint {evil}: it holds pickled Python "
            "objects other than tensors and plain values") in out, out[-3000:]
    assert not os.path.exists(marker), "the checkpoint's payload was executed"
    assert not run.run_processes_seen(), f"processes were started: {run.run_processes_seen()}"
    assert open(os.path.join(root, "metrics.jsonl"), "rb").read() == metrics_before


class Plain:
    """An ordinary object: its class is a global weights_only does not allow."""

    def __init__(self):
        self.value = 3


class Evaluates:
    def __reduce__(self):
        return (eval, ("1 + 1",))


@pytest.mark.parametrize("make", [Plain, Evaluates, lambda: Payload("/nonexistent/x")],
                         ids=["plain-object", "builtin-eval", "os-mkdir"])
def test_checkpointer_refuses_pickled_objects_instead_of_falling_back(tmp_path, make):
    checkpointer = Checkpointer(str(tmp_path))
    checkpointer.save({"counters": {"iteration": 1}}, 1)
    torch.save({"x": make()}, os.path.join(checkpointer.directory, "ckpt-2.pt"))
    with pytest.raises(CheckpointError, match=r"ckpt-2\.pt: it holds pickled Python objects"):
        checkpointer.load_latest()


DETERMINISM = ("Trainer.num_actors=1", "Trainer.num_envs=4", "Trainer.unroll_length=64",
               "PPOLearner.num_epochs=2", "Trainer.checkpoint_interval=4", "Trainer.seed=7")
COMPARED = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
            "grad_norm", "behaviour_digest", "env_steps", "episodes_finished")


@pytest.mark.timeout(300)
def test_sync_run_resumed_after_sigkill_repeats_the_uninterrupted_run(tmp_path):
    iterations = 12
    params = small_params(*DETERMINISM, iterations=iterations)
    rc, out, _ = run_to_end(str(tmp_path / "whole"), params)
    assert rc == 0, out[-3000:]
    whole = read_metrics(str(tmp_path / "whole"))
    assert len(whole) == iterations

    root = str(tmp_path / "killed")
    first_checkpoint = os.path.join(root, "checkpoints", "ckpt-4.pt")
    with TrainRun(root, params) as run:
        run.wait_for(lambda: os.path.exists(first_checkpoint), 120, "ckpt-4.pt")
        run.signal_group(signal.SIGKILL)
        run.wait(30)
        deadline = time.monotonic() + 15
        while run.leftover_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not run.leftover_processes()
        run.remove_blocks()  # the next run would sweep them too
    resumed_from = checkpoint_iteration(checkpoint_files(root)[-1])
    assert resumed_from in (4, 8), f"killed too late: checkpoint {resumed_from}"

    rc, out, _ = run_to_end(root, (), gin_file=None)
    assert rc == 0, out[-3000:]
    assert f"ckpt-{resumed_from}.pt at iteration {resumed_from}" in out
    resumed = read_metrics(root)
    assert [r["iteration"] for r in resumed] == list(range(1, iterations + 1))
    for want, got in zip(whole, resumed):
        for key in COMPARED:
            assert got[key] == want[key], (
                f"iteration {want['iteration']} (resumed from {resumed_from}): {key} "
                f"{got[key]!r} != {want[key]!r}")
    # The checkpoints match too.
    for path in checkpoint_files(root):
        it = checkpoint_iteration(path)
        a = torch.load(path, weights_only=True)["learner"]["model"]
        b = torch.load(os.path.join(str(tmp_path / "whole"), "checkpoints", f"ckpt-{it}.pt"),
                       weights_only=True)["learner"]["model"]
        for name in b:
            assert torch.equal(a[name], b[name]), f"ckpt-{it}: {name}"

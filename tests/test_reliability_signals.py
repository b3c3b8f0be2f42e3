"""Reliability, cases 5 and 6: signals to the run.

- SIGINT (Ctrl-C: sent to the whole process group) and SIGTERM (to the trainer, or
  to the whole group as a service manager does): a final checkpoint at the last
  recorded iteration, every child ends within 15 s, exit status 130 / 143, no
  shared-memory block of the run remains.
- A second SIGINT right after the first: the run exits at once (130), still
  without orphans or shared memory.
- SIGKILL of the whole process group at a random moment, or of the trainer alone
  (its actors then get SIGTERM from Linux, their env workers SIGKILL, and the
  run's resource tracker unlinks the trainer's blocks once they have ended), and
  a new run with the same root_dir: it sweeps the killed run's stale shared-memory
  blocks (after a group kill), resumes from the newest complete checkpoint (or
  starts over if there was none), and the counters in metrics.jsonl and in the
  checkpoints never go backward; every ckpt-*.pt loads with ``weights_only=True``.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
import torch

from alf_async.utils.shared_memory import list_blocks
from reliability_helpers import (CHILD_EXIT_S, SLOW_ENV_PARAM, TrainRun,
                                   assert_counters_monotonic,
                                   checkpoint_files, checkpoint_iteration, small_params)

LONG = 100000  # iterations: the run only ends through the signal


def _wait_children_gone(run: TrainRun, since: float) -> float:
    """Seconds from ``since`` until every process of the run has ended."""
    deadline = since + CHILD_EXIT_S
    while run.leftover_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = run.leftover_processes()
    assert not left, f"children still running {CHILD_EXIT_S:.0f} s after the signal: {left}"
    return time.monotonic() - since


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig, to_group, status", [
    (signal.SIGINT, True, 130),
    (signal.SIGTERM, False, 143),
    (signal.SIGTERM, True, 143),
], ids=["sigint-group", "sigterm-trainer", "sigterm-group"])
def test_signal_writes_final_checkpoint_and_ends_all_children(tmp_path, sig, to_group,
                                                              status):
    root = str(tmp_path / "run")
    params = small_params("Trainer.num_actors=2", "Trainer.num_env_workers=1",
                          "Trainer.checkpoint_interval=1000", iterations=LONG)
    with TrainRun(root, params) as run:
        run.wait_for_iteration(1)
        workers = run.wait_for(lambda: len(run.env_workers()) == 2, 30, "2 env workers")
        assert workers
        run._sample_once()
        sent = time.monotonic()
        (run.signal_group if to_group else run.signal)(sig)
        rc = run.wait(60)
        _wait_children_gone(run, sent)
        run.assert_clean(timeout=2)
        out = run.output()
    assert rc == status, out[-3000:]
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert f"by {name} at iteration" in out and "final checkpoint written" in out, out[-3000:]
    last = run.metrics()[-1]["iteration"]
    files = checkpoint_files(root)
    assert [checkpoint_iteration(f) for f in files] == [last], (files, last)
    state = torch.load(files[-1], weights_only=True)
    assert state["counters"]["iteration"] == last
    assert state["counters"]["env_steps"] == run.metrics()[-1]["env_steps"]
    assert "restarting actor" not in out  # children stopping are not failures


@pytest.mark.timeout(240)
def test_second_sigint_exits_at_once_without_leftovers(tmp_path):
    """Training iterations of 3000 epochs (seconds each, against milliseconds
    between them) make the first Ctrl-C land inside one, where it waits for the
    iteration to end: the second, 50 ms later, finds the run still stopping
    however fast the machine (with short iterations a fast machine finished
    the graceful stop before it)."""
    root = str(tmp_path / "run")
    params = small_params("Trainer.num_actors=2", "Trainer.num_env_workers=1",
                          "PPOLearner.num_epochs=3000", iterations=LONG)
    with TrainRun(root, params) as run:
        run.wait_for_iteration(1)
        run.wait_for(lambda: len(run.env_workers()) == 2, 30, "2 env workers")
        run._sample_once()
        run.signal_group(signal.SIGINT)
        time.sleep(0.05)
        sent = time.monotonic()
        run.signal_group(signal.SIGINT)
        rc = run.wait(60)
        exit_s = time.monotonic() - sent
        _wait_children_gone(run, sent)
        run.assert_clean(timeout=2)
        out = run.output()
    assert rc == 130, out[-3000:]
    assert "second interrupt" in out, out[-3000:]
    assert exit_s < 10, f"the second Ctrl-C took {exit_s:.1f} s to end the run"


def _load_all_checkpoints(root: str):
    states = {}
    for path in checkpoint_files(root):
        state = torch.load(path, weights_only=True)  # complete and safe, or it raises
        assert state["counters"]["iteration"] == checkpoint_iteration(path)
        states[checkpoint_iteration(path)] = state
    return states


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target, moment", [
    ("group", "random"),
    ("trainer", "random"),
    ("group", "before_first_checkpoint"),
])
def test_sigkill_then_resume(tmp_path, target, moment):
    """The env sleeps 5 ms a step (about 0.16 s an iteration with two actors), so
    that the kill lands with seconds of training left however fast the rest runs:
    with the plain env a loaded machine could finish all 40 iterations between
    the iteration the test waits for and the kill."""
    root = str(tmp_path / "run")
    iterations = 40
    interval = 1000 if moment == "before_first_checkpoint" else 3
    params = small_params("Trainer.num_actors=2", "Trainer.num_env_workers=1",
                          f"Trainer.checkpoint_interval={interval}",
                          SLOW_ENV_PARAM,
                          iterations=iterations)
    # A random moment inside training: after a random iteration, plus jitter so
    # that the kill lands anywhere in an iteration (also during checkpoint writes).
    kill_after = random.randint(2, iterations // 3) if moment == "random" else 2
    delay = random.uniform(0.0, 0.3) if moment == "random" else 0.0
    with TrainRun(root, params) as first:
        first.wait_for(lambda: len(first.env_workers()) == 2, 60, "2 env workers")
        first.wait_for_iteration(kill_after)
        time.sleep(delay)
        first._sample_once()
        assert first.running(), "the run ended before the kill; make it longer"
        assert first.metrics()[-1]["iteration"] < iterations, "the run finished before the kill"
        sent = time.monotonic()
        if target == "group":
            first.signal_group(signal.SIGKILL)
        else:
            first.signal(signal.SIGKILL)
        first.wait(30)
        # The trainer's actors get SIGTERM from Linux, env workers SIGKILL.
        _wait_children_gone(first, sent)
        stale = first.leftover_blocks()
        rows_before = first.metrics()
    where = f"(kill {target} after iteration {kill_after} + {delay:.2f} s)"
    if target == "group":  # the resource tracker was killed too
        assert stale, f"expected blocks of the killed run in /dev/shm {where}"
    before = _load_all_checkpoints(root)
    newest = max(before) if before else 0
    if moment == "before_first_checkpoint":
        assert not before
    if target == "trainer":
        # The actors cleaned up after themselves and the run's resource tracker,
        # the last process of the run to end, unlinked the trainer's blocks.
        assert not stale, f"blocks of the killed trainer left {where}: {stale}"

    with TrainRun(root, (), gin_file=None) as second:  # --root_dir alone resumes
        rc = second.wait(240)
        second.assert_clean()
        out = second.output()
    assert rc == 0, out[-3000:]
    assert not set(stale) & set(list_blocks()), f"stale blocks not swept {where}"
    if newest:
        assert f"ckpt-{newest}.pt at iteration {newest}" in out, f"{where}\n{out[-3000:]}"
    else:
        assert "resumed from" not in out
    rows = second.metrics()
    assert rows[0]["iteration"] == 1 and rows[-1]["iteration"] == iterations, where
    assert_counters_monotonic(rows)
    # Rows up to the checkpoint are the first run's; the rest were recomputed.
    assert rows[:newest] == rows_before[:newest]
    after = _load_all_checkpoints(root)
    assert max(after) == iterations and max(after) >= newest
    by_iteration = {r["iteration"]: r for r in rows}
    for it, state in after.items():
        assert state["counters"]["env_steps"] == by_iteration[it]["env_steps"], where
    assert not [n for n in os.listdir(os.path.join(root, "checkpoints"))
                if not n.startswith("ckpt-")], "temporary files left in checkpoints/"


@pytest.mark.timeout(240)
def test_ctrl_c_before_the_first_iteration_says_nothing_was_saved(tmp_path):
    """An unroll of 200k env steps keeps iteration 1 from finishing for many
    seconds (the first-unroll progress line, printed every second while no
    batch has come, shows it is under way): a Ctrl-C then must not claim a
    checkpoint, and none may exist."""
    root = str(tmp_path / "run")
    params = small_params("Trainer.unroll_length=100000", "PPOLearner.mini_batch_size=64",
                          iterations=3)
    with TrainRun(root, params) as run:
        run.wait_for(lambda: "starting 1 actor(s)" in run.output(), 120, "the start")
        run.wait_for(lambda: run.actors(), 30, "the actor")
        run.wait_for(lambda: "first unroll: actors at" in run.output(), 60,
                     "the first unroll's progress line")
        run.signal_group(signal.SIGINT)
        rc = run.wait(60)
        run.assert_clean()
        out = run.output()
    assert rc == 130, out[-3000:]
    assert "interrupted by Ctrl-C at iteration 0; no checkpoint was written (no training " \
           "iteration had finished)" in out, out[-3000:]
    assert "final checkpoint written" not in out
    assert checkpoint_files(root) == []

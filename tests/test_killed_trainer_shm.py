"""A trainer killed with SIGKILL leaves nothing in /dev/shm (issue 28, item 3).

Each test starts the train command as a user does (``TrainRun``: its own
session), waits for its first metrics row, records every process of the run
(the trainer and all its descendants, through psutil), kills the trainer alone
with SIGKILL, and then polls until no /dev/shm entry naming one of those pids
remains and no process of the run is left, failing after ``DEADLINE_S``. No
second run is started: the clean-up may not wait for the next run's sweep.

Runs: the PPO demo with two actor processes and an env worker each; SAC with
two actors, env workers and a (small) replay buffer; Hogwild PPO and Hogwild
SAC (the workers' own replay buffers) with an env worker per worker.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Iterable, List, Sequence, Set

import pytest

from alf_async.utils.shared_memory import shm_directory
from reliability_helpers import TrainRun, small_params

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
DEADLINE_S = 15.0  # from the kill until nothing of the run may remain
LONG = 100000  # iterations: the run only ends through the kill
POINT_MASS = "Trainer.env_name='sac_test_envs:AlfAsyncPointMass-v0'"

# SAC shrunk to seconds: a fast env, small networks and buffer, few random steps.
SMALL_SAC = (
    POINT_MASS,
    "Trainer.num_env_steps=100000000",
    "Trainer.checkpoint_interval=100000",
    "Trainer.num_env_workers=1",
    "Replay.capacity=4096",
    "Replay.learning_starts=64",
    "Replay.save_replay_buffer=False",
    "SACLearner.batch_size=32",
    "SquashedGaussianActor.hidden_sizes=(32, 32)",
    "TwinQNetwork.hidden_sizes=(32, 32)",
    "MetricsRecorder.tensorboard=False",
    "MetricsRecorder.console_interval_s=0",
)


def shm_entries_of(pids: Iterable[int]) -> List[str]:
    """Entries of the shared-memory directory whose name holds one of ``pids``
    as a whole token (``alfa_<pid>_...``, ``torch_<pid>_...``, ...)."""
    wanted = {str(p) for p in pids}
    try:
        names = os.listdir(shm_directory())
    except FileNotFoundError:
        return []
    return sorted(n for n in names if wanted & set(re.split(r"[^0-9A-Za-z]+", n)))


def _kill_trainer_and_wait_clean(run: TrainRun, expect_owners: Set[int]) -> None:
    """SIGKILL the trainer of ``run``; poll until neither a process nor a
    /dev/shm entry of the run is left (fails after ``DEADLINE_S``).

    ``expect_owners``: pids at least one of whose entries must exist before
    the kill (so the test watches blocks the run really has)."""
    run._sample_once()
    pids = set(run.seen) | {run.pid}
    before = shm_entries_of(pids)
    owners = {int(t) for n in before for t in re.split(r"[^0-9A-Za-z]+", n)
              if t.isdigit() and int(t) in pids}
    assert owners & expect_owners, (
        f"expected blocks of {sorted(expect_owners)} before the kill, found {before}")
    assert run.running(), "the run ended before the kill"
    sent = time.monotonic()
    run.signal(signal.SIGKILL)
    run.wait(30)
    deadline = sent + DEADLINE_S
    while time.monotonic() < deadline and (shm_entries_of(pids)
                                           or run.leftover_processes()):
        time.sleep(0.1)
    left_entries, left_processes = shm_entries_of(pids), run.leftover_processes()
    assert not left_entries, (
        f"{DEADLINE_S:.0f} s after the trainer's SIGKILL these entries of the run are "
        f"still in {shm_directory()} (had {before}): {left_entries}\n"
        f"{run.output()[-3000:]}")
    assert not left_processes, (
        f"processes of the run left {DEADLINE_S:.0f} s after the trainer's SIGKILL: "
        f"{left_processes}")


def _start_and_kill(root: str, params: Sequence[str], gin_file: str,
                    workers: int, trainer_blocks: bool) -> None:
    """Start a run of ``workers`` actors (Hogwild workers) with an env worker
    each, wait for its first metrics row and kill its trainer."""
    with TrainRun(root, params, gin_file=gin_file) as run:
        run.wait_for(lambda: len(run.env_workers()) == workers, 120,
                     f"{workers} env workers")
        run.wait_for_iteration(1)
        run._sample_once()
        children = {p.pid for p in run.actors()}
        expect = {run.pid} if trainer_blocks else children
        _kill_trainer_and_wait_clean(run, expect)


@pytest.mark.timeout(240)
def test_ppo_demo_trainer_sigkill_leaves_no_shared_memory(tmp_path):
    """The weight store and trajectory slots (trainer) and the env blocks
    (actors) are gone within seconds of the trainer's death."""
    params = small_params("Trainer.num_actors=2", "Trainer.num_env_workers=1",
                          "Trainer.checkpoint_interval=100000", iterations=LONG)
    _start_and_kill(str(tmp_path / "run"), params, "ppo_bullet_inverted_pendulum.gin",
                    workers=2, trainer_blocks=True)


@pytest.mark.timeout(240)
def test_sac_trainer_sigkill_leaves_no_shared_memory(tmp_path, monkeypatch):
    """SAC's replay buffer (held by the trainer alone) goes too."""
    monkeypatch.setenv("PYTHONPATH", TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    _start_and_kill(str(tmp_path / "run"), SMALL_SAC, "async_sac_bullet_half_cheetah.gin",
                    workers=2, trainer_blocks=True)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_hogwild_trainer_sigkill_leaves_no_shared_memory(tmp_path, monkeypatch, algorithm):
    """The workers' env blocks and replay buffers (SAC) go, and the shared
    networks (torch's file-descriptor sharing) never have a name in /dev/shm."""
    if algorithm == "ppo":
        params = small_params("Trainer.num_env_workers=1",
                              "Trainer.checkpoint_interval=100000", iterations=LONG)
        gin_file = "hogwild_ppo_bullet_inverted_pendulum.gin"
    else:
        monkeypatch.setenv("PYTHONPATH",
                           TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        params, gin_file = list(SMALL_SAC), "hogwild_sac_bullet_half_cheetah.gin"
    _start_and_kill(str(tmp_path / "run"), params, gin_file, workers=2,
                    trainer_blocks=False)

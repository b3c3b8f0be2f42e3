"""Reliability, case 8: bad configuration is refused up front.

Every binding below must make the train command print one clear message naming
the binding and exit with status 2 before any child process starts: the run
directory gets no metrics.jsonl, no config.gin and no checkpoint, and the
process never has a child.

The first COMMAND_CASES bindings (wrong types, zero and negative sizes, an
unroll that does not fit in memory) run through the real command, a few at a
time, watched with psutil while they run. The whole table also runs in this
process through ``alf_async.bin.train.train`` (the command minus flag parsing),
which is fast.
"""

from __future__ import annotations

import os
import re
from typing import List, Tuple

import pytest

from reliability_helpers import DEMO_GIN, TrainRun, small_params, train_in_this_process

PARALLEL = 4
COMMAND_CASES = 9  # the brief's cases first: run through the command

# (binding or bindings, regex the error message must match)
BAD_BINDINGS = [
    ("Trainer.num_envs='abc'", r"Trainer\.num_envs must be an integer >= 1, got 'abc'"),
    ("PPOLearner.num_epochs=1.5", r"PPOLearner\.num_epochs must be an integer >= 1, got 1\.5"),
    ("Trainer.num_envs=0", r"Trainer\.num_envs must be an integer >= 1, got 0"),
    ("Trainer.num_actors=0", r"Trainer\.num_actors must be an integer >= 1, got 0"),
    ("PPOLearner.mini_batch_size=0", r"PPOLearner\.mini_batch_size must be an integer >= 1"),
    ("Trainer.num_iterations='abc'", r"Trainer\.num_iterations must be an integer"),
    ("Trainer.num_actors=-2", r"Trainer\.num_actors must be an integer >= 1, got -2"),
    ("Trainer.unroll_length=-32", r"Trainer\.unroll_length must be an integer >= 1"),
    # With the demo's K = 8 (31 GiB of trajectory slots).
    (("Trainer.num_envs=8", "Trainer.unroll_length=100000000"),
     r"trajectory slots would need [\d.]+ GiB of shared memory.*unroll_length=100000000"),
    ("Trainer.num_env_workers=-1", r"Trainer\.num_env_workers must be an integer >= 0 or 'auto', "
                                   r"got -1"),
    ("Trainer.num_env_workers=1.5", r"Trainer\.num_env_workers must be an integer"),
    ("Trainer.checkpoint_interval=0", r"Trainer\.checkpoint_interval must be an integer >= 1"),
    ("Trainer.slots_per_actor=0", r"Trainer\.slots_per_actor must be an integer >= 1"),
    ("Trainer.num_iterations=-5", r"Trainer\.num_iterations"),
    ("Trainer.num_iterations=2.5", r"Trainer\.num_iterations must be an integer"),
    ("Trainer.num_env_steps='many'", r"Trainer\.num_env_steps must be an integer"),
    ("Trainer.max_actor_restarts=-1", r"Trainer\.max_actor_restarts must be"),
    ("Trainer.max_actor_restarts='x'", r"Trainer\.max_actor_restarts must be an integer"),
    ("Trainer.seed='x'", r"Trainer\.seed must be an integer"),
    ("Trainer.learner_num_threads='a'", r"Trainer\.learner_num_threads must be an integer"),
    ("Trainer.fatal_env_errors='no'", r"Trainer\.fatal_env_errors must be True or False"),
    ("Trainer.reseed_at_checkpoints=1", r"Trainer\.reseed_at_checkpoints must be True or False"),
    ("Trainer.actor_timeout_s=-1", r"Trainer\.actor_timeout_s must be a number >= 0"),
    ("Trainer.max_episode_steps=-3", r"Trainer\.max_episode_steps must be"),
    ("Trainer.max_trajectory_memory_gb='a'", r"Trainer\.max_trajectory_memory_gb must be"),
    ("Trainer.backend='threads'", r"Trainer\.backend must be one of"),
    ("Trainer.env_name='NoSuchEnv-v0'", r"Unknown environment id 'NoSuchEnv-v0'"),
    ("PPOLearner.mini_batch_size=100000", r"PPOLearner\.mini_batch_size=100000 is larger"),
    ("PPOLearner.learning_rate=-0.1", r"PPOLearner\.learning_rate must be a number > 0"),
    ("PPOLearner.learning_rate='fast'", r"PPOLearner\.learning_rate must be a number"),
    ("PPOLearner.gamma=1.5", r"PPOLearner\.gamma must be a number >= 0 and <= 1"),
    ("Checkpointer.keep=0", r"Checkpointer\.keep must be an integer >= 1, got 0"),
    ("Trainer.no_such_knob=3", r"Unknown gin parameter 'no_such_knob' of 'Trainer'"),
]


def _check(run: TrainRun, binding: str, pattern: str) -> List[str]:
    problems = []
    rc = run.wait(120)
    run.assert_clean(timeout=5)
    out = run.output()
    errors = [line for line in out.splitlines() if line.startswith("alf_async: error:")]
    if rc != 2:
        problems.append(f"{binding}: exit {rc}, expected 2\n{out[-1500:]}")
    elif len(errors) != 1 or not re.search(pattern, errors[0]):
        problems.append(f"{binding}: message {errors!r} does not match {pattern!r}")
    elif "Traceback" in out:
        problems.append(f"{binding}: a traceback was printed\n{out[-1500:]}")
    if run.run_processes_seen():
        problems.append(f"{binding}: child processes were started: "
                        f"{run.run_processes_seen()}")
    made = os.listdir(run.root_dir) if os.path.isdir(run.root_dir) else []
    if {"metrics.jsonl", "config.gin"} & set(made):
        problems.append(f"{binding}: the run started (its directory has {made})")
    ckpts = os.path.join(run.root_dir, "checkpoints")
    if os.path.isdir(ckpts) and os.listdir(ckpts):
        problems.append(f"{binding}: checkpoints were written")
    return problems


@pytest.mark.timeout(300)
def test_bad_configuration_exits_2_before_any_process_starts(tmp_path):
    """The train command on the first bindings of the table, at most PARALLEL
    commands at a time (the machine has few cores)."""
    runs: List[TrainRun] = []
    waiting: List[Tuple[TrainRun, str, str]] = []
    problems: List[str] = []
    try:
        for i, (binding, pattern) in enumerate(BAD_BINDINGS[:COMMAND_CASES]):
            if len(waiting) >= PARALLEL:
                problems += _check(*waiting.pop(0))
            extra = binding if isinstance(binding, tuple) else (binding,)
            run = TrainRun(str(tmp_path / f"run{i}"), small_params(*extra, iterations=3))
            runs.append(run)
            waiting.append((run, binding, pattern))
        for item in waiting:
            problems += _check(*item)
    finally:
        for run in runs:
            run.close()
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("binding, pattern", BAD_BINDINGS,
                         ids=[str(b) for b, _ in BAD_BINDINGS])
def test_bad_binding_is_refused_with_a_clear_message(tmp_path, capsys, binding, pattern):
    """The whole table through ``alf_async.bin.train.train`` in this process (what
    the command runs after parsing its flags); the leak fixture checks that no
    process or shared memory was created."""
    root = str(tmp_path / "run")
    extra = binding if isinstance(binding, tuple) else (binding,)
    rc = train_in_this_process(root, [DEMO_GIN], small_params(*extra, iterations=3))
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("alf_async: error:")]
    assert rc == 2, err[-2000:]
    assert len(errors) == 1 and re.search(pattern, errors[0]), errors
    assert not {"metrics.jsonl", "config.gin"} & set(os.listdir(root) if os.path.isdir(root)
                                                      else [])

"""Env failures are logged without flooding the log (issue 28, item 5).

``EnvFailureReporter`` (alf_async.metrics) logs the first few failures in full,
then at most one summary line per interval, counted per error kind and per env,
and a last one at the end of a run; the metrics' ``env_failures`` counts every
failure. Unit tests drive it with a fake clock; short real runs of a flaky env,
in both runtimes, check the log against the metrics.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace
from typing import List

import pytest

from alf_async.env_failure_log import EnvFailureReporter, failure_kind, log_env_failures
from conftest import REPO_ROOT

FULL_LINE = re.compile(r"env (\d+) of (actor \d+|Hogwild worker \d+) \(([^)]+)\) failed and "
                       r"was recreated; its episode was dropped: (.*)$")
SUMMARY_LINE = re.compile(r"(\d+) more env failures of (\S+) in the last \S+, each env "
                          r"recreated and its episode dropped: (.*); (\d+) in all \(the "
                          r"first (\d+) logged in full; metrics: env_failures\)$")


def traceback_of(kind: str, text: str = "it broke") -> str:
    return ("Traceback (most recent call last):\n  File \"env.py\", line 3, in step\n"
            f"    raise {kind}()\nmy_pkg.errors.{kind}: {text}\n")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    """Collects the messages of a logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())


@pytest.fixture
def reporter_and_lines():
    log = logging.getLogger("alf_async.test_env_failure_log")
    log.propagate = False
    lines = Lines()
    log.addHandler(lines)
    clock = FakeClock()
    try:
        yield EnvFailureReporter(full_lines=3, interval_s=60.0, clock=clock, log=log), \
            lines.messages, clock
    finally:
        log.removeHandler(lines)


def test_failure_kind_is_the_type_of_the_last_line():
    assert failure_kind(traceback_of("ValueError")) == "ValueError"
    assert failure_kind("KeyError\n") == "KeyError"
    assert failure_kind("alf_async.envs.fault_injection.InjectedEnvFault: injected") == \
        "InjectedEnvFault"
    assert failure_kind("NonFiniteEnvValue: env 1 of X returned a non-finite reward") == \
        "NonFiniteEnvValue"
    assert failure_kind("env-worker process 12 (envs 0..1) died with signal SIGKILL") == \
        "env-worker lost"
    assert failure_kind("") == "other"
    assert failure_kind("something odd happened") == "other"


def test_first_failures_in_full_then_one_summary_per_interval(reporter_and_lines):
    reporter, lines, clock = reporter_and_lines
    for k in range(3):
        reporter.report("actor 0", k, traceback_of("ValueError", f"bad {k}"), "Env-v0")
    assert lines == [f"env {k} of actor 0 (Env-v0) failed and was recreated; its episode "
                     f"was dropped: my_pkg.errors.ValueError: bad {k}" for k in range(3)]
    # Held back: nothing is logged until the first held failure is interval_s old.
    reporter.report("actor 0", 1, traceback_of("ValueError"), "Env-v0")
    clock.now += 30
    reporter.report("actor 1", 2, traceback_of("KeyError"), "Env-v0")
    reporter.report("actor 0", 1, traceback_of("ValueError"), "Env-v0")
    clock.now += 29.5
    reporter.tick()
    assert len(lines) == 3 and reporter.held == 3
    clock.now += 0.5
    reporter.tick()
    assert len(lines) == 4 and reporter.held == 0
    match = SUMMARY_LINE.fullmatch(lines[3])
    assert match, lines[3]
    assert match.group(1, 2, 4, 5) == ("3", "Env-v0", "6", "3")
    assert match.group(3) == ("ValueError x 2 (env 1 of actor 0: 2); "
                              "KeyError x 1 (env 2 of actor 1: 1)")
    # The next window starts with the next held failure: at most one line per interval.
    clock.now += 1
    reporter.report("actor 0", 0, traceback_of("ValueError"), "Env-v0")
    clock.now += 59
    reporter.report("actor 0", 0, traceback_of("ValueError"), "Env-v0")
    assert len(lines) == 4
    clock.now += 1
    reporter.tick()
    assert len(lines) == 5 and SUMMARY_LINE.fullmatch(lines[4]).group(1) == "2"
    # Nothing held: no line, however long it has been.
    clock.now += 1000
    reporter.tick()
    reporter.flush()
    assert len(lines) == 5
    assert (reporter.total, reporter.logged_in_full, reporter.summarised) == (8, 3, 5)


def test_flush_writes_the_failures_held_at_the_end(reporter_and_lines):
    reporter, lines, clock = reporter_and_lines
    for k in range(3 + 20):
        reporter.report(f"Hogwild worker {k % 2}", k % 4, "NonFiniteEnvValue: nan", "E-v0")
        clock.now += 0.1
    assert len(lines) == 3
    reporter.flush()
    assert len(lines) == 4
    match = SUMMARY_LINE.fullmatch(lines[3])
    assert match and match.group(1) == "20" and match.group(4) == "23", lines[3]
    assert match.group(3).startswith("NonFiniteEnvValue x 20 (")
    reporter.flush()
    assert len(lines) == 4


def test_a_summary_lists_a_few_envs_per_kind_and_counts_the_rest(reporter_and_lines):
    reporter, lines, _ = reporter_and_lines
    for k in range(3 + EnvFailureReporter.MAX_ENVS_LISTED + 4):
        reporter.report("actor 0", k, traceback_of("OSError"), "E-v0")
    reporter.flush()
    listed = SUMMARY_LINE.fullmatch(lines[-1]).group(3)
    assert listed.count("env ") == EnvFailureReporter.MAX_ENVS_LISTED
    assert listed.endswith(", 4 more envs)"), listed


def test_log_env_failures_reports_a_batch_and_counts_every_failure(reporter_and_lines):
    reporter, lines, _ = reporter_and_lines
    failures = [(k % 2, traceback_of("ValueError")) for k in range(7)]
    message = SimpleNamespace(actor_id=3, unroll=SimpleNamespace(env_failures=failures))
    assert log_env_failures(message, "E-v0", reporter) == 7
    assert len(lines) == 3 and all(" of actor 3 (E-v0) " in line for line in lines)
    assert reporter.total == 7 and reporter.held == 4
    empty = SimpleNamespace(actor_id=3, unroll=SimpleNamespace(env_failures=[]))
    assert log_env_failures(empty, "E-v0", reporter) == 0


def test_reporter_arguments_are_checked():
    with pytest.raises(ValueError, match="interval_s > 0"):
        EnvFailureReporter(interval_s=0)
    with pytest.raises(ValueError, match="full_lines >= 0"):
        EnvFailureReporter(full_lines=-1)


# -- real runs -------------------------------------------------------------------

EXAMPLE = os.path.join(REPO_ROOT, "alf_async", "examples", "custom_env")
FLAKY_MODULE = '''
"""PointMass-v0 whose step raises ValueError (8%) or KeyError (4%) of the time."""
import gymnasium as gym
import numpy as np
from my_envs import PointMassEnv


class FlakyPointMass(PointMassEnv):
    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._faults = np.random.default_rng(seed + 11)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        draw = self._faults.random()
        if draw < 0.08:
            raise ValueError("the flaky simulator diverged")
        if draw < 0.12:
            raise KeyError("joint")
        return super().step(action)


gym.register(id="FlakyPointMass-v0", entry_point=FlakyPointMass, max_episode_steps=100)
'''
SMALL = ["Trainer.env_name='flaky_envs:FlakyPointMass-v0'", "Trainer.num_envs=4",
         "Trainer.num_env_workers=0", "Trainer.num_actors=1", "Trainer.unroll_length=25",
         "Trainer.num_env_steps=0", "Trainer.num_iterations=4",
         "PPOLearner.mini_batch_size=50", "PPOLearner.num_epochs=1",
         "MetricsRecorder.tensorboard=False"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runtime", ["actor_learner", "hogwild"])
def test_a_flaky_env_run_logs_a_few_failures_and_counts_all(tmp_path, runtime):
    project = tmp_path / "my_project"
    shutil.copytree(EXAMPLE, project)
    (project / "flaky_envs.py").write_text(FLAKY_MODULE)
    root = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), REPO_ROOT]))
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train", f"--gin_file={project / 'point_mass.gin'}",
         f"--root_dir={root}", *[f"--gin_param={p}" for p in SMALL],
         f"--gin_param=Trainer.runtime='{runtime}'"],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(root / "metrics.jsonl", encoding="utf-8") as f:
        failures = json.loads(f.read().splitlines()[-1])["env_failures"]
    assert failures > 2 * EnvFailureReporter().full_lines  # 400 steps at 12%
    full, summaries = [], []
    for line in result.stderr.splitlines():
        if FULL_LINE.search(line):
            full.append(FULL_LINE.search(line))
        elif SUMMARY_LINE.search(line):
            summaries.append(SUMMARY_LINE.search(line))
    assert len(full) == EnvFailureReporter().full_lines, result.stderr[-3000:]
    assert all(m.group(4).startswith(("ValueError", "KeyError")) for m in full)
    # The run is shorter than a minute: its end writes the one summary line.
    assert len(summaries) == 1, result.stderr[-3000:]
    summary = summaries[0]
    assert int(summary.group(1)) + len(full) == int(summary.group(4)) == failures
    kinds = dict(re.findall(r"(ValueError|KeyError) x (\d+)", summary.group(3)))
    assert sum(int(n) for n in kinds.values()) == int(summary.group(1))
    assert "ValueError" in kinds
    # The same lines are in the run's log file.
    with open(root / "log.txt", encoding="utf-8") as f:
        assert sum(1 for line in f if FULL_LINE.search(line)) == len(full)

"""bench/soak.py: a short soak with real faults passes its verdicts, and the
parts its verdicts rest on catch what they must (progress lost past a
checkpoint interval, counters going back, a truncated metrics file, an env
that raises on demand)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

from alf_async.envs.fault_injection import FAULT_FILE_VARIABLE, InjectedEnvFault, on_demand_id
from alf_async.envs.gym_env import make_env
from bench.soak_progress import MetricsTail, TrainerLife, counters_report

# The demo pendulum, small and on the env that sleeps 5 ms a step: with one
# env worker stepping 2 envs per actor, 2 actors make at most ~400 env steps/s,
# so a budget of 8000 env steps keeps the run training for >= 20 s, past both
# faults (6 s and >= 12 s after training starts), however fast the machine is;
# a slow one gets time to the budget (--overrun_fraction).
SMALL_RUN = ["--gin_file", "ppo_bullet_inverted_pendulum.gin",
             "--env_name", "AlfAsyncLatencyPendulum-v0",
             "--gin_param", "Trainer.num_envs=2", "--gin_param", "Trainer.unroll_length=32",
             "--gin_param", "PPOLearner.mini_batch_size=64",
             "--gin_param", "PPOLearner.num_epochs=1",
             "--gin_param", "Trainer.checkpoint_interval=5",
             "--gin_param", "MetricsRecorder.tensorboard=False"]


def run_soak(cmd, timeout_s: float):
    """Run the soak to its end: (stdout, stderr, exit status). One still
    running after ``timeout_s`` s gets SIGTERM, on which it stops its run and
    reports; its process group is killed if it does not end 120 s later."""
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return stdout, stderr, proc.returncode


@pytest.mark.slow  # each of its faults has its own test in tests/test_reliability_*
@pytest.mark.timeout(700)
def test_a_short_soak_with_faults_passes_every_verdict(tmp_path):
    out = tmp_path / "soak"
    cmd = [sys.executable, "-m", "bench.soak", *SMALL_RUN, "--minutes", "0.5",
           "--faults", "env_raise,trainer_sigkill", "--fault_interval_minutes", "0.1",
           "--sample_interval_s", "2", "--warmup_minutes", "0.05", "--settle_s", "3",
           "--effect_timeout_s", "90", "--num_env_steps", "8000", "--overrun_fraction", "4",
           "--out_dir", str(out)]
    stdout, stderr, returncode = run_soak(cmd, timeout_s=540)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, stderr[-4000:]
    result = json.loads(lines[-1])
    assert result["verdicts"] and all(result["verdicts"].values()), (
        json.dumps(result["verdicts"]), stderr[-4000:])
    assert returncode == 0 and result["passed"]
    # Both faults were injected (the rotation repeats while the run lasts, so
    # a slow machine sees more of them) and each was seen to take effect.
    kills = result["faults_by_kind"].get("trainer_sigkill", 0)
    assert set(result["faults_by_kind"]) == {"env_raise", "trainer_sigkill"}
    assert result["faults_by_kind"]["env_raise"] >= 1 and kills >= 1
    assert all(f["took_effect"] for f in result["faults"])
    # Each SIGKILLed trainer was resumed, and what it lost was measured.
    assert [life["exit_status"] for life in result["trainer_lives"]] == [-9] * kills + [0]
    restarts = result["progress"]["restarts"]
    assert len(restarts) == kills
    assert all(0 <= restart["iterations_lost"] <= 5 for restart in restarts)
    assert result["trainer_lives"][1]["resumed_from"][0] == restarts[0]["resumed_from"][0] >= 5
    assert result["final_env_steps"] >= 8000
    assert result["checkpoints"]["loaded"] >= 2
    assert os.path.isfile(result["plot"])


def _life(index, rows, resumed_from=None):
    life = TrainerLife(index, 0.0, "/nonexistent")
    life.rows, life.resumed_from = rows, resumed_from
    return life


def _rows(first, last, steps_per_iteration=64):
    return [{"iteration": i, "env_steps": i * steps_per_iteration}
            for i in range(first, last + 1)]


def test_counters_report_measures_the_progress_each_restart_lost():
    lives = [_life(0, _rows(1, 12)), _life(1, _rows(11, 30), [10, 640])]
    report = counters_report(lives, checkpoint_interval=5)
    assert report["problems"] == []
    assert report["restarts"][0]["iterations_lost"] == 2
    assert report["restarts"][0]["env_steps_lost"] == 128


def test_counters_report_flags_a_loss_past_the_interval_and_counters_going_back():
    lost_too_much = [_life(0, _rows(1, 12)), _life(1, _rows(6, 20), [5, 320])]
    assert any("lost 7 iterations" in p
               for p in counters_report(lost_too_much, 5)["problems"])
    went_back = [_life(0, _rows(1, 6) + [{"iteration": 7, "env_steps": 10}])]
    assert counters_report(went_back, 5)["problems"] == ["life 0: env_steps went back"]
    wrong_start = [_life(0, _rows(1, 12)), _life(1, _rows(3, 20), [10, 640])]
    assert any("not from its checkpoint" in p for p in counters_report(wrong_start, 5)["problems"])


def test_the_metrics_tail_reads_a_truncated_file_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(1, 5)))
    tail = MetricsTail(str(tmp_path))
    assert [r["iteration"] for r in tail.poll()] == [1, 2, 3, 4, 5]
    # A resumed run cuts the file back to its checkpoint and writes on.
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(1, 3) + _rows(4, 9, 65)))
    assert [r["env_steps"] for r in tail.poll()][3:] == [4 * 65, 5 * 65, 6 * 65, 7 * 65,
                                                          8 * 65, 9 * 65]
    assert tail.resets == 1


def test_the_on_demand_env_raises_once_per_trigger_file(tmp_path, monkeypatch):
    trigger = tmp_path / "fault"
    monkeypatch.setenv(FAULT_FILE_VARIABLE, str(trigger))
    env = make_env(on_demand_id("InvertedPendulumBulletEnv-v0"))
    try:
        env.reset(seed=0)
        action = np.zeros(1, np.float32)
        env.step(action)
        trigger.touch()
        with pytest.raises(InjectedEnvFault):
            env.step(action)
        assert not trigger.exists()
        env.step(action)  # one file, one failure
    finally:
        env.close()


def test_a_train_command_given_the_soak_clusters_environment_joins_it():
    """The Ray soak's cluster listens on loopback; a driver started without Ray's
    loopback switch turns 127.0.0.1 into the machine's own address and never
    reaches it (the soak's train command hung so). The environment the soak
    hands its train command carries the switch, whatever the soak's own had."""
    from bench.soak_cluster import SoakCluster

    cluster = SoakCluster(head_cpus=1, node_cpus=1)
    try:
        env = {k: v for k, v in os.environ.items()
               if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
        env.update(cluster.driver_environment())
        code = ("import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                "print(sum(1 for n in ray.nodes() if n['Alive'])); ray.shutdown()")
        joined = subprocess.run([sys.executable, "-c", code, cluster.address], env=env,
                                capture_output=True, text=True, timeout=120)
        assert joined.returncode == 0, joined.stderr[-2000:]
        assert joined.stdout.strip().splitlines()[-1] == "2"
    finally:
        cluster.shutdown()


def test_the_soak_counts_the_faults_its_plan_has_room_for(tmp_path):
    """30 minutes at one fault every 5 left two kinds of the rotation out (the
    Ray soak of 2026-11-28): the soak says so before it starts."""
    from bench.soak import parse_args

    assert parse_args(["--minutes", "30"]).fault_slots == 4
    assert parse_args(["--minutes", "30", "--fault_interval_minutes", "3.5"]).fault_slots == 6
    assert parse_args([]).fault_slots >= len(parse_args([]).fault_kinds)
    result = subprocess.run([sys.executable, "-m", "bench.soak", "--minutes", "30",
                             "--gin_file", "no_such_file.gin", "--out_dir", str(tmp_path)],
                            cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert "room for about 4 faults, fewer than the 6 kinds" in result.stderr, result.stderr[-2000:]

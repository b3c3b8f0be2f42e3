"""bench/humanoid_suite.py and bench/humanoid_report.py: the figures read from
a humanoid run's metrics rows (thresholds on the training return, T and EPS over
each session's steady rows), async over sync per seed, ALF's table beside ours,
runs in progress read from their directories (made-up rows, no training); and
one real smoke run of the bench on HumanoidBulletEnv with tiny settings, stopped
by its time, resumed, stopped at its score."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Dict, List, Optional

import psutil
import pytest

from bench import benchlib
from bench import humanoid_report as report
from bench import humanoid_suite as suite
from conftest import REPO_ROOT, wait_until

K, UNROLL = 96, 512


def _rows(returns: List[Optional[float]], Ts: List[float], starts=(1,), num_actors: int = 1
          ) -> List[Dict]:
    """Metrics rows as the trainer writes them: iteration i at i * K * UNROLL
    env steps, wall_time the sum of the T so far; rows whose iteration is in
    ``starts`` begin a session (they carry startup_s)."""
    rows, wall = [], 0.0
    for i, (ret, T) in enumerate(zip(returns, Ts), start=1):
        wall += T
        rows.append({"iteration": i, "env_steps": i * K * UNROLL, "wall_time": wall,
                     "num_envs": K, "num_actors": num_actors, "unroll_length": UNROLL,
                     "T": T, "EPS": K / T, "episode_return": ret,
                     "startup_s": 3.0 if i in starts else None, "lag": 0,
                     "actor_unroll_s": T, "learner_train_s": 1.0, "learner_wait_s": 0.0,
                     "actor_wait_s": 0.0, "actor_inference_s": 0.1, "actor_env_s": 0.5,
                     "episodes_finished": 10})
    return rows


def test_thresholds_timing_and_speed_of_a_run_resumed_once():
    # session 1: iterations 1-4 (the first pays the start-up); session 2: 5-7
    rows = _rows([None, 300.0, 600.0, 1200.0, 1100.0, 1600.0, 2100.0],
                 [30.0, 20.0, 20.0, 20.0, 40.0, 20.0, 20.0], starts=(1, 5))
    figures = report.run_figures(rows, score_rows=1)
    per_iteration = K * UNROLL
    assert (figures["steps_to_500"], figures["wall_s_to_500"]) == (3 * per_iteration, 70.0)
    assert (figures["steps_to_1000"], figures["wall_s_to_1000"]) == (4 * per_iteration, 90.0)
    assert (figures["steps_to_1500"], figures["wall_s_to_1500"]) == (6 * per_iteration, 150.0)
    assert (figures["steps_to_2000"], figures["wall_s_to_2000"]) == (7 * per_iteration, 170.0)
    # T and EPS: the first row of each session left out (N = 1), so every T is 20
    assert figures["T"] == 20.0 and figures["EPS"] == K / 20.0
    assert figures["steady_iterations"] == 5 and figures["sessions"] == 2
    assert figures["env_steps_per_s"] == 7 * per_iteration / 170.0
    assert figures["final_return"] == 2100.0 and figures["best_return"] == 2100.0
    assert [p[2] for p in figures["training"]] == [300.0, 600.0, 1200.0, 1100.0, 1600.0,
                                                   2100.0]  # no row without a return
    # an async run leaves its first two rows of each session out
    async_ = report.run_figures(_rows([100.0] * 6, [50.0, 1.0, 7.0, 50.0, 1.0, 7.0],
                                      starts=(1, 4), num_actors=2))
    assert async_["T"] == 7.0 and async_["steady_iterations"] == 2
    assert async_["steps_to_500"] is None


def test_steady_rows_per_session_is_steady_rows_for_a_run_in_one_go():
    rows = _rows([1.0] * 5, [5.0] * 5)
    assert benchlib.steady_rows_per_session(rows, 2) == benchlib.steady_rows(rows, 2)
    resumed = _rows([1.0] * 5, [5.0] * 5, starts=(1, 4))
    assert [r["iteration"] for r in benchlib.steady_rows_per_session(resumed, 1)] == [2, 3, 5]
    assert [r["iteration"] for r in benchlib.steady_rows_per_session(resumed, 3)] == [5]


def _run(mode: str, seed: int, curve, in_progress: bool = False, **figures) -> Dict:
    """A run as the report sees it: training curve [env steps, wall s, return]."""
    run = {"mode": mode, "seed": seed, "training": curve, "in_progress": in_progress,
           "total_env_steps": curve[-1][0] if curve else 0, "stop_score": 2000.0,
           "stopped_by": None if in_progress else "score", **figures}
    for t in report.THRESHOLDS:
        hit = next((p for p in curve if p[2] >= t), None)
        run[f"steps_to_{t}"], run[f"wall_s_to_{t}"] = (hit[0], hit[1]) if hit else (None, None)
    return run


def test_async_over_sync_per_seed_in_progress_runs_included():
    runs = [
        _run("sync", 0, [[1e6, 1000.0, 600.0], [2e6, 2000.0, 1200.0], [3e6, 3000.0, 1400.0]]),
        _run("async", 0, [[2e6, 500.0, 700.0], [4e6, 1000.0, 1600.0]], in_progress=True),
        _run("async", 1, [[1e6, 100.0, 900.0]]),  # no sync twin: no row
    ]
    ratios = report.seed_ratios(runs)
    assert list(ratios) == [0]
    assert ratios[0]["500"] == (2.0, 0.5)  # 2M / 1M env steps, 500 / 1000 s
    assert ratios[0]["1000"] == (2.0, 0.5)  # 4M / 2M, 1000 / 2000 s
    assert ratios[0]["1500"] == "async only" and ratios[0]["2000"] is None
    table = report.ratio_table(runs)
    assert "| 0 (in progress) | 2.00 steps, 0.50 time | 2.00 steps, 0.50 time | async only " \
           "| - |" in table


def test_alf_rows_beside_ours_with_medians_over_seeds():
    figures = {"num_envs": 96, "num_actors": 1, "T": 25.0, "EPS": 3.84,
               "env_steps_per_s": 1900.0}
    runs = [_run("sync", 0, [[29e6, 4 * 3600.0, 2000.0]], **figures),
            _run("sync", 1, [[31e6, 5 * 3600.0, 2001.0]], **figures),
            _run("sync", 2, [[10e6, 3600.0, 800.0]], in_progress=True, **figures)]
    table = report.alf_table(runs)
    assert "| ALF sync K=96 | 96 | 1 | 29.00M | 3h20m | 20.0 | 4.8 | 2417 (derived) |" in table
    assert "| ALF async K=96 | 96 | 2 | 46.00M | 1h40m | 6.5 | 14.8 | 7667 (derived) |" in table
    assert "| ALF sync K=192 | 192 | 1 | 45.00M | 3h30m | - | 7.0 |" in table
    assert "| ours sync seed 0 | 96 | 1 | 29.00M | 4h00m | 25.0 | 3.8 | 1900 | stopped at " \
           "score 2000, 29.00M env steps |" in table
    assert "| ours sync seed 2 | 96 | 1 | - | - | 25.0 | 3.8 | 1900 | in progress, " \
           "10.00M env steps |" in table
    # the median over the three seeds, two of which got to 2000
    assert "| ours sync, median of 3 | 96 | 1 | 30.00M (2/3) | 4h30m | 25.0 | 3.8 | 1900 |" \
        in table
    thresholds = report.threshold_table(runs)
    assert "| sync seed 2 | 10.00M, 1h00m | - | - | - | - | - | in progress" in thresholds


def test_finished_by_score_or_budget_never_by_a_missing_return():
    args = suite.parse_args(["--stop_score", "-100", "--max_env_steps", "1000",
                             "--score_rows", "1"])
    assert suite.finished_by([], args) is None
    assert suite.finished_by([{"episode_return": None, "env_steps": 500}], args) is None
    assert suite.finished_by([{"episode_return": float("nan"), "env_steps": 500}],
                             args) is None
    assert suite.finished_by([{"episode_return": -200.0, "env_steps": 500},
                              {"episode_return": -100.0, "env_steps": 600}], args) == "score"
    assert suite.finished_by([{"episode_return": -200.0, "env_steps": 1000}],
                             args) == "budget"
    assert suite.reached([{"episode_return": 0.0}], 0.0)  # a return of 0 is a return


def test_the_score_averages_rows_so_that_one_swing_reaches_no_threshold():
    """The humanoid's rows swing by hundreds (one row's 100 episodes are less
    than an iteration's): the score, over 5 rows by default, reads the level."""
    returns = [700.0, 1600.0, 700.0, 1000.0, 1500.0]
    rows = _rows(returns, [20.0] * 5)
    assert [p[2] for p in report.score_curve(report.return_curve(rows), 5)] == [
        700.0, 1150.0, 1000.0, 1000.0, 1100.0]
    figures = report.run_figures(rows)
    assert figures["score_rows"] == 5 and figures["final_score"] == 1100.0
    assert figures["steps_to_1000"] == 2 * K * UNROLL and figures["steps_to_1500"] is None
    assert figures["final_return"] == 1500.0  # the last row's, as the console shows it
    assert report.run_figures(rows, score_rows=1)["steps_to_1500"] == 2 * K * UNROLL
    # the bench stops a run on the score, not on a row
    args = suite.parse_args(["--stop_score", "1500"])
    assert args.score_rows == 5 and suite.finished_by(rows[:2], args) is None
    assert suite.finished_by(rows[:2], suite.parse_args(["--stop_score", "1500",
                                                         "--score_rows", "1"])) == "score"
    with pytest.raises(SystemExit):
        suite.parse_args(["--score_rows", "0"])


def _write_run(root, name: str, rows: List[Dict]) -> None:
    os.makedirs(root / name)
    (root / name / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_table_reports_results_and_runs_in_progress_without_training(tmp_path):
    root = tmp_path / "runs"
    _write_run(root, "humanoid_sync_s0", _rows([100.0, 600.0], [20.0, 20.0]))
    _write_run(root, "humanoid_async_s0", _rows([100.0, 1100.0, 1200.0], [7.0, 7.0, 7.0],
                                                num_actors=2))
    _write_run(root, "not_a_run", _rows([5.0], [1.0]))
    finished = _run("sync", 0, [[1e6, 100.0, 600.0], [2e6, 200.0, 2000.0]], num_envs=96,
                    num_actors=1, T=20.0, EPS=4.8, env_steps_per_s=2400.0,
                    max_env_steps=50_000_000, eval_return=2100.0, eval_return_std=50.0,
                    eval_returns=[2050.0, 2150.0])
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(finished) + "\n", encoding="utf-8")
    before = sorted(os.listdir(root))
    out = subprocess.run([sys.executable, "-m", "bench.humanoid_suite", "--table",
                          "--root_dir", str(root), "--results", str(results),
                          "--plot_dir", str(tmp_path / "plots")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(os.listdir(root)) == before  # nothing was trained
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "humanoid_suite" and len(line["alf"]) == 5
    runs = {(r["mode"], r["seed"]): r for r in line["runs"]}
    assert set(runs) == {("sync", 0), ("async", 0)}  # the finished sync run, from results
    assert runs[("sync", 0)]["in_progress"] is False and runs[("sync", 0)]["eval_return"] == 2100
    assert runs[("async", 0)]["in_progress"] is True
    # its score over 5 rows: 100, 600, 800 (its rows' returns 100, 1100, 1200)
    assert runs[("async", 0)]["steps_to_500"] == 2 * K * UNROLL
    assert runs[("async", 0)]["steps_to_1000"] is None
    assert runs[("async", 0)]["total_env_steps"] == 3 * K * UNROLL
    assert line["seed_ratios"]["0"]["500"] == [2 * K * UNROLL / 1e6, 14.0 / 100.0]
    assert line["figures"] == [str(tmp_path / "plots" / "humanoid_suite.png")]
    assert os.path.isfile(line["figures"][0])
    assert "| ALF async K=96 |" in out.stderr and "| 0 (in progress) |" in out.stderr
    assert "| sync seed 0 | 1.00M, 1m40s | 2.00M, 3m20s |" in out.stderr
    assert "2100 +- 50 (2 ep.)" in out.stderr


# -- one real smoke run --------------------------------------------------------------
# ALF's humanoid config, shrunk: 4 envs per actor, unroll 32 (128 env steps an
# iteration), the envs stepped in the actor, one epoch of small minibatches.
TINY = ["--gin_param", "Trainer.num_envs=4", "--gin_param", "Trainer.unroll_length=32",
        "--gin_param", "PPOLearner.mini_batch_size=64", "--gin_param", "PPOLearner.num_epochs=1",
        "--gin_param", "Trainer.num_env_workers=0", "--gin_param", "Trainer.env_splits=1",
        "--gin_param", "Trainer.checkpoint_interval=4",
        "--gin_param", "MetricsRecorder.tensorboard=False"]


def _in_session(sid: int) -> List[str]:
    """The live processes of session ``sid``."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:200]}")
        except (OSError, psutil.Error):
            pass
    return left


def _bench(tmp_path, *flags: str):
    """Run the bench on ``tmp_path``'s runs and results (in a session of its
    own, so that whatever it started can be found); (its JSON line, its
    stderr). Fails if it exits non-zero or leaves a process running."""
    cmd = [sys.executable, "-m", "bench.humanoid_suite", "--root_dir", str(tmp_path / "runs"),
           "--results", str(tmp_path / "results.jsonl"), "--eval_episodes", "2",
           "--poll_s", "0.5", *TINY, *flags]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
        assert wait_until(lambda: not _in_session(proc.pid), timeout=20), \
            f"left running: {_in_session(proc.pid)}"
    finally:
        if _in_session(proc.pid) or proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1]), err


def _metrics(run_dir) -> List[Dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _results(tmp_path) -> List[Dict]:
    return benchlib.read_jsonl(str(tmp_path / "results.jsonl"))


def test_a_smoke_run_stops_on_time_resumes_and_stops_at_its_score(tmp_path):
    sync_dir = tmp_path / "runs" / "humanoid_sync_s0"
    # 1. Out of time: the run is stopped (final checkpoint) and reported in progress.
    line, err = _bench(tmp_path, "--modes", "sync", "--max_env_steps", "1000000",
                       "--stop_score", "1e9", "--timeout_s", "15")
    first = _metrics(sync_dir)
    assert first, f"no iteration in 15 s: {err[-3000:]}"
    assert _results(tmp_path) == []
    [run] = line["runs"]
    assert run["in_progress"] and run["total_env_steps"] == first[-1]["env_steps"] > 0
    assert "in progress" in err
    assert f"ckpt-{first[-1]['iteration']}.pt" in os.listdir(sync_dir / "checkpoints")

    # 2. The next invocation resumes that run directory from its checkpoint, to a
    # budget just past it, and evaluates it.
    budget = first[-1]["env_steps"] + 512
    line, err = _bench(tmp_path, "--modes", "sync", "--max_env_steps", str(budget),
                       "--stop_score", "1e9")
    rows = _metrics(sync_dir)
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    starts = [r["iteration"] for r in rows if r.get("startup_s") is not None]
    assert starts == [1, first[-1]["iteration"] + 1]  # continued, not started again
    [result] = _results(tmp_path)
    assert result["mode"] == "sync" and result["stopped_by"] == "budget"
    assert result["trainer_exit"] == 0 and result["total_env_steps"] == rows[-1]["env_steps"]
    assert result["total_env_steps"] >= budget and result["sessions"] == 2
    assert len(result["eval_returns"]) == 2 and result["eval_env_steps"] == budget

    # 3. A score every row reaches: the async run is stopped at its first return,
    # with a final checkpoint of its last iteration to resume from.
    line, err = _bench(tmp_path, "--modes", "async", "--max_env_steps", "1000000",
                       "--stop_score", "-1000000")
    async_dir = tmp_path / "runs" / "humanoid_async_s0"
    rows = _metrics(async_dir)
    result = _results(tmp_path)[-1]
    assert result["mode"] == "async" and result["stopped_by"] == "score"
    assert result["trainer_exit"] == 128 + signal.SIGTERM
    assert result["total_env_steps"] == rows[-1]["env_steps"] < 1_000_000
    assert result["num_actors"] == 2 and result["eval_return"] is not None
    assert os.path.isfile(async_dir / "config.gin")
    assert f"ckpt-{rows[-1]['iteration']}.pt" in os.listdir(async_dir / "checkpoints")
    assert [r["mode"] for r in line["runs"]] == ["sync", "async"]
    assert "0" in line["seed_ratios"]

    # 4. Finished runs are skipped next time.
    line, err = _bench(tmp_path, "--modes", "async", "--max_env_steps", "1000000",
                       "--stop_score", "-1000000")
    assert "async seed 0: already in" in err and "alf_async.bin.train" not in err
    assert len(_results(tmp_path)) == 2

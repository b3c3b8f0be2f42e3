"""The EPS report: numbers from fabricated metrics files, figures, and a real tiny study."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from alf_async.reporting import plots
from alf_async.reporting.eps_report import REPORT_FILE, ReportError, build_report
from alf_async.reporting.eps_study import eps_table, make_cells, time_split_table
from alf_async.reporting.run_metrics import (
    gin_binding_text, parse_metrics_lines, read_metrics, return_curve, summarize_run,
    threshold_crossing)
from conftest import REPO_ROOT

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def records(K, N, Ts, unroll=(1.0,), train=(0.5,), returns=None, lags=None, unroll_length=8):
    """Fabricated metrics records: one per T, with cumulative counters."""
    out, wall = [], 0.0
    for i, T in enumerate(Ts):
        wall += T
        out.append({
            "iteration": i + 1, "env_steps": (i + 1) * K * unroll_length,
            "wall_time": wall, "num_envs": K, "num_actors": N,
            "unroll_length": unroll_length, "T": T, "EPS": K / T,
            "actor_unroll_s": unroll[i % len(unroll)],
            "actor_wait_s": 0.25, "learner_train_s": train[i % len(train)],
            "learner_wait_s": T - train[i % len(train)],
            "lag": (lags[i] if lags else 0),
            "episode_return": (returns[i] if returns else None),
        })
    return out


def write_run(directory, recs, env="HumanoidBulletEnv-v0"):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(directory, "config.gin"), "w") as f:
        f.write(f"Trainer.env_name = '{env}'\nTrainer.num_envs = {recs[0]['num_envs']}\n")


# Hand-computed: warm-up skips the first N iterations.
#   K=32 sync:  T after iteration 1 = 2.0, 2.2, 1.8      -> T = 2.0, EPS = 16
#   K=32 async: T after iteration 2 = 1.0, 1.2, 0.8      -> T = 1.0, EPS = 32, ratio 2
#   K=64 sync:  3.0, 3.0                                 -> T = 3.0, EPS = 21.33
#   K=64 async: 2.0, 2.0                                 -> T = 2.0, EPS = 32, ratio 1.5
STUDY = {
    "num_envs=32,num_actors=1": (32, 1, [5.0, 2.0, 2.2, 1.8]),
    "num_envs=32,num_actors=2": (32, 2, [5.0, 0.5, 1.0, 1.2, 0.8]),
    "num_envs=64,num_actors=1": (64, 1, [4.0, 3.0, 3.0]),
    "num_envs=64,num_actors=2": (64, 2, [4.0, 1.0, 2.0, 2.0]),
}


@pytest.fixture
def study_dir(tmp_path):
    root = tmp_path / "study"
    for name, (K, N, Ts) in STUDY.items():
        returns = [10.0 * (i + 1) for i in range(len(Ts))]
        write_run(str(root / name), records(K, N, Ts, returns=returns,
                                            lags=[0] + [N - 1] * (len(Ts) - 1)))
    return str(root)


def test_summary_skips_warmup_iterations():
    s = summarize_run(records(32, 1, [5.0, 2.0, 2.2, 1.8]))
    assert s.warmup == 1 and s.steady_iterations == 3 and not s.warmup_fallback
    assert s.mean_T == pytest.approx(2.0)
    assert s.mean_EPS == pytest.approx(16.0)
    assert s.iterations == 4 and s.env_steps == 4 * 32 * 8
    assert s.wall_time_s == pytest.approx(11.0)
    s = summarize_run(records(32, 2, [5.0, 0.5, 1.0, 1.2, 0.8], lags=[0, 1, 1, 1, 1]))
    assert s.warmup == 2 and s.mean_T == pytest.approx(1.0) and s.mean_EPS == pytest.approx(32)
    assert s.mean_lag == pytest.approx(1.0)
    s = summarize_run(records(32, 2, [5.0, 0.5, 1.0, 1.2, 0.8]), warmup=0)
    assert s.mean_T == pytest.approx(8.5 / 5)


def test_too_short_runs_fall_back_to_their_last_iteration():
    s = summarize_run(records(8, 2, [3.0, 0.5]))
    assert s.warmup_fallback and s.steady_iterations == 1
    assert s.mean_T == pytest.approx(0.5)
    assert summarize_run([]).mean_T is None


def test_time_split_and_returns():
    recs = records(16, 1, [4.0, 2.0, 4.0], unroll=(1.0, 1.5, 2.5), train=(0.5, 0.25, 0.75),
                   returns=[None, 5.0, 12.0])
    s = summarize_run(recs, return_threshold=10.0)
    assert s.actor_unroll_s == pytest.approx(2.0)     # (1.5 + 2.5) / 2
    assert s.learner_train_s == pytest.approx(0.5)    # (0.25 + 0.75) / 2
    assert s.learner_wait_s == pytest.approx(2.5)     # (1.75 + 3.25) / 2
    assert s.final_return == 12.0
    assert return_curve(recs) == [(256, 6.0, 5.0), (384, 10.0, 12.0)]
    assert (s.time_to_threshold_s, s.steps_to_threshold) == (10.0, 384)
    assert threshold_crossing(recs, 100.0) is None


def test_metrics_lines_skip_garbage_and_keep_latest_duplicate():
    lines = [json.dumps({"iteration": 1, "T": 1.0}), json.dumps({"iteration": 2, "T": 9.0}),
             json.dumps({"iteration": 2, "T": 2.0}), "", '{"iteration": 3, "T"']
    recs = parse_metrics_lines(lines)
    assert [r["T"] for r in recs] == [1.0, 2.0]


def test_eps_table_matches_hand_computed_values(study_dir):
    from alf_async.reporting.run_metrics import find_run_dirs

    cells = make_cells([summarize_run(read_metrics(d)) for d in find_run_dirs(study_dir)])
    headers, rows = eps_table(cells)
    assert headers == ["K", "sync T (s)", "sync EPS", "async T (s)", "async EPS",
                       "async/sync EPS"]
    assert rows == [["32", "2.00", "16.00", "1.00", "32.00", "2.00"],
                    ["64", "3.00", "21.33", "2.00", "32.00", "1.50"]]
    by = {(c.num_envs, c.num_actors): c for c in cells}
    assert by[(32, 1)].ideal_T == pytest.approx(1.5)          # U + L
    assert by[(32, 2)].ideal_T == pytest.approx(0.75)         # max(L, (U + L) / 2)
    assert by[(32, 2)].lag == pytest.approx(1.0)
    headers, rows = time_split_table(cells)
    assert rows[1][:9] == ["32", "2", "1.000", "1.000", "0.250", "0.500", "0.500", "1.00",
                           "0.750"]


def test_eps_table_with_several_async_actor_counts():
    cells = make_cells([summarize_run(records(8, 1, [9, 4.0])),
                        summarize_run(records(8, 2, [9, 9, 2.0])),
                        summarize_run(records(8, 4, [9, 9, 9, 9, 1.0]))])
    headers, rows = eps_table(cells)
    assert headers[3:] == ["async N=2 T (s)", "async N=2 EPS", "async N=2/sync EPS",
                           "async N=4 T (s)", "async N=4 EPS", "async N=4/sync EPS"]
    assert rows == [["8", "4.00", "2.00", "2.00", "4.00", "2.00", "1.00", "8.00", "4.00"]]


def test_number_formats():
    from alf_async.reporting.tables import fmt_seconds
    from alf_async.utils.formatting import format_duration as fmt_duration

    assert [fmt_seconds(v) for v in (21.333, 2.0, 0.5, 0.03641, None)] == \
        ["21.33", "2.00", "0.500", "0.0364", "-"]
    assert [fmt_duration(v) for v in (0.44, 42, 185, 6000, None)] == \
        ["0.4s", "42s", "3m05s", "1h40m", "-"]


def test_gin_binding_text():
    text = "# c\nTrainer.env_name = 'Hopper'\nTrainer.num_envs = 32\nTrainer.num_envs = 48\n"
    assert gin_binding_text(text, "Trainer.env_name") == "Hopper"
    assert gin_binding_text(text, "Trainer.num_envs") == "48"
    assert gin_binding_text(text, "Trainer.seed") is None


def assert_png(path, size=plots.PIXELS):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    from PIL import Image
    import matplotlib.image

    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size == size
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (size[1], size[0])
    assert pixels.std() > 0  # something was drawn


def test_report_from_fabricated_runs(study_dir, tmp_path):
    out = str(tmp_path / "report")
    built = build_report(study_dir, out, threshold=25.0)
    assert built.report == os.path.join(out, REPORT_FILE)
    assert set(built.plots) == {"eps_vs_k", "return_vs_time", "return_vs_steps"}
    for path in built.plots.values():
        assert os.path.dirname(path) == out
        assert_png(path)
    with open(built.report) as f:
        text = f.read()
    assert "| 32 | 2.00 | 16.00 | 1.00 | 32.00 | 2.00 |" in text
    assert "| 64 | 3.00 | 21.33 | 2.00 | 32.00 | 1.50 |" in text
    assert "warm-up" in text and "first N iterations" in text
    assert f"| CPUs | {os.cpu_count()} " in text and "| torch |" in text
    assert "| pybullet |" in text and "| gymnasium |" in text
    assert "env: HumanoidBulletEnv-v0" in text
    assert "![EPS vs K](eps_vs_k.png)" in text
    assert "![Return vs wall-clock time](return_vs_time.png)" in text
    assert "time to 25" in text
    assert "| actor unroll U (s) |" in text and "ideal T (s)" in text


def test_report_errors(tmp_path):
    with pytest.raises(ReportError, match="no run directory"):
        build_report(str(tmp_path))
    with pytest.raises(ReportError, match="not a directory"):
        build_report(str(tmp_path / "missing"))


def test_plots_are_valid_pngs(tmp_path):
    cells = make_cells([summarize_run(records(k, n, [1.0, 1.0 + k / 100, 1.0 + k / 100]))
                        for k in (8, 16) for n in (1, 2)])
    assert_png(plots.plot_eps_vs_k(cells, str(tmp_path / "eps.png")))
    curves = {"a": [(100, 10.0, 1.0), (200, 20.0, 3.0), (300, 40.0, 2.0)], "b": []}
    assert_png(plots.plot_return_curves(curves, str(tmp_path / "t.png"), x="time"))
    assert_png(plots.plot_return_curves(curves, str(tmp_path / "s.png"), x="steps"))
    assert plots.time_axis(30) == (1.0, "s") and plots.time_axis(7200)[1] == "h"


def test_eps_report_end_to_end(tmp_path):
    """The real study on InvertedPendulum: K = 2, N = 1 and 2, 2 iterations each."""
    root, again = str(tmp_path / "study"), str(tmp_path / "again")
    cmd = [sys.executable, "-m", "alf_async.bin.eps_report",
           "--gin_file=ppo_bullet_inverted_pendulum.gin", f"--root_dir={root}",
           "--num_envs=2", "--num_actors=1,2", "--num_iterations=2",
           "--gin_param=Trainer.unroll_length=16", "--gin_param=PPOLearner.mini_batch_size=32",
           "--gin_param=PPOLearner.num_epochs=1"]
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"num_envs=2,num_actors=1", "num_envs=2,num_actors=2"} <= set(os.listdir(root))
    with open(os.path.join(root, REPORT_FILE)) as f:
        text = f.read()
    assert "env: InvertedPendulumBulletEnv-v0" in text
    assert "Recorded by the sweep" in text
    row = next(line for line in text.splitlines() if line.startswith("| 2 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 6 and all(c != "-" for c in cells), row
    assert float(cells[2]) == pytest.approx(2 / float(cells[1]), rel=0.01)
    assert_png(os.path.join(root, "eps_vs_k.png"))
    assert "| K | sync T (s) |" in result.stdout
    # the same report from the existing runs, elsewhere
    result = subprocess.run([sys.executable, "-m", "alf_async.bin.eps_report",
                             f"--from_dir={root}", f"--report_dir={again}"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(again, REPORT_FILE)) as f:
        assert row in f.read()


def test_a_run_that_never_reaches_the_target_says_so():
    from alf_async.reporting.report import runs_table
    from alf_async.reporting.run_metrics import RunSummary

    fields = {f: None for f in RunSummary.__dataclass_fields__}
    summary = RunSummary(**fields)
    table = runs_table([("sync", summary)], threshold=1000.0)
    assert table.splitlines()[-1].rstrip(" |").endswith("not reached | not reached")

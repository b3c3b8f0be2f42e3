"""bench/suite_report.py: the per-seed async / sync ratios that issue 24's lag
targets are read from (no training: made-up evaluation curves)."""

from bench import suite_report as suite


def _run(mode: str, seed: int, curve):
    """A finished run's result as bench/suite.py writes it: evaluations
    [env steps, training seconds, eval return]."""
    return {"env": "half_cheetah", "mode": mode, "seed": seed, "evaluations": curve}


def test_per_seed_ratios_compare_each_seeds_async_run_with_its_own_sync_run():
    results = [
        _run("sync", 0, [[100_000, 100.0, 500.0], [200_000, 200.0, 1200.0],
                         [300_000, 300.0, 2100.0]]),
        _run("async", 0, [[100_000, 50.0, 1100.0], [200_000, 100.0, 1600.0],
                          [400_000, 200.0, 2700.0]]),
        _run("sync", 1, [[100_000, 80.0, 1000.0], [200_000, 160.0, 3000.0]]),
        _run("async", 1, [[300_000, 120.0, 1000.0]]),
        _run("async", 2, [[100_000, 40.0, 3000.0]]),  # no sync twin: no row
    ]
    ratios = suite.seed_ratios(results)
    assert sorted(ratios) == ["half_cheetah"] and sorted(ratios["half_cheetah"]) == [0, 1]
    seed0, seed1 = ratios["half_cheetah"][0], ratios["half_cheetah"][1]
    assert seed0["1000"] == (0.5, 0.25)  # first hits: 100k / 200k env steps, 50 / 200 s
    assert seed0["2000"] == (400_000 / 300_000, 200.0 / 300.0)
    assert seed0["2500"] == "async only" and seed0["zoo"] is None
    assert seed1["1000"] == (3.0, 1.5)
    assert seed1["2000"] == "sync only"
    table = suite.seed_ratio_tables(results)
    assert "| 0 | 0.50 steps, 0.25 time |" in table
    assert "| 1 | 3.00 steps, 1.50 time |" in table
    assert "sync only" in table and "async only" in table


def test_seed_spread_compares_every_ordered_pair_of_seeds_of_one_config():
    results = [
        _run("sync", 0, [[100_000, 10.0, 1000.0], [200_000, 20.0, 2000.0]]),
        _run("sync", 1, [[200_000, 20.0, 1000.0], [300_000, 30.0, 1500.0]]),
        _run("sync", 2, [[150_000, 15.0, 1200.0]]),
        _run("async", 0, [[100_000, 5.0, 1000.0]]),  # one seed: no spread
    ]
    spread = suite.seed_spread(results)
    assert list(spread["half_cheetah"]) == ["sync"]
    at_1000 = spread["half_cheetah"]["sync"]["1000"]
    # first hits at 1000: 100k, 200k, 150k -> six ordered pairs, largest 2.0;
    # above 1.3: 200/100 and 150/100 (1.5); 200/150 = 1.33 too
    assert at_1000["pairs"] == 6 and at_1000["max"] == 2.0
    assert at_1000["above_1.3"] == 3
    assert spread["half_cheetah"]["sync"]["2000"] == {"max": None, "pairs": 0, "above_1.3": 0}
    table = suite.seed_spread_tables(results)
    assert "| sync (0, 1, 2) | 2.00 (3/6 above 1.3) |" in table


def test_table_reads_several_results_files_as_one(tmp_path):
    """``bench.suite --table --results a.jsonl,b.jsonl``: the report of the rows of
    both (the docs redraw the shipped configs' figures from one file and compare
    it with experiments kept in others)."""
    import json
    import subprocess
    import sys

    from conftest import REPO_ROOT

    curve = [[500_000, 60.0, 1000.0], [1_000_000, 120.0, 2000.0], [2_000_000, 240.0, 2500.0]]
    files = []
    for name, rows in (("a.jsonl", [_run("sync", 0, curve), _run("sync", 1, curve)]),
                       ("b.jsonl", [_run("async", 0, curve)])):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files.append(str(path))
    out = subprocess.run([sys.executable, "-m", "bench.suite", "--table", "--results",
                          ",".join(files)], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    envs = json.loads(out.stdout.strip().splitlines()[-1])["envs"]["half_cheetah"]
    assert envs["sync"]["runs"] == 2 and envs["async"]["runs"] == 1
    assert "| async / sync |" in out.stderr
    refused = subprocess.run([sys.executable, "-m", "bench.suite", "--results",
                              ",".join(files), "--envs", "hopper", "--seeds", "0"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "several only with --table" in refused.stderr


def test_thresholds_are_read_on_the_training_return_as_well_as_on_evaluations():
    """The training curve (the console's mean return of the last 100 episodes)
    has its own thresholds and per-seed ratios; a run without it (analysed
    before it was kept) drops out of those tables only."""
    sync = _run("sync", 0, [[100_000, 10.0, 1100.0]])
    sync["training"] = [[100_000, 10.0, 400.0], [300_000, 30.0, 1050.0]]
    sync["policy_width"] = [[250_000, 0.41, -1.5], [500_000, 0.30, -3.25]]
    async_ = _run("async", 0, [[200_000, 10.0, 1000.0]])
    async_["training"] = [[150_000, 6.0, 1001.0]]
    older = _run("sync", 1, [[100_000, 10.0, 1000.0]])  # no training curve kept
    results = [sync, async_, older]
    assert suite.seed_ratios(results)["half_cheetah"][0]["1000"] == (2.0, 1.0)
    on_training = suite.seed_ratios(results, "training")["half_cheetah"]
    assert list(on_training) == [0] and on_training[0]["1000"] == (0.5, 0.2)
    summary = suite.summarize(results, "training")["half_cheetah"]
    assert summary["sync"]["reached_1000"] == 1 and summary["sync"]["steps_to_1000"] == 300_000
    assert "training return" in suite.markdown_tables({"half_cheetah": summary},
                                                      "training")
    width = suite.width_table(results)
    assert "| sync seed 0 | 0.410 / -1.50 | 0.300 / -3.25 | - |" in width
    assert "async seed 0" not in width


def test_a_run_s_training_curve_leaves_out_iterations_without_a_return(tmp_path):
    """The metrics write NaN for the return before the first episode ends;
    the suite's training curve (and so its JSON results) must not carry it."""
    import json
    import math

    from bench.suite import analyse_run

    rows = [{"iteration": i, "env_steps": 4096 * i, "wall_time": 2.0 * i, "num_envs": 16,
             "num_actors": 1, "unroll_length": 256, "T": 2.0, "EPS": 8.0,
             "episode_return": float("nan") if i < 3 else 100.0 * i} for i in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = analyse_run("half_cheetah", "sync", 0, str(tmp_path))
    assert [p[0] for p in result["training"]] == [4096 * 3, 4096 * 4, 4096 * 5]
    assert all(math.isfinite(p[2]) for p in result["training"])
    json.dumps(result, allow_nan=False)

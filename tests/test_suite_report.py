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
    assert at_1000["missed"] == 0 and at_1000["of"] == 6
    # only seed 0 reached 2000: the two pairs (1, 0) and (2, 0) missed it
    assert spread["half_cheetah"]["sync"]["2000"] == {
        "max": None, "pairs": 0, "above_1.3": 0, "missed": 2, "of": 6}
    table = suite.seed_spread_tables(results)
    assert ("| sync against another seed (0, 1, 2) | 2.00 (3/6 above 1.3); missed 0/6 | "
            "1.50 (1/2 above 1.3); missed 2/6 | -; missed 2/6 |") in table


def test_same_seed_spread_sets_each_async_run_against_the_sync_run_of_its_seed():
    """The issue's spread bound: async's runs over their sync twins, read against
    sync's runs over one another; an async run that never reaches a threshold its
    sync twin reached counts as missed, the other way round does not."""
    results = [
        _run("sync", 0, [[100_000, 10.0, 1000.0], [200_000, 20.0, 2000.0]]),
        _run("sync", 1, [[200_000, 20.0, 1000.0], [300_000, 30.0, 1500.0]]),
        _run("sync", 2, [[150_000, 15.0, 900.0]]),
        _run("async", 0, [[150_000, 5.0, 1000.0]]),  # 1.5x; misses 1500 and 2000
        _run("async", 1, [[100_000, 5.0, 1600.0]]),  # 0.5x to 1000, 1/3x to 1500
        _run("async", 2, [[150_000, 5.0, 1200.0]]),  # async only at 1000
        _run("async", 3, [[50_000, 5.0, 3000.0]]),  # no sync twin: left out
    ]
    same_seed = suite.same_seed_spread(results)["half_cheetah"]
    assert same_seed["1000"] == {"max": 1.5, "pairs": 2, "above_1.3": 1, "missed": 0, "of": 3}
    assert same_seed["1500"]["max"] == 100_000 / 300_000 and same_seed["1500"]["missed"] == 1
    assert same_seed["2000"] == {"max": None, "pairs": 0, "above_1.3": 0, "missed": 1, "of": 3}
    table = suite.seed_spread_tables(results)
    assert ("| async against sync, same seed (0, 1, 2) | 1.50 (1/2 above 1.3); missed 0/3 | "
            "0.33 (0/1 above 1.3); missed 1/3 | -; missed 1/3 |") in table
    assert "| sync against another seed (0, 1, 2) |" in table


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


def _measured(row, sync_rate: float, async_rate: float):
    """``row`` with the envs-alone rates bench/suite.py measures before a run
    trains (env steps/s of sync's and async's layouts, stepping alone)."""
    return {**row, "envs_alone_steps_per_s": {"sync": sync_rate, "async": async_rate}}


def test_async_s_time_of_allowed_sets_its_time_against_its_steps_and_its_envs_speed():
    """Where both runs of a seed measured their envs alone, the per-seed cell
    gains async's time over (its steps ratio x the envs-alone time ratio,
    the mean over the two runs of sync's rate / async's); a seed where only
    one run has the measurement keeps the two figures."""
    import pytest

    results = [
        # envs-alone time ratios 3000 / 2000 = 1.5 and 2500 / 1000 = 2.5: mean 2.0
        _measured(_run("sync", 0, [[100_000, 100.0, 1000.0], [200_000, 200.0, 2000.0]]),
                  3000.0, 2000.0),
        _measured(_run("async", 0, [[120_000, 60.0, 1000.0], [300_000, 150.0, 2000.0]]),
                  2500.0, 1000.0),
        _run("sync", 1, [[100_000, 100.0, 1000.0]]),  # measured by its async run only
        _measured(_run("async", 1, [[150_000, 90.0, 1000.0]]), 2000.0, 1000.0),
    ]
    assert suite.envs_time_ratios(results) == {"half_cheetah": {0: pytest.approx(2.0)}}
    seed0, seed1 = (suite.seed_ratios(results)["half_cheetah"][seed] for seed in (0, 1))
    # 1000: 1.2x the steps in 0.6x the time; allowed 1.2 x 2.0 = 2.4 -> 0.25 of it
    assert seed0["1000"] == pytest.approx((1.2, 0.6, 0.25))
    assert seed0["2000"] == pytest.approx((1.5, 0.75, 0.25))
    assert seed0["2500"] is None
    assert seed1["1000"] == pytest.approx((1.5, 0.9))  # two figures
    table = suite.seed_ratio_tables(results)
    assert "| 0 | 1.20 steps, 0.60 time, 0.25 of allowed | 1.50 steps, 0.75 time, " \
           "0.25 of allowed |" in table
    assert "| 1 | 1.50 steps, 0.90 time |" in table
    assert "same env steps: seed 0 2.00\n" in table  # seed 1: not both runs measured
    assert "the issue's bound is <= 1.1" in table
    figures = suite.report(results)
    assert figures["seed_ratios"]["half_cheetah"]["0"]["1000"] == pytest.approx(
        (1.2, 0.6, 0.25))
    assert figures["seed_ratios"]["half_cheetah"]["1"]["1000"] == pytest.approx((1.5, 0.9))
    assert figures["envs_time_ratios"] == {"half_cheetah": {"0": pytest.approx(2.0)}}


def test_results_without_the_envs_alone_rates_report_as_before():
    """Results written before the envs-alone measurement (or with it off): two
    figures per cell and no envs-alone line or note."""
    results = [_run("sync", 0, [[100_000, 100.0, 1000.0]]),
               _run("async", 0, [[120_000, 60.0, 1000.0]])]
    assert suite.seed_ratios(results)["half_cheetah"][0]["1000"] == (1.2, 0.6)
    table = suite.seed_ratio_tables(results)
    assert "| 0 | 1.20 steps, 0.60 time | - |" in table
    assert "allowed" not in table and "Envs alone" not in table
    assert suite.envs_time_ratios(results) == {}
    assert suite.report(results)["envs_time_ratios"] == {}


def test_envs_alone_flags_are_checked():
    import pytest

    from bench.suite import parse_args

    args = parse_args(["--envs", "hopper"])
    assert args.envs_alone_steps > 0 and args.envs_alone_repeats >= 1
    assert parse_args(["--envs_alone_steps", "0"]).envs_alone_steps == 0  # off
    for flags in (["--envs_alone_steps", "-1"], ["--envs_alone_repeats", "0"]):
        with pytest.raises(SystemExit):
            parse_args(flags)


def test_envs_alone_measures_both_modes_layouts_of_hopper():
    """bench/suite.py's measurement, for real (4 batched steps, one repeat):
    both modes' rates, each mode's envs laid out as the trainer resolves
    them on this machine (N * K envs over N * max(W, 1) processes), and no
    stepping process left behind."""
    import multiprocessing

    from alf_async.sampling_choice import choose_sampling
    from alf_async.utils.process import usable_cores
    from bench import benchlib
    from bench.suite import gin_file, measure_envs_alone

    measured = measure_envs_alone("hopper", [], num_steps=4, repeats=1, seed=3)
    assert multiprocessing.active_children() == []
    for mode in ("sync", "async"):
        config = gin_file("hopper", mode)
        k, n, w, s = (benchlib.config_value(config, [], f"Trainer.{name}") for name in
                      ("num_envs", "num_actors", "num_env_workers", "env_splits"))
        choice = choose_sampling(w, s, cores=usable_cores(), num_actors=n, num_envs=k)
        assert measured["envs_alone_layout"][mode] == {
            "num_envs": n * k, "processes": n * max(choice.num_env_workers, 1)}
        assert measured["envs_alone_steps_per_s"][mode] > 0
        assert len(measured["envs_alone_samples"][mode]) == 1
    # The async Hopper file runs the sync file's envs as two actors (K / 2 each).
    assert measured["envs_alone_layout"]["async"]["num_envs"] == \
        measured["envs_alone_layout"]["sync"]["num_envs"]
    assert measured["envs_alone_layout"]["async"]["processes"] % 2 == 0
    assert measured["envs_alone_steps"] == 4


def test_every_run_median_counts_a_run_that_never_got_there_as_the_slowest():
    """Medians over the seeds that got there count only the fast seeds of a mode
    whose slow seeds never arrive; the every-run median counts each run, and
    is "beyond" where it falls on a run that never got there; the permutation
    p says how consistently async's runs sit after sync's."""
    # sync: all four seeds reach 1000 at once, two of them never 1500;
    # async: all four reach both, later
    fast, never = [[100_000, 10.0, 1600.0]], [[100_000, 10.0, 1200.0]]
    slow = [[300_000, 30.0, 1600.0]]
    results = ([_run("sync", s, fast) for s in (0, 1)] + [_run("sync", s, never) for s in (2, 3)]
               + [_run("async", s, slow) for s in range(4)])
    summary = suite.summarize(results)["half_cheetah"]
    assert summary["sync"]["steps_to_1500"] == 100_000  # the seeds that got there
    assert summary["sync"]["every_run_steps_to_1500"] is None
    assert summary["async"]["every_run_steps_to_1500"] == 300_000
    table = suite.markdown_tables({"half_cheetah": summary})
    row = next(line for line in table.splitlines() if line.startswith("| async / sync, every run"))
    # to 1000: 0.10M for sync, 0.30M for async (3.00); to 1500: async only
    assert "| 3.00 (0.30M / 0.10M) | async only (0.30M / beyond) |" in row
    assert "- (beyond / beyond)" in row
    # with the permutation test: every async run after every sync run to 1000
    # is the most extreme of the C(8, 4) = 70 labellings
    shifts = suite.mode_shift(results)["half_cheetah"]
    assert shifts["1000"]["U"] == 16 and shifts["1000"]["p_slower"] == 1 / 70
    # to 1500 the two sync runs that stopped at 0.10M leave their pairs open
    assert shifts["1500"]["U"] == 8
    assert "2500" not in shifts  # nobody got there
    table = suite.markdown_tables({"half_cheetah": summary}, shifts=suite.mode_shift(results))
    row = next(line for line in table.splitlines() if line.startswith("| async / sync, every run"))
    assert "| 3.00 (0.30M / 0.10M, p 0.014) |" in row


def test_runs_from_two_cpu_models_are_named_and_split_pairs_listed():
    """A seeded sync run repeats itself only on one CPU model, so the report
    says when its rows come from several and which seeds' pairs are split."""
    curve = [[100_000, 10.0, 1000.0]]
    same = [dict(_run(mode, 0, curve), cpu_model="A") for mode in ("sync", "async")]
    assert suite.machines_note(same) == ""
    assert suite.machines_note([_run("sync", 0, curve), _run("async", 0, curve)]) == ""
    split = [dict(_run("sync", 0, curve), cpu_model="Intel Xeon"),
             dict(_run("async", 0, curve), cpu_model="AMD EPYC"),
             dict(_run("sync", 1, curve), cpu_model="AMD EPYC"),
             dict(_run("async", 1, curve), cpu_model="AMD EPYC")]
    note = suite.machines_note(split)
    assert "2 CPU models (AMD EPYC; Intel Xeon)" in note
    assert note.endswith("different models: half_cheetah seed 0.")


def test_machine_info_names_the_cpu_model():
    from bench import benchlib

    info = benchlib.machine_info()
    assert isinstance(info["cpu_model"], str) and info["cpu_model"]


def test_cpu_model_tells_apart_two_cpus_of_one_name(tmp_path):
    """A virtual machine names a Zen 2 and a Zen 4 EPYC alike ("AMD EPYC"),
    yet their float kernels differ (AVX2 against AVX-512), so a seeded sync
    run repeats on one and not across them: the model string must differ."""
    from alf_async.reporting.machine import cpu_model

    def cpuinfo(name: str, family: int, model: int, flags: str) -> str:
        path = tmp_path / f"{family}_{model}"
        block = (f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n"
                 f"model\t\t: {model}\nmodel name\t: {name}\nstepping\t: 1\n"
                 f"flags\t\t: fpu sse2 {flags}\n")
        path.write_text(block + "\n" + block.replace("processor\t: 0", "processor\t: 1"))
        return str(path)

    zen2 = cpu_model(cpuinfo("AMD EPYC", 23, 49, "avx2 fma"))
    zen4 = cpu_model(cpuinfo("AMD EPYC", 25, 17, "avx2 fma avx512f avx512_bf16"))
    assert zen2 == "AMD EPYC (family 23 model 49 stepping 1; avx2)"
    assert zen4 == "AMD EPYC (family 25 model 17 stepping 1; avx2, avx512f, avx512_bf16)"
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\nmodel name\t: Some CPU\n")
    assert cpu_model(str(bare)) == "Some CPU"
    assert cpu_model(str(tmp_path / "missing")) not in ("", None)


def _budget_row(seed: int, budget: int, wall_per_step: float = 1e-3, layout=()):
    """A bench/suite.py row of an Ant sync run of ``seed`` trained to
    ``budget`` env steps (evaluations and training curves every 50k)."""
    curve = [[s, s * wall_per_step, s / 500.0] for s in range(50_000, budget + 1, 50_000)]
    return {"env": "ant", "mode": "sync", "seed": seed, "evaluations": curve,
            "training": curve, "total_env_steps": budget, "max_env_steps": budget,
            "gin_file": "ppo_bullet_ant.gin", "eval_interval": 50_000, "eval_episodes": 10,
            "gin_params": [f"Trainer.seed={seed}", f"Trainer.num_env_steps={budget}",
                           *layout], "cpu_model": "cpu A"}


def test_a_run_resumed_to_a_larger_budget_counts_once_by_its_longest_row():
    """bench.suite run again with a larger --max_env_steps appends a second row
    of the same run; medians and permutation tests must not count it twice."""
    half, whole = _budget_row(6, 500_000), _budget_row(6, 1_000_000)
    other_seed = _budget_row(7, 500_000)
    assert suite.distinct_runs([half, other_seed, whole]) == [other_seed, whole]
    assert suite.distinct_runs([whole, half]) == [whole]  # whichever file came first
    # not the same run: a second run of the seed (its own wall times), another
    # layout, another CPU model, a row whose points differ from the shorter one's
    separate = _budget_row(6, 1_000_000, wall_per_step=2e-3)
    layout = _budget_row(6, 1_000_000, layout=("Trainer.num_env_workers=0",))
    machine = {**whole, "cpu_model": "cpu B"}
    changed = {**whole, "evaluations": [[50_000, 50.0, 0.0]] + whole["evaluations"][1:]}
    for row in (separate, layout, machine, changed):
        assert suite.distinct_runs([half, row]) == [half, row]
    # rows of one budget (a run listed twice by hand) are left as they are
    assert suite.distinct_runs([whole, dict(whole)]) == [whole, dict(whole)]
    summary = suite.summarize([half, whole, other_seed])  # without distinct_runs: 3
    assert summary["ant"]["sync"]["runs"] == 3
    assert suite.summarize(suite.distinct_runs([half, whole, other_seed]))[
        "ant"]["sync"]["runs"] == 2


def test_the_suite_table_counts_a_run_and_its_extension_once(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import REPO_ROOT

    first, second = tmp_path / "half.jsonl", tmp_path / "whole.jsonl"
    first.write_text(json.dumps(_budget_row(6, 500_000)) + "\n"
                     + json.dumps(_budget_row(7, 500_000)) + "\n", encoding="utf-8")
    second.write_text(json.dumps(_budget_row(6, 1_000_000)) + "\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "bench.suite", "--table", "--results",
                          f"{first},{second}"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    sync = json.loads(out.stdout.strip().splitlines()[-1])["envs"]["ant"]["sync"]
    assert sync["runs"] == 2 and sorted(sync["seeds"]) == [6, 7]
    assert sync["reached_2000"] == 1  # only seed 6's 1M row gets to 2000 (at 1M)


def _write_config(run_dir, lines):
    run_dir.mkdir()
    (run_dir / "config.gin").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(run_dir)


def test_learning_bindings_keep_what_a_run_learned_with_and_drop_seed_and_resumables(
        tmp_path):
    """A suite row records its run's config.gin less the seed and what a resume
    may change, so two rows of one gin file name with different contents can be
    told apart (the async Ant file changed its lag correction on 2026-12-06)."""
    from bench import benchlib
    from bench.suite import analyse_run

    common = ["Trainer.env_name = 'HalfCheetahBulletEnv-v0'", "Trainer.num_envs = 16",
              "PPOLearner.learning_rate = 0.0003"]
    old = _write_config(tmp_path / "old", common + [
        "Trainer.seed = 0", "Trainer.num_actors = 2", "Trainer.num_env_steps = 1000000",
        "PPOLearner.lag_correction = 'vtrace_gae'"])
    new = _write_config(tmp_path / "new", common + [
        "Trainer.seed = 5", "Trainer.num_actors = 1", "Trainer.num_env_steps = 2000000",
        "PPOLearner.lag_correction = 'decoupled'", "PPOLearner.device = 'cpu'"])
    assert benchlib.learning_bindings(old) == {
        "PPOLearner.lag_correction": "'vtrace_gae'", "PPOLearner.learning_rate": "0.0003",
        "Trainer.env_name": "'HalfCheetahBulletEnv-v0'"}
    assert benchlib.learning_bindings(new)["PPOLearner.lag_correction"] == "'decoupled'"
    assert set(benchlib.learning_bindings(new)) == set(benchlib.learning_bindings(old))
    assert benchlib.learning_bindings(str(tmp_path / "no_such_run")) == {}
    (tmp_path / "new" / "metrics.jsonl").write_text("", encoding="utf-8")
    result = analyse_run("half_cheetah", "async", 5, new)
    assert result["learning_bindings"] == benchlib.learning_bindings(new)


def test_the_report_warns_when_one_env_and_mode_pools_runs_of_different_settings(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import REPO_ROOT

    curve = [[500_000, 60.0, 1000.0]]

    def row(mode, seed, lag=None):
        bindings = {"Trainer.env_name": "'X'"}
        if lag:
            bindings["PPOLearner.lag_correction"] = lag
        return {**_run(mode, seed, curve), "learning_bindings": bindings}

    same = [row("sync", 0), row("sync", 1), row("async", 0, "'decoupled'")]
    assert suite.pooled_settings(same) == {} and suite.settings_note(same) == ""
    mixed = same + [row("async", 1, "'vtrace_gae'"), row("async", 2, "'decoupled'"),
                    row("async", 3), _run("async", 4, curve)]
    assert suite.pooled_settings(mixed) == {"half_cheetah": {"async": {
        "PPOLearner.lag_correction": {"'decoupled'": [0, 2], "'vtrace_gae'": [1],
                                      "(not bound)": [3]},
        suite.UNRECORDED: {"": [4]}}}}
    assert suite.settings_note(mixed) == (
        "half_cheetah async pools runs of different settings: PPOLearner.lag_correction "
        "'decoupled' (seeds 0, 2), 'vtrace_gae' (seed 1), (not bound) (seed 3); "
        "seed 4 records no settings.")
    unknown = same + [_run("sync", 2, curve)]
    assert suite.settings_note(unknown) == (
        "half_cheetah sync: seed 2 records no settings: not checked against the other "
        "runs' settings.")
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "bench.suite", "--table", "--results",
                          str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["pooled_settings"]["half_cheetah"]["async"][
        "PPOLearner.lag_correction"]["'vtrace_gae'"] == [1]
    assert "half_cheetah async pools runs of different settings" in out.stderr

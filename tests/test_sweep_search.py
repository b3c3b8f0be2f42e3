"""Searches (alf-sweep --search): the space syntax and its checks, objectives,
and real Optuna studies on CartPole: pruning, synchronous halving, best trial,
resume after Ctrl-C."""

from __future__ import annotations

import json
import os
import re

import pytest

from alf_async.iteration_record import IterationRecord
from alf_async.sweep.grid import SweepSyntaxError
from alf_async.sweep.objective import metric_curve, objective_value
from alf_async.sweep.space import is_distribution, parse_dimension, parse_space, trial_params
from sweep_helpers import SWEEP_COMMAND, interrupt_once_training, read_summary, run

optuna = pytest.importorskip("optuna")

SWEEP = SWEEP_COMMAND
# CartPole, synchronous, 1024 env steps per iteration; a checkpoint every 2.
TINY_CARTPOLE = ["Trainer.checkpoint_interval=2"]
# A learning rate that cannot learn beside the config's own: the search's bad half.
LEARNING_RATES = "PPOLearner.learning_rate=choice(1e-9, 2.5e-3)"


def search_command(root, sweeps, steps, extra=()):
    return (SWEEP + ["--gin_file=ppo_cartpole.gin", f"--root_dir={root}", "--search=optuna"]
            + [f"--sweep={s}" for s in sweeps]
            + [f"--gin_param={p}" for p in TINY_CARTPOLE + [f"Trainer.num_env_steps={steps}"]]
            + list(extra))


def load_study(root):
    return optuna.load_study(study_name="alf_sweep",
                             storage=f"sqlite:///{os.path.join(root, 'study.db')}")


def metrics_iterations(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["iteration"] for line in f if line.strip()]


# -- the space ----------------------------------------------------------------

def test_distributions_parse_and_write_gin_text():
    lr, epochs, clip, actors, tied = parse_space([
        "PPOLearner.learning_rate=loguniform(1e-5, 1e-3)",
        "PPOLearner.num_epochs=int(4, 20)", "PPOLearner.clip_ratio=uniform(0.1, 0.3)",
        "Trainer.num_actors=choice(1, 2)", "Trainer.num_envs,:size=[(8, small), (16, big)]"])
    assert (lr.kind, lr.low, lr.high) == ("loguniform", 1e-5, 1e-3)
    assert (epochs.kind, clip.kind, actors.kind, tied.kind) == ("int", "uniform", "choice",
                                                                "choice")
    assert actors.options == ["1", "2"] and tied.options == ["(8, small)", "(16, big)"]
    drawn = {lr.key: 3e-4, epochs.key: 7, clip.key: 0.25, actors.key: "2",
             tied.key: "(16, big)"}
    assert trial_params([lr, epochs, clip, actors, tied], drawn) == (
        ("PPOLearner.learning_rate", "0.0003"), ("PPOLearner.num_epochs", "7"),
        ("PPOLearner.clip_ratio", "0.25"), ("Trainer.num_actors", "2"),
        ("Trainer.num_envs", "16"), (":size", "big"))
    assert is_distribution("PPOLearner.clip_ratio=uniform(0.1, 0.3)")
    assert not is_distribution("Trainer.num_envs=[8, 16]")


@pytest.mark.parametrize("text,message", [
    ("PPOLearner.clip_ratio=uniform(0.3, 0.1)", "empty"),
    ("PPOLearner.clip_ratio=uniform(0.2, 0.2)", "empty or a single value"),
    ("PPOLearner.learning_rate=loguniform(0, 1e-3)", "0 < low"),
    ("PPOLearner.num_epochs=int(4.5, 20)", "integers"),
    ("PPOLearner.clip_ratio=uniform(0.1)", "two numbers"),
    ("PPOLearner.clip_ratio=uniform(a, 0.3)", "must be a number"),
    ("Trainer.num_actors=choice()", "one or more values"),
    ("PPOLearner.clip_ratio=gauss(0, 1)", "unknown distribution"),
    ("A.x,B.y=uniform(0, 1)", "draws one binding"),
])
def test_bad_distributions_are_named(text, message):
    with pytest.raises(SweepSyntaxError, match=message) as error:
        parse_dimension(text)
    assert text in str(error.value)


def test_objective_final_and_auc():
    rows = [IterationRecord.from_json({"iteration": i, "env_steps": s, "episode_return": r})
            for i, (s, r) in enumerate([(100, None), (200, 10.0), (400, 30.0), (600, 20.0)])]
    curve = metric_curve(rows, "episode_return")
    assert curve == [(200, 10.0), (400, 30.0), (600, 20.0)]
    assert objective_value(curve, "final") == 20.0
    # trapezoids: (200 * 20 + 200 * 25) / 400
    assert objective_value(curve, "auc") == pytest.approx(22.5)
    assert objective_value([], "auc") is None
    evals = [IterationRecord.from_json({"iteration": 5, "env_steps": 900,
                                        "eval_return": 50.0, "eval_env_steps": 800})]
    assert metric_curve(evals, "eval_return") == [(800, 50.0)]


BAD_SPACES = [
    ("PPOLearner.learning_rat=loguniform(1e-5, 1e-3)", "learning_rat"),
    ("Nobody.learning_rate=uniform(0.1, 0.2)", "Nobody"),
    ("Trainer.env_name=uniform(0.1, 0.2)", "Trainer.env_name is not numeric"),
    ("PPOLearner.num_epochs=uniform(2, 8)", "PPOLearner.num_epochs is an integer"),
    ("PPOLearner.clip_ratio=uniform(0.3, 0.1)", "empty"),
    ("Trainer.num_actors=choice(1, @nothing)", "Trainer.num_actors"),
    # values gin parses but the settings refuse: caught before any trial starts
    ("Trainer.num_actors=choice(1, 0)", "Trainer.num_actors must be an integer >= 1"),
    ("Trainer.num_envs=int(0, 8)", "Trainer.num_envs must be"),
    ("Trainer.backend=choice('process', 'slurm')", "Trainer.backend must be one of"),
]


def test_bad_search_spaces_are_refused_by_name(tmp_path, capsys):
    from alf_async.bin.sweep import SearchOptions, sweep

    root = str(tmp_path / "s")
    for space, named in BAD_SPACES:
        code = sweep(root, ["ppo_cartpole.gin"], [space], ["Trainer.num_env_steps=1024"],
                     search=SearchOptions("optuna", 1))
        err = capsys.readouterr().err
        assert code == 2, space
        assert "alf_async.sweep: error:" in err and named in err and space in err, err
    assert not os.path.exists(root)


def test_the_command_exits_2_on_a_bad_space_before_anything_starts(tmp_path):
    root = tmp_path / "s"
    space, named = BAD_SPACES[0]
    result = run(search_command(root, [space], 2048, ["--num_trials=2"]))
    assert result.returncode == 2, result.stderr
    assert "alf_async.sweep: error:" in result.stderr and named in result.stderr
    assert not root.exists()


def test_pruning_waits_a_third_of_the_budget_unless_told(tmp_path, capsys):
    """The returns of a run's first iterations are noise: by default a trial
    is judged only from a third of its budget on; the flags override it. The
    command line once (its flags reach the search), the rest in this process."""
    from alf_async.bin.sweep import SearchOptions, sweep

    command = search_command(tmp_path / "s", [LEARNING_RATES], 9000,
                             ["--num_trials=2", "--dry_run", "--pruner=percentile",
                              "--prune_percentile=25"])
    result = run(command)
    assert result.returncode == 0, result.stderr
    assert "pruner percentile top 25% (from 3000 env steps" in result.stdout

    def dry_run(**options):
        code = sweep(str(tmp_path / "s"), ["ppo_cartpole.gin"], [LEARNING_RATES],
                     TINY_CARTPOLE + ["Trainer.num_env_steps=9000"], dry_run=True,
                     search=SearchOptions("optuna", 2, **options))
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    assert ("pruner median (from 3000 env steps of a trial and 2 complete trial(s) on)"
            in dry_run())
    assert "pruner successive_halving (from 0 env steps" in dry_run(
        prune_after_env_steps=0, pruner="successive_halving")
    assert "pruner none\n" in dry_run(pruner="none")
    # synchronous halving: by default two rungs, the budget / the factor and the budget
    assert ("pruner halving (rungs at 2250, 9000 env steps; the best 1/4 of each rung "
            "go on)") in dry_run(pruner="halving")
    assert not (tmp_path / "s").exists()


def test_percentile_pruner_keeps_only_the_top_percent(tmp_path):
    """--pruner=percentile with P = 25 stops a trial that the median pruner
    keeps: above the median of the complete trials, below their top quarter."""
    from alf_async.sweep.search import SearchSettings, _pruner

    def should_prune(pruner, percentile):
        settings = SearchSettings("optuna", 6, "final", "episode_return", pruner, 2, 100, 0,
                                  prune_percentile=percentile)
        study = optuna.create_study(direction="maximize", pruner=_pruner(settings))
        for value in (10.0, 20.0, 30.0):
            study.add_trial(optuna.trial.create_trial(
                value=value, intermediate_values={100: value},
                distributions={}, params={}))
        trial = study.ask()
        trial.report(22.0, 100)
        return trial.should_prune()

    assert not should_prune("median", 25.0)  # 22 > the median 20
    assert should_prune("percentile", 25.0)  # 22 < 25, the top quarter's edge
    assert not should_prune("percentile", 50.0)  # the median pruner's test


def test_search_flags_are_checked(tmp_path):
    from alf_async.bin.sweep import SearchOptions, sweep

    root = str(tmp_path / "s")
    gin = ["ppo_cartpole.gin"]
    space = ["PPOLearner.clip_ratio=uniform(0.1, 0.3)"]
    assert sweep(root, gin, space) == 2  # a distribution in a grid
    assert sweep(root, gin, space, search=SearchOptions("optuna")) == 2  # no --num_trials
    assert sweep(root, gin, space, search=SearchOptions("grid", 2)) == 2
    assert sweep(root, gin, space, search=SearchOptions("optuna", 2, objective="best")) == 2
    assert sweep(root, gin, space, search=SearchOptions("optuna", 2, pruner="hyperband")) == 2
    for percentile in (0.0, 100.0, -5.0):
        assert sweep(root, gin, space, search=SearchOptions(
            "optuna", 2, pruner="percentile", prune_percentile=percentile)) == 2
    assert sweep(root, gin, [], search=SearchOptions("optuna", 2)) == 2
    assert not os.path.exists(root)


def test_halving_flags_are_checked(tmp_path, capsys):
    """--pruner=halving needs a factor >= 2, a first rung below one env-step
    budget that every trial shares; refused by name before anything starts."""
    from alf_async.bin.sweep import SearchOptions, sweep

    root = str(tmp_path / "s")
    gin, space, budget = ["ppo_cartpole.gin"], [LEARNING_RATES], ["Trainer.num_env_steps=9000"]
    for options, named in [
            (SearchOptions("optuna", 4, pruner="halving", halving_factor=1),
             "--halving_factor must be >= 2"),
            (SearchOptions("optuna", 4, pruner="halving", prune_after_env_steps=9000),
             "the first rung (9000 env steps) must be above 0 and below the trials' "
             "budget (9000)"),
            (SearchOptions("optuna", 4, pruner="halving", prune_after_env_steps=0),
             "the first rung (0 env steps)")]:
        assert sweep(root, gin, space, budget, search=options) == 2
        assert named in capsys.readouterr().err
    assert sweep(root, gin, space, budget, search=SearchOptions(
        "optuna", 4, pruner="halving", halving_brackets=5)) == 2
    assert "--halving_brackets must be between 1 and --num_trials (4), got 5" in \
        capsys.readouterr().err
    searched_budget = space + ["Trainer.num_env_steps=choice(4096, 8192)"]
    assert sweep(root, gin, searched_budget, budget,
                 search=SearchOptions("optuna", 4, pruner="halving")) == 2
    assert "do not search Trainer.num_env_steps" in capsys.readouterr().err
    assert not os.path.exists(root)


def test_halving_rungs():
    from alf_async.sweep.halving import halving_rungs

    assert halving_rungs(100000, 4, 300000) == [100000, 300000]
    assert halving_rungs(4096, 2, 12288) == [4096, 8192, 12288]
    assert halving_rungs(1000, 3, 9000) == [1000, 3000, 9000]
    with pytest.raises(ValueError, match="factor must be >= 2"):
        halving_rungs(1000, 1, 9000)


# -- real searches ----------------------------------------------------------------

def test_optuna_study_prunes_the_bad_learning_rate(tmp_path):
    """6 trials, 2 at a time (the sampler seeded 0): a bad rate drawn once two
    trials are complete falls below the median and is stopped early, with a
    final checkpoint; every good rate completes."""
    root = str(tmp_path / "search")
    steps = 10240
    result = run(search_command(root, [LEARNING_RATES], steps,
                                ["--num_trials=6", "--max_parallel=2"]))
    assert result.returncode == 0, result.stderr
    study = load_study(root)
    states = {t.number: t.state.name for t in study.trials}
    rates = {t.number: t.params["PPOLearner.learning_rate"] for t in study.trials}
    assert len(states) == 6
    pruned = [n for n, s in states.items() if s == "PRUNED"]
    assert pruned and all(rates[n] == "1e-9" for n in pruned), (states, rates)
    assert all(states[n] == "COMPLETE" for n in rates if rates[n] == "2.5e-3")
    rows = read_summary(root)
    for n in pruned:
        run_dir = os.path.join(root, f"trial_{n:04d}")
        iterations = metrics_iterations(run_dir)
        assert len(iterations) < steps // 1024  # stopped before its budget
        assert os.listdir(os.path.join(run_dir, "checkpoints"))
        with open(os.path.join(run_dir, "log.txt")) as f:
            assert "SIGTERM" in f.read()
        assert rows[f"trial_{n:04d}"]["status"] == "pruned"
        pruned_at = re.search(rf"trial_{n:04d}: pruned at (\d+) env steps", result.stderr)
        assert pruned_at and int(pruned_at.group(1)) >= steps // 3  # the default warm-up
    # the best trial: the study's, named in the output and written as best.gin
    best = study.best_trial
    assert rates[best.number] == "2.5e-3"
    assert rows[f"trial_{best.number:04d}"]["status"] == "complete"
    assert float(rows[f"trial_{best.number:04d}"]["objective"]) == pytest.approx(best.value)
    assert f"best trial: trial_{best.number:04d}" in result.stdout
    assert "--gin_param=PPOLearner.learning_rate=2.5e-3" in result.stdout
    with open(os.path.join(root, "best.gin")) as f:
        assert "PPOLearner.learning_rate = 2.5e-3" in f.read()
    assert os.path.getsize(os.path.join(root, "search.png")) > 0
    # the run of the best trial is an ordinary run directory with its settings
    with open(os.path.join(root, f"trial_{best.number:04d}", "config.gin")) as f:
        assert "PPOLearner.learning_rate = 0.0025" in f.read()


@pytest.mark.slow  # the halving search's Ctrl-C test resumes a search too
def test_search_resumes_after_ctrl_c_without_losing_or_repeating_a_trial(tmp_path):
    root = str(tmp_path / "search")
    steps = 12288  # 12 iterations
    command = search_command(root, ["PPOLearner.clip_ratio=uniform(0.1, 0.3)"], steps,
                             ["--num_trials=3", "--max_parallel=2", "--pruner=none"])
    stopped = interrupt_once_training(command, os.path.join(root, "trial_0000"),
                                      "the first trial")
    err = stopped.stderr
    assert stopped.returncode == 130, err
    assert "trial_0000: stays running in the study" in err
    interrupted = {t.number: t for t in load_study(root).trials}
    assert interrupted[0].state.name == "RUNNING"
    done_before = metrics_iterations(os.path.join(root, "trial_0000"))
    assert 0 < len(done_before) < 12

    result = run(command)
    assert result.returncode == 0, result.stderr
    assert "trial_0000: resumed" in result.stderr
    study = load_study(root)
    assert [t.number for t in study.trials] == [0, 1, 2]
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    # trial 0 kept its parameters and went on from its checkpoint: each
    # iteration once, the last one the budget's
    assert study.trials[0].params == interrupted[0].params
    assert metrics_iterations(os.path.join(root, "trial_0000")) == list(range(1, 13))
    with open(os.path.join(root, "trial_0000", "train_output.txt")) as f:
        assert f.read().count("\n=== ") == 2  # started once, resumed once
    with open(os.path.join(root, "trial_0002", "train_output.txt")) as f:
        assert f.read().count("\n=== ") == 1
    assert list(read_summary(root)) == ["trial_0000", "trial_0001", "trial_0002"]
    # a third run has nothing left to do
    again = run(command)
    assert again.returncode == 0
    assert again.stderr.count("complete earlier, skipped") == 3


# -- synchronous successive halving -----------------------------------------------

HALVING_STEPS = 12288  # 12 iterations; rungs at 4096 (a third), 8192 and 12288


def halving_command(root):
    return search_command(root, [LEARNING_RATES], HALVING_STEPS,
                          ["--num_trials=4", "--max_parallel=2", "--pruner=halving",
                           "--halving_factor=2", "--prune_after_env_steps=4096"])


def check_halving_study(root, stderr):
    """4 trials, factor 2: all four reach rung 0, the best two rung 1, the best
    one the budget; the others pruned at their rung, each by its rung value,
    and every trial's metrics rows once each (paused trials resumed from their
    checkpoints, not run again)."""
    study = load_study(root)
    trials = {t.number: t for t in study.trials}
    assert len(trials) == 4
    states = {n: t.state.name for n, t in trials.items()}
    assert sorted(states.values()) == ["COMPLETE", "PRUNED", "PRUNED", "PRUNED"], states
    rungs = {n: {int(k): v for k, v in t.user_attrs["rung_values"].items()}
             for n, t in trials.items()}
    assert all(0 in r for r in rungs.values())
    # rung 0: the two below the others' values were pruned there
    went_on = [n for n in trials if 1 in rungs[n]]
    assert len(went_on) == 2
    assert min(rungs[n][0] for n in went_on) >= max(
        rungs[n][0] for n in trials if n not in went_on), rungs
    (winner,) = [n for n, s in states.items() if s == "COMPLETE"]
    assert winner in went_on and rungs[winner][1] >= max(rungs[n][1] for n in went_on)
    rates = {n: t.params["PPOLearner.learning_rate"] for n, t in trials.items()}
    assert rates[winner] == "2.5e-3"
    summary = read_summary(root)
    for n, trial in trials.items():
        run_dir = os.path.join(root, f"trial_{n:04d}")
        iterations = metrics_iterations(run_dir)
        assert iterations == list(range(1, len(iterations) + 1)), (n, iterations)
        if n == winner:
            assert len(iterations) == HALVING_STEPS // 1024
            assert summary[f"trial_{n:04d}"]["status"] == "complete"
        else:
            assert len(iterations) < HALVING_STEPS // 1024
            assert summary[f"trial_{n:04d}"]["status"] == "pruned"
            last_rung = max(rungs[n])
            assert float(summary[f"trial_{n:04d}"]["objective"]) == pytest.approx(
                rungs[n][last_rung])
            assert re.search(rf"trial_{n:04d}: pruned at rung {last_rung} ", stderr)
    for n in went_on:  # paused at rung 0, then resumed from its checkpoint
        with open(os.path.join(root, f"trial_{n:04d}", "train_output.txt")) as f:
            assert f.read().count("\n=== ") >= 2
    return winner


def test_halving_resumes_after_ctrl_c_at_the_rung_it_was_at(tmp_path):
    root = str(tmp_path / "halving")
    command = halving_command(root)
    # the third trial starts once one of the first two is paused at rung 0
    stopped = interrupt_once_training(command, os.path.join(root, "trial_0002"),
                                      "the third trial")
    err = stopped.stderr
    assert stopped.returncode == 130, err
    assert "; paused until every trial has reached it" in err
    assert all(t.state.name == "RUNNING" for t in load_study(root).trials)

    result = run(command)
    assert result.returncode == 0, result.stderr
    assert "rungs at 4096, 8192, 12288 env steps; the best 1/2 of each rung go on" in err
    winner = check_halving_study(root, err + result.stderr)
    assert f"best trial: trial_{winner:04d}" in result.stdout


@pytest.mark.slow  # eight trainings; the one-bracket halving runs in the suite
def test_halving_brackets_draw_each_bracket_after_the_one_before(tmp_path):
    """--halving_brackets=2: trials 0-1 halve (rungs 4096, 8192, 12288: one
    goes on at each), and trials 2-3 are drawn only once that bracket has
    finished, so the sampler has its results; each bracket completes one."""
    root = str(tmp_path / "brackets")
    result = run(halving_command(root) + ["--halving_brackets=2"])
    assert result.returncode == 0, result.stderr
    assert ("rungs at 4096, 8192, 12288 env steps; the best 1/2 of each rung go on in 2 "
            "brackets drawn one after the other") in result.stderr
    study = load_study(root)
    states = [t.state.name for t in study.trials]
    assert len(states) == 4
    assert sorted(states[:2]) == ["COMPLETE", "PRUNED"]
    assert sorted(states[2:]) == ["COMPLETE", "PRUNED"]
    lines = result.stderr.splitlines()
    first_of_second = next(i for i, line in enumerate(lines) if "trial_0002: started" in line)
    bracket_one_done = [i for i, line in enumerate(lines)
                        if re.search(r"trial_000[01]: final episode_return", line)]
    assert len(bracket_one_done) == 1 and bracket_one_done[0] < first_of_second
    # no trial went on past a rung before every trial of its bracket had
    # stopped there: both of the first bracket paused at rung 0 first
    first_resume = next(i for i, line in enumerate(lines) if ": resumed (" in line)
    assert sum("; paused until every trial has reached it" in line
               for line in lines[:first_resume]) == 2

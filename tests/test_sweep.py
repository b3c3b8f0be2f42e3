"""The sweep command: grid syntax and naming, real tiny sweeps, resume, failures, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import psutil
import pytest

from alf_async.sweep.grid import (
    MAX_NAME_LENGTH, SweepSyntaxError, expand_grid, parse_sweep, run_specs,
    sanitize_value, split_top_level)
from alf_async.sweep.runner import STATUS_FILE, is_finished, status_of_exit
from conftest import REPO_ROOT, wait_until
from sweep_helpers import SWEEP_COMMAND, read_summary, run, wait_for_training

# One worker runs this module, so its module fixtures run once rather than
# once on each pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("sweep")

SWEEP = SWEEP_COMMAND
TINY = ["Trainer.num_iterations=2", "Trainer.num_env_steps=0", "Trainer.unroll_length=16",
        "PPOLearner.num_epochs=1", "Trainer.checkpoint_interval=1"]
SAFE_NAME = re.compile(r"^[A-Za-z0-9._+=,~-]+$")


def sweep_command(root, sweeps, params=TINY, extra=()):
    return (SWEEP + ["--gin_file=ppo_bullet_inverted_pendulum.gin", f"--root_dir={root}"]
            + [f"--sweep={s}" for s in sweeps] + [f"--gin_param={p}" for p in params]
            + list(extra))


# -- syntax, grid, names -------------------------------------------------------

def test_split_top_level_respects_brackets_and_quotes():
    assert split_top_level("1, (2, 3), 'a,b', [4, 5], \"x,y\"") == \
        ["1", "(2, 3)", "'a,b'", "[4, 5]", '"x,y"']
    with pytest.raises(SweepSyntaxError):
        split_top_level("(1, 2")


def test_parse_single_binding_keeps_gin_text():
    sweep = parse_sweep("ActorNetwork.hidden_sizes=[(64, 64), (32,), 'x']")
    assert sweep.names == ("ActorNetwork.hidden_sizes",)
    assert sweep.values == (("(64, 64)",), ("(32,)",), ("'x'",))


def test_parse_tied_bindings():
    sweep = parse_sweep("Trainer.num_actors,Trainer.slots_per_actor=[(1, 1), (2, 1), (2, 2),]")
    assert sweep.names == ("Trainer.num_actors", "Trainer.slots_per_actor")
    assert sweep.values == (("1", "1"), ("2", "1"), ("2", "2"))


@pytest.mark.parametrize("text", [
    "Trainer.num_envs",                          # no '='
    "Trainer.num_envs=32",                       # not a list
    "Trainer.num_envs=[]",                       # empty
    "Trainer.num_envs=[1,,2]",                   # empty element
    "Trainer.num_envs=[1, 2",                    # unbalanced
    "Trainer.num_envs,Trainer.num_actors=[(1, 2), 3]",     # not a tuple
    "Trainer.num_envs,Trainer.num_actors=[(1, 2), (3,)]",  # wrong arity
    ":mode=[a, b]",                              # labels only
    "Trainer.num envs=[1]",                      # bad name
    "Trainer.num_envs,Trainer.num_envs=[(1, 2)]",  # repeated name
])
def test_parse_errors_are_explained(text):
    with pytest.raises(SweepSyntaxError, match="--sweep="):
        parse_sweep(text)


def test_grid_is_the_product_first_sweep_slowest():
    sweeps = [parse_sweep("Trainer.num_envs=[8, 16]"),
              parse_sweep("Trainer.num_actors,Trainer.slots_per_actor=[(1, 1), (2, 2)]")]
    points = expand_grid(sweeps)
    assert [dict(p) for p in points] == [
        {"Trainer.num_envs": "8", "Trainer.num_actors": "1", "Trainer.slots_per_actor": "1"},
        {"Trainer.num_envs": "8", "Trainer.num_actors": "2", "Trainer.slots_per_actor": "2"},
        {"Trainer.num_envs": "16", "Trainer.num_actors": "1", "Trainer.slots_per_actor": "1"},
        {"Trainer.num_envs": "16", "Trainer.num_actors": "2", "Trainer.slots_per_actor": "2"},
    ]
    with pytest.raises(SweepSyntaxError, match="swept twice"):
        expand_grid([parse_sweep("Trainer.num_envs=[1]"), parse_sweep("Trainer.num_envs=[2]")])


def test_run_names_are_readable_and_labels_replace_their_sweep():
    specs = run_specs([parse_sweep('Trainer.num_actors,:mode=[(1, "sync"), (2, async)]'),
                       parse_sweep("Trainer.num_envs=[8, 16]")])
    assert [s.name for s in specs] == ["mode=sync,num_envs=8", "mode=sync,num_envs=16",
                                       "mode=async,num_envs=8", "mode=async,num_envs=16"]
    # labels are not gin bindings, but are columns of the table
    assert specs[2].gin_params == ["Trainer.num_actors=2", "Trainer.num_envs=8"]
    assert specs[2].as_dict() == {"Trainer.num_actors": "2", "mode": "async",
                                  "Trainer.num_envs": "8"}
    # no label: every tied name is in the run name
    specs = run_specs([parse_sweep("Trainer.num_actors,Trainer.slots_per_actor=[(2, 1)]")])
    assert specs[0].name == "num_actors=2,slots_per_actor=1"
    assert run_specs([])[0].name == "base"


def test_run_names_are_safe_unique_and_stable():
    sweeps = [parse_sweep("ActorNetwork.hidden_sizes,ValueNetwork.hidden_sizes="
                          "[((64, 64), (64, 64)), ((32,), (32,))]"),
              parse_sweep("PPOLearner.device=['cuda:0', 'a b', 'a-b']"),
              parse_sweep("PPOLearner.learning_rate=[-0.5, 0.5, 1e-3]")]
    specs = run_specs(sweeps)
    names = [s.name for s in specs]
    assert len(set(names)) == len(names) == 18
    assert all(SAFE_NAME.match(n) and len(n) <= MAX_NAME_LENGTH for n in names), names
    # two bindings share the parameter name hidden_sizes: full names are used
    assert names[0].startswith("ActorNetwork.hidden_sizes=64-64,ValueNetwork.hidden_sizes=64-64,")
    assert "learning_rate=-0.5" in names[0] and "device=cuda-0" in names[0]
    # 'a b' and 'a-b' sanitize alike: both get a distinguishing suffix
    assert sum("device=a-b" in n and "~" in n for n in names) == 12
    assert [s.name for s in run_specs(sweeps)] == names  # stable
    long = run_specs([parse_sweep("Trainer.env_name=['%s']" % ("x" * 300))])[0].name
    assert len(long) <= MAX_NAME_LENGTH and SAFE_NAME.match(long)


def test_sanitize_value():
    assert sanitize_value("-0.5") == "-0.5"
    assert sanitize_value("'HumanoidBulletEnv-v0'") == "HumanoidBulletEnv-v0"
    assert sanitize_value("(64, 64)") == "64-64"
    assert sanitize_value("@relu") == "relu"
    assert sanitize_value("''") == "empty"


def test_finished_means_exit_0_with_the_same_arguments():
    assert status_of_exit(0) == "done"
    assert status_of_exit(2) == "failed" and status_of_exit(1) == "failed"
    assert status_of_exit(130) == "interrupted" and status_of_exit(-9) == "killed"
    args = ["--gin_file=a.gin", "--gin_param=Trainer.num_envs=2"]
    assert is_finished({"status": "done", "train_arguments": args}, args)
    assert not is_finished({"status": "failed", "train_arguments": args}, args)
    assert not is_finished({"status": "done", "train_arguments": args[:1]}, args)
    assert not is_finished(None, args)


def test_bad_input_exits_2_without_running(tmp_path, capsys):
    from alf_async.bin.sweep import sweep

    root = str(tmp_path / "s")
    assert sweep(root, ["no_such_file.gin"], []) == 2
    assert "was not found" in capsys.readouterr().err
    assert sweep(root, ["ppo_bullet_inverted_pendulum.gin"], ["Trainer.num_envs=3"]) == 2
    assert "--sweep=" in capsys.readouterr().err
    assert not os.path.exists(root)


def test_dry_run_prints_commands(tmp_path):
    result = run(sweep_command(tmp_path / "s", ["Trainer.num_envs=[2, 4]"],
                               extra=["--dry_run"]))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("num_envs=2: ")
    assert "--gin_param=Trainer.num_envs=4" in lines[1] and "alf_async.bin.train" in lines[1]
    assert not (tmp_path / "s").exists()


# -- real sweeps ---------------------------------------------------------------

GRID = "Trainer.num_envs,PPOLearner.mini_batch_size=[(2, 32), (4, 64), (2, 100000)]"
# Episodes end by time limit within each 16-step unroll, so that a return (and
# the threshold of 1) is reported whatever the sampled actions.
GRID_PARAMS = TINY + ["Trainer.max_episode_steps=8"]
GOOD = ["num_envs=2,mini_batch_size=32", "num_envs=4,mini_batch_size=64"]
BAD = "num_envs=2,mini_batch_size=100000"  # mini batch larger than the batch: invalid


@pytest.fixture(scope="module")
def first_sweep(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("sweep") / "grid")
    result = run(sweep_command(root, [GRID], params=GRID_PARAMS,
                               extra=["--max_parallel=2", "--return_threshold=1"]))
    return root, result


def test_sweep_runs_every_point_and_records_a_failed_one(first_sweep):
    root, result = first_sweep
    assert result.returncode == 1, result.stderr  # one run failed, the others ran
    rows = read_summary(root)
    assert list(rows) == GOOD + [BAD]
    for name in GOOD:
        row = rows[name]
        assert row["status"] == "done" and row["exit_code"] == "0"
        assert row["iterations"] == "2"
        K = int(row["Trainer.num_envs"])
        assert int(row["env_steps"]) == 2 * 16 * K
        assert float(row["mean_T_s"]) > 0
        assert float(row["mean_EPS"]) == pytest.approx(K / float(row["mean_T_s"]))
        assert float(row["mean_lag"]) == 0.0
        assert float(row["time_to_threshold_s"]) >= 0 and int(row["steps_to_threshold"]) > 0
        # each run got its own operative config with its swept values
        with open(os.path.join(root, name, "config.gin")) as f:
            config = f.read()
        assert f"Trainer.num_envs = {K}" in config
        assert f"PPOLearner.mini_batch_size = {row['PPOLearner.mini_batch_size']}" in config
    assert rows[BAD]["status"] == "failed" and rows[BAD]["exit_code"] == "2"
    assert rows[BAD]["iterations"] == "0"
    with open(os.path.join(root, BAD, STATUS_FILE)) as f:
        assert json.load(f)["exit_code"] == 2
    # the table is printed at the end, and the failure explained on stderr
    assert "| run | Trainer.num_envs | PPOLearner.mini_batch_size | status |" in result.stdout
    assert "| num_envs=2,mini_batch_size=100000 | 2 | 100000 | failed | 2 |" in result.stdout
    assert "mini_batch_size=100000 is larger than one batch" in result.stderr
    with open(os.path.join(root, "summary.md")) as f:
        assert "time to 1 (s)" in f.read()
    assert os.path.isfile(os.path.join(root, "machine.json"))


def test_rerun_skips_finished_runs_and_retries_failed(first_sweep):
    root, _ = first_sweep
    before = {n: open(os.path.join(root, n, "metrics.jsonl")).read() for n in GOOD}
    result = run(sweep_command(root, [GRID], params=GRID_PARAMS))
    assert result.returncode == 1
    for name in GOOD:
        assert f"{name}: finished earlier, skipped" in result.stderr
        with open(os.path.join(root, name, "metrics.jsonl")) as f:
            assert f.read() == before[name]
    assert f"{BAD}: started" in result.stderr
    rows = read_summary(root)
    assert [rows[n]["status"] for n in GOOD] == ["done", "done"]
    assert rows[BAD]["status"] == "failed"


def test_rerun_resumes_unfinished_runs(first_sweep):
    root, _ = first_sweep
    name = GOOD[0]
    with open(os.path.join(root, name, "metrics.jsonl")) as f:
        first_two = f.read().splitlines()
    # a larger budget makes the finished run unfinished: it resumes from its checkpoint
    params = [p for p in GRID_PARAMS if "num_iterations" not in p] + ["Trainer.num_iterations=3"]
    result = run(sweep_command(root, ["Trainer.num_envs,PPOLearner.mini_batch_size=[(2, 32)]"],
                               params=params))
    assert result.returncode == 0, result.stderr
    assert f"{name}: resumed" in result.stderr
    with open(os.path.join(root, name, "metrics.jsonl")) as f:
        lines = f.read().splitlines()
    assert lines[:2] == first_two and len(lines) == 3
    assert json.loads(lines[2])["iteration"] == 3
    rows = read_summary(root)
    assert list(rows) == [name] and rows[name]["iterations"] == "3"


def test_ctrl_c_stops_running_children_cleanly(tmp_path):
    root = str(tmp_path / "s")
    params = [p for p in TINY if "num_iterations" not in p] + [
        "Trainer.num_iterations=1000000", "PPOLearner.mini_batch_size=32"]
    proc = subprocess.Popen(sweep_command(root, ["Trainer.num_envs=[2, 4]"], params=params),
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_training(os.path.join(root, "num_envs=2"), "the first run")
        # the train process and its actors: in their own session, not the sweep's
        sweep_process = psutil.Process(proc.pid)
        run_tree = sweep_process.children(recursive=True)
        assert run_tree and all(os.getsid(p.pid) != os.getsid(proc.pid) for p in run_tree)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "SIGINT: stopping 1 running run(s)" in err
    rows = read_summary(root)
    assert rows["num_envs=2"]["status"] == "interrupted"
    assert rows["num_envs=2"]["exit_code"] == "130"  # train stopped cleanly
    assert rows["num_envs=4"]["status"] == "pending"
    assert os.listdir(os.path.join(root, "num_envs=2", "checkpoints"))
    # nothing the sweep started is left running
    def leftovers():
        return [p.pid for p in run_tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert wait_until(lambda: not leftovers(), timeout=10), leftovers()


def test_runs_stop_when_the_sweep_is_killed(tmp_path):
    root = str(tmp_path / "s")
    params = [p for p in TINY if "num_iterations" not in p] + [
        "Trainer.num_iterations=1000000", "PPOLearner.mini_batch_size=32",
        "Trainer.num_envs=2"]
    proc = subprocess.Popen(sweep_command(root, ["Trainer.seed=[0]"], params=params),
                            cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_training(os.path.join(root, "seed=0"), "the run")
        run_tree = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the orphaned run got SIGTERM: it stops with a final checkpoint, leaving nothing
    assert wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                      for p in run_tree), timeout=90)
    assert os.listdir(os.path.join(root, "seed=0", "checkpoints"))
    with open(os.path.join(root, "seed=0", "log.txt")) as f:
        assert "SIGTERM" in f.read()

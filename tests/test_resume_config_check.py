"""Resume checks the settings (``alf_async.config_changes``): the resuming
command's bindings are compared with the run's config.gin. How the run is
carried out (budget, intervals, N, K, evaluation, logging) may change and is
logged and recorded; what it learns (env, networks, algorithm, learner
hyperparameters, seed) is refused with exit 2 naming each binding with both
values, unless --allow_config_change."""

from __future__ import annotations

import json
import os

import gin
import pytest

from reliability_helpers import DEMO_GIN, read_metrics, small_params, train_in_this_process

from alf_async.config import parse_config
from alf_async.config_changes import CHANGES_FILE, binding_values, config_changes


@pytest.fixture
def trained_run(tmp_path):
    """A demo-pendulum run of 2 iterations with a checkpoint."""
    root = str(tmp_path / "run")
    assert train_in_this_process(root, [DEMO_GIN], small_params(iterations=2)) == 0
    assert len(read_metrics(root)) == 2
    return root


def _changes_record(root):
    path = os.path.join(root, CHANGES_FILE)
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_effective_values_are_compared_defaults_included():
    try:
        parse_config([DEMO_GIN], ["PPOLearner.value_loss_weight = 0.5"])
        old = binding_values()
        parse_config([DEMO_GIN], ["Trainer.num_iterations = 7"])
        new = binding_values()
    finally:
        gin.clear_config()
    # value_loss_weight = 0.5 is the default: unbinding it changes nothing.
    assert [(c.name, c.old, c.new, c.allowed) for c in config_changes(old, new)] == [
        ("Trainer.num_iterations", "0", "7", True)]


def test_an_image_encoders_memory_format_may_change_on_resume_its_architecture_not():
    # Checkpoints load under either memory format (tests/test_pixels.py); the
    # architecture is what the run learns with.
    import alf_async.networks.encoders  # noqa: F401  (registers ImageEncoder: its defaults)

    old = {"ImageEncoder.memory_format": "'contiguous'"}
    new = {"ImageEncoder.architecture": "'impala'"}  # memory_format: the default again
    assert [(c.name, c.old, c.new, c.allowed) for c in config_changes(old, new)] == [
        ("ImageEncoder.architecture", "'auto'", "'impala'", False),
        ("ImageEncoder.memory_format", "'contiguous'", "'channels_last'", True)]


@pytest.mark.parametrize("binding,name", [
    ('Trainer.env_name="InvertedPendulumSwingupBulletEnv-v0"', "Trainer.env_name"),
    ("ActorNetwork.hidden_sizes=(16,)", "ActorNetwork.hidden_sizes"),
    ('Trainer.algorithm="sac"', "Trainer.algorithm"),
    ("PPOLearner.entropy_coef=0.05", "PPOLearner.entropy_coef"),
    ("Trainer.seed=5", "Trainer.seed"),
])
def test_a_change_of_what_the_run_learns_is_refused_by_name(trained_run, capsys, binding, name):
    capsys.readouterr()
    code = train_in_this_process(trained_run, [], [binding, "Trainer.num_iterations=3"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{name}: " in err and " -> " in err, err
    assert "--allow_config_change" in err
    assert "Trainer.num_iterations" not in err  # an allowed change is not refused
    assert len(read_metrics(trained_run)) == 2  # nothing was trained
    assert _changes_record(trained_run) == []


def test_changes_of_how_the_run_is_carried_out_are_applied_and_recorded(trained_run):
    params = ["Trainer.num_iterations=4", "Trainer.checkpoint_interval=1", "Trainer.num_actors=2",
              "Trainer.num_envs=3", "MetricsRecorder.console_interval_s=1.0"]
    assert train_in_this_process(trained_run, [], params) == 0
    assert [row["iteration"] for row in read_metrics(trained_run)] == [1, 2, 3, 4]
    record = _changes_record(trained_run)
    assert len(record) == 1 and not record[0]["allow_config_change"]
    assert record[0]["checkpoint"].endswith("ckpt-2.pt")
    changed = {c["name"]: (c["old"], c["new"]) for c in record[0]["changes"]}
    assert changed["Trainer.num_iterations"] == ("2", "4")
    assert changed["Trainer.num_actors"] == ("1", "2")
    assert changed["Trainer.num_envs"] == ("2", "3")
    assert set(changed) == {"Trainer.num_iterations", "Trainer.checkpoint_interval",
                            "Trainer.num_actors", "Trainer.num_envs",
                            "MetricsRecorder.console_interval_s"}
    log = open(os.path.join(trained_run, "log.txt"), encoding="utf-8").read()
    assert "resumed with a changed setting: Trainer.num_actors: 1 -> 2" in log


def test_allow_config_change_resumes_and_keeps_the_change_in_the_record(trained_run):
    code = train_in_this_process(trained_run, [], ["PPOLearner.entropy_coef=0.05",
                                                   "Trainer.num_iterations=3"],
                                 allow_config_change=True)
    assert code == 0
    assert len(read_metrics(trained_run)) == 3
    record = _changes_record(trained_run)
    assert record[-1]["allow_config_change"] is True
    forced = [c for c in record[-1]["changes"] if not c["allowed"]]
    assert [c["name"] for c in forced] == ["PPOLearner.entropy_coef"]
    assert "entropy_coef = 0.05" in open(os.path.join(trained_run, "config.gin")).read()

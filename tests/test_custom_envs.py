"""A user's own env module, outside the package, trains in every process layout.

The example folder (alf_async/examples/custom_env: my_envs.py + point_mass.gin)
is copied to a temporary folder that stands for the user's project, and trained
from another working directory with W = 2 env workers and N = 2 actors, once with
``import my_envs`` in the gin file and once with ``env_name = "my_envs:PointMass-v0"``.
Start-up failures that would recur (a module that cannot be imported, an env
constructor that raises) stop the run at once with exit 2 and the error's own line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

EXAMPLE = os.path.join(REPO_ROOT, "alf_async", "examples", "custom_env")
SMALL = ["Trainer.num_envs=4", "Trainer.unroll_length=25", "Trainer.num_env_steps=0",
         "Trainer.num_iterations=6", "PPOLearner.mini_batch_size=50",
         "PPOLearner.num_epochs=1", "MetricsRecorder.tensorboard=False"]


@pytest.fixture
def user_project(tmp_path):
    project = tmp_path / "my_project"
    shutil.copytree(EXAMPLE, project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return project, elsewhere


def train(args, cwd, pythonpath):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pythonpath), REPO_ROOT]))
    return subprocess.run([sys.executable, "-m", "alf_async.bin.train", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=240)


def last_row(root):
    with open(os.path.join(root, "metrics.jsonl"), encoding="utf-8") as f:
        return json.loads(f.read().splitlines()[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("form", ["gin_import", "module_colon_id"])
def test_user_env_trains_with_env_workers_and_two_actors(user_project, form):
    project, elsewhere = user_project
    gin_file = project / "point_mass.gin"
    params = list(SMALL)
    if form == "module_colon_id":
        text = gin_file.read_text().replace("import my_envs\n", "")
        gin_file.write_text(text)
        params.append("Trainer.env_name='my_envs:PointMass-v0'")
    root = elsewhere / "run"
    result = train([f"--gin_file={gin_file}", f"--root_dir={root}",
                    *[f"--gin_param={p}" for p in params]], elsewhere, project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("2 actor(s) x 4 envs (process backend, 2 env workers and 2 env split(s) each)"
            in result.stderr)
    row = last_row(root)
    assert row["iteration"] == 6 and row["actor_restarts"] == 0 and row["env_failures"] == 0
    # Resuming needs only the run directory (the saved config imports the module).
    result = train([f"--root_dir={root}", "--gin_param=Trainer.num_iterations=7"],
                   elsewhere, project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_row(root)["iteration"] == 7


def _write_module(folder, text):
    (folder / "broken_envs.py").write_text(text)


@pytest.mark.timeout(200)
def test_unimportable_module_exits_2_naming_it(user_project):
    project, elsewhere = user_project
    result = train([f"--gin_file={project / 'point_mass.gin'}",
                    f"--root_dir={elsewhere / 'run'}",
                    "--gin_param=Trainer.env_name='no_such_envs:PointMass-v0'"],
                   elsewhere, project)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert re.search(r"alf_async: error: .*module 'no_such_envs' cannot be imported "
                     r"\(ModuleNotFoundError", result.stderr), result.stderr[-3000:]
    assert not (elsewhere / "run").exists()


@pytest.mark.timeout(200)
@pytest.mark.parametrize("where", ["everywhere", "in_env_workers"])
def test_env_constructor_that_raises_stops_the_run_at_once(user_project, where):
    """In the trainer: a config error. Only in the env workers (a failure the
    trainer cannot see before the run starts): the actor cannot start; no restart
    is tried, exit 2 with the env's own error line."""
    project, elsewhere = user_project
    condition = "True" if where == "everywhere" else (
        "multiprocessing.current_process().name == 'alf_async-env-worker'")
    _write_module(project, f'''
import multiprocessing
import gymnasium as gym
from my_envs import PointMassEnv


class Broken(PointMassEnv):
    def __init__(self):
        if {condition}:
            raise RuntimeError("the simulator licence is missing")
        super().__init__()


gym.register(id="Broken-v0", entry_point=Broken, max_episode_steps=100)
''')
    result = train([f"--gin_file={project / 'point_mass.gin'}",
                    f"--root_dir={elsewhere / 'run'}",
                    "--gin_param=Trainer.env_name='broken_envs:Broken-v0'",
                    *[f"--gin_param={p}" for p in SMALL]], elsewhere, project)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [l for l in result.stderr.splitlines() if l.startswith("alf_async: error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "RuntimeError: the simulator licence is missing" in errors[0]
    assert "restarting actor" not in result.stderr
    assert "Traceback" not in result.stderr.split("alf_async: error:")[-1]


@pytest.mark.timeout(200)
def test_an_action_space_alf_async_cannot_train_exits_2(user_project):
    project, elsewhere = user_project
    (project / "text_envs.py").write_text('''
import gymnasium as gym
import numpy as np
from my_envs import PointMassEnv


class TextActions(PointMassEnv):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Text(5)


gym.register(id="TextActions-v0", entry_point=TextActions, max_episode_steps=10)
''')
    result = train([f"--gin_file={project / 'point_mass.gin'}",
                    f"--root_dir={elsewhere / 'run'}",
                    "--gin_param=Trainer.env_name='text_envs:TextActions-v0'"],
                   elsewhere, project)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = [l for l in result.stderr.splitlines() if l.startswith("alf_async: error:")]
    assert len(errors) == 1 and re.search(
        r"env TextActions-v0 has the action space Text\(.*which alf_async cannot train on; "
        r"supported: Box \(continuous, bounded\), Discrete and MultiDiscrete", errors[0]), (
        result.stderr[-2000:])
    assert not (elsewhere / "run").exists()

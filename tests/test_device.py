"""The learner's device as a setting (``utils.devices``): one rule for both
learners, checked before a run starts, a GPU refused for Hogwild, a GPU run
resumed on a machine without one, and checkpoints loaded onto the CPU.

This machine may have no GPU: the tests that need one to exist patch how many
CUDA devices torch reports (``devices.cuda_device_count``) and stop before a
tensor would be put there. ``bench/gpu_smoke.py`` runs the real thing on a GPU
machine.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time

import gin
import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.sac_learner import SACLearner
from alf_async.settings import TrainerSettings
from alf_async.training.parts import learner_device
from alf_async.utils import devices
from alf_async.utils.devices import fall_back_to_cpu, resolve_device
from alf_async.utils.validation import ConfigError
from conftest import REPO_ROOT
from reliability_helpers import read_metrics, small_params, train_in_this_process

PENDULUM_GIN = "ppo_bullet_inverted_pendulum.gin"


@pytest.fixture
def gpus(monkeypatch):
    """Make torch report ``n`` CUDA devices (``gpus(n)``)."""
    def set_count(n: int) -> None:
        monkeypatch.setattr(devices, "cuda_device_count", lambda: n)
    return set_count


@pytest.fixture
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


# -- the rule ---------------------------------------------------------------------
def test_the_device_values_resolve_against_the_machine(gpus):
    gpus(0)
    assert resolve_device("PPOLearner", "cpu") == torch.device("cpu")
    assert resolve_device("PPOLearner", "auto") == torch.device("cpu")
    gpus(2)
    assert resolve_device("SACLearner", "auto") == torch.device("cuda")
    assert resolve_device("SACLearner", "cuda") == torch.device("cuda", 0)
    assert resolve_device("SACLearner", "cuda:1") == torch.device("cuda", 1)
    assert resolve_device("PPOLearner", "cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"PPOLearner.device='cuda:2' names a CUDA device "
                                          r"this machine does not have: this machine has "
                                          r"CUDA devices 0\.\.1"):
        resolve_device("PPOLearner", "cuda:2")


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0:1", "mps", 1, None])
@pytest.mark.parametrize("learner", [PPOLearner, SACLearner])
def test_both_learners_refuse_a_value_that_is_no_device_by_its_binding(learner, value):
    name = learner.__name__
    with pytest.raises(ConfigError) as e:
        learner(3, 2, device=value)
    message = str(e.value)
    assert message.startswith(f"{name}.device must be 'cpu', 'cuda', 'cuda:N'")
    assert repr(value) in message and "this machine has" in message


@pytest.mark.parametrize("learner", [PPOLearner, SACLearner])
@pytest.mark.parametrize("value", ["cuda", "cuda:1"])
def test_both_learners_refuse_a_cuda_device_this_machine_lacks(learner, value, gpus):
    gpus(0)
    with pytest.raises(ConfigError, match=rf"{learner.__name__}.device='{value}' names a CUDA "
                                          r"device this machine does not have: this machine "
                                          r"has no CUDA device"):
        learner(3, 2, device=value)


@pytest.mark.parametrize("learner", [PPOLearner, SACLearner])
def test_auto_trains_on_the_cpu_without_a_gpu(learner, gpus):
    gpus(0)
    assert learner(3, 2, device="auto").device == torch.device("cpu")


# -- before the run starts ------------------------------------------------------------
def test_a_missing_gpu_is_refused_before_anything_starts(tmp_path, capsys, gpus):
    """The issue's acceptance: --gin_param=PPOLearner.device="'cuda'" on a
    machine without CUDA exits 2 naming the binding and what the machine has,
    before an env is made or a file of the run is written."""
    gpus(0)
    root = tmp_path / "run"
    start = time.monotonic()
    rc = train_in_this_process(str(root), ["ppo_bullet_half_cheetah.gin"],
                               ["PPOLearner.device='cuda'"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "PPOLearner.device='cuda' names a CUDA device this machine does not have" in err
    assert "this machine has no CUDA device" in err
    assert not (root / "config.gin").exists() and not (root / "checkpoints").exists()
    assert time.monotonic() - start < 30


def test_the_console_command_exits_2_naming_the_binding(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO_ROOT, os.environ.get("PYTHONPATH", "")]), CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train", "--gin_file=ppo_bullet_half_cheetah.gin",
         "--gin_param=PPOLearner.device='cuda'",  # the shell's --gin_param=...="'cuda'"
         f"--root_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "PPOLearner.device='cuda'" in result.stderr
    assert "this machine has no CUDA device" in result.stderr
    assert "Traceback" not in result.stderr


def test_sac_runs_check_their_own_binding(clean_gin, gpus):
    gpus(0)
    gin.parse_config("SACLearner.device = 'cuda:1'\nPPOLearner.device = 'cuda'")
    settings = TrainerSettings(num_env_steps=1, algorithm="sac")
    with pytest.raises(ConfigError, match=r"^SACLearner.device='cuda:1'"):
        learner_device(settings)


@pytest.mark.parametrize("value", ["cuda", "auto"])
def test_hogwild_refuses_a_gpu_learner_by_name(value, clean_gin, gpus):
    gpus(1)
    gin.parse_config(f"PPOLearner.device = '{value}'")
    settings = TrainerSettings(num_env_steps=1, runtime="hogwild", num_actors=2)
    with pytest.raises(ConfigError) as e:
        learner_device(settings)
    message = str(e.value)
    assert message.startswith(f"PPOLearner.device='{value}'")
    assert "Trainer.runtime='hogwild' trains on the CPU only" in message
    if value == "auto":
        assert "resolved to 'cuda' on this machine" in message
    gin.clear_config()
    gin.parse_config("PPOLearner.device = 'cuda'")
    assert learner_device(TrainerSettings(num_env_steps=1)) == torch.device("cuda", 0)
    gin.clear_config()
    assert learner_device(settings) == torch.device("cpu")  # the default


# -- resuming a GPU run on a machine without one ---------------------------------------
def test_fall_back_rebinds_only_a_missing_device_the_user_did_not_ask_for(clean_gin, gpus):
    gpus(0)
    gin.parse_config("PPOLearner.device = 'cuda'\nSACLearner.device = 'cuda:1'")
    lines = fall_back_to_cpu(["SACLearner.device='cuda:1'", "Trainer.num_iterations=3"])
    assert len(lines) == 1 and lines[0].startswith("PPOLearner.device='cuda' in the run's "
                                                   "saved config")
    assert "trains on the CPU" in lines[0]
    assert gin.query_parameter("PPOLearner.device") == "cpu"
    assert gin.query_parameter("SACLearner.device") == "cuda:1"  # asked for: checked later
    gin.clear_config()
    gin.parse_config("PPOLearner.device = 'cpu'")
    assert fall_back_to_cpu([]) == []
    gpus(1)
    gin.clear_config()
    gin.parse_config("PPOLearner.device = 'cuda'")
    assert fall_back_to_cpu([]) == []  # there: kept
    assert gin.query_parameter("PPOLearner.device") == "cuda"


@pytest.mark.timeout(300)
def test_a_gpu_run_resumes_on_a_machine_without_one(tmp_path, capsys, gpus):
    """A run whose config.gin binds PPOLearner.device = 'cuda' (trained on a
    GPU) resumes here with --root_dir alone: it trains on the CPU, logs one
    line saying so and keeps 'cuda' in its config.gin; asking for 'cuda' on
    the command line is refused instead."""
    gpus(0)
    root = str(tmp_path / "run")
    params = small_params("Trainer.backend='inprocess'", iterations=1)
    assert train_in_this_process(root, [PENDULUM_GIN], params) == 0
    config = os.path.join(root, "config.gin")
    with open(config, "a", encoding="utf-8") as f:
        f.write("\nPPOLearner.device = 'cuda'\n")  # as a GPU run writes it
    capsys.readouterr()

    assert train_in_this_process(root, [], ["PPOLearner.device='cuda'",
                                            "Trainer.num_iterations=2"]) == 2
    assert "PPOLearner.device='cuda' names a CUDA device" in capsys.readouterr().err

    assert train_in_this_process(root, [], ["Trainer.num_iterations=2"]) == 0
    with open(os.path.join(root, "log.txt"), encoding="utf-8") as f:
        log = f.read()
    said = [line for line in log.splitlines() if "trains on the CPU" in line]
    assert len(said) == 1 and "PPOLearner.device='cuda'" in said[0], log[-3000:]
    assert read_metrics(root)[-1]["iteration"] == 2
    with open(config, encoding="utf-8") as f:
        assert "PPOLearner.device = 'cuda'" in f.read()


# -- checkpoints load onto the CPU ---------------------------------------------------
def test_every_torch_load_maps_to_the_cpu():
    """A checkpoint or a Hogwild worker's state written from GPU tensors loads
    on a machine without one: every ``torch.load`` in the library and the
    benchmarks names ``map_location``."""
    calls = []
    for folder in ("alf_async", "bench"):
        for dirpath, _, names in os.walk(os.path.join(REPO_ROOT, folder)):
            for name in names:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                            and node.func.attr == "load"
                            and isinstance(node.func.value, ast.Name)
                            and node.func.value.id == "torch"):
                        calls.append((os.path.relpath(path, REPO_ROOT), node.lineno,
                                      {k.arg for k in node.keywords}))
    assert calls, "no torch.load found: the scan is broken"
    missing = [f"{path}:{line}" for path, line, keywords in calls
               if "map_location" not in keywords]
    assert not missing, f"torch.load without map_location: {missing}"

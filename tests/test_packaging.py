"""The package as users install it: ``python -m build`` makes a wheel and an
sdist that carry every shipped gin file, and the wheel installed on its own
(``pip install --no-deps --target``, outside this checkout) trains a shipped
config by its bare name and shows each command's flags under ``--help``."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import REPO_ROOT

# One worker runs this module, so its module fixtures run once rather than
# once on each pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("packaging")

SHIPPED_GIN = sorted(os.path.relpath(p, os.path.join(REPO_ROOT, "gin_configs"))
                     for p in glob.glob(os.path.join(REPO_ROOT, "gin_configs", "**", "*.gin"),
                                        recursive=True))
COMMANDS = ("alf-train", "alf-sweep", "alf-eps-report", "alf-play", "alf-gen-config-docs",
            "alf-export")


def _tracked_files() -> list:
    result = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                            check=True)
    return [name for name in result.stdout.decode().split("\0") if name]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """(wheel path, sdist path) built by ``python -m build`` from a copy of the
    checkout's files that git tracks or would add (the build writes into its
    source folder)."""
    base = tmp_path_factory.mktemp("dist")
    source, out = base / "source", base / "out"
    for name in _tracked_files():
        if not os.path.exists(os.path.join(REPO_ROOT, name)):
            continue  # deleted in the working tree, not yet committed
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(REPO_ROOT, name), target)
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                             str(out), str(source)], capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheels = glob.glob(str(out / "*.whl"))
    sdists = glob.glob(str(out / "*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(out)
    return wheels[0], sdists[0]


def test_the_wheel_carries_every_shipped_gin_file_and_the_license(dist):
    names = set(zipfile.ZipFile(dist[0]).namelist())
    assert SHIPPED_GIN, "no gin file found in gin_configs/"
    missing = [g for g in SHIPPED_GIN if f"alf_async/gin_configs/{g}" not in names]
    assert not missing, f"gin files missing from the wheel: {missing}"
    assert "alf_async/examples/custom_env/point_mass.gin" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)[-10:]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(dist[0]).read(entry_points).decode()
    for command in COMMANDS:
        assert f"{command} =" in text, f"{command} is not a console script of the wheel"


def test_the_sdist_carries_the_sources_the_wheel_is_built_from(dist):
    names = {n.split("/", 1)[1] for n in tarfile.open(dist[1]).getnames() if "/" in n}
    for needed in ("setup.py", "pyproject.toml", "LICENSE", "README.md",
                   "alf_async/__init__.py", *(f"gin_configs/{g}" for g in SHIPPED_GIN)):
        assert needed in names, f"{needed} missing from the sdist"


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory):
    """The folder the wheel is installed into, alone (``pip install --no-deps
    --target``): its package and its console scripts in ``bin/``."""
    target = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                             "--no-compile", "--quiet", "--target", str(target), dist[0]],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return target


def test_the_installed_wheel_trains_a_shipped_config_from_an_empty_folder(installed, tmp_path):
    target, work = installed, tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))
    # The package comes from the installed wheel, not from this checkout.
    where = subprocess.run([sys.executable, "-c", "import alf_async; print(alf_async.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.strip().startswith(str(target)), where.stdout + where.stderr
    script = target / "bin" / "alf-train"
    assert script.is_file(), os.listdir(target / "bin")
    run = subprocess.run(
        [str(script), "--gin_file=ppo_cartpole.gin", "--root_dir=run",
         "--gin_param=Trainer.num_iterations=1", "--gin_param=Trainer.num_env_steps=0",
         "--gin_param=Trainer.num_envs=2", "--gin_param=Trainer.unroll_length=16",
         "--gin_param=PPOLearner.mini_batch_size=32", "--gin_param=PPOLearner.num_epochs=1"],
        cwd=work, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(work / "run" / "metrics.jsonl", encoding="utf-8") as f:
        assert len(f.readlines()) == 1
    assert "Trainer.env_name = 'CartPole-v1'" in (work / "run" / "config.gin").read_text()


@pytest.mark.parametrize("command,flag", [("alf-train", "--gin_file"), ("alf-sweep", "--sweep"),
                                          ("alf-sweep", "--gin_param"),
                                          ("alf-eps-report", "--num_envs"),
                                          ("alf-play", "--record_file"),
                                          ("alf-gen-config-docs", "--output"),
                                          ("alf-export", "--format")])
def test_console_scripts_help_shows_their_flags(installed, tmp_path, command, flag):
    """A console script is a generated file, not the command's module: its
    --help still prints the command's description and flags (shared ones too)."""
    result = subprocess.run([str(installed / "bin" / command), "--help"], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(installed)),
                            capture_output=True, text=True, timeout=60)
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text[-3000:]
    assert flag in text, text[-3000:]
    assert "Try --helpfull" in text  # the short help, not the full one
    assert len(text.splitlines()) > 8, text

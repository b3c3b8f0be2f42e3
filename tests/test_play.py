"""The play command: a checkpoint of a short real run played, printed and recorded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from alf_async.bin.play import play
from alf_async.playback.player import load_policy
from alf_async.checkpoint import load_checkpoint_file
from conftest import REPO_ROOT

# One worker runs this module, so its module fixtures run once rather than
# once on each pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("play")

EPISODE_LINE = re.compile(r"^episode (\d+): return (-?[\d.]+), length (\d+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 2-iteration InvertedPendulum run with checkpoints at iterations 1 and 2."""
    root = str(tmp_path_factory.mktemp("play") / "run")
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train",
         "--gin_file=ppo_bullet_inverted_pendulum.gin", f"--root_dir={root}",
         "--gin_param=Trainer.num_iterations=2", "--gin_param=Trainer.num_env_steps=0",
         "--gin_param=Trainer.num_envs=2", "--gin_param=Trainer.unroll_length=16",
         "--gin_param=PPOLearner.mini_batch_size=32", "--gin_param=PPOLearner.num_epochs=1",
         "--gin_param=Trainer.checkpoint_interval=1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(os.listdir(os.path.join(root, "checkpoints"))) == ["ckpt-1.pt", "ckpt-2.pt"]
    return root


def episodes_of(text):
    return [(int(i), float(r), int(n)) for i, r, n in EPISODE_LINE.findall(text)]


def test_play_records_a_gif_with_every_frame(run_dir, tmp_path):
    gif = str(tmp_path / "out.gif")
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.play", f"--root_dir={run_dir}",
         "--num_episodes=2", "--max_steps=12", f"--record_file={gif}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    episodes = episodes_of(result.stdout)
    assert [e[0] for e in episodes] == [1, 2]
    assert all(1 <= n <= 12 for _, _, n in episodes)
    assert "ckpt-2.pt" in result.stdout  # the newest checkpoint by default
    frames = sum(n + 1 for _, _, n in episodes)  # a frame after reset, one per step
    assert f"recorded {frames} frames to {gif}" in result.stdout
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames == frames
        assert image.size == (320, 240)


def test_play_is_deterministic_with_the_checkpoint_normalizer(run_dir, capsys):
    policy, run_env, path = load_policy(run_dir, "ckpt-1.pt")
    assert path.endswith("ckpt-1.pt") and run_env.env_name == "InvertedPendulumBulletEnv-v0"
    assert not run_env.time_feature
    assert policy.deterministic
    state = load_checkpoint_file(path)
    normalizer = state["learner"]["normalizer"]
    assert policy.normalizer.count == float(normalizer["count"].reshape(-1)[0]) > 0
    np.testing.assert_allclose(policy.normalizer.mean, normalizer["mean"].numpy())
    # mean actions: the same seed gives the same episodes
    assert play(run_dir, num_episodes=2, max_steps=30, seed=3) == 0
    first = episodes_of(capsys.readouterr().out)
    assert play(run_dir, num_episodes=2, max_steps=30, seed=3) == 0
    assert episodes_of(capsys.readouterr().out) == first and len(first) == 2


def test_play_records_mp4(run_dir, tmp_path, capsys):
    pytest.importorskip("imageio_ffmpeg")
    import imageio

    mp4 = str(tmp_path / "sub" / "out.mp4")
    assert play(run_dir, num_episodes=1, max_steps=10, record_file=mp4) == 0
    (_, _, length), = episodes_of(capsys.readouterr().out)
    reader = imageio.v2.get_reader(mp4)
    try:
        assert reader.count_frames() == length + 1
    finally:
        reader.close()


def test_play_errors_are_clear(run_dir, tmp_path, capsys):
    assert play(str(tmp_path / "missing")) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert play(str(empty)) == 2
    assert "no config.gin" in capsys.readouterr().err
    shutil.copy(os.path.join(run_dir, "config.gin"), empty / "config.gin")
    assert play(str(empty)) == 2
    assert "holds no checkpoint" in capsys.readouterr().err
    assert not (empty / "checkpoints").exists()  # nothing created in the user's directory
    assert play(run_dir, checkpoint="ckpt-99.pt") == 2
    assert "ckpt-99.pt does not exist" in capsys.readouterr().err
    assert play(run_dir, record_file=str(tmp_path / "x.avi")) == 2
    assert ".gif or .mp4" in capsys.readouterr().err
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    assert play(run_dir, checkpoint=str(bad)) == 2
    assert "corrupt or truncated" in capsys.readouterr().err


# -- rendering only to record (issue 28, item 2) -------------------------------

EXAMPLE = os.path.join(REPO_ROOT, "alf_async", "examples", "custom_env")
TINY = ["Trainer.num_iterations=1", "Trainer.num_env_steps=0", "Trainer.num_envs=2",
        "Trainer.num_env_workers=0", "Trainer.num_actors=1", "Trainer.unroll_length=16",
        "PPOLearner.mini_batch_size=32", "PPOLearner.num_epochs=1",
        "MetricsRecorder.tensorboard=False"]


def run_command(module, args, cwd=REPO_ROOT, pythonpath=None, timeout=300):
    """``python -m <module> <args>`` as a user runs it (PYTHONPATH: the user's
    folder first, then the repository)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, REPO_ROOT) if p)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def point_mass_run(tmp_path_factory):
    """(project folder, run directory): a 1-iteration run of the example user env
    PointMass-v0, whose metadata declares no render mode."""
    base = tmp_path_factory.mktemp("point_mass")
    project = base / "my_project"
    shutil.copytree(EXAMPLE, project)
    root = str(base / "run")
    result = run_command("alf_async.bin.train",
                         [f"--gin_file={project / 'point_mass.gin'}", f"--root_dir={root}",
                          *[f"--gin_param={p}" for p in TINY]],
                         cwd=str(base), pythonpath=str(project))
    assert result.returncode == 0, result.stderr[-3000:]
    return project, root


def test_play_evaluates_an_env_that_cannot_render(point_mass_run):
    project, root = point_mass_run
    result = run_command("alf_async.bin.play", [f"--root_dir={root}", "--num_episodes=2",
                                                "--max_steps=20"],
                         cwd=str(project.parent), pythonpath=str(project))
    assert result.returncode == 0, result.stderr[-3000:]
    episodes = episodes_of(result.stdout)
    assert [(i, n) for i, _, n in episodes] == [(1, 20), (2, 20)], result.stdout
    returns = np.array([r for _, r, _ in episodes])
    summary = re.search(r"mean return over 2 episode\(s\): (\S+) \(std (\S+)\)",
                        result.stdout)
    assert summary, result.stdout
    assert float(summary.group(1)) == pytest.approx(returns.mean(), abs=0.011)
    assert float(summary.group(2)) == pytest.approx(returns.std(), abs=0.011)
    assert "Traceback" not in result.stderr


def test_recording_an_env_that_cannot_render_is_refused_in_one_line(point_mass_run):
    project, root = point_mass_run
    gif = project.parent / "refused.gif"
    result = run_command("alf_async.bin.play", [f"--root_dir={root}",
                                                f"--record_file={gif}"],
                         cwd=str(project.parent), pythonpath=str(project))
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.fullmatch(r"alf_async\.play: error: cannot record PointMass-v0: env "
                        r"PointMass-v0 cannot render frames: .*; play it without "
                        r"--record_file to evaluate the policy", lines[0]), lines[0]
    assert not gif.exists()


def _install_requires():
    """The ``install_requires`` of the repository's setup.py, read without running it."""
    import ast

    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [ast.literal_eval(element) for element in node.value.elts]
    raise AssertionError("setup.py has no install_requires")


def test_play_records_the_shipped_cartpole_config(tmp_path):
    """The README's install brings what CartPole's rendering needs (pygame, with
    gymnasium's classic-control extra), and recording a run of ppo_cartpole.gin
    writes every frame."""
    requires = [r.replace(" ", "").lower() for r in _install_requires()]
    assert any(r.startswith(("gymnasium[classic-control]", "pygame")) for r in requires), \
        requires
    root = str(tmp_path / "cartpole")
    result = run_command("alf_async.bin.train",
                         ["--gin_file=ppo_cartpole.gin", f"--root_dir={root}",
                          *[f"--gin_param={p}" for p in TINY]])
    assert result.returncode == 0, result.stderr[-3000:]
    gif = str(tmp_path / "cartpole.gif")
    result = run_command("alf_async.bin.play", [f"--root_dir={root}", "--num_episodes=2",
                                                "--max_steps=8", f"--record_file={gif}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    episodes = episodes_of(result.stdout)
    assert [e[0] for e in episodes] == [1, 2], result.stdout
    frames = sum(n + 1 for _, _, n in episodes)
    assert f"recorded {frames} frames to {gif}" in result.stdout
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames == frames
        assert image.size == (600, 400)


def test_make_env_refuses_a_render_mode_the_env_lacks(tmp_path, monkeypatch):
    """Asked to render, make_env raises RenderModeError for an env whose metadata
    leaves the mode out and for one whose constructor takes no render_mode."""
    import gymnasium as gym

    from alf_async.envs.gym_env import RenderModeError, make_env

    monkeypatch.syspath_prepend(EXAMPLE)
    with pytest.raises(RenderModeError, match=r"PointMass-v0 cannot render frames: its "
                                              r"render_modes are \[\], without 'rgb_array'"):
        make_env("my_envs:PointMass-v0", render_mode="rgb_array")
    from my_envs import PointMassEnv

    env_id = "AlfAsyncTestNoRenderArgument-v0"
    gym.register(id=env_id, entry_point=lambda: PointMassEnv(), max_episode_steps=10)
    try:
        with pytest.raises(RenderModeError, match="constructor takes no render_mode"):
            make_env(env_id, render_mode="rgb_array")
        env = make_env(env_id)  # evaluation needs no rendering
        assert env.reset(seed=0).shape == (4,)
        env.close()
    finally:
        del gym.registry[env_id]

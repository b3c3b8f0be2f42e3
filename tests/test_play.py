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

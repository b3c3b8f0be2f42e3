"""Where Atari episodes end. With ``Trainer.terminal_on_life_loss`` a lost
life ends the training episode while the game goes on, and the episode
statistics still count whole games (real Breakout, five lives, through
ale-py); a time limit counts env steps of 4 frames."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from alf_async.envs.atari import ale_installed
from alf_async.envs.batched_env import BatchedEnv
from alf_async.envs.gym_env import EnvOptionError, make_env
from alf_async.runtime.actor import Actor
from alf_async.settings import TrainerSettings
from conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(not ale_installed(), reason="needs the [atari] extra")

BREAKOUT = "ALE/Breakout-v5"
LIVES = 5
MAX_STEPS = 20_000  # a game of random play lasts a few hundred steps


def play_one_game(env: BatchedEnv, rng: np.random.Generator, lives=None):
    """Random actions until the batch reports a finished game; per step the
    (reward, terminated, truncated, life lost) of env 0, the finished games,
    and (with ``lives``) the lives left before and after each step."""
    env.reset()
    steps, games, counts = [], [], []
    for _ in range(MAX_STEPS):
        before = lives() if lives else None
        result = env.step(rng.integers(0, 4, size=(env.num_envs, 1)).astype(np.float32))
        steps.append((float(result.reward[0]), bool(result.terminated[0]),
                      bool(result.truncated[0]), bool(env.arrays["life_lost"][0])))
        if lives:
            counts.append((before, lives()))
        games += env.pop_finished_episodes()
        if games:
            return steps, games, counts
    raise AssertionError(f"no game of {BREAKOUT} ended in {MAX_STEPS} steps")


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_lost_life_ends_the_training_episode_but_not_the_game(num_workers):
    env = BatchedEnv(BREAKOUT, 1, num_workers, seed=3, terminal_on_life_loss=True)
    try:
        lives = None
        if num_workers == 0:  # the env is in this process: read its lives
            ale = env._group.envs[0].env.unwrapped.ale
            lives = ale.lives
        steps, games, counts = play_one_game(env, np.random.default_rng(0), lives)
    finally:
        env.close()
    terminations = [i for i, s in enumerate(steps) if s[1]]
    lost = [i for i, s in enumerate(steps) if s[3]]
    # The learner sees an episode end at each lost life and at the game's end...
    assert lost == terminations[:-1] and len(lost) == LIVES - 1
    assert terminations[-1] == len(steps) - 1 and not steps[-1][3]
    # ...while the statistics count one whole game: every reward, every step.
    assert len(games) == 1
    game_return, game_length = games[0]
    assert game_length == len(steps)
    assert game_return == pytest.approx(sum(s[0] for s in steps))
    if lives is not None:
        # The game went on after each lost life (no new game: lives count down).
        assert counts[0][0] == LIVES
        for i in lost:
            before, after = counts[i]
            assert after == before - 1
            assert counts[i + 1][0] == after  # the next step starts from there
        assert counts[-1][0] == 1  # the last life was lost at the game's end


def test_without_the_option_only_the_game_end_ends_an_episode():
    env = BatchedEnv(BREAKOUT, 1, 0, seed=3)
    try:
        steps, games, _ = play_one_game(env, np.random.default_rng(0))
    finally:
        env.close()
    assert [i for i, s in enumerate(steps) if s[1]] == [len(steps) - 1]
    assert not any(s[3] for s in steps)
    assert games[0][1] == len(steps)


def test_the_option_is_refused_for_an_env_without_lives_to_lose():
    with pytest.raises(EnvOptionError, match="Trainer.terminal_on_life_loss.*CartPole-v1"):
        make_env("CartPole-v1", terminal_on_life_loss=True)


def test_an_atari_time_limit_counts_env_steps_not_frames():
    env = make_env("ALE/Pong-v5", max_episode_steps=3)
    try:
        assert env.max_episode_steps == 3
        env.reset(seed=0)
        truncated = [env.step(np.zeros(1, np.float32))[3] for _ in range(3)]
    finally:
        env.close()
    assert truncated == [False, False, True]  # 12 frames: the third env step


def test_a_run_asking_it_of_an_env_without_lives_is_refused_before_it_starts(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.train", "--gin_file=ppo_cartpole.gin",
         f"--root_dir={tmp_path / 'run'}", "--gin_param=Trainer.terminal_on_life_loss=True"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Trainer.terminal_on_life_loss applies to Atari games" in result.stderr
    assert "CartPole-v1" in result.stderr


def test_the_actor_makes_its_envs_with_the_setting():
    settings = TrainerSettings(env_name=BREAKOUT, num_envs=1, num_env_workers=0,
                               unroll_length=4, num_iterations=1, terminal_on_life_loss=True)
    actor = Actor(0, settings, lambda observation, action_spec, seed: None)
    try:
        assert actor.env.terminal_on_life_loss
        assert type(actor.env._group.envs[0].env).__name__ == "EpisodicLife"
    finally:
        actor.close()

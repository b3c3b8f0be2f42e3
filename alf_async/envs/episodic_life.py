"""``EpisodicLife``: an Atari game whose lost lives end episodes, not the game
(``Trainer.terminal_on_life_loss``; ``atari.wrap_atari`` applies it)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

NOOP = 0  # ALE's action 0 in every game's action set


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (``terminated``, ``info["life_lost"]``)
    but not the game: the ``reset`` that follows takes one no-op step instead
    of starting a new game, unless the game is over or a seed is given.
    (gymnasium's ``AtariPreprocessing(terminal_on_life_loss=True)`` starts a
    new game at every lost life, so that later lives are never played.)"""

    def __init__(self, env: Any):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = self._ale_lives()
        if lives < self._lives and not self._game_over:
            terminated = True
            info = dict(info, life_lost=True)
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: Any = None, options: Any = None):
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # the game goes on after a lost life
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self._ale_lives()
        return obs, info

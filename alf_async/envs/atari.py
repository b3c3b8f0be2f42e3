"""Atari games through ale-py, preprocessed the standard way.

``make_env`` recognises an Atari id (one that ale-py registers: ``ALE/Pong-v5``,
``PongNoFrameskip-v4``, ...) and wraps it with gymnasium's own wrappers:

- ``AtariPreprocessing``: up to 30 no-op actions at reset, the action repeated
  for 4 frames (the base env is made with ``frameskip=1``; the max of the last
  two frames is kept), 84 x 84 grayscale frames as uint8, no scaling (the
  network divides by 255);
- ``FrameStackObservation``: the last 4 frames, an observation of (4, 84, 84)
  uint8;
- with ``terminal_on_life_loss`` (``Trainer.terminal_on_life_loss``, for
  training envs only), ``episodic_life.EpisodicLife``: a lost life ends the episode for the
  learner (``terminated``: no bootstrap past it) while the game goes on, and
  the step says so in ``info["life_lost"]``, so that the episode statistics
  still count whole games. Without it the end of the game ends an episode.

``ALE/...-v5`` ids keep ale-py's sticky actions (repeat_action_probability 0.25,
the benchmark setting of Machado et al., 2018); ``...NoFrameskip-v4`` ids have
none. Rewards are not clipped here, so that episode returns are the game's
score; ``PPOLearner.reward_clip`` clips them for training.

ale-py (which carries the ROMs) and opencv come with the ``atari`` extra:
``pip install -e ".[atari]"``.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Dict, Optional

FRAME_SKIP = 4
NOOP_MAX = 30
SCREEN_SIZE = 84
FRAME_STACK = 4
# Env steps a second of game time (the console draws 60 frames a second): the
# frame rate of a video with one frame an env step that plays in real time
# (ale-py declares render_fps 30 whatever the frame skip).
STEPS_PER_SECOND = 60 / FRAME_SKIP
ATARI_EXTRA = 'pip install -e ".[atari]" (from the alf_async checkout)'


def ale_installed() -> bool:
    return importlib.util.find_spec("ale_py") is not None


def register_atari_ids() -> bool:
    """Register ale-py's ids with gymnasium (importing ale-py does); False
    without ale-py."""
    if not ale_installed():
        return False
    import ale_py  # noqa: F401  (registers ALE/..., ...NoFrameskip-v4 ids)

    return True


def looks_like_atari(env_id: str) -> bool:
    """An id of ale-py's forms, registered or not (for the hint to install it)."""
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def is_atari(env_id: str) -> bool:
    """Whether the registered id ``env_id`` is one of ale-py's."""
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    entry = getattr(spec, "entry_point", "")
    return isinstance(entry, str) and entry.startswith("ale_py")


def atari_make_kwargs(env_id: str) -> Dict[str, Any]:
    """``gym.make`` keyword arguments the preprocessing needs (frameskip 1)."""
    import gymnasium as gym

    return {} if gym.registry[env_id].kwargs.get("frameskip") == 1 else {"frameskip": 1}


def wrap_atari(env: Any, terminal_on_life_loss: bool = False,
               max_episode_steps: Optional[int] = None) -> Any:
    """``env`` (made with ``atari_make_kwargs``) with the standard preprocessing
    (see the module doc) and, with ``max_episode_steps``, a time limit in env
    steps of 4 frames (a game's, through its lives); raises gymnasium's
    ``DependencyNotInstalled`` without opencv."""
    import gymnasium as gym

    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    env = gym.wrappers.FrameStackObservation(env, FRAME_STACK)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    if not terminal_on_life_loss:
        return env
    from alf_async.envs.episodic_life import EpisodicLife

    return EpisodicLife(env)


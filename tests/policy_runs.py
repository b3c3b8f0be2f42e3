"""Tiny trained runs for the Python API's tests (tests/test_python_api.py,
tests/test_export.py); no tests here.

``trained_run(kind)`` (a session fixture: each kind is trained once per pytest
worker, by ``alf_async.train`` in the worker's process) returns the run
directory of a shipped gin file shrunk to one or a few iterations of a couple
of envs:

- "box": PPO on InvertedPendulumBulletEnv-v0 (a Box action, observations
  normalized); "box_squashed" the same with ``ActorNetwork.squash_mean``;
- "discrete": PPO on CartPole-v1 (Discrete(2));
- "image": PPO on AlfAsyncDotCentering-v0 (9 x 9 x 1 uint8 frames, a conv
  encoder);
- "lstm": PPO with an LSTM on AlfAsyncMaskedCartPole-v1 (separate actor and
  value cores: a state of 2 x 2 x 16 floats);
- "sac": SAC on AlfAsyncDotCenteringContinuous-v0 (frames, a Box action), past
  its first gradient steps.

``rollout`` plays a policy's deterministic actions on its env and keeps what
each step saw, for comparisons with other ways of acting.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest

# One iteration of 2 envs x 16 steps, one epoch; no TensorBoard files.
TINY = ["Trainer.num_env_steps=0", "Trainer.num_iterations=1", "Trainer.num_envs=2",
        "Trainer.num_env_workers=0", "Trainer.env_splits=1", "Trainer.num_actors=1",
        "Trainer.unroll_length=16", "PPOLearner.mini_batch_size=32",
        "PPOLearner.num_epochs=1", "MetricsRecorder.tensorboard=False",
        "MetricsRecorder.console_interval_s=0"]

RUNS: Dict[str, Tuple[str, List[str]]] = {
    "box": ("ppo_bullet_inverted_pendulum.gin", []),
    # a large output layer: the squash moves the deterministic action
    "box_squashed": ("ppo_bullet_inverted_pendulum.gin", ["ActorNetwork.squash_mean=True",
                                                          "ActorNetwork.mean_init_scale=10.0"]),
    "discrete": ("ppo_cartpole.gin", []),
    "image": ("ppo_image_dot_centering.gin", []),
    "lstm": ("ppo_cartpole_masked_lstm.gin", ["ActorCritic.rnn_size=16"]),
    # 4 iterations of 2 x 16 steps; gradient steps from env step 32 on.
    "sac": ("sac_image_dot_centering.gin", ["Trainer.num_iterations=4",
                                            "Replay.learning_starts=32",
                                            "SACLearner.batch_size=16"]),
}


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Callable[[str], str]:
    """``trained_run(kind)`` -> the run directory of a tiny run (see the module doc)."""
    import alf_async

    roots: Dict[str, str] = {}

    def run(kind: str) -> str:
        if kind not in roots:
            gin_file, extra = RUNS[kind]
            root = str(tmp_path_factory.mktemp(f"api_{kind}") / "run")
            alf_async.train(gin_file, root, bindings=TINY + extra)
            roots[kind] = root
        return roots[kind]

    return run


def rollout(policy, steps: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """``steps`` steps of ``policy.predict`` (deterministic, one observation at
    a time, carrying a recurrent policy's state) on ``policy.make_env()``,
    resetting with seeds ``seed``, ``seed + 1``, ... at each episode's end.

    Returns arrays over the steps: ``observation`` [T, *O], ``episode_start``
    [T] bool, ``action`` [T, *A] and, for a recurrent policy, ``state`` [T, S]
    (the state each step acted from) and ``next_state`` [T, S].
    """
    env = policy.make_env()
    record: Dict[str, list] = {"observation": [], "episode_start": [], "action": [],
                               "state": [], "next_state": []}
    try:
        observation, _ = env.reset(seed=seed)
        episodes, start = 1, True
        state: Optional[np.ndarray] = None
        for _ in range(steps):
            state = policy.initial_state() if start else state
            action, next_state = policy.predict(observation, state)
            for key, value in (("observation", observation), ("episode_start", start),
                               ("action", action), ("state", state),
                               ("next_state", next_state)):
                record[key].append(value)
            observation, _, terminated, truncated, _ = env.step(action)
            state, start = next_state, terminated or truncated
            if start:
                observation, _ = env.reset(seed=seed + episodes)
                episodes += 1
    finally:
        env.close()
    if not policy.recurrent:
        del record["state"], record["next_state"]
    return {key: np.array(values) for key, values in record.items()}

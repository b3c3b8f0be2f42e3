"""Stable-Baselines3 SAC on HalfCheetahBulletEnv-v0 with the rl-baselines3-zoo
hyperparameters, for bench/sac_learning.py.

Runs under the Python of SB3's own virtual environment (never alf_async's:
SB3 is a benchmark-only dependency), e.g.
    /tmp/peers/sb3/bin/python bench/peers/sb3_sac.py --marks 100000,300000

A long run can be split: with ``--save_dir DIR`` the model, its replay buffer
and the marks so far are saved in DIR at every mark, and the same command with
``--resume`` (and more marks) continues from the last one (the env restarts its
episode there; the training state is the saved one).

Zoo entry (hyperparams/sac.yml, HalfCheetahBulletEnv-v0): buffer 300000,
batch 256, lr 7.3e-4, gamma 0.98, tau 0.02, train_freq 8, gradient_steps 8,
learning_starts 10000, ent_coef auto, gSDE with log_std_init -3, net_arch
[400, 300], TimeFeatureWrapper. Prints one JSON line: {"library": "sb3",
"return_at": {mark: mean return of the last 100 episodes}, "wall_s_at": {mark:
seconds of model.learn, summed over resumed parts}, "steps_to_threshold" and
"wall_s_to_threshold" (when that mean return first reached --threshold; null if
never), "gradient_steps_per_s", "env_steps_per_s"} (a resumed part gives
"resumed_at" and its own env_steps_per_s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque

import gymnasium as gym
import numpy as np
import pybullet_envs_gymnasium  # noqa: F401  (registers the Bullet envs)
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor


class TimeFeature(gym.ObservationWrapper):
    """Appends 1 - t / max_steps to the observation (sb3-contrib's TimeFeatureWrapper,
    rewritten here so that the venv needs no sb3-contrib)."""

    def __init__(self, env, max_steps: int = 1000):
        super().__init__(env)
        low = np.append(env.observation_space.low, 0.0).astype(np.float32)
        high = np.append(env.observation_space.high, 1.0).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.max_steps, self.t = max_steps, 0

    def reset(self, **kwargs):
        self.t = 0
        return super().reset(**kwargs)

    def step(self, action):
        self.t += 1
        return super().step(action)

    def observation(self, observation):
        return np.append(observation, 1.0 - self.t / self.max_steps).astype(np.float32)


class Marks(BaseCallback):
    """Records return and wall time at each mark, and the env steps and wall time
    at which the mean return first reached the threshold; with save_dir also saves
    the model, its replay buffer and these records there at each mark, so that a
    long run can be continued later with --resume."""

    def __init__(self, marks, save_dir=None, threshold=None):
        super().__init__()
        self.marks, self.returns = sorted(marks), deque(maxlen=100)
        self.return_at, self.wall_s_at, self.start = {}, {}, time.monotonic()
        self.save_dir, self.wall_before = save_dir, 0.0
        self.threshold, self.steps_to_threshold, self.wall_s_to_threshold = threshold, None, None

    def restore(self, state):
        self.returns.extend(state["returns"])
        self.return_at, self.wall_s_at = state["return_at"], state["wall_s_at"]
        self.wall_before = state["wall_s"]
        self.steps_to_threshold = state.get("steps_to_threshold")
        self.wall_s_to_threshold = state.get("wall_s_to_threshold")

    def wall_s(self) -> float:
        return self.wall_before + time.monotonic() - self.start

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            if "episode" in info:
                self.returns.append(info["episode"]["r"])
                if (self.threshold is not None and self.steps_to_threshold is None
                        and np.mean(self.returns) >= self.threshold):
                    self.steps_to_threshold = self.num_timesteps
                    self.wall_s_to_threshold = self.wall_s()
                    print(f"threshold {self.threshold}: {self.num_timesteps} env steps, "
                          f"{self.wall_s_to_threshold:.0f} s", file=sys.stderr, flush=True)
        for mark in self.marks:
            if str(mark) not in self.return_at and self.num_timesteps >= mark:
                self.return_at[str(mark)] = float(np.mean(self.returns)) if self.returns else None
                self.wall_s_at[str(mark)] = self.wall_s()
                # Each mark as it is passed, so that a run cut short keeps them.
                print(f"mark {mark}: return {self.return_at[str(mark)]}, "
                      f"{self.wall_s_at[str(mark)]:.0f} s", file=sys.stderr, flush=True)
                if self.save_dir:
                    self.save()
        return True

    def save(self) -> None:
        self.model.save(os.path.join(self.save_dir, "model.zip"))
        self.model.save_replay_buffer(os.path.join(self.save_dir, "replay_buffer.pkl"))
        state = {"returns": [float(r) for r in self.returns], "return_at": self.return_at,
                 "wall_s_at": self.wall_s_at, "wall_s": self.wall_s(),
                 "num_timesteps": self.num_timesteps,
                 "steps_to_threshold": self.steps_to_threshold,
                 "wall_s_to_threshold": self.wall_s_to_threshold}
        tmp = os.path.join(self.save_dir, "marks.json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, os.path.join(self.save_dir, "marks.json"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--marks", default="100000,300000")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=1000.0,
                   help="score for steps- and time-to-score (mean return of the last "
                        "100 episodes)")
    p.add_argument("--save_dir", default=None,
                   help="save model, replay buffer and marks here at each mark")
    p.add_argument("--resume", action="store_true",
                   help="continue the run saved in --save_dir (from its last mark)")
    args = p.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    env = TimeFeature(Monitor(gym.make("HalfCheetahBulletEnv-v0")))
    callback = Marks(marks, args.save_dir, args.threshold)
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
    if args.resume:
        if not args.save_dir or not os.path.isfile(os.path.join(args.save_dir, "marks.json")):
            p.error("--resume needs a --save_dir holding an earlier run's marks.json")
        with open(os.path.join(args.save_dir, "marks.json")) as f:
            state = json.load(f)
        model = SAC.load(os.path.join(args.save_dir, "model.zip"), env=env, device="cpu")
        model.load_replay_buffer(os.path.join(args.save_dir, "replay_buffer.pkl"))
        callback.restore(state)
        start = time.monotonic()
        model.learn(total_timesteps=max(marks) - model.num_timesteps, callback=callback,
                    reset_num_timesteps=False)
        wall = time.monotonic() - start
        print(json.dumps({"library": "sb3", "return_at": callback.return_at,
                          "wall_s_at": callback.wall_s_at, "resumed_at": state["num_timesteps"],
                          "steps_to_threshold": callback.steps_to_threshold,
                          "wall_s_to_threshold": callback.wall_s_to_threshold,
                          "env_steps_per_s": (model.num_timesteps - state["num_timesteps"])
                          / wall}))
        return
    model = SAC("MlpPolicy", env, learning_rate=7.3e-4, buffer_size=300000, batch_size=256,
                ent_coef="auto", gamma=0.98, tau=0.02, train_freq=8, gradient_steps=8,
                learning_starts=10000, use_sde=True,
                policy_kwargs=dict(log_std_init=-3, net_arch=[400, 300]),
                seed=args.seed, device="cpu", verbose=0)
    start = time.monotonic()
    model.learn(total_timesteps=max(marks), callback=callback)
    wall = time.monotonic() - start
    print(json.dumps({"library": "sb3", "return_at": callback.return_at,
                      "wall_s_at": callback.wall_s_at,
                      "steps_to_threshold": callback.steps_to_threshold,
                      "wall_s_to_threshold": callback.wall_s_to_threshold,
                      "gradient_steps_per_s": model._n_updates / wall,
                      "env_steps_per_s": model.num_timesteps / wall}))


if __name__ == "__main__":
    main()

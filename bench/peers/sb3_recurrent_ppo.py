"""sb3-contrib's RecurrentPPO on CartPole without velocities, with the
rl-baselines3-zoo's settings, for bench/recurrent_cartpole.py.

Runs under the Python of SB3's own virtual environment with sb3-contrib
installed (never alf_async's: a benchmark-only dependency; bench/peers/README.md
sets it up, sb3-contrib 2.9.2 to match stable-baselines3 2.9.2), e.g.
    /tmp/peers/sb3/bin/python bench/peers/sb3_recurrent_ppo.py --steps 150000 --seed 0

The env: gymnasium's CartPole-v1 observing [cart position, pole angle] only
(the entries alf_async's AlfAsyncMaskedCartPole-v1 keeps; the zoo's
CartPoleNoVel-v1 is the same task). Zoo entry (hyperparams/ppo_lstm.yml,
CartPoleNoVel-v1): 8 envs x 32 steps, batch 256, 20 epochs, gamma 0.98, GAE
lambda 0.8, learning rate and clip range linear from 1e-3 and 0.2, no entropy
bonus, observations normalized (VecNormalize, rewards not), MlpLstmPolicy with
an LSTM of 64 for the actor and one for the critic, (64,) ReLU layers after
them, no orthogonal init; 1e5 steps in the zoo.

Stops once the threshold is reached. Prints one JSON line: {"library": "sb3_contrib", "seed", "env_steps", "learn_s",
"env_steps_per_s", "setup_s", "curve": [[env steps, seconds since learn
started, mean return of the last 100 episodes, as alf_async's
``episode_return``], ...] (one point per rollout),
"threshold", "steps_to_threshold", "seconds_to_threshold" (None if not reached)}.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque


def make_masked_cartpole():
    import gymnasium as gym
    import numpy as np

    class KeepPositions(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            space = env.observation_space
            self.observation_space = gym.spaces.Box(space.low[[0, 2]], space.high[[0, 2]],
                                                    dtype=np.float32)

        def observation(self, observation):
            return observation[[0, 2]]

    return KeepPositions(gym.make("CartPole-v1"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, required=True, help="env-step budget (all envs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=475.0)
    args = p.parse_args(argv)
    start = time.perf_counter()
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    venv = VecNormalize(make_vec_env(make_masked_cartpole, n_envs=8, seed=args.seed),
                        norm_obs=True, norm_reward=False, gamma=0.98)
    model = RecurrentPPO(
        "MlpLstmPolicy", venv, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98,
        gae_lambda=0.8, ent_coef=0.0, learning_rate=lambda progress: 1e-3 * progress,
        clip_range=lambda progress: 0.2 * progress, seed=args.seed, device="cpu",
        policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
                           enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])))
    setup_s = time.perf_counter() - start

    class Curve(BaseCallback):
        def __init__(self):
            super().__init__()
            self.returns = deque(maxlen=100)
            self.points, self.t0 = [], time.perf_counter()

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            # False ends learn(): stop at the threshold, as the bench's alf_async runs do.
            return not (self.points and self.points[-1][2] >= args.threshold)

        def _on_rollout_end(self) -> None:
            if self.returns:
                self.points.append([self.num_timesteps, time.perf_counter() - self.t0,
                                    sum(self.returns) / len(self.returns)])

    curve = Curve()
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=curve)
    learn_s = time.perf_counter() - t0
    reached = next((pt for pt in curve.points if pt[2] >= args.threshold), None)
    print(json.dumps({
        "library": "sb3_contrib", "seed": args.seed, "env_steps": int(model.num_timesteps),
        "learn_s": learn_s, "env_steps_per_s": model.num_timesteps / learn_s,
        "setup_s": setup_s, "threshold": args.threshold, "curve": curve.points,
        "steps_to_threshold": reached[0] if reached else None,
        "seconds_to_threshold": reached[1] if reached else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

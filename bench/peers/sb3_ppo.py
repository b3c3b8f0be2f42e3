"""Stable-Baselines3 PPO on the PyBullet suite with the rl-baselines3-zoo's
hyperparameters, for bench/suite_throughput.py.

Runs under the Python of SB3's own virtual environment (never alf_async's:
SB3 is a benchmark-only dependency), e.g.
    /tmp/peers/sb3/bin/python bench/peers/sb3_ppo.py --env HopperBulletEnv-v0 --steps 100000

Zoo entries (hyperparams/ppo.yml, "Tuned"): HalfCheetahBulletEnv-v0 gives the
defaults the other three inherit: VecNormalize (observations and rewards), 16
envs x 512 steps, minibatches of 128, 20 epochs, gamma 0.99, GAE lambda 0.9, no
entropy bonus, gSDE (sample every 4 steps), max grad norm 0.5, value weight
0.5, learning rate 3e-5, clip range 0.4, (256, 256) ReLU networks apart for
policy and value, no orthogonal init, log_std_init -2. Ant: log_std_init -1.
Hopper and Walker2D: clip range linear from 0.4. The envs run in a
SubprocVecEnv (the zoo's --vec-env subproc) with a Monitor each.

Prints one JSON line: {"library": "sb3", "env": ..., "env_steps": ...,
"learn_s": seconds of model.learn, "env_steps_per_s", "rollout_s" (collection)
and "update_s" (the rest), "last_return" (mean of the last 20 finished
episodes, raw rewards), "setup_s" (imports and env creation)}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ZOO_DEFAULTS = dict(n_envs=16, batch_size=128, n_steps=512, gamma=0.99, gae_lambda=0.9,
                    n_epochs=20, ent_coef=0.0, sde_sample_freq=4, max_grad_norm=0.5,
                    vf_coef=0.5, learning_rate=3e-5, use_sde=True, clip_range=0.4,
                    log_std_init=-2.0, linear_clip=False)
ZOO_PPO = {
    "HalfCheetahBulletEnv-v0": dict(ZOO_DEFAULTS),
    "AntBulletEnv-v0": dict(ZOO_DEFAULTS, log_std_init=-1.0),
    "HopperBulletEnv-v0": dict(ZOO_DEFAULTS, linear_clip=True),
    "Walker2DBulletEnv-v0": dict(ZOO_DEFAULTS, linear_clip=True),
}


class MakeEnv:
    """Picklable env constructor: each SubprocVecEnv worker registers the Bullet
    envs itself before making one."""

    def __init__(self, env_id: str):
        self.env_id = env_id

    def __call__(self, **kwargs):
        import gymnasium as gym
        import pybullet_envs_gymnasium  # noqa: F401  (registers the Bullet envs)

        return gym.make(self.env_id, **kwargs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", required=True, choices=sorted(ZOO_PPO))
    p.add_argument("--steps", type=int, required=True, help="env-step budget (all envs)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    start = time.perf_counter()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sb3_timing import rollout_timer

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

    hp = dict(ZOO_PPO[args.env])
    n_envs, log_std_init, linear_clip = hp.pop("n_envs"), hp.pop("log_std_init"), hp.pop(
        "linear_clip")
    if linear_clip:
        initial = hp["clip_range"]
        hp["clip_range"] = lambda progress: progress * initial  # the zoo's lin_0.4
    venv = make_vec_env(MakeEnv(args.env), n_envs=n_envs, seed=args.seed,
                        vec_env_cls=SubprocVecEnv)
    venv = VecNormalize(venv, gamma=hp["gamma"])
    model = PPO("MlpPolicy", venv, seed=args.seed, verbose=0, **hp,
                policy_kwargs=dict(log_std_init=log_std_init, ortho_init=False,
                                   activation_fn=torch.nn.ReLU,
                                   net_arch=dict(pi=[256, 256], vf=[256, 256])))

    split = rollout_timer()
    setup_s = time.perf_counter() - start
    learn_start = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=split)
    learn_s = time.perf_counter() - learn_start
    steps = int(model.num_timesteps)
    venv.close()
    print(json.dumps({
        "library": "sb3", "env": args.env, "env_steps": steps, "learn_s": learn_s,
        "env_steps_per_s": steps / learn_s, "rollout_s": split.rollout_s,
        "update_s": learn_s - split.rollout_s, "setup_s": setup_s,
        "last_return": (sum(split.returns) / len(split.returns)) if split.returns else None,
        "torch_threads": torch.get_num_threads()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

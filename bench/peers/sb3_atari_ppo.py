"""Stable-Baselines3 PPO on an Atari game with the rl-baselines3-zoo's Atari
settings, for bench/pixels_throughput.py.

Runs under the Python of SB3's own virtual environment (never alf_async's:
SB3 is a benchmark-only dependency), with ale-py and opencv installed there, e.g.
    /tmp/peers/sb3/bin/python bench/peers/sb3_atari_ppo.py --env ALE/Pong-v5 --steps 20000

The zoo's entry (hyperparams/ppo.yml, "atari"): AtariWrapper (no-op reset,
frame skip 4, a lost life ends the training episode, FIRE at reset where the
game needs it, 84 x 84 grayscale, rewards clipped), 4 stacked frames, CnnPolicy
(the Nature CNN, shared by policy and value), 8 envs x 128 steps, 4 epochs of
minibatches of 256, learning rate and clip range linear from 2.5e-4 and 0.1,
value weight 0.5, entropy 0.01. The envs run in a SubprocVecEnv (the zoo's
--vec-env subproc) and are made with frameskip=1, as AtariWrapper skips frames
itself.

Prints one JSON line: {"library": "sb3", "env": ..., "env_steps": ... (agent
steps, 4 frames each), "learn_s", "env_steps_per_s", "rollout_s" (collection),
"update_s" (the rest), "last_return" (mean game score of the last 20 finished
games), "setup_s"}.

Long learning runs (bench/pong_learning.py) resume across sessions: with
``--save_dir`` the model is saved there every ``--save_every`` agent steps and
when the run stops, a run with the same directory continues from the saved
model (the schedules continue over the whole ``--steps`` budget), and every
rollout appends {"env_steps", "wall_s" (learning seconds summed over resumes),
"return" (mean score of the last 100 finished games), "games"} to
``progress.jsonl`` there. ``--stop_after_s`` ends a session's learning after
that many seconds (saved; run again to continue).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

class MakeAtari:
    """Picklable env constructor: each SubprocVecEnv worker registers ale-py's
    ids itself, then makes the game with frameskip 1 (AtariWrapper skips)."""

    def __init__(self, env_id: str):
        self.env_id = env_id

    def __call__(self, **kwargs):
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
        return gym.make(self.env_id, frameskip=1, **kwargs)


ZOO_ATARI = dict(n_envs=8, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4,
                 clip_range=0.1, vf_coef=0.5, ent_coef=0.01)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--steps", type=int, required=True, help="agent-step budget (all envs)")
    p.add_argument("--num_envs", type=int, default=ZOO_ATARI["n_envs"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save_dir", default=None, help="save and resume the run here")
    p.add_argument("--save_every", type=int, default=100_000, help="agent steps")
    p.add_argument("--stop_after_s", type=float, default=None,
                   help="stop learning after this many seconds (resumable)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sb3_timing import progress_saver, rollout_timer

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack

    hp = dict(ZOO_ATARI)
    hp.pop("n_envs")
    lr, clip = hp.pop("learning_rate"), hp.pop("clip_range")
    venv = make_atari_env(MakeAtari(args.env), n_envs=args.num_envs, seed=args.seed,
                          vec_env_cls=SubprocVecEnv)
    venv = VecFrameStack(venv, n_stack=4)
    saved = os.path.join(args.save_dir, "model.zip") if args.save_dir else None
    if saved and os.path.isfile(saved):  # resume: weights, optimizer, schedules, steps
        model = PPO.load(saved, env=venv)
    else:
        model = PPO("CnnPolicy", venv, seed=args.seed, verbose=0, **hp,
                    learning_rate=lambda progress: progress * lr,  # the zoo's lin_2.5e-4
                    clip_range=lambda progress: progress * clip)  # lin_0.1
    done_before = int(model.num_timesteps)

    split = rollout_timer()
    callbacks = [split]
    if args.save_dir:
        callbacks.append(progress_saver(args.save_dir, args.save_every, args.stop_after_s))
    setup_s = time.perf_counter() - start
    learn_start = time.perf_counter()
    if args.steps > done_before:
        model.learn(total_timesteps=args.steps - done_before, callback=callbacks,
                    reset_num_timesteps=done_before == 0)
    learn_s = time.perf_counter() - learn_start
    if saved:
        model.save(saved)
    steps = int(model.num_timesteps) - done_before
    venv.close()
    print(json.dumps({
        "library": "sb3", "env": args.env, "num_envs": args.num_envs, "env_steps": steps,
        "total_env_steps": int(model.num_timesteps),
        "learn_s": learn_s, "env_steps_per_s": steps / max(learn_s, 1e-9), "rollout_s": split.rollout_s,
        "update_s": learn_s - split.rollout_s, "setup_s": setup_s,
        "last_return": (sum(split.returns) / len(split.returns)) if split.returns else None,
        "torch_threads": torch.get_num_threads()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Sample Factory 2.1.1 PPO on a PyBullet locomotion env with its own MuJoCo
settings, for bench/peer_throughput.py.

Runs under the Python of Sample Factory's own virtual environment (never
alf_async's: a benchmark-only dependency; bench/peers/README.md makes it),
e.g.
    /tmp/peers/sf/bin/python bench/peers/sf_ppo.py --steps 98304 --async_rl 0

Settings: sf_examples.mujoco.mujoco_params.mujoco_override_defaults (imported
from the sample-factory wheel, not copied): rollout 64, batch 1024, 2 epochs of
4 minibatches, learning rate 2.95e-3 decaying linearly, (64, 64) tanh MLP,
input and return normalization, double-buffered sampling (worker_num_splits 2).
The layout is set for a 2-core machine and the 16 envs of alf_async's PyBullet
configs: 2 workers x 8 envs, on the CPU. Sample Factory's sync mode trains on
whole rollouts of every env (workers x envs x rollout a multiple of
num_batches_per_epoch x batch_size): its MuJoCo settings train on one rollout of
their 64 envs per iteration (4 x 1024); for other env counts
``--num_batches_per_epoch`` keeps that (96 envs: 6 minibatches of 1024).
Before its first rollout Sample Factory steps env i of a worker 64 x i times at
random ("decorrelating experience", inside ``runner.run()``): with 48 envs a
worker that is about 72k random humanoid steps, minutes of start-up that a
run of a few hundred thousand env steps would count as training time.
``--decorrelate_envs 0`` skips it (the humanoid falls within tens of steps at
first, so its episodes stagger by themselves).

Prints one JSON line: {"library": "sample-factory", "mode": "sync"|"async",
"env_steps", "run_s", "env_steps_per_s", "setup_s", "exit_s"}: run_s is the
training loop (``runner.run()``), setup_s everything before it from the start
of this script (imports, config, runner.init), exit_s from the end of the loop
to the end of this script's work (the runner's own shutdown is inside run()).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

START = time.perf_counter()


@contextlib.contextmanager
def _stdout_to_stderr():
    """PyBullet prints 'argv[0]=' from C on connect: keep stdout for the JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def make_bullet_env(full_env_name, cfg=None, env_config=None, render_mode=None, **kwargs):
    """Sample Factory's env factory: the registry name is the gymnasium id."""
    import gymnasium as gym
    import pybullet_envs_gymnasium  # noqa: F401  (registers the *BulletEnv-v0 ids)

    with _stdout_to_stderr():
        env = gym.make(full_env_name, render_mode=render_mode)
        env.reset()
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="HalfCheetahBulletEnv-v0")
    p.add_argument("--steps", type=int, required=True, help="env-step budget")
    p.add_argument("--async_rl", type=int, choices=[0, 1], default=0)
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--envs_per_worker", type=int, default=8)
    p.add_argument("--num_batches_per_epoch", type=int, default=None,
                   help="minibatches of 1024 per epoch (default: Sample Factory's MuJoCo 4)")
    p.add_argument("--decorrelate_envs", type=int, choices=[0, 1], default=1,
                   help="Sample Factory's decorrelate_envs_on_one_worker (default: on, as it ships)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train_dir", default="/tmp/peers/sf_train")
    args = p.parse_args(argv)

    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner
    from sf_examples.mujoco.mujoco_params import mujoco_override_defaults

    register_env(args.env, make_bullet_env)
    mode = "async" if args.async_rl else "sync"
    sf_argv = [f"--env={args.env}",
               f"--experiment={args.env}_{mode}_{os.getpid()}_{int(time.time())}",
               f"--train_dir={args.train_dir}", f"--train_for_env_steps={args.steps}",
               f"--async_rl={bool(args.async_rl)}", f"--num_workers={args.num_workers}",
               f"--num_envs_per_worker={args.envs_per_worker}", f"--seed={args.seed}",
               "--device=cpu", "--restart_behavior=overwrite", "--with_wandb=False"]
    if not args.decorrelate_envs:
        sf_argv.append("--decorrelate_envs_on_one_worker=False")
    if args.num_batches_per_epoch is not None:
        sf_argv.append(f"--num_batches_per_epoch={args.num_batches_per_epoch}")
    parser, partial_cfg = parse_sf_args(argv=sf_argv, evaluation=False)
    mujoco_override_defaults(partial_cfg.env, parser)
    cfg = parse_full_cfg(parser, sf_argv)
    cfg, runner = make_runner(cfg)
    status = runner.init()
    loop_start = time.perf_counter()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    loop_end = time.perf_counter()
    env_steps = int(sum(runner.env_steps.values())) if runner.env_steps else 0
    run_s = loop_end - loop_start
    print(json.dumps({
        "library": "sample-factory", "mode": mode, "env": args.env,
        "envs": args.num_workers * args.envs_per_worker, "env_steps": env_steps,
        "run_s": run_s, "env_steps_per_s": env_steps / run_s if run_s else None,
        "setup_s": loop_start - START, "exit_s": time.perf_counter() - loop_end,
        "status": int(status)}), flush=True)
    return 0 if status == ExperimentStatus.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main())

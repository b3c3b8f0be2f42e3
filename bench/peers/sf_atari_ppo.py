"""Sample Factory 2.1.1 PPO on Atari Pong with its own Atari example's settings,
for bench/pixels_throughput.py.

Runs under the Python of Sample Factory's own virtual environment (never
alf_async's: a benchmark-only dependency; bench/peers/README.md makes it, with
ale-py 0.9.1 and opencv-python-headless<4.11 for numpy 1.26), e.g.
    /tmp/peers/sf/bin/python bench/peers/sf_atari_ppo.py --steps 20000 --async_rl 1

Settings: sf_examples.atari (imported from the sample-factory wheel, not
copied): PongNoFrameskip-v4 with no-op reset, frame skip 4, episodic life,
clipped rewards, 84 x 84 grayscale, 4 stacked frames; its convnet_atari encoder;
rollout 128, minibatches of 256, 4 epochs, learning rate 2.5e-4 decaying
linearly, clip ratio 0.1. The layout is set for a 2-core machine and the same
number of envs as alf_async's Pong configs: 2 workers x 4 envs, double-buffered
(worker_num_splits 2), on the CPU.

Sample Factory counts frames (env_frameskip 4 with summaries_use_frameskip);
--steps and the reported env_steps are agent steps (4 frames each), as for
alf_async and Stable-Baselines3.

Prints one JSON line: {"library": "sample-factory", "mode": "sync"|"async",
"env_steps", "run_s", "env_steps_per_s", "setup_s", "last_return"}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

FRAME_SKIP = 4


def make_pong(env_name, cfg, env_config, render_mode=None):
    """Sample Factory's own Atari env, in a process that has registered ale-py's
    ids first (importing ale_py does; Sample Factory's spawned workers have not)."""
    import ale_py  # noqa: F401
    from sf_examples.atari.atari_utils import make_atari_env

    return make_atari_env(env_name, cfg, env_config, render_mode=render_mode)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, required=True, help="agent-step budget (all envs)")
    p.add_argument("--async_rl", type=int, choices=[0, 1], default=0)
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--envs_per_worker", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train_dir", default="/tmp/peers/sf_train")
    args = p.parse_args(argv)
    start = time.perf_counter()

    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.train import make_runner
    from sample_factory.envs.env_utils import register_env
    from sf_examples.atari.atari_params import atari_override_defaults

    register_env("atari_pong", make_pong)
    mode = "async" if args.async_rl else "sync"
    sf_argv = [
        "--env=atari_pong", f"--experiment=pong_{mode}_{os.getpid()}",
        f"--train_dir={args.train_dir}", f"--train_for_env_steps={args.steps * FRAME_SKIP}",
        f"--async_rl={bool(args.async_rl)}", f"--num_workers={args.num_workers}",
        f"--num_envs_per_worker={args.envs_per_worker}", "--worker_num_splits=2",
        f"--seed={args.seed}", "--device=cpu", "--restart_behavior=overwrite",
        "--with_wandb=False"]
    parser, partial_cfg = parse_sf_args(argv=sf_argv, evaluation=False)
    atari_override_defaults(partial_cfg.env, parser)
    cfg = parse_full_cfg(parser, sf_argv)
    cfg, runner = make_runner(cfg)
    status = runner.init()
    setup_s = time.perf_counter() - start
    t0 = time.perf_counter()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    run_s = time.perf_counter() - t0
    frames = int(sum(runner.env_steps.values())) if runner.env_steps else 0
    rewards = []
    if "reward" in runner.policy_avg_stats:
        rewards = [float(x) for x in list(runner.policy_avg_stats["reward"][0])[-20:]]
    steps = frames // FRAME_SKIP
    print(json.dumps({
        "library": "sample-factory", "mode": mode, "status": int(status), "env_steps": steps,
        "run_s": run_s, "env_steps_per_s": steps / run_s if run_s else None,
        "setup_s": setup_s, "num_envs": args.num_workers * args.envs_per_worker,
        "last_return": sum(rewards) / len(rewards) if rewards else None}), flush=True)
    return 0 if status == ExperimentStatus.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main())

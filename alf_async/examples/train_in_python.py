"""Train PPO from Python instead of the command line.

    python -m alf_async.examples.train_in_python --root_dir=/tmp/alf_async_example

Binds gin parameters in code, builds a ``Trainer`` and runs it; then prints the
last metrics line. Use it as a template for notebooks and custom loops.
"""

from __future__ import annotations

import argparse
import json
import os

import gin

from alf_async.config import parse_config
from alf_async.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--num_actors", type=int, default=2)
    args = parser.parse_args()

    # The demo config, with a few bindings changed in code.
    parse_config(["ppo_bullet_inverted_pendulum.gin"], [
        f"Trainer.num_iterations = {args.iterations}",
        "Trainer.num_env_steps = 0",
        f"Trainer.num_actors = {args.num_actors}",
        "Trainer.num_envs = 4",
        "Trainer.unroll_length = 128",
        "PPOLearner.mini_batch_size = 256",
    ])
    trainer = Trainer(root_dir=args.root_dir)
    counters = trainer.train()
    with open(os.path.join(args.root_dir, "metrics.jsonl")) as f:
        last = json.loads(f.readlines()[-1])
    print(f"trained {counters['iteration']} iterations, {counters['env_steps']} env steps")
    print(f"last iteration: T={last['T']:.3f}s EPS={last['EPS']:.2f} lag={last['lag']} "
          f"return={last['episode_return']}")
    print(gin.operative_config_str().splitlines()[0] if gin.operative_config_str() else "")


if __name__ == "__main__":
    main()

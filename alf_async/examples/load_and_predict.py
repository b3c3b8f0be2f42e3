"""Train with ``alf_async.train``, then act with ``alf_async.load`` in a plain
gymnasium loop, as with Stable-Baselines3.

    python -m alf_async.examples.load_and_predict --root_dir=/tmp/alf_async_cartpole

Trains CartPole for ``--iterations`` iterations (a run directory trained before
is resumed, or left as it is when its budget is reached), loads the newest
checkpoint, plays ``--episodes`` episodes with ``policy.predict`` and prints
each return. With ``--export FILE`` it also writes the policy as a TorchScript
file and checks that the file gives predict's actions. docs/python_api.md
explains each step.
"""

from __future__ import annotations

import argparse

import numpy as np

import alf_async


def play(policy: "alf_async.Policy", episodes: int, seed: int = 0) -> list:
    """Returns of ``episodes`` episodes played with the deterministic policy."""
    env = policy.make_env()  # the env as the run made it
    returns = []
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            state, total, done = None, 0.0, False  # state: a recurrent policy's memory
            while not done:
                action, state = policy.predict(observation, state, deterministic=True)
                observation, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            print(f"episode {episode + 1}: return {total:.1f}")
    finally:
        env.close()
    return returns


def check_export(policy: "alf_async.Policy", path: str) -> None:
    """Export the policy as TorchScript and compare its actions with predict's."""
    import torch

    exported = torch.jit.load(policy.export(path, format="torchscript"))
    env = policy.make_env()
    try:
        observations = np.stack([env.reset(seed=s)[0] for s in range(16)])
    finally:
        env.close()
    want, _ = policy.predict(observations)
    got = exported(torch.from_numpy(observations)).numpy()
    assert np.array_equal(got, want), (got, want)
    print(f"exported to {path}: the same actions as predict on {len(observations)} "
          "observations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--export", default=None, help="write a TorchScript file here")
    args = parser.parse_args()

    counters = alf_async.train("ppo_cartpole.gin", args.root_dir, bindings=[
        f"Trainer.num_iterations={args.iterations}", "Trainer.num_env_steps=0"])
    print(f"trained {counters['iteration']} iterations, {counters['env_steps']} env steps")
    policy = alf_async.load(args.root_dir)
    print(f"loaded {policy.checkpoint}")
    returns = play(policy, args.episodes)
    print(f"mean return over {len(returns)} episode(s): {np.mean(returns):.1f}")
    if args.export:
        check_export(policy, args.export)


if __name__ == "__main__":  # alf_async.train starts processes: guard the entry point
    main()

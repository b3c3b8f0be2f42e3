"""Why a lag of one version narrows PPO's policy: the library's PPO loss on a bandit (issue 53).

A one-dimensional bandit with reward r(a) = a (no optimum, so a width that
shrinks is not the policy converging) and a Gaussian policy N(m, exp(s)^2)
whose two parameters (m, s) are trained by ``algorithms.ppo_loss.ppo_loss``,
the loss the learner uses: each iteration samples ``--batch`` actions, takes
the reward minus its batch mean as the advantage, and runs ``--epochs``
epochs of minibatches of ``--mini_batch_size`` with Adam (``--learning_rate``).
With lag 0 the actions are sampled by the current parameters (sync); with lag
1 by the parameters of one iteration before (N = 2's lag), and the loss is
the decoupled one (pi_prox: the parameters at the start of the iteration,
weights min(pi_prox / mu, rho_bar)). Variants: lag 0; lag 1 with rho_bar 1
and 100, each with the advantages' normalization taken under the behaviour
policy (PPO2's) and under pi_prox (``PPOLearner.advantage_moments =
"proximal"``).

Output, one JSON line: per variant, the mean over ``--seeds`` seeds of m and
of the std exp(s) after iterations 5, 10 and 20 (m starts at 0, the std at
0.5). A variant that narrows the std faster than lag 0 while its mean moves
no faster is the narrowing the async PyBullet runs show.

    python -m bench.lag_bandit
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Dict, List, Sequence

import torch

from alf_async.algorithms.ppo_loss import ppo_loss

REPORT_ITERATIONS = (5, 10, 20)


def train(lag: int, rho_bar: float, moments: str, seed: int, batch: int, epochs: int,
          mini_batch_size: int, learning_rate: float,
          iterations: int = max(REPORT_ITERATIONS)) -> List[Sequence[float]]:
    """(m, std) after each iteration of one run."""
    generator = torch.Generator().manual_seed(seed)
    params = torch.tensor([0.0, math.log(0.5)], dtype=torch.float64,
                          requires_grad=True)
    optimizer = torch.optim.Adam([params], lr=learning_rate)
    versions = [params.detach().clone()]
    trace = []
    for _ in range(iterations):
        behaviour = versions[max(0, len(versions) - 1 - lag)]
        actions = behaviour[0] + behaviour[1].exp() * torch.randn(
            batch, generator=generator, dtype=torch.float64)

        def log_prob(p: torch.Tensor) -> torch.Tensor:
            return torch.distributions.Normal(p[0], p[1].exp()).log_prob(actions)

        behaviour_log_prob = log_prob(behaviour)
        proximal_log_prob = log_prob(params.detach())
        advantages = actions - actions.mean()
        zeros = torch.zeros(batch, dtype=torch.float64)
        for _ in range(epochs):
            order = torch.randperm(batch, generator=generator)
            for first in range(0, batch - mini_batch_size + 1, mini_batch_size):
                idx = order[first:first + mini_batch_size]
                out = ppo_loss(log_prob(params)[idx], behaviour_log_prob[idx], advantages[idx],
                               zeros[idx], zeros[idx], zeros[idx], clip_ratio=0.2,
                               value_loss_weight=0.0, entropy_coef=0.0,
                               proximal_log_prob=proximal_log_prob[idx] if lag else None,
                               max_importance_weight=rho_bar if lag else None,
                               advantage_moments=moments)
                optimizer.zero_grad()
                out.loss.backward()
                optimizer.step()
        versions.append(params.detach().clone())
        trace.append((params[0].item(), params[1].exp().item()))
    return trace


def main(argv: Sequence[str] | None = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--mini_batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=3e-3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    variants = {"lag0": (0, 1.0, "behaviour")}
    for rho_bar in (1.0, 100.0):
        for moments in ("behaviour", "proximal"):
            variants[f"lag1_rho{rho_bar:g}_{moments}"] = (1, rho_bar, moments)
    result: Dict[str, object] = {"bench": "lag_bandit", "seeds": args.seeds,
                                 "iterations": list(REPORT_ITERATIONS)}
    for name, (lag, rho_bar, moments) in variants.items():
        runs = [train(lag, rho_bar, moments, seed, args.batch, args.epochs,
                      args.mini_batch_size, args.learning_rate) for seed in range(args.seeds)]
        result[name] = {
            "mean": [round(sum(r[i - 1][0] for r in runs) / len(runs), 3)
                     for i in REPORT_ITERATIONS],
            "std": [round(sum(r[i - 1][1] for r in runs) / len(runs), 4)
                    for i in REPORT_ITERATIONS]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

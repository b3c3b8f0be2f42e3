"""Ray scaling: EPS against the number of Ray actors on a latency-bound env.

Starts a local multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head and
``--nodes - 1`` worker nodes on loopback, ``--cpus_per_node`` logical CPUs each)
and trains ``AlfAsyncLatencyPendulum-v0`` (alf_async.envs.latency: every env step
sleeps ``step_latency_s``, so an actor waits rather than computes) with
N = 1, 2, 4, 8 Ray actors that join the cluster (``RayBackend.address``), one run
after another. Per N it reports T, EPS, the learner's training time L and the
actors' unroll time U (means after ``--warmup`` iterations), and

- ideal_EPS = min(N x EPS(N = 1), K / L): linear scaling until the learner,
  training back to back, is the bottleneck (L of that run: with many actors on
  few cores the learner itself slows down, which lowers its limit);
- efficiency = EPS / ideal_EPS;
- learner_busy = L / T: the learner's share of the time (1.0 = saturated).

Because the env waits instead of computing, N actors need far fewer than N cores
and the curve shows the runtime's scaling, not this machine's core count.

Output: one JSON line {"bench": "ray_scaling", "runs": [{"N", "T", "EPS", "L",
"U", "learner_limit_EPS", "ideal_EPS", "efficiency", "learner_busy"}, ...],
"saturates_at_N" (the first N whose learner is busy >= 80% of the time), ...}.
``--plot FILE`` also draws EPS and ideal EPS against N.

Full size:  python -m bench.ray_scaling --plot ray_scaling.png
Smoke run:  python -m bench.ray_scaling --num_actors 1,2 --iterations 4 --warmup 1 --nodes 2
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib

logger = logging.getLogger("bench")

ENV = "alf_async.envs.latency:AlfAsyncLatencyPendulum-v0"
GIN_FILE = "ppo_bullet_inverted_pendulum.gin"


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num_actors", default="1,2,4,8", help="comma-separated N values")
    p.add_argument("--nodes", type=int, default=4, help="nodes of the local cluster")
    p.add_argument("--cpus_per_node", type=int, default=2,
                   help="logical CPUs of each node (actors reserve 1 each)")
    p.add_argument("--num_envs", type=int, default=4, help="K")
    p.add_argument("--unroll_length", type=int, default=64)
    p.add_argument("--num_epochs", type=int, default=30,
                   help="PPO epochs: sets the learner's time per batch, L")
    p.add_argument("--iterations", type=int, default=24)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--plot", default=None, help="write a PNG of EPS against N here")
    benchlib.add_common_train_args(p)
    args = p.parse_args(argv)
    args.num_actors = benchlib.parse_int_list(args.num_actors)
    return args


def start_cluster(nodes: int, cpus_per_node: int):
    """A local Ray cluster of ``nodes`` nodes on loopback; returns it."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
    os.environ.setdefault("RAY_worker_niceness", "0")  # actors at the learner's priority
    from ray.cluster_utils import Cluster

    memory = 100 * 1024 ** 2
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": cpus_per_node, "object_store_memory": memory, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=cpus_per_node, object_store_memory=memory)
    cluster.wait_for_nodes()
    logger.info("local Ray cluster: %d nodes at %s", nodes, cluster.address)
    return cluster


def plot(runs: List[Dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ns = [r["N"] for r in runs]
    ax.plot(ns, [r["EPS"] for r in runs], "o-", label="measured EPS")
    ax.plot(ns, [r["ideal_EPS"] for r in runs], "--", label="min(N x EPS(1), K / L of the run)")
    ax.set_xlabel("Ray actors N")
    ax.set_ylabel("EPS (envs / s)")
    ax.set_xticks(ns)
    ax.set_ylim(bottom=0)
    ax.set_title("EPS vs N, latency-bound env, local Ray cluster")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    cluster = start_cluster(args.nodes, args.cpus_per_node)
    runs: List[Dict[str, Any]] = []
    try:
        for n in args.num_actors:
            params = [f"Trainer.env_name='{ENV}'", "Trainer.backend='ray'",
                      f"RayBackend.address='{cluster.address}'",
                      "RayBackend.num_cpus_per_actor=1", f"Trainer.num_actors={n}",
                      f"Trainer.num_envs={args.num_envs}", "Trainer.num_env_workers=0",
                      f"Trainer.unroll_length={args.unroll_length}",
                      f"PPOLearner.num_epochs={args.num_epochs}",
                      f"PPOLearner.mini_batch_size={args.num_envs * args.unroll_length // 4}",
                      "Trainer.num_env_steps=0", f"Trainer.num_iterations={args.iterations}",
                      "MetricsRecorder.tensorboard=False", *args.gin_param]
            timing = benchlib.timing_run(GIN_FILE, params, f"ray_scaling_n{n}", args.root_dir,
                                         args.keep, args.warmup, args.timeout_s)
            runs.append({"N": n, **timing})
            logger.info("N=%d: EPS %.2f, T %.3f s, L %.3f s", n, timing["EPS"], timing["T"],
                        timing["L"])
    finally:
        cluster.shutdown()
    base = next((r for r in runs if r["N"] == 1), runs[0])
    eps_per_actor = base["EPS"] / base["N"]
    for r in runs:
        r["learner_limit_EPS"] = args.num_envs / r["L"]
        r["ideal_EPS"] = min(r["N"] * eps_per_actor, r["learner_limit_EPS"])
        r["efficiency"] = r["EPS"] / r["ideal_EPS"]
        r["learner_busy"] = r["L"] / r["T"]
    saturated = [r["N"] for r in runs if r["learner_busy"] >= 0.8]
    if args.plot:
        plot(runs, args.plot)
    benchlib.emit({"bench": "ray_scaling", "env": ENV, "nodes": args.nodes,
                   "num_envs": args.num_envs, "unroll_length": args.unroll_length,
                   "runs": runs, "saturates_at_N": saturated[0] if saturated else None,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Recurrent policies on CartPole without velocities: alf_async's LSTM configs,
sync and async, against sb3-contrib's RecurrentPPO, and against the same
config without memory.

For each seed, back to back on this machine: ``ppo_cartpole_masked_lstm.gin``
(sync, N = 1) and ``async_ppo_cartpole_masked_lstm.gin`` (N = 2) until the mean
return of the last 100 episodes (metrics ``episode_return``) reaches
``--threshold`` (475 of CartPole's 500) or ``--steps`` env steps pass; then,
with ``--sb3_python`` (SB3's virtualenv with sb3-contrib), RecurrentPPO with
the rl-baselines3-zoo's settings (``peers/sb3_recurrent_ppo.py``, the same
window of 100 episodes). Once (first seed): the sync config without the LSTM
(``ActorCritic.rnn = None``, (64, 64) MLPs) for ``--ff_steps``, which shows the
gap memory makes and the recurrent core's cost in env steps/s.

Wall times are seconds of training (alf_async: metrics ``wall_time``, start-up
excluded; SB3: from the start of ``learn``).

Output: one JSON line {"bench": "recurrent_cartpole", "threshold", "runs":
{"sync": [per seed {"seed", "steps_to_threshold", "seconds_to_threshold",
"final_return", "env_steps_per_s"}], "async": [...], "sb3": [...]},
"feed_forward": {"final_return", "best_return", "env_steps_per_s"},
"median": {run: {"steps_to_threshold", "seconds_to_threshold"}},
"lstm_cost": feed-forward env steps/s over the sync LSTM's} and a markdown
table on stderr.

Full size:  python -m bench.recurrent_cartpole --seeds 0,1,2 --sb3_python /tmp/peers/sb3/bin/python
Smoke run:  python -m bench.recurrent_cartpole --seeds 0 --steps 5000 --ff_steps 2000
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

from bench import benchlib, children

logger = logging.getLogger("bench")
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers",
                    "sb3_recurrent_ppo.py")
CONFIGS = {"sync": "ppo_cartpole_masked_lstm.gin",
           "async": "async_ppo_cartpole_masked_lstm.gin"}
FEED_FORWARD = ["ActorCritic.rnn=None", "ActorNetwork.hidden_sizes=(64, 64)",
                "ValueNetwork.hidden_sizes=(64, 64)"]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=benchlib.parse_int_list, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=300_000, help="env-step budget per run")
    p.add_argument("--ff_steps", type=int, default=60_000,
                   help="env steps of the run without memory")
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--sb3_python", default=None,
                   help="python of SB3's virtualenv with sb3-contrib (without it: not run)")
    p.add_argument("--root_dir", default=None, help="keep the runs here (default: a temp dir)")
    p.add_argument("--timeout_s", type=float, default=3600.0)
    return p.parse_args(argv)


def alf_run(gin_file: str, params: List[str], root: str, threshold: Optional[float],
            timeout_s: float) -> Dict[str, Any]:
    """Train until the threshold (None: the whole budget); the run's figures."""
    def reached(rows) -> bool:
        return threshold is not None and any(
            (r.get("episode_return") or 0) >= threshold for r in rows)

    benchlib.run_train([gin_file], params, root, timeout_s=timeout_s, stop_when=reached,
                       poll_s=1.0)
    rows = benchlib.read_metrics(os.path.join(root, "metrics.jsonl"))
    hit = next((r for r in rows if threshold is not None
                and (r.get("episode_return") or 0) >= threshold), None)
    returns = [r["episode_return"] for r in rows if r.get("episode_return") is not None]
    last = rows[-1]
    return {"steps_to_threshold": hit["env_steps"] if hit else None,
            "seconds_to_threshold": hit["wall_time"] if hit else None,
            "final_return": last.get("episode_return"), "best_return": max(returns),
            "env_steps": last["env_steps"],
            "env_steps_per_s": last["env_steps"] / last["wall_time"]}


def sb3_run(python: str, seed: int, steps: int, threshold: float,
            timeout_s: float) -> Dict[str, Any]:
    cmd = [python, PEER, "--steps", str(steps), "--seed", str(seed),
           "--threshold", str(threshold)]
    out = children.run_peer_json(cmd, timeout_s=timeout_s)
    curve = out.pop("curve")
    out["final_return"] = curve[-1][2] if curve else None
    return out


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    root = args.root_dir or tempfile.mkdtemp(prefix="alf_recurrent_")
    result: Dict[str, Any] = {"bench": "recurrent_cartpole", "threshold": args.threshold,
                              "steps_budget": args.steps, "machine": benchlib.machine_info(),
                              "runs": {"sync": [], "async": [], "sb3": []}}
    for seed in args.seeds:
        params = [f"Trainer.num_env_steps={args.steps}", f"Trainer.seed={seed}"]
        for mode, gin_file in CONFIGS.items():
            run = alf_run(gin_file, params, os.path.join(root, f"{mode}_{seed}"),
                          args.threshold, args.timeout_s)
            result["runs"][mode].append(dict(run, seed=seed))
            logger.info("%s seed %d: %s", mode, seed, run)
        if args.sb3_python:
            run = sb3_run(args.sb3_python, seed, args.steps, args.threshold, args.timeout_s)
            result["runs"]["sb3"].append(run)
            logger.info("sb3 seed %d: %s", seed, run)
        if seed == args.seeds[0]:
            ff = alf_run(CONFIGS["sync"], [f"Trainer.num_env_steps={args.ff_steps}",
                                           f"Trainer.seed={seed}"] + FEED_FORWARD,
                         os.path.join(root, f"feed_forward_{seed}"), None, args.timeout_s)
            result["feed_forward"] = ff
    result["median"] = {}
    for mode, runs in result["runs"].items():
        if not runs:
            continue
        steps = [r["steps_to_threshold"] for r in runs]
        secs = [r["seconds_to_threshold"] for r in runs]
        result["median"][mode] = {
            "steps_to_threshold": benchlib.median(steps) if None not in steps else None,
            "seconds_to_threshold": benchlib.median(secs) if None not in secs else None,
            "reached": sum(s is not None for s in steps), "of": len(steps)}
    sync_rate = benchlib.median(r["env_steps_per_s"] for r in result["runs"]["sync"])
    result["lstm_cost"] = result["feed_forward"]["env_steps_per_s"] / sync_rate
    lines = ["| run | seed | env steps to threshold | seconds | final return |",
             "|---|---:|---:|---:|---:|"]
    for mode, runs in result["runs"].items():
        for r in runs:
            lines.append(f"| {mode} | {r['seed']} | {r['steps_to_threshold']} | "
                         f"{r['seconds_to_threshold'] if r['seconds_to_threshold'] is None else round(r['seconds_to_threshold'], 1)} | "
                         f"{r['final_return']:.1f} |")
    print("\n".join(lines), file=sys.stderr)
    benchlib.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Throughput on the PyBullet suite against Stable-Baselines3 PPO with the zoo's settings.

For each env of bench/suite.py (HalfCheetah, Ant, Hopper, Walker2D), back to
back on this machine: alf_async's shipped sync and async configs
(``ppo_bullet_<env>.gin``, ``async_ppo_bullet_<env>.gin``) and SB3's PPO with the
rl-baselines3-zoo's hyperparameters (``peers/sb3_ppo.py``, in SB3's own
virtualenv given by ``--sb3_python``), ``--env_steps`` env steps each (100k).
Each rate is env steps over training time (alf_async: the training loop's
``wall_time``; SB3: ``model.learn``), start-up excluded. SB3's time for the zoo's
2M env steps at that rate is what bench/suite.py's time to the zoo's score is
set against.

Output: one JSON line {"bench": "suite_throughput", "envs": {env: {"sync",
"async", "sb3": env steps/s, "async_x_sb3", "sb3_2M_s"}}} and a markdown table on
stderr.

Full size:  python -m bench.suite_throughput --sb3_python /tmp/peers/sb3/bin/python
Smoke run:  python -m bench.suite_throughput --envs hopper --env_steps 8192
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib, children
from bench.suite import gin_file
from bench.suite_report import ZOO_PPO_SCORES

logger = logging.getLogger("bench")
SB3_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "sb3_ppo.py")
ZOO_BUDGET = 2_000_000


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default=",".join(ZOO_PPO_SCORES))
    p.add_argument("--env_steps", type=int, default=100_000)
    p.add_argument("--sb3_python", default=None,
                   help="python of SB3's virtualenv (without it SB3 is not run)")
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=1800.0)
    args = p.parse_args(argv)
    args.envs = [e for e in args.envs.replace(" ", "").split(",") if e]
    unknown = [e for e in args.envs if e not in ZOO_PPO_SCORES]
    if unknown:
        p.error(f"unknown env(s) {unknown}; known: {', '.join(ZOO_PPO_SCORES)}")
    return args


def run_alf(env: str, mode: str, args: argparse.Namespace) -> float:
    """Env steps/s of alf_async's shipped config over its training loop."""
    run = benchlib.RunDir(args.root_dir, f"throughput_{env}_{mode}", args.keep)
    params = [f"Trainer.num_env_steps={args.env_steps}",
              "Trainer.checkpoint_interval=100000", *args.gin_param]
    try:
        status = benchlib.run_train([gin_file(env, mode)], params, run.path, args.timeout_s)
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if status["returncode"] != 0 or not rows:
        raise RuntimeError(f"{env} {mode}: the run failed (exit {status['returncode']})")
    return rows[-1]["env_steps"] / rows[-1]["wall_time"]


def run_sb3(env: str, args: argparse.Namespace) -> Dict[str, Any]:
    env_id, _ = ZOO_PPO_SCORES[env]
    cmd = [args.sb3_python, SB3_SCRIPT, "--env", env_id, "--steps", str(args.env_steps)]
    return children.run_peer_json(cmd, timeout_s=args.timeout_s)


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    envs: Dict[str, Dict[str, Any]] = {}
    for env in args.envs:
        entry: Dict[str, Any] = {"sync": run_alf(env, "sync", args),
                                 "async": run_alf(env, "async", args)}
        if args.sb3_python:
            sb3 = run_sb3(env, args)
            entry.update(sb3=sb3["env_steps_per_s"], sb3_update_s=sb3["update_s"],
                         sb3_rollout_s=sb3["rollout_s"],
                         async_x_sb3=entry["async"] / sb3["env_steps_per_s"],
                         sync_x_sb3=entry["sync"] / sb3["env_steps_per_s"],
                         sb3_2M_s=ZOO_BUDGET / sb3["env_steps_per_s"])
        envs[env] = entry
        logger.info("%s: %s", env, entry)
    lines = ["| env | alf_async sync | alf_async async | SB3 (zoo settings) | async / SB3 "
             "| SB3's time for 2M steps |", "|---|---:|---:|---:|---:|---:|"]
    for env, e in envs.items():
        sb3 = (f"{e['sb3']:.0f} | {e['async_x_sb3']:.2f} | {e['sb3_2M_s'] / 60:.0f} min"
               if "sb3" in e else "- | - | -")
        lines.append(f"| {ZOO_PPO_SCORES[env][0]} | {e['sync']:.0f} | {e['async']:.0f} | {sb3} |")
    print("\n".join(lines) + "\n(env steps/s over training time, start-up excluded)",
          file=sys.stderr)
    benchlib.emit({"bench": "suite_throughput", "env_steps": args.env_steps, "envs": envs,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

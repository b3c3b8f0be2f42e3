"""End-to-end throughput of a shipped sync/async config pair (HalfCheetah or
the humanoid) against Sample Factory and Stable-Baselines3, back to back, with
the machine's raw limit measured in the same run.

In one sitting (``--env half_cheetah``, the default): the raw two-process limit
(16 envs stepped by 2 processes at once, random actions, no policy:
``raw_env.measure_raw_env_processes``), then alf_async's shipped sync config
(``ppo_bullet_half_cheetah.gin``, "auto" env workers and splits) and Sample
Factory's sync mode, alf_async's async config (``async_ppo_bullet_half_cheetah.gin``,
N = 2) and Sample Factory's async mode (``peers/sf_ppo.py`` in Sample Factory's
own virtualenv, ``--sf_python``; 2 workers x 8 envs, its MuJoCo settings), then
SB3's PPO with the rl-baselines3-zoo's HalfCheetah settings (``peers/sb3_ppo.py``
in SB3's own virtualenv, ``--sb3_python``; 16 envs in subprocesses, (256, 256)
networks, 20 epochs of minibatches of 128, gSDE), ``--env_steps`` each,
``--repeats`` times, and the raw limit again at the end. SB3 has no async mode:
its one rate is set against both of alf_async's.

``--env humanoid``: the same with ``ppo_bullet_humanoid.gin`` and
``async_ppo_bullet_humanoid.gin`` (K = 96 envs per actor, unroll 512: 192 envs
in the async file's two actors, as HalfCheetah's async file steps 2 x 16), Sample
Factory on 96 envs (2 workers x 48, its MuJoCo settings with 6
minibatches of 1024 per epoch, so that its sync mode trains on one rollout of
every env per iteration as its MuJoCo settings do, and without its start-up
staggering of the envs by random steps, minutes with 48 envs a worker) and the raw
limit of 96 envs over 2 processes. The zoo has no PPO settings for the PyBullet
humanoid, so SB3 is not run there (``--sb3_python`` is refused). ``--env_steps``
should then be a multiple of 96 x 512 = 49152 (one sync iteration) and of Sample
Factory's batch of 1024, e.g. 294912 (6 iterations).

Each rate is env steps over the training loop (alf_async: the last metrics
row's ``wall_time``, the loop from the first unroll on; Sample Factory:
``runner.run()``; SB3: ``model.learn``): start-up excluded. ``alf_setup_exit_s`` is the rest of the
train command's process wall time (start-up until every actor is ready, the
first unroll's start, and shutdown), ``sf_setup_exit_s`` Sample Factory's
set-up and exit around its loop. The actor's unroll rate of the sync run
(``sync_unroll_steps_per_s``: K x T / actor_unroll_s, the median iteration)
is set against the raw limit (``sync_unroll_limit_fraction``).

Output: one JSON line {"bench": "peer_throughput", "env", "configs", "limit_steps_per_s",
"runs": [...], "median": {"alf_sync", "sf_sync", "alf_async", "sf_async", "sb3",
"sync_x_sf", "async_x_sf", "sync_x_sb3", "async_x_sb3",
"sync_unroll_limit_fraction"}} and a markdown table on stderr.

Full size:  python -m bench.peer_throughput --sf_python /tmp/peers/sf/bin/python \
                --sb3_python /tmp/peers/sb3/bin/python
Humanoid:   python -m bench.peer_throughput --env humanoid --env_steps 294912 \
                --sf_python /tmp/peers/sf/bin/python
Smoke run:  python -m bench.peer_throughput --env_steps 8192 --repeats 1
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib, children, raw_env

logger = logging.getLogger("bench")
SF_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "sf_ppo.py")
SB3_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "sb3_ppo.py")
# Per ``--env``: the gymnasium id, the shipped config pair, the envs each
# library steps (alf_async's K; Sample Factory splits them over 2 workers), and
# whether the rl-baselines3-zoo has PPO settings for it (bench/peers/sb3_ppo.py);
# sf_batches_per_epoch: Sample Factory's minibatches of 1024 per epoch where its
# sync mode needs another value than its MuJoCo 4 (None: its 4) (one rollout of 64 steps of
# every env per iteration: 96 x 64 = 6 x 1024); sf_decorrelate: whether Sample
# Factory staggers its envs with random steps before the first rollout (its
# default; off for 48 envs a worker, where it is minutes of start-up).
PAIRS: Dict[str, Dict[str, Any]] = {
    "half_cheetah": {"env": "HalfCheetahBulletEnv-v0", "num_envs": 16, "sb3": True,
                     "sf_batches_per_epoch": None, "sf_decorrelate": True,
                     "configs": {"sync": "ppo_bullet_half_cheetah.gin",
                                 "async": "async_ppo_bullet_half_cheetah.gin"}},
    "humanoid": {"env": "HumanoidBulletEnv-v0", "num_envs": 96, "sb3": False,
                 "sf_batches_per_epoch": 6, "sf_decorrelate": False,
                 "configs": {"sync": "ppo_bullet_humanoid.gin",
                             "async": "async_ppo_bullet_humanoid.gin"}},
}
SF_WORKERS = 2


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=sorted(PAIRS), default="half_cheetah",
                   help="which shipped sync/async pair (and env) to measure")
    p.add_argument("--env_steps", type=int, default=98304,
                   help="env steps per run (a multiple of both libraries' batches)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sf_python", default=None,
                   help="python of Sample Factory's virtualenv (without it SF is not run)")
    p.add_argument("--sb3_python", default=None,
                   help="python of SB3's virtualenv (without it SB3 is not run)")
    p.add_argument("--limit_steps", type=int, default=1024,
                   help="steps per env of each raw-limit measurement")
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=1200.0)
    args = p.parse_args(argv)
    if args.sb3_python and not PAIRS[args.env]["sb3"]:
        p.error(f"--sb3_python: the rl-baselines3-zoo has no PPO settings for --env {args.env} "
                f"({PAIRS[args.env]['env']}); SB3 is measured only with --env half_cheetah")
    return args


def run_alf(mode: str, index: int, args: argparse.Namespace) -> Dict[str, Any]:
    run = benchlib.RunDir(args.root_dir, f"peer_{mode}_{index}", args.keep)
    params = [f"Trainer.num_env_steps={args.env_steps}", "Trainer.checkpoint_interval=100000",
              *args.gin_param]
    try:
        status = benchlib.run_train([PAIRS[args.env]["configs"][mode]], params, run.path, args.timeout_s)
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if status["returncode"] != 0 or not rows:
        raise RuntimeError(f"alf_async {mode}: the run failed (exit {status['returncode']})")
    last = rows[-1]
    unroll = [r["num_envs"] * r["unroll_length"] / r["actor_unroll_s"] for r in rows[1:]]
    return {"env_steps_per_s": last["env_steps"] / last["wall_time"],
            "setup_exit_s": status["wall_s"] - last["wall_time"],
            "unroll_steps_per_s": benchlib.median(unroll) if unroll else None}


def run_sf(mode: str, args: argparse.Namespace) -> Dict[str, Any]:
    pair = PAIRS[args.env]
    cmd = [args.sf_python, SF_SCRIPT, "--env", pair["env"], "--steps", str(args.env_steps),
           "--async_rl", "1" if mode == "async" else "0", "--num_workers", str(SF_WORKERS),
           "--envs_per_worker", str(pair["num_envs"] // SF_WORKERS)]
    if not pair["sf_decorrelate"]:
        cmd += ["--decorrelate_envs", "0"]
    if pair["sf_batches_per_epoch"] is not None:
        cmd += ["--num_batches_per_epoch", str(pair["sf_batches_per_epoch"])]
    return children.run_peer_json(cmd, timeout_s=args.timeout_s, quiet=True)


def run_sb3(args: argparse.Namespace) -> Dict[str, Any]:
    cmd = [args.sb3_python, SB3_SCRIPT, "--env", PAIRS[args.env]["env"],
           "--steps", str(args.env_steps)]
    return children.run_peer_json(cmd, timeout_s=args.timeout_s, quiet=True)


def measure_limit(args: argparse.Namespace) -> float:
    pair = PAIRS[args.env]
    return raw_env.measure_raw_env_processes(pair["env"], pair["num_envs"], SF_WORKERS,
                                             args.limit_steps, seed=1)["steps_per_s"]


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    limits = [measure_limit(args)]
    runs = []
    for index in range(args.repeats):
        run: Dict[str, Any] = {}
        for mode in ("sync", "async"):
            alf = run_alf(mode, index, args)
            run[f"alf_{mode}"] = alf["env_steps_per_s"]
            run[f"alf_{mode}_setup_exit_s"] = alf["setup_exit_s"]
            if mode == "sync":
                run["sync_unroll_steps_per_s"] = alf["unroll_steps_per_s"]
            if args.sf_python:
                sf = run_sf(mode, args)
                run[f"sf_{mode}"] = sf["env_steps_per_s"]
                run[f"sf_{mode}_setup_exit_s"] = sf["setup_s"] + sf["exit_s"]
            logger.info("repeat %d %s: %s", index, mode, run)
        if args.sb3_python:
            sb3 = run_sb3(args)
            run["sb3"] = sb3["env_steps_per_s"]
            run["sb3_setup_exit_s"] = sb3["setup_s"]
            logger.info("repeat %d sb3: %s", index, run["sb3"])
        limits.append(measure_limit(args))
        runs.append(run)
    limit = benchlib.mean(limits)
    median = {k: benchlib.median(r[k] for r in runs) for k in runs[0]}
    median["sync_unroll_limit_fraction"] = median["sync_unroll_steps_per_s"] / limit
    if args.sf_python:
        median["sync_x_sf"] = benchlib.median(r["alf_sync"] / r["sf_sync"] for r in runs)
        median["async_x_sf"] = benchlib.median(r["alf_async"] / r["sf_async"] for r in runs)
    if args.sb3_python:
        for mode in ("sync", "async"):
            median[f"{mode}_x_sb3"] = benchlib.median(r[f"alf_{mode}"] / r["sb3"] for r in runs)
    lines = ["| run | env steps/s (median) | x Sample Factory | x SB3 | set-up + exit (s) |",
             "|---|---:|---:|---:|---:|"]
    for mode in ("sync", "async"):
        ratio = f"{median[f'{mode}_x_sf']:.2f}" if args.sf_python else "-"
        to_sb3 = f"{median[f'{mode}_x_sb3']:.2f}" if args.sb3_python else "-"
        lines.append(f"| alf_async {mode} | {median[f'alf_{mode}']:.0f} | {ratio} | {to_sb3} "
                     f"| {median[f'alf_{mode}_setup_exit_s']:.1f} |")
        if args.sf_python:
            lines.append(f"| Sample Factory {mode} | {median[f'sf_{mode}']:.0f} | 1.00 | - "
                         f"| {median[f'sf_{mode}_setup_exit_s']:.1f} |")
    if args.sb3_python:
        lines.append(f"| SB3 (zoo settings) | {median['sb3']:.0f} | - | 1.00 "
                     f"| {median['sb3_setup_exit_s']:.1f} |")
    envs_per_process = PAIRS[args.env]["num_envs"] // SF_WORKERS
    print("\n".join(lines) + f"\n(raw limit, {SF_WORKERS} processes x {envs_per_process} envs: "
          f"{limit:.0f} env steps/s; "
          f"sync unroll {median['sync_unroll_steps_per_s']:.0f} = "
          f"{median['sync_unroll_limit_fraction']:.2f} of it)", file=sys.stderr)
    benchlib.emit({"bench": "peer_throughput", "env": PAIRS[args.env]["env"],
                   "configs": PAIRS[args.env]["configs"], "env_steps": args.env_steps,
                   "limit_steps_per_s": limit, "limits": limits, "runs": runs,
                   "median": median, **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

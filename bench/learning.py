"""Learning check: does a config reach a target return, and how fast?

Runs the train command on a gin config (default: the demo
ppo_bullet_inverted_pendulum.gin) and reads its metrics.jsonl. The return
tracked is the metrics file's ``episode_return``: the mean return of the last
100 finished episodes (MetricsRecorder.return_window) at each training
iteration. Reported:

- steps_to_threshold / wall_s_to_threshold: env steps and trainer wall time
  (metrics ``wall_time``, seconds since the training loop started, start-up
  excluded) at the first iteration whose mean return is >= ``--threshold``;
  null if never reached;
- final_return, best_return, total env steps, iterations and wall time;
- pass: the threshold was reached (within ``--max_env_steps`` if given).

The default threshold depends on the env of the config: 950 for
InvertedPendulumBulletEnv-v0 (maximum 1000), 1000 for HalfCheetahBulletEnv-v0
(a random policy scores about -1360), 475 for CartPole-v1 (maximum 500, the
solved mark); other envs need ``--threshold``.

``--stop_at_threshold`` stops the run (SIGTERM: final checkpoint, clean exit) as
soon as the threshold is reached, to save time. ``--metrics PATH`` analyses an
existing metrics.jsonl instead of training (nothing is run).

Wall time depends on the machine and its load; steps do not (for a fixed seed,
up to nondeterminism of parallel float reductions).

Output: one JSON line {"bench": "learning", "threshold": ..., "steps_to_threshold":
..., "wall_s_to_threshold": ..., "final_return": ..., "pass": ...}.

Full size:  python -m bench.learning                                   (pendulum, ~1-3 min)
            python -m bench.learning --gin_file ppo_cartpole.gin         (discrete, ~1 min)
            python -m bench.learning --gin_file async_ppo_cartpole.gin
            python -m bench.learning --gin_file ppo_bullet_half_cheetah.gin   (15-30 min)
Smoke run:  python -m bench.learning --max_env_steps 8192
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Any, Dict, List, Optional


from bench import benchlib

logger = logging.getLogger("bench")

DEFAULT_THRESHOLDS = {
    "InvertedPendulumBulletEnv-v0": 950.0,
    "HalfCheetahBulletEnv-v0": 1000.0,
    "CartPole-v1": 475.0,
}


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gin_file", default="ppo_bullet_inverted_pendulum.gin")
    p.add_argument("--threshold", type=float, default=None,
                   help="target mean return (default: per env, see above)")
    p.add_argument("--max_env_steps", type=int, default=None,
                   help="override the config's budget Trainer.num_env_steps")
    p.add_argument("--stop_at_threshold", action="store_true",
                   help="stop the run once the threshold is reached")
    p.add_argument("--metrics", default=None,
                   help="analyse this metrics.jsonl instead of training")
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=4 * 3600.0)
    return p.parse_args(argv)


def first_reaching(rows: List[Dict[str, Any]], threshold: float) -> Optional[Dict[str, Any]]:
    for r in rows:
        ret = r.get("episode_return")
        if ret is not None and math.isfinite(ret) and ret >= threshold:
            return r
    return None


def analyse(rows: List[Dict[str, Any]], threshold: float,
            max_env_steps: Optional[int]) -> Dict[str, Any]:
    hit = first_reaching(rows, threshold)
    returns = [r["episode_return"] for r in rows if r.get("episode_return") is not None]
    last = rows[-1] if rows else {}
    reached = hit is not None and (max_env_steps is None or hit["env_steps"] <= max_env_steps)
    return {
        "threshold": threshold,
        "steps_to_threshold": hit["env_steps"] if hit else None,
        "wall_s_to_threshold": hit["wall_time"] if hit else None,
        "iteration_at_threshold": hit["iteration"] if hit else None,
        "final_return": last.get("episode_return"),
        "best_return": max(returns) if returns else None,
        "total_env_steps": last.get("env_steps", 0),
        "total_iterations": last.get("iteration", 0),
        "total_wall_s": last.get("wall_time", 0.0),
        "total_episodes": last.get("episodes", 0),
        "pass": reached,
    }


def main(argv: List[str] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    result: Dict[str, Any] = {"bench": "learning"}
    if args.metrics:
        rows = benchlib.read_metrics(args.metrics)
        if not rows:
            raise SystemExit(f"no metrics rows in {args.metrics}")
        config_dir = os.path.dirname(os.path.abspath(args.metrics))
        env_name = None
        config = os.path.join(config_dir, "config.gin")
        if os.path.isfile(config):
            env_name = benchlib.config_value(config, [], "Trainer.env_name")
        result.update({"metrics": os.path.abspath(args.metrics), "env": env_name})
        status = None
    else:
        params = list(args.gin_param)
        if args.max_env_steps:
            params.append(f"Trainer.num_env_steps={args.max_env_steps}")
        env_name = benchlib.config_value(args.gin_file, params, "Trainer.env_name")
        result.update({"gin_file": args.gin_file, "gin_params": params, "env": env_name})
    threshold = args.threshold
    if threshold is None:
        if env_name not in DEFAULT_THRESHOLDS:
            raise SystemExit(f"no default threshold for {env_name}; pass --threshold")
        threshold = DEFAULT_THRESHOLDS[env_name]
    if not args.metrics:
        run = benchlib.RunDir(args.root_dir, "learning", args.keep)
        metrics_path = os.path.join(run.path, "metrics.jsonl")
        stop_when = ((lambda rows: first_reaching(rows, threshold) is not None)
                     if args.stop_at_threshold else None)
        try:
            status = benchlib.run_train([args.gin_file], params, run.path, args.timeout_s,
                                        stop_when=stop_when)
            rows = benchlib.read_metrics(metrics_path)
        finally:
            run.cleanup()
        result["root_dir"] = run.path if run.keep else None
        result["returncode"] = status["returncode"]
        result["process_wall_s"] = status["wall_s"]
        result["stopped_at_threshold"] = status["stopped_early"]
        if not rows:
            raise SystemExit(f"the run wrote no metrics (exit {status['returncode']})")
    result.update(analyse(rows, threshold, args.max_env_steps))
    result.update(benchlib.machine_info())
    logger.info("threshold %.0f: %s", threshold,
                f"reached at {result['steps_to_threshold']} env steps, "
                f"{result['wall_s_to_threshold']:.0f} s" if result["pass"] else "not reached")
    benchlib.emit(result)
    return 0 if status is None or status["returncode"] in (0, 143) else 1


if __name__ == "__main__":
    sys.exit(main())

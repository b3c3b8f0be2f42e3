"""Start-up and shutdown time of the train command.

Runs ``python -m alf_async.bin.train`` ``--repeats`` times with a budget of one
training iteration and short unrolls, and reads each run's metrics.jsonl:

- startup_s: seconds from the launch of the train process until every actor was
  ready to unroll (the ``startup_s`` the trainer writes on its first metrics
  row): interpreter and imports, config, learner, actor processes, env workers
  and their envs, the envs' first reset;
- loop_s: the training loop (one unroll and one training iteration);
- shutdown_s = process wall time - startup_s - loop_s: final checkpoint, actors
  and env workers stopped, shared memory released, interpreter exit;
- process_wall_s: the whole command, as a user times it.

Medians over the repeats are reported with the per-run values. Default: the
HalfCheetah config with W = 2 env workers (``--gin_param`` changes it).

Output: one JSON line {"bench": "startup", "startup_s": ..., "shutdown_s": ...,
"startup_plus_shutdown_s": ..., "runs": [...]}.

Full size:  python -m bench.startup
            python -m bench.startup --gin_param Trainer.num_actors=2
Smoke run:  python -m bench.startup --repeats 1
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, List, Optional

from bench import benchlib

logger = logging.getLogger("bench")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gin_file", default="ppo_bullet_half_cheetah.gin")
    p.add_argument("--num_env_workers", type=int, default=2, help="W")
    p.add_argument("--repeats", type=int, default=3)
    benchlib.add_common_train_args(p)
    p.set_defaults(timeout_s=300.0)
    return p.parse_args(argv)


def one_run(args: argparse.Namespace, index: int) -> Dict[str, Any]:
    params = [f"Trainer.num_env_workers={args.num_env_workers}", "Trainer.num_iterations=1",
              "Trainer.num_env_steps=0", "Trainer.unroll_length=16",
              "PPOLearner.mini_batch_size=64", "PPOLearner.num_epochs=1",
              *args.gin_param]
    run = benchlib.RunDir(args.root_dir, f"startup_{index}", args.keep)
    try:
        status = benchlib.run_train([args.gin_file], params, run.path, args.timeout_s,
                                    poll_s=0.2)
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if status["returncode"] != 0 or not rows:
        raise RuntimeError(f"start-up run {index} failed (exit {status['returncode']})")
    startup = rows[0].get("startup_s")
    loop = rows[-1]["wall_time"]
    return {"startup_s": startup, "loop_s": loop, "process_wall_s": status["wall_s"],
            "shutdown_s": status["wall_s"] - startup - loop}


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    runs = [one_run(args, i) for i in range(args.repeats)]
    for r in runs:
        logger.info("start-up %.2f s, loop %.2f s, shutdown %.2f s, whole command %.2f s",
                    r["startup_s"], r["loop_s"], r["shutdown_s"], r["process_wall_s"])
    startup = benchlib.median(r["startup_s"] for r in runs)
    shutdown = benchlib.median(r["shutdown_s"] for r in runs)
    benchlib.emit({"bench": "startup", "gin_file": args.gin_file,
                   "num_env_workers": args.num_env_workers, "gin_params": args.gin_param,
                   "startup_s": startup, "shutdown_s": shutdown,
                   "startup_plus_shutdown_s": startup + shutdown,
                   "process_wall_s": benchlib.median(r["process_wall_s"] for r in runs),
                   "runs": runs, **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

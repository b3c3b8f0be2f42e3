"""Fault injection: do runs survive a child process killed at a random time?

``--runs`` times, start the train command on the demo pendulum config with a
short budget (``--iterations`` training iterations), N = ``--num_actors`` actors
with ``--num_env_workers`` env-worker processes each (>= 1, so that workers exist
to be killed). At a random moment of the training (when the run has finished
a randomly drawn iteration in the ``--kill_window`` fraction of the budget, plus a
random delay of up to ``--max_jitter_s``, so that the kill also lands inside
unrolls and training steps), SIGKILL one process drawn at random: an actor or an
env worker (the role is drawn first, then the process). A killed actor
must be restarted by the trainer (``actor_restarts``), a killed env worker by its
actor (counted as ``env_failures``).

A run counts as finished when it exits with status 0 and its last metrics line
is the budget's iteration. The report gives how many finished, the restarts and
env failures seen, per-run wall times, and whether any process or shared-memory
block of a run was left behind. Target: every run finishes.

    python -m bench.fault_injection               # 10 runs
    python -m bench.fault_injection --runs 2      # smoke run

stdout: exactly one JSON line with the figures; logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import psutil

from alf_async.reporting.run_metrics import read_metrics

from bench import benchlib
from bench.children import DescendantWatch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
logger = logging.getLogger("fault_injection")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--iterations", type=int, default=20,
                   help="training iterations of each run (the short budget)")
    p.add_argument("--gin_file", default="ppo_bullet_inverted_pendulum.gin")
    p.add_argument("--num_actors", type=int, default=2)
    p.add_argument("--num_env_workers", type=int, default=2,
                   help="env-worker processes per actor (>= 1)")
    p.add_argument("--kill_window", default="0.05,0.7",
                   help="the kill comes after an iteration drawn uniformly in this "
                        "fraction range of the budget")
    p.add_argument("--max_jitter_s", type=float, default=1.0,
                   help="random extra delay after that iteration")
    p.add_argument("--roles", default="actor,env_worker",
                   help="comma-separated roles the victim is drawn from")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the random choices (default: from the clock)")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra gin binding for every run (repeatable)")
    p.add_argument("--timeout_s", type=float, default=600.0,
                   help="a run still going after this long counts as hung and is killed")
    p.add_argument("--root_dir", default=None,
                   help="keep the run directories here (default: temporary, removed)")
    args = p.parse_args(argv)
    if args.num_env_workers < 1 and "env_worker" in args.roles:
        p.error("--num_env_workers must be >= 1 to kill env workers")
    return args


def find_processes(trainer_pid: int) -> Dict[str, List[psutil.Process]]:
    found = benchlib.run_processes(trainer_pid)
    return {"actor": found["actors"], "env_worker": found["env_workers"]}


def one_run(index: int, args: argparse.Namespace, rng: random.Random, base: str) -> Dict:
    root = os.path.join(base, f"run{index}")
    cmd = [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root}",
           f"--gin_file={args.gin_file}",
           f"--gin_param=Trainer.num_actors={args.num_actors}",
           f"--gin_param=Trainer.num_env_workers={args.num_env_workers}",
           "--gin_param=Trainer.num_env_steps=0",
           f"--gin_param=Trainer.num_iterations={args.iterations}",
           f"--gin_param=Trainer.seed={rng.randrange(2 ** 31)}"]
    cmd += [f"--gin_param={p}" for p in args.gin_param]
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    roles = [r for r in args.roles.split(",") if r]
    role = rng.choice(roles)
    low, high = (float(x) for x in args.kill_window.split(","))
    after_iteration = max(1, int(round(rng.uniform(low, high) * args.iterations)))
    delay = rng.uniform(0.0, args.max_jitter_s)
    record: Dict = {"run": index, "target_role": role, "kill_after_iteration": after_iteration,
                    "kill_jitter_s": delay, "killed": False}
    logger.info("run %d: will SIGKILL a random %s %.2f s after iteration %d", index, role,
                delay, after_iteration)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=sys.stderr,
                            stderr=sys.stderr, start_new_session=True)
    watch = DescendantWatch(proc.pid)

    try:
        deadline = started + args.timeout_s
        kill_at = None
        while proc.poll() is None and time.monotonic() < deadline:
            watch.record()
            now = time.monotonic()
            if kill_at is None:
                rows = read_metrics(root)
                if rows and "training_started_s" not in record:
                    record["training_started_s"] = now - started
                if rows and rows[-1]["iteration"] >= after_iteration:
                    kill_at = now + delay
            if kill_at is not None and not record["killed"] and now >= kill_at:
                candidates = find_processes(proc.pid)[role]
                if candidates:
                    victim = rng.choice(candidates)
                    try:
                        victim.send_signal(signal.SIGKILL)
                        record.update(killed=True, target_pid=victim.pid,
                                      kill_at_s=now - started,
                                      iteration_at_kill=read_metrics(root)[-1]["iteration"])
                        logger.info("run %d: SIGKILLed %s pid %d at iteration %d", index,
                                    role, victim.pid, record["iteration_at_kill"])
                    except psutil.Error:
                        pass
            time.sleep(0.05)
        record["hung"] = proc.poll() is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    record["wall_s"] = time.monotonic() - started
    record["exit_status"] = proc.returncode
    rows = read_metrics(root)
    last = rows[-1] if rows else {}
    record["final_iteration"] = last.get("iteration", 0)
    record["actor_restarts"] = last.get("actor_restarts", 0)
    record["env_failures"] = last.get("env_failures", 0)
    record["finished"] = bool(proc.returncode == 0
                              and record["final_iteration"] == args.iterations)
    # Nothing of the run may remain.
    record["leftover_processes"] = watch.wait_gone()
    record["leftover_shm_blocks"] = watch.leftover_blocks()
    watch.kill_alive()  # do not let them disturb the next run
    logger.info("run %d: exit %s, iteration %d/%d, actor restarts %d, env failures %d, "
                "%.1f s", index, proc.returncode, record["final_iteration"], args.iterations,
                record["actor_restarts"], record["env_failures"], record["wall_s"])
    return record


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s [fault_injection] %(message)s", datefmt="%H:%M:%S")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    base = args.root_dir or tempfile.mkdtemp(prefix="alf_async_faults_")
    os.makedirs(base, exist_ok=True)
    runs = []
    try:
        for i in range(args.runs):
            runs.append(one_run(i, args, rng, base))
    finally:
        if args.root_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    walls = [r["wall_s"] for r in runs]
    finished = sum(r["finished"] for r in runs)
    result = {
        "bench": "fault_injection", "seed": seed, "runs": len(runs),
        "iterations_budget": args.iterations, "num_actors": args.num_actors,
        "num_env_workers": args.num_env_workers, "gin_file": args.gin_file,
        "finished": finished, "all_finished": finished == len(runs),
        "kills": sum(r["killed"] for r in runs),
        "kills_by_role": {role: sum(r["killed"] and r["target_role"] == role for r in runs)
                          for role in sorted({r["target_role"] for r in runs})},
        "actor_restarts_seen": sum(r["actor_restarts"] for r in runs),
        "env_failures_seen": sum(r["env_failures"] for r in runs),
        "runs_with_leftovers": sum(bool(r["leftover_processes"] or r["leftover_shm_blocks"])
                                   for r in runs),
        "hung": sum(r.get("hung", False) for r in runs),
        "wall_s_mean": sum(walls) / len(walls) if walls else None,
        "wall_s_max": max(walls) if walls else None,
        "per_run": runs,
    }
    benchlib.emit(result)
    return 0 if result["all_finished"] and not result["runs_with_leftovers"] else 1


if __name__ == "__main__":
    sys.exit(main())

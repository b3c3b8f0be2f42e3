"""Soak test: does a long asynchronous run leak memory or file descriptors?

Runs the train command (the demo pendulum config, N = 2 actors, each with
``--num_env_workers`` env-worker processes, with a budget too large to reach) for
``--minutes`` minutes. Every ``--sample_interval_s`` seconds it samples, with
psutil, the resident memory (RSS) and the number of open file descriptors of the
trainer, of each actor and of each env worker. The first sample taken after
``--warmup_minutes`` is the baseline (start-up, allocator pools and the first
checkpoints settle during the warm-up); growth is reported in percent of the
baseline for the last sample and as the maximum over the samples after the
baseline, per role (trainer / actors / env workers, summed over the processes of
the role) and for the whole run. The target is growth below ``--target_pct``
(5 %) everywhere.

At the end the run is stopped like a user does, with SIGINT (Ctrl-C to the
process group): it must write a final checkpoint, exit with 130 and leave no
process and no shared-memory block behind.

    python -m bench.soak                       # 20 minutes
    python -m bench.soak --minutes 2 --warmup_minutes 0.5 --sample_interval_s 15

stdout: exactly one JSON line with the figures; logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
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
logger = logging.getLogger("soak")
ROLES = ("trainer", "actors", "env_workers")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--minutes", type=float, default=20.0, help="length of the soak")
    p.add_argument("--sample_interval_s", type=float, default=60.0,
                   help="seconds between two samples")
    p.add_argument("--warmup_minutes", type=float, default=2.0,
                   help="the first sample after this is the baseline")
    p.add_argument("--gin_file", default="ppo_bullet_inverted_pendulum.gin")
    p.add_argument("--num_actors", type=int, default=2)
    p.add_argument("--num_env_workers", type=int, default=1,
                   help="env-worker processes per actor (0: envs in the actor)")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra gin binding (repeatable)")
    p.add_argument("--target_pct", type=float, default=5.0,
                   help="growth allowed after the warm-up, in percent")
    p.add_argument("--root_dir", default=None,
                   help="run directory (default: a temporary one, removed at the end)")
    p.add_argument("--stop_timeout_s", type=float, default=120.0,
                   help="time the run gets to stop after SIGINT")
    return p.parse_args(argv)


def processes_by_role(trainer_pid: int) -> Dict[str, List[psutil.Process]]:
    """The trainer, its actors and their env workers."""
    try:
        trainer = psutil.Process(trainer_pid)
    except psutil.Error:
        return {role: [] for role in ROLES}
    found = benchlib.run_processes(trainer_pid)
    return {"trainer": [trainer], "actors": found["actors"], "env_workers": found["env_workers"]}


def take_sample(trainer_pid: int, started: float) -> Dict:
    """RSS (MiB) and open fds of every process of the run, per role and in total."""
    sample: Dict = {"t_s": round(time.monotonic() - started, 1), "processes": {}}
    for role, procs in processes_by_role(trainer_pid).items():
        rss = fds = 0
        count = 0
        for p in procs:
            try:
                with p.oneshot():
                    r, f = p.memory_info().rss, p.num_fds()
            except psutil.Error:
                continue
            rss += r
            fds += f
            count += 1
            sample["processes"][str(p.pid)] = {"role": role, "rss_mib": r / 2 ** 20, "fds": f}
        sample[role] = {"rss_mib": rss / 2 ** 20, "fds": fds, "count": count}
    sample["total"] = {"rss_mib": sum(sample[r]["rss_mib"] for r in ROLES),
                       "fds": sum(sample[r]["fds"] for r in ROLES)}
    return sample


def growth_pct(base: float, value: float) -> float:
    return (value - base) / base * 100.0 if base else float("nan")


def summarize(samples: List[Dict], baseline_index: int) -> Dict:
    """Growth of RSS and fds per role and in total, from the baseline on."""
    base = samples[baseline_index]
    after = samples[baseline_index:]
    last = samples[-1]
    out = {}
    for key in ROLES + ("total",):
        entry = {}
        for metric in ("rss_mib", "fds"):
            b = base[key][metric]
            entry[f"{metric}_baseline"] = b
            entry[f"{metric}_final"] = last[key][metric]
            entry[f"{metric}_growth_pct"] = growth_pct(b, last[key][metric])
            entry[f"{metric}_max_growth_pct"] = max(growth_pct(b, s[key][metric])
                                                    for s in after)
        if key != "total":
            entry["count_baseline"] = base[key]["count"]
            entry["count_final"] = last[key]["count"]
        out[key] = entry
    # Processes alive at the baseline and at the end (an actor restart changes pids).
    per_process = {}
    for pid, b in base["processes"].items():
        if pid in last["processes"]:
            per_process[pid] = {
                "role": b["role"],
                "rss_growth_pct": growth_pct(b["rss_mib"], last["processes"][pid]["rss_mib"]),
                "fds_growth_pct": growth_pct(b["fds"], last["processes"][pid]["fds"])}
    out["per_process"] = per_process
    return out


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s [soak] %(message)s", datefmt="%H:%M:%S")
    tmp = None
    root = args.root_dir
    if root is None:
        tmp = tempfile.mkdtemp(prefix="alf_async_soak_")
        root = os.path.join(tmp, "run")
    cmd = [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root}",
           f"--gin_file={args.gin_file}",
           f"--gin_param=Trainer.num_actors={args.num_actors}",
           f"--gin_param=Trainer.num_env_workers={args.num_env_workers}",
           "--gin_param=Trainer.num_env_steps=1000000000000",
           "--gin_param=Trainer.num_iterations=0",
           "--gin_param=MetricsRecorder.console_interval_s=60"]
    cmd += [f"--gin_param={p}" for p in args.gin_param]
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    logger.info("running: %s", " ".join(cmd))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=sys.stderr,
                            stderr=sys.stderr, start_new_session=True)
    samples: List[Dict] = []
    watch = DescendantWatch(proc.pid)
    result: Dict = {"bench": "soak", "minutes": args.minutes,
                    "sample_interval_s": args.sample_interval_s,
                    "warmup_minutes": args.warmup_minutes, "num_actors": args.num_actors,
                    "num_env_workers": args.num_env_workers, "gin_file": args.gin_file,
                    "target_pct": args.target_pct}
    try:
        # Training starts with the first metrics line.
        while not read_metrics(root):
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended (exit {proc.returncode}) before training")
            time.sleep(0.5)
        t0 = time.monotonic()
        result["startup_s"] = t0 - started
        end = t0 + args.minutes * 60.0
        next_sample = t0
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended early (exit {proc.returncode})")
            now = time.monotonic()
            if now >= next_sample:
                sample = take_sample(proc.pid, t0)
                samples.append(sample)
                watch.record(sample["processes"])
                logger.info("t=%5.0fs RSS trainer %.0f MiB, actors %.0f MiB (%d), env workers "
                            "%.0f MiB (%d); fds %d", sample["t_s"],
                            sample["trainer"]["rss_mib"], sample["actors"]["rss_mib"],
                            sample["actors"]["count"], sample["env_workers"]["rss_mib"],
                            sample["env_workers"]["count"], sample["total"]["fds"])
                next_sample += args.sample_interval_s
            time.sleep(min(1.0, max(0.05, next_sample - time.monotonic())))
        samples.append(take_sample(proc.pid, t0))
        watch.record(samples[-1]["processes"])
        rows = read_metrics(root)

        # Stop like Ctrl-C does: SIGINT to the whole process group.
        logger.info("stopping the run with SIGINT")
        stop_sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=args.stop_timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        result["stop_s"] = time.monotonic() - stop_sent
        result["exit_status"] = rc
    except BaseException as e:
        result["error"] = f"{type(e).__name__}: {e}"
        rc = None
        rows = read_metrics(root)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Nothing of the run may remain.
    result["leftover_processes"] = watch.wait_gone()
    shm = result["leftover_shm_blocks"] = watch.leftover_blocks()
    result["clean_stop"] = (result.get("exit_status") == 130 and not result["leftover_processes"]
                            and not shm)
    ckpts = os.path.join(root, "checkpoints")
    result["final_checkpoint"] = bool(os.path.isdir(ckpts) and any(
        n.startswith("ckpt-") for n in os.listdir(ckpts)))
    if rows:
        result["iterations"] = rows[-1]["iteration"]
        result["env_steps"] = rows[-1]["env_steps"]
        result["actor_restarts"] = rows[-1].get("actor_restarts")
        result["env_failures"] = rows[-1].get("env_failures")
    result["num_samples"] = len(samples)
    if samples:
        warm = args.warmup_minutes * 60.0
        baseline = next((i for i, s in enumerate(samples) if s["t_s"] >= warm), None)
        if baseline is None or baseline == len(samples) - 1 and len(samples) > 1:
            logger.warning("no sample after a warm-up of %.1f min before the end: using "
                           "the first sample as the baseline", args.warmup_minutes)
            baseline = 0
        result["baseline_t_s"] = samples[baseline]["t_s"]
        result["final_t_s"] = samples[-1]["t_s"]
        result["growth"] = summarize(samples, baseline)
        worst = max(result["growth"][k][f"{m}_growth_pct"]
                    for k in ("trainer", "actors", "env_workers", "total")
                    for m in ("rss_mib", "fds")
                    if result["growth"][k][f"{m}_baseline"])
        result["worst_growth_pct"] = worst
        result["rss_total_growth_pct"] = result["growth"]["total"]["rss_mib_growth_pct"]
        result["fds_total_growth_pct"] = result["growth"]["total"]["fds_growth_pct"]
        result["within_target"] = bool(worst < args.target_pct)
        result["samples"] = [{"t_s": s["t_s"], **{r: s[r] for r in ROLES},
                              "total": s["total"]} for s in samples]
    result["passed"] = bool(result.get("within_target") and result["clean_stop"]
                            and "error" not in result)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    benchlib.emit(result)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Soak: a shipped async config trained for hours while faults arrive every few
minutes. Does the run survive them, reach its budget, lose at most one
checkpoint interval per trainer restart, and keep memory, file descriptors,
threads, shared memory and processes flat?

Trains ``--gin_file`` (default: async_ppo_bullet_half_cheetah.gin, N = 2
actors, with ``--num_env_workers`` env workers each so that env workers exist
to be killed) with the train command, on an env that raises on demand
(``AlfAsyncOnDemandFault/<the config's env>``, the same env with a trigger
file: alf_async/envs/fault_injection.py). The soak's plan counts from the
run's first metrics row (its start-up is left out); the budget is sized so
that the run ends at it about ``--minutes`` after that: ``--num_env_steps``, or
``--env_steps_per_s`` x the soak's seconds x ``--busy_fraction``, the rate
measured by a fault-free calibration run of ``--calibration_s`` seconds unless
given. Every ``--fault_interval_minutes`` one fault of the ``--faults``
rotation is injected (bench/soak_faults.py: SIGKILL an actor, SIGKILL an env
worker, SIGSTOP an actor for ``--stop_s`` s, SIGTERM the trainer, an env step
that raises, SIGKILL the trainer; a stopped trainer is resumed with the same
command) and the soak checks it took effect. With ``--backend ray`` the actors
run on a local two-node Ray cluster whose worker node is removed once, half
way, and a node added back ``--node_down_s`` later.

Every ``--sample_interval_s`` it samples RSS, open fds and threads of the
trainer and all its descendants per role, the bytes of the run's /dev/shm
blocks and its process count (bench/soak_resources.py), and loads every new
checkpoint with weights_only (bench/soak_checkpoints.py). At the end it checks
the counters across restarts (bench/soak_progress.py), that no process of the
run and no shared-memory block is left, and writes the figures with a
verdict per target (RSS after the warm-up grows < ``--target_pct``; fds,
threads, shared memory and processes flat; no orphan; at most one checkpoint
interval lost per trainer restart; every checkpoint loads; every fault took
effect; the run reached its budget) and a plot of the resources against time
with the faults marked (``<out_dir>/soak.png``).

    python -m bench.soak                                   # 2 hours
    python -m bench.soak --minutes 5 --fault_interval_minutes 0.6 --warmup_minutes 1
    python -m bench.soak --backend ray --minutes 30 --fault_interval_minutes 3.5

stdout: exactly one JSON line; logs go to stderr, the runs' own output to
``<out_dir>/train-<i>.log``. Exit status 0 when every verdict passes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import psutil

from alf_async.envs.fault_injection import FAULT_FILE_VARIABLE, on_demand_id
from alf_async.settings import TrainerSettings
from alf_async.utils.shared_memory import block_owner_pid, list_blocks

from bench import benchlib
from bench.children import REPO_ROOT, DescendantWatch, sigterm_raises
from bench.soak_checkpoints import CheckpointAudit
from bench.soak_faults import (NODE_FAULT, PROCESS_FAULTS, TRAINER_FAULTS, FaultRecord,
                               advance, inject, lock_record, took_effect)
from bench.soak_plot import plot_soak
from bench.soak_progress import MetricsTail, TrainerLife, counters_report
from bench.soak_resources import ResourceSample, classify, take_sample
from bench.soak_verdicts import resource_report, settled

logger = logging.getLogger("soak")
DEFAULT_GIN = "async_ppo_bullet_half_cheetah.gin"
POLL_S = 0.5  # seconds between two looks at the run
STARTUP_LIMIT_S = 900.0  # a run that writes no metrics row in this long failed


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--minutes", type=float, default=120.0,
                   help="planned length of the soak; the budget is sized to it")
    p.add_argument("--backend", choices=("process", "ray"), default="process")
    p.add_argument("--gin_file", default=DEFAULT_GIN)
    p.add_argument("--env_name", default=None,
                   help="base env id (default: the gin file's Trainer.env_name); the run "
                        "trains on its AlfAsyncOnDemandFault/ variant")
    p.add_argument("--num_actors", type=int, default=2)
    p.add_argument("--num_env_workers", type=int, default=1,
                   help="env-worker processes per actor (>= 1: they are fault targets)")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra gin binding (repeatable)")
    p.add_argument("--faults", default=",".join(PROCESS_FAULTS),
                   help="the rotation of faults, comma-separated")
    p.add_argument("--fault_interval_minutes", type=float, default=5.0)
    p.add_argument("--stop_s", type=float, default=30.0,
                   help="seconds an actor stays stopped (SIGSTOP ... SIGCONT)")
    p.add_argument("--node_down_s", type=float, default=30.0,
                   help="Ray: seconds between removing the node and adding one back")
    p.add_argument("--effect_timeout_s", type=float, default=180.0,
                   help="a fault whose effect is not seen within this long failed")
    p.add_argument("--orphan_wait_s", type=float, default=60.0,
                   help="seconds the processes of an ended train process get to end; "
                        "one still running then is an orphan")
    p.add_argument("--sample_interval_s", type=float, default=30.0)
    p.add_argument("--warmup_minutes", type=float, default=10.0,
                   help="samples before this are left out of the growth figures")
    p.add_argument("--settle_s", type=float, default=60.0,
                   help="samples this soon after a fault are left out of the growth figures")
    p.add_argument("--target_pct", type=float, default=5.0,
                   help="growth allowed after the warm-up, in percent")
    p.add_argument("--num_env_steps", type=int, default=None,
                   help="the run's budget (default: sized to --minutes)")
    p.add_argument("--env_steps_per_s", type=float, default=None,
                   help="the rate the budget is sized with (default: measured)")
    p.add_argument("--calibration_s", type=float, default=90.0,
                   help="seconds of the fault-free run that measures the rate")
    p.add_argument("--busy_fraction", type=float, default=0.9,
                   help="share of the soak the run trains at full rate (faults cost the rest)")
    p.add_argument("--overrun_fraction", type=float, default=0.5,
                   help="the soak waits this fraction of --minutes past its plan for the "
                        "run to reach its budget, then stops it")
    p.add_argument("--out_dir", default=None,
                   help="where the run, the logs and soak.png go (default: a new "
                        "temporary directory, kept)")
    args = p.parse_args(argv)
    kinds = [k for k in args.faults.split(",") if k]
    unknown = set(kinds) - set(PROCESS_FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; choose from {', '.join(PROCESS_FAULTS)}")
    if args.num_env_workers < 1 and "env_worker_sigkill" in kinds:
        p.error("--num_env_workers must be >= 1 to kill env workers")
    args.fault_kinds = kinds
    # Faults come every interval while at least one interval of the plan is
    # left, and the last may slip past that while an earlier one settles: about
    # minutes / interval - 2 of them (the node removal on Ray comes on top).
    args.fault_slots = max(0, math.floor(args.minutes / args.fault_interval_minutes) - 2)
    return args


def describe(pids: List[int]) -> str:
    """'pid (command line)' of each process, for the log."""
    texts = []
    for pid in pids:
        try:
            texts.append(f"{pid} ({' '.join(psutil.Process(pid).cmdline())[:120]})")
        except psutil.Error:
            texts.append(str(pid))
    return ", ".join(texts)


def configured_value(gin_file: str, gin_params: List[str], name: str, default):
    """The value ``gin_file`` and ``gin_params`` bind to ``name`` (as the
    train command reads them), or ``default`` where they bind none."""
    import gin

    from alf_async.config import parse_config

    parse_config([gin_file], gin_params)
    try:
        return gin.query_parameter(name)
    except ValueError:
        return default
    finally:
        gin.clear_config()


class Soak:
    """The soaked run: its train processes one after another (``lives``), the
    rows, checkpoints and resources seen, and the faults injected. Implements
    bench/soak_faults.py's ``RunView``."""

    def __init__(self, args: argparse.Namespace, out_dir: str, cmd: List[str],
                 env: Dict[str, str], cluster=None):
        self.args, self.out_dir, self.cmd, self.env, self.cluster = args, out_dir, cmd, env, cluster
        self.root_dir = os.path.join(out_dir, "run")
        self.fault_file = env[FAULT_FILE_VARIABLE]
        self.started = time.monotonic()
        self.lives: List[TrainerLife] = []
        self.watches: List[DescendantWatch] = []
        self.proc: Optional[subprocess.Popen] = None
        self.tail = MetricsTail(self.root_dir)
        self.audit = CheckpointAudit(self.root_dir)
        self.samples: List[ResourceSample] = []
        self.faults: List[FaultRecord] = []
        self.owners_seen: set = set()
        self.orphans: List[int] = []
        self.training_started_s: Optional[float] = None  # the first metrics row, soak s

    # -- RunView ------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.started

    @property
    def trainer_pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def life_index(self) -> int:
        return len(self.lives) - 1

    def life(self, index: int) -> TrainerLife:
        return self.lives[index]

    def rows_of_life(self, index: int) -> List[Dict]:
        life = self.lives[index]
        return life.rows if life.ended_s is not None else life.rows_in(self.tail)

    def processes(self, role: str) -> List[psutil.Process]:
        pids = classify(self.trainer_pid, os.getpid() if self.cluster else None)
        return [psutil.Process(pid) for pid, r in sorted(pids.items()) if r == role
                and psutil.pid_exists(pid)]

    def remove_actor_node(self) -> Optional[str]:
        rows = self.rows_of_life(self.life_index)[-2 * self.args.num_actors:]
        return self.cluster.remove_node_hosting({r.get("actor_node") for r in rows})

    def add_node(self) -> None:
        self.cluster.add_node()

    def nodes_alive(self) -> int:
        return self.cluster.nodes_alive()

    # -- the train processes --------------------------------------------------------
    def launch(self) -> None:
        index = len(self.lives)
        log_path = os.path.join(self.out_dir, f"train-{index}.log")
        life = TrainerLife(index, self.now(), log_path, len(self.tail.poll()),
                           self.tail.resets)
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=REPO_ROOT, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.lives.append(life)
        self.watches.append(DescendantWatch(self.proc.pid))
        logger.info("t=%.0fs: train process %d started (pid %d)", self.now(), index,
                    self.proc.pid)

    def close_life(self, status: int) -> None:
        """Record the end of the current train process; wait for its children."""
        life = self.lives[-1]
        life.lock_at_exit = lock_record(self.root_dir)
        life.close(self.now(), status, self.tail)
        watch = self.watches[-1]
        left = watch.wait_gone(self.args.orphan_wait_s)
        if left:
            logger.warning("processes of train process %d outlived it by %.0f s: %s",
                           life.index, self.args.orphan_wait_s, describe(left))
            self.orphans += left
            watch.kill_alive()
        logger.info("t=%.0fs: train process %d ended with %s after iteration %s",
                    self.now(), life.index, status,
                    life.rows[-1]["iteration"] if life.rows else None)

    def watch_processes(self) -> None:
        """Note every process of the current train process (its descendants,
        and on Ray its actors and their env workers on the cluster's nodes),
        so that any of them still running after it ended counts as an orphan."""
        watch = self.watches[-1]
        watch.record()
        if self.cluster is not None and self.trainer_pid is not None:
            watch.record([pid for pid, role in classify(None, os.getpid()).items()
                          if role in ("actors", "env_workers")])

    def sample(self) -> None:
        sample = take_sample(self.now(), self.trainer_pid,
                             os.getpid() if self.cluster else None, self.owners_seen)
        self.samples.append(sample)
        self.audit.check()
        logger.info("t=%5.0fs RSS %.0f MiB, fds %d, threads %d, shm %.1f MiB, %d processes",
                    sample.t_s, sample.total("rss_mib"), sample.total("fds"),
                    sample.total("threads"), sample.shm_bytes / 2 ** 20, sample.processes)

    # -- the soak -------------------------------------------------------------------
    def run(self) -> Optional[str]:
        """Train, sample and inject faults until the run ends at its budget;
        None, or why the soak stopped early. The plan (the fault times, the
        node removal half way, when to give up) counts from the run's first
        metrics row, ``training_started_s``: the start-up is not the soak's."""
        args = self.args
        planned_s = args.minutes * 60.0
        interval_s = args.fault_interval_minutes * 60.0
        faults_until = planned_s - interval_s
        give_up_s = planned_s * (1.0 + args.overrun_fraction) + 60.0
        rotation = list(args.fault_kinds)
        node_fault_at = planned_s / 2.0 if self.cluster else None
        next_sample, next_fault = 0.0, interval_s
        self.launch()
        while True:
            status = self.proc.poll()
            self.watch_processes()
            self.tail.poll()
            life = self.lives[-1]
            if life.first_row_s is None and self.rows_of_life(life.index):
                life.first_row_s = self.now()
                if self.training_started_s is None:
                    self.training_started_s = life.first_row_s
            if status is not None:
                self.close_life(status)
                expected = any(f.kind in TRAINER_FAULTS and f.life == self.life_index
                               for f in self.faults)
                if expected:
                    self.launch()
                elif status == 0:
                    return None
                else:
                    return f"train process {self.life_index} exited {status} unexpectedly"
            for fault in self.faults:
                advance(fault, self)
                if fault.took_effect is None:
                    fault.took_effect = took_effect(fault, self)
                    if (fault.took_effect is None
                            and self.now() - self._effect_clock(fault) > args.effect_timeout_s):
                        fault.took_effect = False
                        fault.note = fault.note or "no effect seen in time"
                    if fault.took_effect is not None:
                        logger.info("t=%.0fs: %s %s: %s", self.now(), fault.kind,
                                    "took effect" if fault.took_effect else "FAILED",
                                    fault.note)
            if self.now() >= next_sample:
                self.sample()
                next_sample += args.sample_interval_s
            if self.training_started_s is None:
                if self.now() > STARTUP_LIMIT_S:
                    self._stop_run()
                    return f"the run wrote no metrics row in {STARTUP_LIMIT_S:.0f} s"
                time.sleep(POLL_S)
                continue
            now = self.now() - self.training_started_s  # seconds of the plan
            quiet = all(f.took_effect is not None and not f.pending.get("process")
                        and "add_at" not in f.pending for f in self.faults)
            if quiet and node_fault_at is not None and now >= node_fault_at:
                if self._inject(NODE_FAULT):
                    node_fault_at = None
            elif quiet and rotation and next_fault <= now <= faults_until:
                if self._inject(rotation[len(self.faults) % len(rotation)]):
                    next_fault = max(next_fault + interval_s, now + 1.0)
            if now > give_up_s:
                self._stop_run()
                return (f"the run had not reached its budget {give_up_s:.0f} s after it "
                        "started training")
            time.sleep(POLL_S)

    def _stop_run(self) -> None:
        """SIGTERM the train process (SIGKILL to its group if it lingers)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.close_life(self.proc.wait(timeout=120))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.close_life(self.proc.wait())

    def _effect_clock(self, fault: FaultRecord) -> float:
        """Soak seconds the fault's effect timeout counts from: its injection,
        or for a trainer fault the start of the resumed train process."""
        if fault.kind in TRAINER_FAULTS and fault.life + 1 < len(self.lives):
            return self.lives[fault.life + 1].started_s
        return fault.at_s

    def _inject(self, kind: str) -> bool:
        record = inject(kind, self, self.args.stop_s, self.args.node_down_s)
        if record is None:
            return False
        self.faults.append(record)
        logger.info("t=%.0fs: injected %s (target %s) at iteration %d", record.at_s, kind,
                    record.target, record.before["iteration"])
        return True

    def stop(self) -> None:
        """Last resort: nothing of the run may outlive the soak."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for fault in self.faults:
            if fault.pending.get("process") is not None:
                try:
                    fault.pending["process"].send_signal(signal.SIGCONT)
                except psutil.Error:
                    pass


def calibrate(cmd: List[str], env: Dict[str, str], out_dir: str, seconds: float) -> float:
    """Env steps/s of a fault-free run of ``cmd`` (a fresh run directory),
    over ``seconds`` after its first metrics row."""
    root = os.path.join(out_dir, "calibration")
    cmd = [c if not c.startswith("--root_dir=") else f"--root_dir={root}" for c in cmd]
    cmd = [c for c in cmd if "Trainer.num_env_steps=" not in c]
    cmd += ["--gin_param=Trainer.num_env_steps=1000000000"]
    tail = MetricsTail(root)
    with open(os.path.join(out_dir, "calibration.log"), "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    watch = DescendantWatch(proc.pid)
    try:
        first_seen = None
        while proc.poll() is None:
            watch.record()
            rows = tail.poll()
            if rows and first_seen is None:
                first_seen = time.monotonic()
            if first_seen is not None and time.monotonic() - first_seen >= seconds:
                break
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        watch.wait_gone(30.0)
        watch.kill_alive()
    rows = tail.poll()
    if len(rows) < 3:
        raise RuntimeError(f"the calibration run wrote {len(rows)} rows (exit "
                           f"{proc.returncode}); see {out_dir}/calibration.log")
    first, last = rows[1], rows[-1]
    return (last["env_steps"] - first["env_steps"]) / (last["wall_time"] - first["wall_time"])


def leftover_blocks(owners) -> List[str]:
    """Shared-memory blocks in /dev/shm whose owner is in ``owners``."""
    return [b for b in list_blocks() if block_owner_pid(b) in owners]


def unsettled_windows(soak: Soak, settle_s: float) -> List[Tuple[float, float]]:
    """(start, end) soak seconds of each fault, from its injection until
    ``settle_s`` after the run is whole again: after a trainer restart, after
    the resumed trainer's first row; after a SIGSTOP, after the SIGCONT; after
    a node removal, after the node came back; else after the fault."""
    windows = []
    for fault in soak.faults:
        whole = fault.at_s
        if fault.kind in TRAINER_FAULTS:
            resumed = (soak.lives[fault.life + 1] if fault.life + 1 < len(soak.lives)
                       else None)
            whole = resumed.first_row_s if resumed and resumed.first_row_s else soak.now()
        whole = max([whole] + [fault.pending[k] for k in ("cont_sent_s", "node_added_s")
                               if k in fault.pending])
        windows.append((fault.at_s, whole + settle_s))
    return windows


def verdicts(soak: Soak, args: argparse.Namespace, budget: int, interval: int,
             stop_reason: Optional[str], leftover_blocks: List[str]) -> Dict:
    """Every figure of the soak and its verdicts (``passed``: all hold)."""
    kept = settled(soak.samples, unsettled_windows(soak, args.settle_s),
                   (soak.training_started_s or 0.0) + args.warmup_minutes * 60.0)
    resources = resource_report(kept, args.target_pct)
    progress = counters_report(soak.lives, interval)
    final_rows = soak.lives[-1].rows if soak.lives else []
    last = final_rows[-1] if final_rows else {}
    kinds_wanted = set(args.fault_kinds) | ({NODE_FAULT} if soak.cluster else set())
    trainer_faults = [f for f in soak.faults if f.kind in TRAINER_FAULTS]
    result_verdicts = dict(resources.get("verdicts", {}) or {
        "rss_growth_below_target": False, "fds_flat": False, "threads_flat": False,
        "shm_flat": False, "processes_flat": False})
    result_verdicts.update({
        "no_orphan": not soak.orphans,
        "no_leftover_shm": not leftover_blocks,
        "progress_lost_within_checkpoint_interval": bool(
            not progress["problems"] and progress["restarts_checked"] == len(trainer_faults)
            and (progress["restarts_checked"] >= 1 or not trainer_faults)),
        "every_checkpoint_loads": soak.audit.report()["all_load"],
        "every_fault_took_effect": bool(soak.faults) and all(f.took_effect
                                                              for f in soak.faults),
        "every_fault_kind_injected": kinds_wanted <= {f.kind for f in soak.faults},
        "reached_budget": bool(stop_reason is None and soak.lives
                               and soak.lives[-1].exit_status == 0
                               and last.get("env_steps", 0) >= budget),
    })
    counts: Dict[str, int] = {}
    for fault in soak.faults:
        counts[fault.kind] = counts.get(fault.kind, 0) + 1
    return {
        "duration_min": soak.now() / 60.0, "training_started_s": soak.training_started_s,
        "num_env_steps_budget": budget, "checkpoint_interval": interval,
        "final_iteration": last.get("iteration"), "final_env_steps": last.get("env_steps"),
        "final_return": last.get("episode_return"),
        "trainer_lives": [{"index": l.index, "started_s": round(l.started_s, 1),
                           "ended_s": l.ended_s, "exit_status": l.exit_status,
                           "resumed_from": l.resumed_from} for l in soak.lives],
        "faults_by_kind": counts, "faults": [f.to_json() for f in soak.faults],
        "progress": progress, "checkpoints": soak.audit.report(),
        "resources": resources, "orphans": soak.orphans, "leftover_shm_blocks": leftover_blocks,
        "stop_reason": stop_reason, "num_samples": len(soak.samples),
        "verdicts": result_verdicts, "passed": all(result_verdicts.values()),
    }


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s [soak] %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)
    if args.fault_slots < len(args.fault_kinds):
        logger.warning("a %.0f-minute soak with a fault every %g minutes has room for about "
                       "%d faults, fewer than the %d kinds of --faults: some will not come "
                       "(every_fault_kind_injected fails); lower --fault_interval_minutes to "
                       "%.2g or less", args.minutes, args.fault_interval_minutes,
                       args.fault_slots, len(args.fault_kinds),
                       args.minutes / (len(args.fault_kinds) + 2))
    out_dir = os.path.abspath(args.out_dir or tempfile.mkdtemp(prefix="alf_async_soak_"))
    os.makedirs(out_dir, exist_ok=True)
    base_env = args.env_name or configured_value(args.gin_file, args.gin_param,
                                                 "Trainer.env_name", None)
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env[FAULT_FILE_VARIABLE] = os.path.join(out_dir, "env_fault")
    os.environ[FAULT_FILE_VARIABLE] = env[FAULT_FILE_VARIABLE]  # for the Ray nodes
    params = [f"Trainer.env_name='{on_demand_id(base_env)}'",
              f"Trainer.num_actors={args.num_actors}",
              f"Trainer.num_env_workers={args.num_env_workers}",
              "Trainer.num_iterations=0", "MetricsRecorder.console_interval_s=60"]
    cluster = None
    result: Dict = {"bench": "soak", "backend": args.backend, "gin_file": args.gin_file,
                    "env_name": on_demand_id(base_env), "num_actors": args.num_actors,
                    "num_env_workers": args.num_env_workers, "minutes": args.minutes,
                    "fault_interval_minutes": args.fault_interval_minutes,
                    "fault_rotation": args.fault_kinds, "stop_s": args.stop_s,
                    "date": datetime.date.today().isoformat(), "out_dir": out_dir,
                    **benchlib.machine_info()}
    soak = None
    with sigterm_raises():  # a SIGTERM stops the run and the cluster first, then reports
        try:
            if args.backend == "ray":
                from bench.soak_cluster import SoakCluster

                per_actor = 1 + args.num_env_workers
                cluster = SoakCluster(head_cpus=(args.num_actors - 1) * per_actor,
                                      node_cpus=per_actor)
                env.update(cluster.driver_environment())
                params += ["Trainer.backend='ray'", f"RayBackend.address='{cluster.address}'",
                           f"RayBackend.num_cpus_per_actor={per_actor}"]
            params += args.gin_param
            cmd = benchlib.train_command([args.gin_file], params, os.path.join(out_dir, "run"))
            budget = args.num_env_steps
            if budget is None:
                rate = args.env_steps_per_s
                if rate is None:
                    logger.info("measuring the rate: %.0f s of training without faults",
                                args.calibration_s)
                    rate = calibrate(cmd, env, out_dir, args.calibration_s)
                result["env_steps_per_s_sized_with"] = rate
                budget = int(rate * args.minutes * 60.0 * args.busy_fraction)
            cmd.append(f"--gin_param=Trainer.num_env_steps={budget}")
            result["command"] = " ".join(cmd)
            interval = configured_value(args.gin_file, args.gin_param,
                                        "Trainer.checkpoint_interval",
                                        TrainerSettings.checkpoint_interval)
            logger.info("soak of %.1f min, budget %d env steps: %s", args.minutes, budget,
                        " ".join(cmd))
            soak = Soak(args, out_dir, cmd, env, cluster)
            try:
                stop_reason = soak.run()
            finally:
                soak.stop()
        except (KeyboardInterrupt, SystemExit) as e:  # Ctrl-C, SIGTERM: report what was seen
            stop_reason = f"the soak was stopped ({type(e).__name__} {e})"
            result["error"] = stop_reason
        except Exception as e:  # noqa: BLE001  (reported in the JSON line)
            result["error"] = f"{type(e).__name__}: {e}"
            stop_reason = result["error"]
        finally:
            if cluster is not None:
                cluster.shutdown()
    if soak is None:
        result["passed"] = False
        benchlib.emit(result)
        return 1
    for watch in soak.watches:
        left = [p for p in watch.wait_gone(args.orphan_wait_s) if p not in soak.orphans]
        if left:
            logger.warning("processes outlived the soak's run: %s", describe(left))
        soak.orphans += left
        watch.kill_alive()
    leftover = sorted({b for w in soak.watches for b in w.leftover_blocks()}
                      | set(leftover_blocks(soak.owners_seen)))
    result.update(verdicts(soak, args, budget, interval, stop_reason, leftover))
    if soak.samples:
        result["plot"] = os.path.join(out_dir, "soak.png")
        plot_soak(soak.samples, result["faults"], result["plot"],
                  f"soak: {args.gin_file} ({args.backend}), {result['duration_min']:.0f} min")
        with open(os.path.join(out_dir, "samples.jsonl"), "w", encoding="utf-8") as f:
            for s in soak.samples:
                f.write(json.dumps(s.to_json()) + "\n")
    benchlib.emit(result)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Helpers shared by the benchmark scripts in bench/ (not a benchmark itself).

Conventions every script follows:

- stdout carries exactly one line, a JSON object with the figures; everything
  else (logs, PyBullet's C-level prints, the train command's console) goes to
  stderr. ``claim_stdout()`` enforces this at the file-descriptor level, so even
  child processes that print to fd 1 end up on stderr.
- training runs are started through the train command
  (``python -m alf_async.bin.train``) in a child process, exactly as a user would
  start them, and read back from their ``metrics.jsonl``.
- a bench stopped with SIGTERM (``kill``) or Ctrl-C stops the run it is waiting
  on first (``run_train`` and bench/children.py), so no training run outlives it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
from typing import Any, Dict, IO, Iterable, List, Optional, Sequence

import numpy as np

from alf_async.reporting.machine import cpu_model
from alf_async.reporting.run_metrics import parse_metrics_lines
from bench import children
from bench.children import REPO_ROOT

logger = logging.getLogger("bench")

_json_out: Optional[IO[str]] = None


def claim_stdout() -> None:
    """Keep the real stdout for the final JSON line; send fd 1 to stderr.

    Call once at the start of ``main()`` (not at import: spawned children
    re-import the main module).
    """
    global _json_out
    if _json_out is not None:
        return
    sys.stdout.flush()
    _json_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s [bench] %(message)s", datefmt="%H:%M:%S")


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    return value


def emit(result: Dict[str, Any]) -> None:
    """Print the one JSON line of figures to the real stdout."""
    out = _json_out or sys.__stdout__
    out.write(json.dumps(_clean(result), sort_keys=False) + "\n")
    out.flush()


def parse_int_list(text: str) -> List[int]:
    """'32,48,96' -> [32, 48, 96]."""
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def mean(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else float("nan")


def median(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else float("nan")


def machine_info() -> Dict[str, Any]:
    """CPU model, count and load, to judge how noisy the timings are and which
    runs may be compared bit for bit (float kernels differ between CPU
    models, so a seeded synchronous run repeats itself only on the same one)."""
    info: Dict[str, Any] = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count()}
    try:
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        info["load_avg_1m"] = os.getloadavg()[0]
    except OSError:
        pass
    return info


# -- training runs through the train command ---------------------------------------
class RunDir:
    """A run directory under ``base`` (a fresh temporary one by default),
    removed at exit unless ``keep``."""

    def __init__(self, base: Optional[str], name: str, keep: bool):
        self.keep = keep or base is not None
        if base is None:
            base = tempfile.mkdtemp(prefix="alf_async_bench_")
            self._tmp = base
        else:
            self._tmp = None
            os.makedirs(base, exist_ok=True)
        self.path = os.path.join(base, name)
        if os.path.exists(self.path):
            raise FileExistsError(f"{self.path} exists; a benchmark needs a fresh run "
                                  "directory (the train command would resume it)")

    def cleanup(self) -> None:
        if not self.keep and self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def run_processes(trainer_pid: int) -> Dict[str, List[Any]]:
    """The processes of a running train command by role (psutil processes):
    "actors" (the trainer's children named ``ACTOR_PROCESS_NAME`` or
    ``HOGWILD_WORKER_PROCESS_NAME``, forked from its forkserver or spawned
    where there is none; not the evaluator or the env probe) and "env_workers"
    (the actors' children named ``ENV_WORKER_PROCESS_NAME``); empty lists once
    the trainer is gone."""
    import psutil

    from alf_async.utils.process import (ACTOR_PROCESS_NAME, ENV_WORKER_PROCESS_NAME,
                                         HOGWILD_WORKER_PROCESS_NAME)

    def named(procs, names) -> List[Any]:
        found = []
        for proc in procs:
            try:
                if proc.name() in names:
                    found.append(proc)
            except psutil.Error:
                pass
        return found

    try:
        descendants = psutil.Process(trainer_pid).children(recursive=True)
    except psutil.Error:
        return {"actors": [], "env_workers": []}
    actors = named(descendants, (ACTOR_PROCESS_NAME, HOGWILD_WORKER_PROCESS_NAME))
    workers = []
    for actor in actors:
        try:
            workers += named(actor.children(), (ENV_WORKER_PROCESS_NAME,))
        except psutil.Error:
            pass
    return {"actors": actors, "env_workers": workers}


def train_command(gin_files: Sequence[str], gin_params: Sequence[str],
                  root_dir: str) -> List[str]:
    cmd = [sys.executable, "-m", "alf_async.bin.train", f"--root_dir={root_dir}"]
    cmd += [f"--gin_file={f}" for f in gin_files]
    cmd += [f"--gin_param={p}" for p in gin_params]
    return cmd


def run_train(gin_files: Sequence[str], gin_params: Sequence[str], root_dir: str,
              timeout_s: Optional[float] = None, stop_when=None,
              poll_s: float = 5.0) -> Dict[str, Any]:
    """Run the train command to its end (or until ``stop_when(rows)`` is true,
    then stop it with SIGTERM, which writes a final checkpoint and exits 143;
    ``rows``: the run's metrics rows, checked every ``poll_s`` seconds and
    read again only when the file changed).

    The child's stdout and stderr both go to our stderr. Returns
    {"returncode", "wall_s", "stopped_early", "timed_out"}.
    """
    cmd = train_command(gin_files, gin_params, root_dir)
    logger.info("running: %s", " ".join(cmd))
    metrics_path = os.path.join(root_dir, "metrics.jsonl")
    seen: Dict[str, Any] = {"file": None, "rows": []}

    def rows_now() -> List[Dict[str, Any]]:
        """The rows, read again only when the file changed since the last poll."""
        try:
            info = os.stat(metrics_path)
            file = (info.st_size, info.st_mtime_ns)
        except FileNotFoundError:
            file = None
        if file != seen["file"]:
            seen["file"], seen["rows"] = file, read_metrics(metrics_path)
        return seen["rows"]

    stop = None if stop_when is None else (lambda: stop_when(rows_now()))
    return children.run_child(cmd, env=repo_env(), timeout_s=timeout_s, stop_when=stop,
                              poll_s=poll_s)


def repo_env() -> Dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH:
    the library's commands run as children use this checkout's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


_PLAYED_EPISODE = re.compile(r"^episode (\d+): return (\S+), length (\d+)$", re.MULTILINE)
_PLAYED_CHECKPOINT = re.compile(r"^checkpoint: (.+?); env: ", re.MULTILINE)


def play_run(root_dir: str, num_episodes: int, timeout_s: Optional[float] = None
             ) -> Dict[str, Any]:
    """Evaluate a run's newest checkpoint as a user would, with the play
    command (``python -m alf_async.bin.play --root_dir=RUN --num_episodes=N``:
    the policy's mean action on one env, episode i reset with seed i - 1, no
    rendering).

    Returns {"checkpoint": its path, "returns": [...], "lengths": [env steps,
    ...], "eval_return": their mean, "eval_return_std": their (population)
    std, "eval_s": seconds the command took}. Raises RuntimeError when the
    command fails or prints no episode.
    """
    cmd = [sys.executable, "-m", "alf_async.bin.play", f"--root_dir={root_dir}",
           f"--num_episodes={num_episodes}"]
    logger.info("running: %s", " ".join(cmd))
    status = children.run_child(cmd, env=repo_env(), timeout_s=timeout_s,
                                capture_stdout=True)
    episodes = [(float(ret.rstrip(",")), int(length))
                for _, ret, length in _PLAYED_EPISODE.findall(status["stdout"])]
    if status["returncode"] != 0 or status["timed_out"] or not episodes:
        raise RuntimeError(f"the play command on {root_dir} failed (exit "
                           f"{status['returncode']}, {len(episodes)} episode(s)): "
                           f"{status['stdout'][-500:]}")
    checkpoint = _PLAYED_CHECKPOINT.search(status["stdout"])
    returns = [ret for ret, _ in episodes]
    avg = sum(returns) / len(returns)
    return {"checkpoint": checkpoint.group(1) if checkpoint else None, "returns": returns,
            "lengths": [length for _, length in episodes], "eval_return": avg,
            "eval_return_std": (sum((r - avg) ** 2 for r in returns) / len(returns)) ** 0.5,
            "eval_s": status["wall_s"]}


def read_jsonl(path: str) -> List[Dict[str, Any]]:
    """Rows of a JSON-lines file such as a bench's results or eval.jsonl (a
    missing file or a torn line is tolerated)."""
    if not os.path.isfile(path):
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def read_metrics(path: str) -> List[Dict[str, Any]]:
    """Rows of a metrics.jsonl (a missing file or a torn last line are tolerated)."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return parse_metrics_lines(f)


def steady_rows(rows: List[Dict[str, Any]], warmup: int) -> List[Dict[str, Any]]:
    """Rows after the first ``warmup`` iterations (start-up, first weight loads
    and, for N >= 2, the pipeline filling up). Falls back to the last row if the
    run was too short."""
    kept = [r for r in rows if r.get("iteration", 0) > warmup]
    if not kept and rows:
        logger.warning("only %d iterations for a warm-up of %d: using the last one",
                       len(rows), warmup)
        kept = rows[-1:]
    return kept


def steady_rows_per_session(rows: List[Dict[str, Any]], warmup: int) -> List[Dict[str, Any]]:
    """Rows after the first ``warmup`` iterations of each session of a run
    resumed across sessions: a session begins at the first row and at every
    row that carries ``startup_s`` (the first iteration after a start or a
    resume, whose T counts from the loop's start; for N >= 2 the next ones
    find batches the actors unrolled meanwhile). For a run trained in one go
    this is ``steady_rows``. Falls back to the last row if nothing is left."""
    kept: List[Dict[str, Any]] = []
    in_session = 0
    for index, row in enumerate(rows):
        started = row.get("startup_s")
        if index == 0 or (isinstance(started, (int, float)) and math.isfinite(started)):
            in_session = 0
        in_session += 1
        if in_session > warmup:
            kept.append(row)
    if not kept and rows:
        logger.warning("no session longer than a warm-up of %d: using the last row", warmup)
        kept = rows[-1:]
    return kept


def summarize_timing(rows: List[Dict[str, Any]]) -> Dict[str, float]:
    """Mean T, EPS, env steps/s and time split of steady-state metrics rows.

    EPS and env steps/s are computed from the mean T (K / mean T), not averaged
    per row, so that they agree with the design's definitions.
    """
    if not rows:
        return {}
    T = mean(r["T"] for r in rows)
    K = rows[0]["num_envs"]
    L_unroll = rows[0]["unroll_length"]
    return {
        "iterations_used": len(rows),
        "T": T,
        "T_median": median(r["T"] for r in rows),
        "EPS": K / T,
        "env_steps_per_s": K * L_unroll / T,
        "U": mean(r["actor_unroll_s"] for r in rows),
        "L": mean(r["learner_train_s"] for r in rows),
        "learner_wait_s": mean(r["learner_wait_s"] for r in rows),
        "actor_wait_s": mean(r["actor_wait_s"] for r in rows),
        "actor_inference_s": mean(r["actor_inference_s"] for r in rows),
        "actor_env_s": mean(r["actor_env_s"] for r in rows),
        "lag_mean": mean(r["lag"] for r in rows),
        "episodes_per_1k_steps": 1000.0 * sum(r.get("episodes_finished", 0) for r in rows)
        / (K * L_unroll * len(rows)),
        "lag_max": max(r["lag"] for r in rows),
    }


def add_common_train_args(parser) -> None:
    """Options every training-based benchmark shares."""
    parser.add_argument("--gin_param", action="append", default=[],
                        help="extra gin binding for every run (repeatable)")
    parser.add_argument("--root_dir", default=None,
                        help="put run directories here and keep them (default: a "
                             "temporary directory, removed at the end)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary run directories")
    parser.add_argument("--timeout_s", type=float, default=3600.0,
                        help="stop a training run that takes longer than this")


def timing_run(gin_file: str, params: Sequence[str], name: str, root_dir: Optional[str],
               keep: bool, warmup: int, timeout_s: Optional[float]) -> Dict[str, float]:
    """One training run for timing: run the train command with ``params`` (which
    should set a budget in iterations), then ``summarize_timing`` of the rows
    after ``warmup`` iterations. Checkpoints are pushed past the budget so that
    writing them does not inflate T (the final one is still written after the
    loop). Raises RuntimeError if the run failed."""
    run = RunDir(root_dir, name, keep)
    params = ["Trainer.checkpoint_interval=1000000"] + list(params)
    try:
        status = run_train([gin_file], params, run.path, timeout_s)
        rows = read_metrics(os.path.join(run.path, "metrics.jsonl"))
    finally:
        run.cleanup()
    if status["returncode"] != 0 or not rows:
        raise RuntimeError(f"training run {name} failed (exit {status['returncode']}, "
                           f"{len(rows)} iterations); see the log above")
    summary = summarize_timing(steady_rows(rows, warmup))
    summary["iterations_run"] = len(rows)
    summary["wall_s"] = status["wall_s"]
    return summary


def config_value(gin_file: str, gin_params: Sequence[str], name: str) -> Any:
    """The value a gin file (plus bindings) gives ``name``, e.g. 'Trainer.num_envs'."""
    import gin

    from alf_async.config import parse_config

    parse_config([gin_file], list(gin_params))
    try:
        return gin.query_parameter(name)
    finally:
        gin.clear_config()


def learning_bindings(run_dir: str) -> Dict[str, str]:
    """The bindings of a run's saved ``config.gin`` that decide what it learns:
    ``[scope/]Configurable.param`` -> value as gin text, leaving out the seed
    and every binding a resume may change (the budget, N, K, W, evaluation,
    the device: ``config_changes.RESUMABLE``). Two runs of one env and mode
    with different dicts trained different configs; empty when the run has no
    config.gin."""
    import gin

    from alf_async.config import parse_config
    from alf_async.config_changes import binding_values, is_resumable

    path = os.path.join(run_dir, "config.gin")
    if not os.path.isfile(path):
        return {}
    parse_config([path])
    try:
        return {name: value for name, value in sorted(binding_values().items())
                if not is_resumable(name) and name.split("/")[-1] != "Trainer.seed"}
    finally:
        gin.clear_config()

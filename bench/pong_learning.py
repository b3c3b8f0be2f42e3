"""Pong learning: alf_async async PPO against Stable-Baselines3 PPO with the
zoo's Atari settings, at equal env steps and in wall time (issue 25's learning
benchmark). Runs resume across sessions.

    python -m bench.pong_learning --root_dir runs/pong --runs alf_async:0,sb3:0 \\
        --sb3_python /tmp/peers/sb3/bin/python --session_s 3000
    python -m bench.pong_learning --root_dir runs/pong --table

The runs (``--runs``: library:seed, comma-separated), each to ``--env_steps``
agent steps (4 frames each; default 2M), one after the other:

- ``alf_async:s``: the train command on ``async_ppo_atari_pong.gin`` (N = 2)
  with ``Trainer.seed = s``, in ``root_dir/alf_async_s<s>`` (``alf_sync:s``:
  the same with ``ppo_atari_pong.gin``, N = 1, in ``alf_sync_s<s>``); stopped with
  SIGTERM after ``--session_s`` seconds (a final checkpoint) and resumed by the
  next call. Its metrics.jsonl gives, per iteration, the env steps, the
  training loop's wall time (summed over resumes, start-up excluded) and
  ``episode_return``, the mean unclipped score of the last 100 finished games.
- ``sb3:s``: bench/peers/sb3_atari_ppo.py under ``--sb3_python`` (SB3 in its
  own virtualenv with ale-py and opencv: bench/peers/README.md), seed s, in
  ``root_dir/sb3_s<s>`` (``--save_dir``: saved and resumed there); its
  progress.jsonl gives the same three figures per rollout (the mean of the
  last 100 games; learning time).

Both play ``ALE/Pong-v5`` (sticky actions) with 8 envs. Reported for each run
(``--table`` reads what the runs have written, finished or not): env steps
reached, the mean return at 1M and 2M env steps (the first record at or past
the mark), env steps/s, and the env steps and wall minutes to the first record
at or above each of -20, -15, -10, 0, 10 and 18. One JSON line on stdout, a
markdown table on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench import benchlib, children

logger = logging.getLogger("bench")
SB3_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers",
                          "sb3_atari_ppo.py")
GIN_FILES = {"alf_async": "async_ppo_atari_pong.gin", "alf_sync": "ppo_atari_pong.gin"}
ENV_ID = "ALE/Pong-v5"
MARKS = (1_000_000, 2_000_000)
THRESHOLDS = (-20.0, -15.0, -10.0, 0.0, 10.0, 18.0)
LIBRARIES = ("alf_async", "alf_sync", "sb3")


def parse_runs(text: str) -> List[Tuple[str, int]]:
    """"alf_async:0,sb3:0" -> [("alf_async", 0), ("sb3", 0)]."""
    runs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        library, _, seed = item.partition(":")
        if library not in LIBRARIES or not seed.lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(
                f"a run is library:seed with library in {LIBRARIES}, got {item!r}")
        runs.append((library, int(seed)))
    return runs


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root_dir", required=True, help="where the runs live (kept)")
    p.add_argument("--runs", type=parse_runs, default=parse_runs("alf_async:0,sb3:0"))
    p.add_argument("--env_steps", type=int, default=2_000_000)
    p.add_argument("--session_s", type=float, default=3000.0,
                   help="train each unfinished run for at most this long, then stop it "
                        "(it resumes next time)")
    p.add_argument("--sb3_python", default=None, help="python of SB3's virtualenv")
    p.add_argument("--table", action="store_true", help="only report (train nothing)")
    p.add_argument("--gin_param", action="append", default=[],
                   help="extra gin binding for the alf_async and alf_sync runs (repeatable)")
    return p.parse_args(argv)


def run_dir(root_dir: str, library: str, seed: int) -> str:
    return os.path.join(os.path.abspath(root_dir), f"{library}_s{seed}")


def progress(root_dir: str, library: str, seed: int) -> List[Tuple[int, float, Optional[float]]]:
    """(env steps, wall seconds, mean return of the last 100 games) per record."""
    path = run_dir(root_dir, library, seed)
    if library in GIN_FILES:
        rows = benchlib.read_metrics(os.path.join(path, "metrics.jsonl"))
        return [(int(r["env_steps"]), float(r["wall_time"]), r.get("episode_return"))
                for r in rows]
    rows = benchlib.read_jsonl(os.path.join(path, "progress.jsonl"))
    return [(int(r["env_steps"]), float(r["wall_s"]), r.get("return")) for r in rows]


def train_alf(library: str, seed: int, args: argparse.Namespace) -> None:
    path = run_dir(args.root_dir, library, seed)
    params = [f"Trainer.seed={seed}", f"Trainer.num_env_steps={args.env_steps}",
              *args.gin_param]
    # The gin file only for a new run: a resumed one reads its saved config.gin.
    files = [] if os.path.isfile(os.path.join(path, "config.gin")) else [GIN_FILES[library]]
    status = benchlib.run_train(files, params, path, timeout_s=args.session_s)
    logger.info("%s seed %d: exit %s after %.0f s", library, seed, status["returncode"],
                status["wall_s"])


def train_sb3(seed: int, args: argparse.Namespace) -> None:
    if not args.sb3_python:
        raise SystemExit("--sb3_python is needed to train an sb3 run")
    cmd = [args.sb3_python, SB3_SCRIPT, "--env", ENV_ID, "--steps", str(args.env_steps),
           "--seed", str(seed), "--save_dir", run_dir(args.root_dir, "sb3", seed),
           "--stop_after_s", str(args.session_s)]
    logger.info("running: %s", " ".join(cmd))
    done = children.run_child(cmd, capture_stdout=True)
    logger.info("sb3 seed %d: exit %d %s", seed, done["returncode"],
                done["stdout"].strip()[-400:])


def first_at_or_above(points: Sequence[Tuple[int, float, Optional[float]]], score: float
                      ) -> Optional[Tuple[int, float]]:
    for steps, wall, value in points:
        if value is not None and value >= score:
            return steps, wall
    return None


def return_at(points: Sequence[Tuple[int, float, Optional[float]]], steps: int
              ) -> Optional[float]:
    for at, _, value in points:
        if at >= steps:
            return value
    return None


def analyse(points: Sequence[Tuple[int, float, Optional[float]]]) -> Dict[str, Any]:
    if not points:
        return {"env_steps": 0}
    steps, wall, _ = points[-1]
    return {"env_steps": steps, "wall_s": wall,
            "env_steps_per_s": steps / wall if wall > 0 else None,
            "return_at": {str(m): return_at(points, m) for m in MARKS},
            "last_return": points[-1][2],
            "to": {str(t): first_at_or_above(points, t) for t in THRESHOLDS}}


def markdown(results: Dict[str, Dict[str, Any]]) -> str:
    head = ("| run | env steps | return at 1M | at 2M | env steps/s | "
            + " | ".join(f"to {t:g}" for t in THRESHOLDS) + " |")
    lines = [head, "|---" * (5 + len(THRESHOLDS)) + "|"]

    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    for name, r in results.items():
        if not r["env_steps"]:
            lines.append(f"| {name} | 0 |" + " |" * (3 + len(THRESHOLDS)))
            continue
        reach = []
        for t in THRESHOLDS:
            hit = r["to"][str(t)]
            reach.append("-" if hit is None else f"{hit[0] / 1e6:.2f}M, {hit[1] / 60:.0f} min")
        lines.append(f"| {name} | {r['env_steps'] / 1e6:.2f}M | "
                     f"{num(r['return_at']['1000000'], '.1f')} | "
                     f"{num(r['return_at']['2000000'], '.1f')} | "
                     f"{num(r['env_steps_per_s'], '.0f')} | " + " | ".join(reach) + " |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    if not args.table:
        for library, seed in args.runs:
            points = progress(args.root_dir, library, seed)
            if points and points[-1][0] >= args.env_steps:
                logger.info("%s seed %d: done (%d env steps)", library, seed, points[-1][0])
                continue
            if library in GIN_FILES:
                train_alf(library, seed, args)
            else:
                train_sb3(seed, args)
    results = {f"{library} seed {seed}": analyse(progress(args.root_dir, library, seed))
               for library, seed in args.runs}
    print(markdown(results), file=sys.stderr)
    benchlib.emit({"bench": "pong_learning", "env": ENV_ID, "budget": args.env_steps,
                   "root_dir": os.path.abspath(args.root_dir), "runs": results,
                   **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

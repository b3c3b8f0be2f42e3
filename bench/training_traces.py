"""The PPO statistics of finished runs along their whole length, side by side.

Issue 24's "measure first": how far a stale batch is from the policy that
trains on it, and how hard one iteration pushes the policy, from the start of
a run to its convergence, sync against async. For each run directory (a
``metrics.jsonl`` and, if evaluated, an ``eval.jsonl``) the rows are cut into
bins of ``--bin`` env steps and each statistic is averaged per bin:

- behaviour_kl: KL(mu || pi_prox) estimated over the batch (0 without lag,
  up to normalizer updates and float rounding);
- truncated_fraction: the share of samples whose pi_prox / mu exceeded rho_bar
  (by any amount: about half of a sync run's samples, whose weights differ
  from 1 by the normalizer's update);
- truncated_weight: the share of the batch's summed pi_prox / mu that the
  truncation removed (how much the correction actually cut);
- approx_kl, clip_fraction: how far an iteration moved the policy (against
  pi_prox);
- explained_variance, action_std, lag, learning_rate, gradient_steps;
- episode_return (training, stochastic) and eval_return (deterministic, the
  evaluation that fell in the bin).

``--plot PATH`` also draws the curves themselves, row by row (not binned):
one panel per statistic of ``--plot_stats`` against env steps, every run a
line (eval_return as points), approx_kl and behaviour_kl on a log scale, so a
run that blows up past its budget shows where.

Usage: python -m bench.training_traces sync=runs/suite/half_cheetah_sync_s0 \\
           async=runs/suite/half_cheetah_async_s0 --bin 200000 [--plot traces.png]
Output: a markdown table per statistic on stderr, one JSON line on stdout
{"bench": "training_traces", "bin": ..., "runs": {label: {stat: [per bin]}},
"summary": {label: {"env_steps", "best_return", "final_return",
"max_approx_kl"}}, "plot": path or null}.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from bench import benchlib

logger = logging.getLogger("bench")

STATS = ("behaviour_kl", "truncated_fraction", "truncated_weight", "importance_weight",
         "approx_kl", "clip_fraction", "explained_variance", "action_std", "lag",
         "learning_rate", "gradient_steps", "episode_return", "eval_return")


def finite_value(row: Dict, stat: str) -> Optional[float]:
    """``row[stat]`` as a float when it is a finite number, else None."""
    value = row.get(stat)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def binned(rows: Sequence[Dict], evals: Sequence[Dict], bin_steps: int,
           num_bins: int) -> Dict[str, List[Optional[float]]]:
    """stat -> its mean over the rows whose env_steps fall in each bin
    [i * bin_steps, (i + 1) * bin_steps) (the last bin takes the rest); None
    where a bin has no value."""
    sums: Dict[str, List[float]] = {s: [0.0] * num_bins for s in STATS}
    counts: Dict[str, List[int]] = {s: [0] * num_bins for s in STATS}
    for source in (rows, evals):
        for row in source:
            i = min(int(row["env_steps"]) // bin_steps, num_bins - 1)
            for stat in STATS:
                value = finite_value(row, stat)
                if value is not None:
                    sums[stat][i] += value
                    counts[stat][i] += 1
    return {s: [sums[s][i] / counts[s][i] if counts[s][i] else None
                for i in range(num_bins)] for s in STATS}


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="LABEL=RUN_DIR (a run's --root_dir)")
    p.add_argument("--bin", type=int, default=200_000, help="env steps per bin")
    p.add_argument("--plot", default=None, help="write the curves to this PNG")
    p.add_argument("--plot_stats", default="episode_return,approx_kl",
                   help="comma-separated statistics, one panel each")
    args = p.parse_args(argv)
    args.labelled = []
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not os.path.isfile(os.path.join(path, "metrics.jsonl")):
            p.error(f"{item!r}: expected LABEL=RUN_DIR with a metrics.jsonl in RUN_DIR")
        args.labelled.append((label, path))
    if args.bin < 1:
        p.error(f"--bin must be >= 1 env step, got {args.bin}")
    args.plot_stat_list = [s for s in args.plot_stats.split(",") if s]
    unknown = [s for s in args.plot_stat_list if s not in STATS]
    if unknown or not args.plot_stat_list:
        p.error(f"--plot_stats: unknown {unknown or 'none given'}; choose from {', '.join(STATS)}")
    return args


LOG_SCALE_STATS = ("approx_kl", "behaviour_kl")


def summary(rows: Sequence[Dict]) -> Dict[str, Optional[float]]:
    """A run's length and the figures a collapse shows in: its best and last
    training return (metrics ``episode_return``) and its largest approx_kl."""
    def finite(stat: str) -> List[float]:
        return [v for v in (finite_value(r, stat) for r in rows) if v is not None]
    returns, kls = finite("episode_return"), finite("approx_kl")
    return {"env_steps": int(rows[-1]["env_steps"]) if rows else 0,
            "best_return": max(returns) if returns else None,
            "final_return": returns[-1] if returns else None,
            "max_approx_kl": max(kls) if kls else None}


def plot_curves(loaded: Sequence[Tuple[str, Sequence[Dict], Sequence[Dict]]],
                stats: Sequence[str], path: str) -> None:
    """One panel per statistic against env steps (millions), a line per run
    from its metrics rows, eval_return as markers from its eval rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(stats), 1, figsize=(9, 2.6 * len(stats)), sharex=True,
                             squeeze=False)
    for ax, stat in zip(axes[:, 0], stats):
        for i, (label, rows, evals) in enumerate(loaded):
            source, style = (evals, "o-") if stat == "eval_return" else (rows, "-")
            points = [(int(r["env_steps"]) / 1e6, v) for r in source
                      for v in (finite_value(r, stat),)
                      if v is not None and (stat not in LOG_SCALE_STATS or v > 0)]
            if points:
                ax.plot(*zip(*points), style, color=f"C{i % 10}", label=label,
                        linewidth=1, markersize=3)
        if stat in LOG_SCALE_STATS:
            ax.set_yscale("log")
        ax.set_ylabel(stat)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("env steps (millions)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cell(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    loaded = []
    for label, path in args.labelled:
        rows = benchlib.read_metrics(os.path.join(path, "metrics.jsonl"))
        eval_path = os.path.join(path, "eval.jsonl")
        evals = benchlib.read_jsonl(eval_path) if os.path.isfile(eval_path) else []
        loaded.append((label, rows, evals))
    last = max((int(r["env_steps"]) for _, rows, _ in loaded for r in rows), default=0)
    # A budget overshoots by part of a batch (2,002,944 for 2M): those rows
    # join the last bin rather than open one of their own.
    num_bins = max(1, round(last / args.bin))
    traces = {label: binned(rows, evals, args.bin, num_bins) for label, rows, evals in loaded}
    header = " | ".join(f"{(i + 1) * args.bin / 1e6:g}M" for i in range(num_bins))
    lines = []
    for stat in STATS:
        if all(v is None for t in traces.values() for v in t[stat]):
            continue
        lines += [f"#### {stat} (mean per bin of {args.bin:,} env steps, up to)", "",
                  f"| run | {header} |", "|---|" + "---:|" * num_bins]
        for label, trace in traces.items():
            lines.append(f"| {label} | " + " | ".join(_cell(v) for v in trace[stat]) + " |")
        lines.append("")
    print("\n".join(lines), file=sys.stderr)
    if args.plot:
        plot_curves(loaded, args.plot_stat_list, args.plot)
    benchlib.emit({"bench": "training_traces", "bin": args.bin, "runs": traces,
                   "summary": {label: summary(rows) for label, rows, _ in loaded},
                   "dirs": dict(args.labelled), "plot": args.plot})
    return 0


if __name__ == "__main__":
    sys.exit(main())

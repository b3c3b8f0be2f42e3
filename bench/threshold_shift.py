"""Does one config of the PyBullet suite need more env steps than another to
each return threshold, beyond what seed noise gives? A two-sample permutation
test on bench/suite.py's results files (no training here).

A group is the runs of one mode read from one or more results files (for
instance the sync rows of several sittings, or the async rows of a screen;
a run resumed to a larger budget counts once, by its longest row).
Each run gives, per curve (``suite_report.CURVES``) and threshold
(``suite_report.threshold_scores``), the env steps of its first point at or
above the threshold, or, where it never got there, the env steps it stopped
at: a censored value, the true one lies beyond it. Two runs compare by
Gehan's generalized Wilcoxon score: +1 where the first certainly needed more
env steps than the second, -1 where certainly fewer, 0 where a censored value
leaves it open or they tie. U sums the scores of every (candidate run,
reference run) pair. The one-sided p that the candidate is slower is the
share of the relabellings of the pooled runs into groups of the same sizes
whose U is at least the observed one (every relabelling counted, not
sampled: ``censored_steps.permutation_test``); ``p_faster`` the same
for U at most the observed one. A small p_slower says the candidate's runs
sit above the reference's more consistently than drawing both from one
config gives; it says nothing of how much (the medians' ratio does).

    python -m bench.threshold_shift --env ant \\
        --reference sync@docs/suite/current/ant_back_to_back_1M_zen2.jsonl \\
        --candidate async@docs/suite/current/ant_back_to_back_1M_zen2_seeds3-5.jsonl

A group is ``[LABEL=]MODE@FILE[,FILE...]``; ``--candidate`` repeats. Prints
one JSON line: per candidate, curve and threshold, both groups' Kaplan-Meier
medians (``censored_steps.km_median``: runs of different budgets pool
correctly; with one budget a run that never got there counts as the slowest,
as in suite_report's every-run row), their ratio, how many runs got there, U,
the number of pairs, p_slower and p_faster.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench import benchlib
from bench.suite_report import CURVES, MODES, ZOO_PPO_SCORES, distinct_runs, group_shift


def parse_group(spec: str) -> Tuple[str, str, List[str]]:
    """``[LABEL=]MODE@FILE[,FILE...]`` -> (label, mode, files)."""
    label, _, rest = spec.partition("=") if "=" in spec.split("@")[0] else ("", "", spec)
    mode, at, files = rest.partition("@")
    if not at or mode not in MODES or not files:
        raise ValueError(f"a group is [LABEL=]MODE@FILE[,FILE...] with MODE one of "
                         f"{', '.join(MODES)}; got {spec!r}")
    return label or mode, mode, files.split(",")


def load_group(env: str, mode: str, files: Sequence[str]) -> List[Dict[str, Any]]:
    """The results of ``env`` in ``mode`` from ``files`` (JSON lines of
    bench/suite.py), each run once (``distinct_runs``: a run resumed to a
    larger budget counts by its longest row)."""
    runs = []
    for path in files:
        if not os.path.isfile(path):
            raise ValueError(f"results file {path!r} does not exist")
        runs += [r for r in benchlib.read_jsonl(path)
                 if r.get("env") == env and r.get("mode") == mode]
    return distinct_runs(runs)


def compare(env: str, candidate: Sequence[Dict[str, Any]],
            reference: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """curve -> threshold name -> the figures of ``candidate`` against
    ``reference`` (see the module docstring)."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for curve in CURVES:
        cand = [r for r in candidate if r.get(curve)]
        ref = [r for r in reference if r.get(curve)]
        if cand and ref:
            out[curve] = group_shift(cand, ref, curve, ZOO_PPO_SCORES[env][1])
    return out


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, choices=sorted(ZOO_PPO_SCORES))
    parser.add_argument("--reference", required=True, help="[LABEL=]MODE@FILE[,FILE...]")
    parser.add_argument("--candidate", required=True, action="append",
                        help="[LABEL=]MODE@FILE[,FILE...] (repeatable)")
    args = parser.parse_args(argv)
    try:
        ref_label, ref_mode, ref_files = parse_group(args.reference)
        groups = [parse_group(spec) for spec in args.candidate]
    except ValueError as error:
        parser.error(str(error))
    try:
        reference = load_group(args.env, ref_mode, ref_files)
        candidates = [(label, load_group(args.env, mode, files), mode, files)
                      for label, mode, files in groups]
    except ValueError as error:
        parser.error(str(error))
    if not reference:
        parser.error(f"no {ref_mode} runs of {args.env} in {', '.join(ref_files)}")
    line: Dict[str, Any] = {"bench": "threshold_shift", "env": args.env,
                            "reference": {"label": ref_label, "runs": len(reference),
                                          "seeds": sorted(r["seed"] for r in reference)},
                            "candidates": []}
    for label, runs, mode, files in candidates:
        if not runs:
            parser.error(f"no {mode} runs of {args.env} in {', '.join(files)}")
        line["candidates"].append({"label": label, "runs": len(runs),
                                   "seeds": sorted(r["seed"] for r in runs),
                                   "curves": compare(args.env, runs, reference)})
    benchlib.emit(line)
    return line


if __name__ == "__main__":
    main()

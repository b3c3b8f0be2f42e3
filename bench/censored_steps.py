"""Statistics of env steps to a threshold where some runs never got there
(censored values): Gehan's pairwise scores with a permutation p for a shift
between two groups of runs, and the Kaplan-Meier median of one group. Pure
functions of ``Reach`` values; bench/suite_report.py turns a result into them
and bench/threshold_shift.py compares results files with them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence


@dataclass(frozen=True)
class Reach:
    """One run's env steps to a threshold (``reached``), or the env steps it
    stopped at without getting there (not ``reached``: censored)."""

    env_steps: float
    reached: bool


def gehan_score(a: Reach, b: Reach) -> int:
    """+1 where run a certainly needed more env steps than run b, -1 where
    certainly fewer, 0 where censoring leaves it open (or they tie)."""
    if a.reached and b.reached:
        return (a.env_steps > b.env_steps) - (a.env_steps < b.env_steps)
    if a.reached:  # b got no further than b.env_steps without reaching it
        return -1 if a.env_steps <= b.env_steps else 0
    if b.reached:
        return 1 if b.env_steps <= a.env_steps else 0
    return 0


def subset_sum_counts(values: Sequence[int], size: int) -> Dict[int, int]:
    """sum -> how many subsets of ``size`` of ``values`` (by position) have
    that sum: a count over every subset without enumerating them (dynamic
    programming over (subset size, sum); exact integers)."""
    by_size: List[Dict[int, int]] = [{0: 1}] + [{} for _ in range(size)]
    for value in values:
        for k in range(size, 0, -1):  # downwards: each value joins a subset once
            target = by_size[k]
            for total, ways in by_size[k - 1].items():
                target[total + value] = target.get(total + value, 0) + ways
    return by_size[size]


def permutation_test(candidate: Sequence[Reach], reference: Sequence[Reach]
                     ) -> Dict[str, Any]:
    """U (sum of ``gehan_score`` over every (candidate, reference) pair), the
    number of pairs and the exact one-sided permutation p values of U >=
    observed (``p_slower``) and U <= observed (``p_faster``) over every
    relabelling of the pooled runs into groups of the same sizes."""
    pooled = list(candidate) + list(reference)
    n, total = len(candidate), len(pooled)
    if n == 0 or n == total:
        raise ValueError("both groups need at least one run")
    # U of a group: the sum over i in it and j outside it of score(i, j). The
    # scores are antisymmetric, so the pairs inside the group cancel and U is
    # the sum of the group's rows over every pooled run; the relabellings'
    # U are then the sums of n of the pooled rows.
    row_sums = [sum(gehan_score(a, b) for b in pooled) for a in pooled]
    observed = sum(row_sums[:n])
    counts = subset_sum_counts(row_sums, n)
    labellings = math.comb(total, n)
    at_least = sum(ways for u, ways in counts.items() if u >= observed)
    at_most = sum(ways for u, ways in counts.items() if u <= observed)
    return {"U": observed, "pairs": n * (total - n), "p_slower": at_least / labellings,
            "p_faster": at_most / labellings}


def km_median(reaches: Sequence[Reach]) -> Optional[float]:
    """The Kaplan-Meier median of the env steps to a threshold: a run that
    stopped without getting there counts as at risk up to the env steps it
    trained and not after, so runs of different budgets pool correctly. Where
    the estimate of "not yet there" sits at exactly one half between two
    arrivals, their midpoint (the ordinary median when nobody was censored;
    with every censored run beyond every arrival, the median with those runs
    counted as the slowest); None where it never falls to one half (the
    median lies among the censored runs)."""
    arrivals = sorted({r.env_steps for r in reaches if r.reached})
    survival = 1.0
    for i, t in enumerate(arrivals):
        at_risk = sum(r.env_steps >= t for r in reaches)
        arrived = sum(r.reached and r.env_steps == t for r in reaches)
        survival *= 1.0 - arrived / at_risk
        if math.isclose(survival, 0.5):
            return (t + arrivals[i + 1]) / 2 if i + 1 < len(arrivals) else None
        if survival < 0.5:
            return t
    return None

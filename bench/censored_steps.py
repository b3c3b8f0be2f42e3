"""Statistics of env steps to a threshold where some runs never got there
(censored values): Gehan's pairwise scores with a permutation p for a shift
between two groups of runs, and the Kaplan-Meier median of one group. Pure
functions of ``Reach`` values; bench/suite_report.py turns a result into them
and bench/threshold_shift.py compares results files with them."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

EXACT_LIMIT = 200_000  # relabellings enumerated whole; above it, this many random draws


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


def permutation_test(candidate: Sequence[Reach], reference: Sequence[Reach],
                     seed: int = 0) -> Dict[str, float]:
    """U (sum of ``gehan_score`` over every (candidate, reference) pair), the
    number of pairs and the one-sided permutation p values of U >= observed
    (``p_slower``) and U <= observed (``p_faster``) over relabellings of the
    pooled runs into groups of the same sizes."""
    pooled = list(candidate) + list(reference)
    n, total = len(candidate), len(pooled)
    if n == 0 or n == total:
        raise ValueError("both groups need at least one run")
    # U of a group: the sum over i in it and j outside it of score(i, j). The
    # scores are antisymmetric, so the pairs inside the group cancel and U is
    # the sum of the group's rows over every pooled run.
    row_sums = [sum(gehan_score(a, b) for b in pooled) for a in pooled]

    def statistic(members: Sequence[int]) -> int:
        return sum(row_sums[i] for i in members)

    observed = statistic(range(n))
    count = math.comb(total, n)
    if count <= EXACT_LIMIT:
        labellings = itertools.combinations(range(total), n)
        draws = count
    else:
        rng = random.Random(seed)
        labellings = (rng.sample(range(total), n) for _ in range(EXACT_LIMIT))
        draws = EXACT_LIMIT
    at_least = at_most = 0
    for members in labellings:
        u = statistic(members)
        at_least += u >= observed
        at_most += u <= observed
    return {"U": observed, "pairs": n * (total - n), "p_slower": at_least / draws,
            "p_faster": at_most / draws, "exact": count <= EXACT_LIMIT}


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

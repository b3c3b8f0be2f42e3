"""bench/censored_steps.py: Gehan's scores with censored runs, the exact
permutation p values (counted, checked against enumerating every
relabelling), and the Kaplan-Meier median."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from bench import censored_steps as stats
from bench.censored_steps import Reach


def median_over_every_run(steps):
    """The median of ``steps`` with a run that never got there (None) taken as
    slower than every run that did; None where the median falls on such a run."""
    ordered = sorted(steps, key=lambda s: math.inf if s is None else s)
    middle = ordered[(len(ordered) - 1) // 2: len(ordered) // 2 + 1]
    return None if not middle or any(s is None for s in middle) else sum(middle) / len(middle)


def test_gehan_scores_leave_open_what_censoring_hides():
    assert stats.gehan_score(Reach(5, True), Reach(3, True)) == 1
    assert stats.gehan_score(Reach(3, True), Reach(5, True)) == -1
    assert stats.gehan_score(Reach(3, True), Reach(3, True)) == 0
    # b stopped at 4 without getting there: a at 3 was certainly faster...
    assert stats.gehan_score(Reach(3, True), Reach(4, False)) == -1
    assert stats.gehan_score(Reach(4, True), Reach(4, False)) == -1
    # ...but a at 6 may or may not be slower than b's unknown value beyond 4
    assert stats.gehan_score(Reach(6, True), Reach(4, False)) == 0
    assert stats.gehan_score(Reach(4, False), Reach(3, True)) == 1
    assert stats.gehan_score(Reach(4, False), Reach(6, True)) == 0
    assert stats.gehan_score(Reach(4, False), Reach(9, False)) == 0


def test_gehan_scores_are_antisymmetric():
    """permutation_test leans on this: a group's own pairs cancel in U."""
    runs = [Reach(s, r) for s in (1, 2, 3, 4) for r in (True, False)]
    for a in runs:
        for b in runs:
            assert stats.gehan_score(a, b) == -stats.gehan_score(b, a), (a, b)


def test_exact_p_counts_every_relabelling():
    """Candidates {3, 4} against {1, 2}: U = 4 of 4 pairs, and of the six ways
    to pick two of four runs only the observed one reaches U = 4."""
    out = stats.permutation_test([Reach(3, True), Reach(4, True)],
                                 [Reach(1, True), Reach(2, True)])
    assert out["U"] == 4 and out["pairs"] == 4
    assert out["p_slower"] == pytest.approx(1 / 6)
    assert out["p_faster"] == 1.0
    # Swapped, the candidate is the faster group.
    swapped = stats.permutation_test([Reach(1, True), Reach(2, True)],
                                     [Reach(3, True), Reach(4, True)])
    assert swapped["U"] == -4 and swapped["p_faster"] == pytest.approx(1 / 6)


def test_a_run_that_never_got_there_counts_as_slower_than_the_runs_that_did():
    """Three candidate runs that missed the threshold within the budget every
    reference run reached it in are as slow as three can be: p is 1 / C(6, 3)."""
    candidate = [Reach(1e6, False)] * 3
    reference = [Reach(2e5, True), Reach(3e5, True), Reach(4e5, True)]
    out = stats.permutation_test(candidate, reference)
    assert out["U"] == 9
    assert out["p_slower"] == pytest.approx(1 / math.comb(6, 3))


def test_identical_groups_are_no_evidence_either_way():
    runs = [Reach(s, True) for s in (1, 2, 3)]
    out = stats.permutation_test(runs, list(runs))
    assert out["U"] == 0
    assert out["p_slower"] > 0.5 and out["p_faster"] > 0.5


def _enumerated(candidate, reference):
    """The permutation test by brute force: U of every relabelling, the
    candidate's pairs summed score by score."""
    pooled = candidate + reference
    n = len(candidate)

    def u(members):
        inside = set(members)
        return sum(stats.gehan_score(pooled[i], pooled[j])
                   for i in members for j in range(len(pooled)) if j not in inside)

    observed = u(range(n))
    all_u = [u(members) for members in itertools.combinations(range(len(pooled)), n)]
    return observed, (sum(x >= observed for x in all_u) / len(all_u),
                      sum(x <= observed for x in all_u) / len(all_u))


def test_the_counted_p_equals_enumerating_every_relabelling():
    rng = random.Random(11)
    for _ in range(60):
        sizes = rng.randint(1, 5), rng.randint(1, 5)
        candidate, reference = ([Reach(rng.choice([1, 2, 3, 4, 5, 6]), rng.random() < 0.7)
                                 for _ in range(size)] for size in sizes)
        out = stats.permutation_test(candidate, reference)
        observed, (p_slower, p_faster) = _enumerated(candidate, reference)
        assert out["U"] == observed
        assert out["p_slower"] == pytest.approx(p_slower)
        assert out["p_faster"] == pytest.approx(p_faster)


def test_large_groups_are_counted_exactly_and_fast():
    """C(60, 30) ~ 1.2e17 relabellings: counted, not enumerated. Thirty
    candidates all after thirty references are the one most extreme labelling."""
    candidate = [Reach(1e6 + s, True) for s in range(30)]
    reference = [Reach(s, True) for s in range(30)]
    out = stats.permutation_test(candidate, reference)
    assert out["U"] == 900
    assert out["p_slower"] == 1 / math.comb(60, 30)
    assert out["p_faster"] == 1.0


def test_an_empty_group_is_refused():
    with pytest.raises(ValueError):
        stats.permutation_test([], [Reach(1, True)])


def test_with_one_budget_the_km_median_is_the_median_over_every_run():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        steps = [rng.choice([None, *range(50_000, 1_000_001, 50_000)]) for _ in range(n)]
        reaches = [Reach(1e6 + 4096, False) if s is None else Reach(s, True) for s in steps]
        assert stats.km_median(reaches) == median_over_every_run(steps), steps


def test_the_oracle_counts_a_run_that_never_got_there_as_the_slowest():
    assert median_over_every_run([300_000, None, 100_000]) == 300_000
    assert median_over_every_run([400_000, 100_000, 200_000, None]) == 300_000
    assert median_over_every_run([100_000, None]) is None
    assert median_over_every_run([]) is None


def test_a_run_censored_early_leaves_the_risk_set_at_its_budget():
    """A run that stopped at 0.5M without getting there says nothing about
    0.7M: the median of {0.3M, 0.7M, 0.9M and a miss at 0.5M} is 0.7M, where
    counting the miss as the slowest run would give 0.8M."""
    reaches = [Reach(3e5, True), Reach(5e5, False), Reach(7e5, True), Reach(9e5, True)]
    assert stats.km_median(reaches) == 7e5
    assert median_over_every_run([3e5, None, 7e5, 9e5]) == 8e5
    assert stats.km_median([Reach(5e5, False)] * 3 + [Reach(1e5, True)]) is None

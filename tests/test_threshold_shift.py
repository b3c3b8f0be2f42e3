"""bench/threshold_shift.py: Gehan's scores with censored runs, the exact and
the sampled permutation p values, and the command line on a results file."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from bench import threshold_shift as shift
from bench.suite_report import median_over_every_run
from bench.threshold_shift import Reach

REPO = __file__.rsplit("/tests/", 1)[0]


def test_gehan_scores_leave_open_what_censoring_hides():
    assert shift.gehan_score(Reach(5, True), Reach(3, True)) == 1
    assert shift.gehan_score(Reach(3, True), Reach(5, True)) == -1
    assert shift.gehan_score(Reach(3, True), Reach(3, True)) == 0
    # b stopped at 4 without getting there: a at 3 was certainly faster...
    assert shift.gehan_score(Reach(3, True), Reach(4, False)) == -1
    assert shift.gehan_score(Reach(4, True), Reach(4, False)) == -1
    # ...but a at 6 may or may not be slower than b's unknown value beyond 4
    assert shift.gehan_score(Reach(6, True), Reach(4, False)) == 0
    assert shift.gehan_score(Reach(4, False), Reach(3, True)) == 1
    assert shift.gehan_score(Reach(4, False), Reach(6, True)) == 0
    assert shift.gehan_score(Reach(4, False), Reach(9, False)) == 0


def test_exact_p_counts_every_relabelling():
    """Candidates {3, 4} against {1, 2}: U = 4 of 4 pairs, and of the six ways
    to pick two of four runs only the observed one reaches U = 4."""
    out = shift.permutation_test([Reach(3, True), Reach(4, True)],
                                 [Reach(1, True), Reach(2, True)])
    assert out["exact"] and out["U"] == 4 and out["pairs"] == 4
    assert out["p_slower"] == pytest.approx(1 / 6)
    assert out["p_faster"] == 1.0
    # Swapped, the candidate is the faster group.
    swapped = shift.permutation_test([Reach(1, True), Reach(2, True)],
                                     [Reach(3, True), Reach(4, True)])
    assert swapped["U"] == -4 and swapped["p_faster"] == pytest.approx(1 / 6)


def test_a_run_that_never_got_there_counts_as_slower_than_the_runs_that_did():
    """Three candidate runs that missed the threshold within the budget every
    reference run reached it in are as slow as three can be: p is 1 / C(6, 3)."""
    candidate = [Reach(1e6, False)] * 3
    reference = [Reach(2e5, True), Reach(3e5, True), Reach(4e5, True)]
    out = shift.permutation_test(candidate, reference)
    assert out["U"] == 9
    assert out["p_slower"] == pytest.approx(1 / math.comb(6, 3))


def test_identical_groups_are_no_evidence_either_way():
    runs = [Reach(s, True) for s in (1, 2, 3)]
    out = shift.permutation_test(runs, list(runs))
    assert out["U"] == 0
    assert out["p_slower"] > 0.5 and out["p_faster"] > 0.5


def test_sampled_relabellings_approximate_the_exact_p(monkeypatch):
    candidate = [Reach(s, True) for s in (4, 6, 7, 9, 10)]
    reference = [Reach(s, True) for s in (1, 2, 3, 5, 8)]
    exact = shift.permutation_test(candidate, reference)
    monkeypatch.setattr(shift, "EXACT_LIMIT", 20_000)  # C(10, 5) = 252 < 20,000: still exact
    assert shift.permutation_test(candidate, reference) == exact
    monkeypatch.setattr(shift, "EXACT_LIMIT", 100)  # 252 > 100: 100 random draws
    sampled = shift.permutation_test(candidate, reference, seed=3)
    assert not sampled["exact"] and sampled["U"] == exact["U"]
    assert abs(sampled["p_slower"] - exact["p_slower"]) < 0.1
    assert shift.permutation_test(candidate, reference, seed=3) == sampled  # seeded


def test_an_empty_group_is_refused():
    with pytest.raises(ValueError):
        shift.permutation_test([], [Reach(1, True)])


def test_with_one_budget_the_km_median_is_the_median_over_every_run():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        steps = [rng.choice([None, *range(50_000, 1_000_001, 50_000)]) for _ in range(n)]
        reaches = [Reach(1e6 + 4096, False) if s is None else Reach(s, True) for s in steps]
        assert shift.km_median(reaches) == median_over_every_run(steps), steps


def test_a_run_censored_early_leaves_the_risk_set_at_its_budget():
    """A run that stopped at 0.5M without getting there says nothing about
    0.7M: the median of {0.3M, 0.7M, 0.9M and a miss at 0.5M} is 0.7M, where
    counting the miss as the slowest run would give 0.8M."""
    reaches = [Reach(3e5, True), Reach(5e5, False), Reach(7e5, True), Reach(9e5, True)]
    assert shift.km_median(reaches) == 7e5
    assert median_over_every_run([3e5, None, 7e5, 9e5]) == 8e5
    assert shift.km_median([Reach(5e5, False)] * 3 + [Reach(1e5, True)]) is None


def _result(mode: str, seed: int, steps_to_1000: int, budget: int = 1_000_000):
    """A bench/suite.py result whose eval and training curves cross 1000 at
    ``steps_to_1000`` (never, if it is beyond ``budget``)."""
    curve = [[s, s / 1000.0, 1200.0 if s >= steps_to_1000 else 500.0]
             for s in range(50_000, budget + 1, 50_000)]
    return {"env": "ant", "mode": mode, "seed": seed, "evaluations": curve,
            "training": curve, "total_env_steps": budget}


def test_the_command_reads_groups_from_results_files(tmp_path):
    sync, async_ = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
    sync.write_text("".join(json.dumps(_result("sync", s, 250_000 + 50_000 * s)) + "\n"
                            for s in range(4)))
    rows = [_result("async", s, 500_000 + 50_000 * s) for s in range(3)]
    rows.append(_result("async", 3, 2_000_000))  # never got there
    rows.append(_result("sync", 9, 100_000))  # another mode's row: left out
    async_.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(
        [sys.executable, "-m", "bench.threshold_shift", "--env", "ant",
         "--reference", f"sync@{sync}", "--candidate", f"shipped=async@{async_}"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["reference"] == {"label": "sync", "runs": 4, "seeds": [0, 1, 2, 3]}
    (candidate,) = line["candidates"]
    assert candidate["label"] == "shipped" and candidate["seeds"] == [0, 1, 2, 3]
    cell = candidate["curves"]["evaluations"]["1000"]
    assert cell["candidate_reached"] == 3 and cell["reference_reached"] == 4
    assert cell["U"] == 16 and cell["pairs"] == 16  # every async run after every sync run
    assert cell["p_slower"] == pytest.approx(1 / math.comb(8, 4), abs=1e-6)  # 6 digits
    # Kaplan-Meier medians: async's miss (at 1M, past every arrival) is its slowest
    assert cell["candidate_median"] == pytest.approx(575_000)
    assert cell["reference_median"] == pytest.approx(325_000)
    assert "1500" not in candidate["curves"]["evaluations"]  # nobody got there


def test_a_group_spec_splits_at_the_first_equals_sign_and_the_at_sign():
    assert shift.parse_group("async@a.jsonl,b.jsonl") == ("async", "async", ["a.jsonl", "b.jsonl"])
    assert shift.parse_group("lag0=async@runs/x=1/r.jsonl") == ("lag0", "async",
                                                                 ["runs/x=1/r.jsonl"])
    assert shift.parse_group("sync@runs/x=1/r.jsonl") == ("sync", "sync", ["runs/x=1/r.jsonl"])


@pytest.mark.parametrize("spec, message", [
    ("sideways@x.jsonl", "MODE one of"),
    ("sync", "MODE one of"),
    ("sync@/no/such/results.jsonl", "does not exist"),
])
def test_bad_groups_are_refused_by_name(spec, message):
    out = subprocess.run(
        [sys.executable, "-m", "bench.threshold_shift", "--env", "ant",
         "--reference", spec, "--candidate", spec],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert message in out.stderr

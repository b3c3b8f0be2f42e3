"""bench/threshold_shift.py: the command line on results files and its group
specs (the statistics it reports: tests/test_censored_steps.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bench import threshold_shift as shift

REPO = __file__.rsplit("/tests/", 1)[0]


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


def test_a_group_counts_a_run_resumed_to_a_larger_budget_once(tmp_path):
    """The 0.5M row of a run in one file and its 1M row (the same run trained
    on) in another: one run of the group, read at its longest."""
    half = {**_result("sync", 6, 2_000_000, budget=500_000), "gin_params":
            ["Trainer.seed=6", "Trainer.num_env_steps=500000"]}
    whole = {**_result("sync", 6, 800_000), "gin_params":
             ["Trainer.seed=6", "Trainer.num_env_steps=1000000"]}
    files = []
    for name, rows in (("half.jsonl", [half, _result("sync", 7, 300_000)]),
                       ("whole.jsonl", [whole])):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(str(tmp_path / name))
    group = shift.load_group("ant", "sync", files)
    assert sorted((r["seed"], r["total_env_steps"]) for r in group) == [
        (6, 1_000_000), (7, 1_000_000)]


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

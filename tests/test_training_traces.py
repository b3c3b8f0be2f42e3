"""bench/training_traces.py: binned statistics, the per-run summary, the curves' plot."""

import json
import os
import subprocess
import sys

import pytest

from bench import training_traces

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_run(path, returns, kls, evals=()):
    os.makedirs(path)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for i, (ret, kl) in enumerate(zip(returns, kls)):
            f.write(json.dumps({"iteration": i + 1, "env_steps": (i + 1) * 100,
                                "episode_return": ret, "approx_kl": kl}) + "\n")
    if evals:
        with open(os.path.join(path, "eval.jsonl"), "w") as f:
            for steps, ret in evals:
                f.write(json.dumps({"env_steps": steps, "eval_return": ret}) + "\n")


def test_summary_bins_and_plot(tmp_path, capfd):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _write_run(a, [1.0, 5.0, 3.0, 2.0], [0.01, 0.02, 7.5, 0.01], evals=[(200, 4.0), (400, 2.5)])
    _write_run(b, [0.0, float("nan"), 6.0, 6.0], [0.01, 0.0, 0.03, 0.02])
    plot = str(tmp_path / "curves.png")
    assert training_traces.main([f"first={a}", f"second={b}", "--bin", "200",
                                 "--plot", plot, "--plot_stats",
                                 "episode_return,approx_kl,eval_return"]) == 0
    out = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert out["summary"]["first"] == {"env_steps": 400, "best_return": 5.0,
                                       "final_return": 2.0, "max_approx_kl": 7.5}
    assert out["summary"]["second"]["best_return"] == 6.0
    # Bins of 200 env steps: [0, 200) holds the first row, the last bin the rest.
    assert out["runs"]["first"]["episode_return"] == pytest.approx([1.0, 10.0 / 3.0], abs=1e-5)
    assert out["runs"]["first"]["eval_return"] == [None, 3.25]
    assert out["runs"]["second"]["episode_return"] == [0.0, 6.0]  # the NaN row is skipped
    assert out["plot"] == plot
    with open(plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_unknown_plot_stat_is_refused_by_name(tmp_path):
    a = str(tmp_path / "a")
    _write_run(a, [1.0], [0.01])
    result = subprocess.run([sys.executable, "-m", "bench.training_traces", f"a={a}",
                             "--plot_stats", "episode_return,reward"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "reward" in result.stderr and "episode_return" in result.stderr

"""The warning of a run whose policy moves too far per iteration, several
iterations in a row (``alf_async.kl_watch``), from the watch itself and from a
real run's log."""

from __future__ import annotations

import os

import pytest

from reliability_helpers import DEMO_GIN, small_params, train_in_this_process

from alf_async.kl_watch import KLWatch
from alf_async.utils.validation import ConfigError


def test_a_streak_above_the_bound_warns_once_and_a_dip_starts_a_new_streak():
    watch = KLWatch(bound=0.1, iterations=3)
    kls = [0.05, 0.2, 0.3, 0.05, 0.2, 0.4, 0.9, 2.0, 5.0, 0.01, 0.5, 0.6, 0.7]
    warned = [i for i, kl in enumerate(kls, start=1)
              if watch.observe(i, {"approx_kl": kl, "learning_rate": 1e-3})]
    assert warned == [7, 13]  # iterations 5-7, then 11-13; 8 and 9 continue the first


def test_the_warning_names_the_streak_and_the_settings():
    watch = KLWatch(bound=0.1, iterations=2)
    assert watch.observe(4, {"approx_kl": 0.79, "learning_rate": 1e-3}) is None
    text = watch.observe(5, {"approx_kl": 6.9e9, "learning_rate": 1e-3})
    assert "iterations 4-5: 0.79, 6.9e+09" in text
    for setting in ("PPOLearner.learning_rate (now 0.001)", "PPOLearner.target_kl",
                    "PPOLearner.num_epochs", "KLWatch.bound"):
        assert setting in text, text


@pytest.mark.parametrize("stats", [{}, {"approx_kl": float("nan")}])
def test_learners_without_a_kl_and_non_finite_values_never_warn(stats):
    watch = KLWatch(bound=0.1, iterations=1)
    assert watch.observe(1, stats) is None


def test_bound_zero_turns_it_off_and_bad_values_are_refused():
    assert KLWatch(bound=0.0, iterations=1).observe(1, {"approx_kl": 10.0}) is None
    with pytest.raises(ConfigError, match="KLWatch.iterations"):
        KLWatch(iterations=0)


def test_a_run_over_the_bound_logs_the_warning(tmp_path):
    root = str(tmp_path / "run")
    # A bound no iteration stays under (with 4 epochs on the batch, the policy
    # moves from the one that acted): the warning comes at the second one.
    code = train_in_this_process(root, [DEMO_GIN], small_params(
        "PPOLearner.num_epochs=4", "KLWatch.bound=1e-12", "KLWatch.iterations=2",
        iterations=3))
    assert code == 0
    log = open(os.path.join(root, "log.txt"), encoding="utf-8").read()
    assert log.count("approx_kl has been above 1e-12 for 2 iterations in a row "
                     "(iterations 1-2") == 1, log[-3000:]


def test_one_iteration_above_the_spike_warns_at_once_naming_it():
    """The image env's async run past its budget: two iterations of 1.04 and
    2.23, back under the bound before a third, then the return fell."""
    watch = KLWatch(bound=0.1, iterations=3, spike=1.0)
    kls = [0.02, 0.12, 0.05, 1.04, 2.23, 0.39, 0.01, 1.5]
    texts = {i: watch.observe(i, {"approx_kl": kl}) for i, kl in enumerate(kls, start=1)}
    assert [i for i, t in texts.items() if t] == [4, 8]  # 5 and 6 continue 4's streak
    assert "approx_kl reached 1.04 at iteration 4 (above KLWatch.spike=1)" in texts[4]
    assert "KLWatch.spike" in texts[4] and "PPOLearner.target_kl" in texts[4]
    # spike 0: only streaks warn (iterations 4-6 are three above the bound).
    streaks_only = KLWatch(bound=0.1, iterations=3, spike=0.0)
    assert [i for i, kl in enumerate(kls, start=1)
            if streaks_only.observe(i, {"approx_kl": kl})] == [6]


def test_a_spike_below_the_bound_is_refused_by_name():
    with pytest.raises(ConfigError, match="KLWatch.spike=0.05 is below KLWatch.bound=0.1"):
        KLWatch(bound=0.1, spike=0.05)

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

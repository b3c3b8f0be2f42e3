"""A warning when a PPO run's policy moves too far per iteration, for several
iterations in a row: what comes before a run's collapse.

The learner's ``approx_kl`` (the mean approximate KL between the policy at
each gradient step and the one the iteration started from, per iteration) stays
around 0.01-0.05 in healthy runs of the shipped configs; runs that collapsed
past their budget (the masked-CartPole LSTM configs, docs/notebook/
lstm_past_budget.md) showed iterations of 0.3 up to 1e4 before their return
fell. ``KLWatch.observe`` is fed every iteration's value and returns one
warning when the value has been above ``bound`` for ``iterations`` iterations
in a row, or at once when one iteration's value is above ``spike`` (once per
streak above ``bound`` either way), naming the settings that bound the step.
The spike catches blow-ups that come an iteration or two at a time (the image
env's async runs past their budget: approx_kl 1.0 and 2.2 on two iterations,
then back under the bound, the return falling from 14.5 to 7).
"""

from __future__ import annotations

import math
from typing import List, Mapping, Optional

import gin

from alf_async.utils.validation import ConfigError, check


@gin.configurable
class KLWatch:
    """Watches PPO's ``approx_kl`` per iteration.

    Args:
        bound: an iteration's ``approx_kl`` above this counts (0: never warn).
        iterations: how many iterations in a row above ``bound`` make a warning.
        spike: one iteration's ``approx_kl`` above this warns at once (0: only
            streaks warn); at least ``bound``.
    """

    def __init__(self, bound: float = 0.1, iterations: int = 3, spike: float = 1.0):
        check("KLWatch", "bound", bound, "number", low=0)
        check("KLWatch", "iterations", iterations, "int", low=1)
        check("KLWatch", "spike", spike, "number", low=0)
        if spike and spike < bound:
            raise ConfigError(f"KLWatch.spike={spike:g} is below KLWatch.bound={bound:g}: "
                              "expected 0 (off) or a value of at least the bound")
        self.bound = float(bound)
        self.iterations = int(iterations)
        self.spike = float(spike)
        self._streak: List[float] = []
        self._first_iteration = 0
        self._warned = False

    def observe(self, iteration: int, stats: Mapping[str, float]) -> Optional[str]:
        """Feed one iteration's learner statistics; returns the warning to log
        when this iteration completes a streak (None otherwise, and for
        learners without ``approx_kl``)."""
        kl = stats.get("approx_kl")
        if not self.bound or kl is None or not math.isfinite(kl) or kl <= self.bound:
            self._streak, self._warned = [], False
            return None
        if not self._streak:
            self._first_iteration = iteration
        self._streak.append(float(kl))
        if self._warned:
            return None
        if len(self._streak) >= self.iterations:
            values = ", ".join(f"{v:.3g}" for v in self._streak)
            what = (f"approx_kl has been above {self.bound:g} for {len(self._streak)} "
                    f"iterations in a row (iterations {self._first_iteration}-{iteration}: "
                    f"{values})")
        elif self.spike and kl > self.spike:
            what = (f"approx_kl reached {kl:.3g} at iteration {iteration} (above "
                    f"KLWatch.spike={self.spike:g})")
        else:
            return None
        self._warned = True
        rate = stats.get("learning_rate")
        rate_text = f" (now {rate:.3g})" if rate is not None else ""
        return (f"{what}: each iteration moves the policy far from the one that "
                "acted, which in runs measured here came before the return collapsed. "
                f"Bound the step: a smaller PPOLearner.learning_rate{rate_text} or "
                "PPOLearner.learning_rate_schedule='linear', a KL budget "
                "PPOLearner.target_kl (e.g. 0.02), or fewer PPOLearner.num_epochs. "
                "KLWatch.bound and KLWatch.spike set this warning's thresholds "
                "(bound 0: off).")

"""How far one PPO iteration may move the policy: the learning-rate schedule,
the clip range that may follow it, and the per-iteration KL budget
(``PPOLearner``'s learning_rate_schedule, learning_rate_end_fraction,
anneal_clip_ratio and target_kl).

- "constant": every iteration steps with ``learning_rate``.
- "linear": the step size falls linearly with the run's progress p (env steps
  trained on before the iteration / ``Trainer.num_env_steps``, or iterations /
  ``Trainer.num_iterations``), lr(p) = learning_rate * (1 - p * (1 - f)) with
  f = learning_rate_end_fraction, as the ``lin_<lr>`` schedules of SB3 and the
  rl-baselines3-zoo do (f = 0). It depends on p only, so a resumed run goes on
  where it stopped; Hogwild workers get the progress of the batches granted
  before theirs (``hogwild.messages.RunIteration``); a caller that gives no
  progress trains at learning_rate.
- anneal_clip_ratio (with "linear"): the clip range falls by the same factor,
  clip(p) = clip_ratio * lr(p) / learning_rate, as the zoo's ``lin_0.1``
  clip range for Atari does beside its ``lin_2.5e-4`` learning rate.
- target_kl (None: off): an iteration's remaining gradient steps are skipped
  once a minibatch's approximate KL between the policy being trained and the
  iteration's starting policy (pi_prox; the behaviour policy mu with
  ``lag_correction = "none"``) exceeds 1.5 * target_kl, measured before its
  step (SB3's ``target_kl``). It bounds how far one version moves the policy,
  hence how off-policy a batch one version old is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from alf_async.utils.validation import ConfigError, check

SCHEDULES = ("constant", "linear")
# A minibatch whose KL exceeds this multiple of target_kl ends the iteration.
KL_STOP_FACTOR = 1.5


@dataclass(frozen=True)
class StepSizeControl:
    """The learning rate of each iteration and the KL budget within one."""

    learning_rate: float
    schedule: str = "constant"
    end_fraction: float = 0.0
    target_kl: Optional[float] = None
    anneal_clip_ratio: bool = False

    def __post_init__(self) -> None:
        for name, value, kind, bounds in (
                ("learning_rate", self.learning_rate, "number", dict(low=0, low_open=True)),
                ("learning_rate_schedule", self.schedule, "choice", dict(choices=SCHEDULES)),
                ("learning_rate_end_fraction", self.end_fraction, "number",
                 dict(low=0, high=1)),
                ("target_kl", self.target_kl, "number",
                 dict(low=0, low_open=True, optional=True))):
            check("PPOLearner", name, value, kind, **bounds)
        check("PPOLearner", "anneal_clip_ratio", self.anneal_clip_ratio, "bool")
        if self.anneal_clip_ratio and self.schedule == "constant":
            raise ConfigError(
                "PPOLearner.anneal_clip_ratio=True makes the clip range follow the "
                "learning-rate schedule, but PPOLearner.learning_rate_schedule is "
                "'constant': set it to 'linear' or leave anneal_clip_ratio False")

    def learning_rate_at(self, progress: Optional[float]) -> float:
        """The step size of an iteration at ``progress`` (0..1, the share of
        the budget trained on before it; None: the schedule's start)."""
        if self.schedule == "constant" or progress is None:
            return float(self.learning_rate)
        p = min(max(float(progress), 0.0), 1.0)
        return float(self.learning_rate) * (1.0 - p * (1.0 - self.end_fraction))

    def clip_ratio_at(self, clip_ratio: float, progress: Optional[float]) -> float:
        """PPO's clip epsilon for an iteration at ``progress``: ``clip_ratio``,
        scaled like the learning rate when ``anneal_clip_ratio`` is set."""
        if not self.anneal_clip_ratio:
            return float(clip_ratio)
        return float(clip_ratio) * self.learning_rate_at(progress) / float(self.learning_rate)

    def over_budget(self, approx_kl: Any) -> bool:
        """Whether a minibatch with this approximate KL (to the iteration's
        starting policy; a float or a 0-d tensor, read only with a budget
        set) ends the iteration before its step."""
        return (self.target_kl is not None
                and float(approx_kl) > KL_STOP_FACTOR * self.target_kl)

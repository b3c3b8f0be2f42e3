"""Holding an off-policy run to a ratio of env steps to gradient steps.

With a replay buffer, sampling and training need not wait for each other, and
an async run would otherwise do as many gradient steps as the learner's speed
allows, whatever the envs' speed: another algorithm than its sync version.
``StepRatio`` keeps the two counts tied: after ``learning_starts`` env steps,
every ``env_steps_per_gradient_step`` = r env steps buy one gradient step.

- The learner may take ``gradient_steps_due(E, G)`` more steps, E env steps
  collected (in the buffer), G gradient steps taken: up to
  G*(E) = floor((E - learning_starts) / r) in all once E >= learning_starts.
- Actors may start a batch of b env steps only if the steps collected or in
  flight (E_c) plus b stay within ``lead`` of what the learner has paid for:
  E_c + b <= learning_starts + r * G + lead (``may_collect``). Before
  ``learning_starts`` they are never held back.

With one actor (N = 1), ``lead`` = b (one batch) and a learner that takes every
due step before the actor is released, the run is the sync loop "collect b
steps, take b / r gradient steps". With N actors, lead = N x b lets each hold
one batch, and the achieved ratio differs from r by at most lead / (r G) over
the run, a bound that shrinks as the run goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StepRatio:
    """The env-steps : gradient-steps contract of an off-policy run.

    Args:
        env_steps_per_gradient_step: r > 0 (1.0: one gradient step per env
            step, as in SB3's SAC with train_freq 1 and gradient_steps 1).
        learning_starts: env steps collected before the first gradient step.
        lead: env steps the actors may be ahead of what the learner paid for
            (> 0; the Trainer uses N x K x unroll_length).
        env_steps_offset, gradient_steps_offset: the counts the contract starts
            from (a run resumed without its replay buffer collects
            ``learning_starts`` steps again before training on).
    """

    env_steps_per_gradient_step: float
    learning_starts: int
    lead: int
    env_steps_offset: int = 0
    gradient_steps_offset: int = 0

    def __post_init__(self) -> None:
        if not self.env_steps_per_gradient_step > 0:
            raise ValueError("env_steps_per_gradient_step must be > 0, got "
                             f"{self.env_steps_per_gradient_step}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if self.lead < 1:
            raise ValueError(f"lead must be >= 1 env step, got {self.lead}")

    def gradient_steps_earned(self, env_steps: int) -> int:
        """G*(E): gradient steps that ``env_steps`` collected pay for in all."""
        collected = env_steps - self.env_steps_offset
        if collected < self.learning_starts:
            return self.gradient_steps_offset
        return self.gradient_steps_offset + int(math.floor(
            (collected - self.learning_starts) / self.env_steps_per_gradient_step + 1e-9))

    def gradient_steps_due(self, env_steps: int, gradient_steps: int) -> int:
        """Gradient steps the learner may take now (>= 0)."""
        return max(0, self.gradient_steps_earned(env_steps) - gradient_steps)

    def may_collect(self, env_steps_committed: int, batch_steps: int,
                    gradient_steps: int) -> bool:
        """Whether an actor may start a batch of ``batch_steps`` env steps, with
        ``env_steps_committed`` collected or in flight and ``gradient_steps`` taken."""
        collected = env_steps_committed + batch_steps - self.env_steps_offset
        if collected <= self.learning_starts:
            return True
        paid = self.learning_starts + self.env_steps_per_gradient_step * (
            gradient_steps - self.gradient_steps_offset)
        return collected <= paid + self.lead

    def achieved(self, env_steps: int, gradient_steps: int) -> float:
        """Env steps per gradient step since learning started (nan before any)."""
        grads = gradient_steps - self.gradient_steps_offset
        if grads < 1:
            return float("nan")
        return max(0, env_steps - self.env_steps_offset - self.learning_starts) / grads

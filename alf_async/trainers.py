"""The Trainer for a run's algorithm: ``Trainer.algorithm`` picks it.

"ppo" -> ``trainer.Trainer`` (on-policy: one actor batch, one training
iteration); "sac" -> ``off_policy_trainer.OffPolicyTrainer`` (a replay buffer
between the actors and the learner). ``Trainer.runtime = "hogwild"`` ->
``hogwild.trainer.HogwildTrainer`` for either algorithm (N workers training
shared networks).
"""

from __future__ import annotations

from typing import Any, Optional

from alf_async.hogwild.trainer import HogwildTrainer
from alf_async.off_policy_trainer import OffPolicyTrainer
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import TrainerSettings
from alf_async.trainer import Trainer


def make_trainer(root_dir: str, settings: Optional[TrainerSettings] = None,
                 policy_factory: Optional[PolicyFactory] = None, **overrides: Any) -> Trainer:
    """The Trainer of ``settings.algorithm`` (settings from gin when None)."""
    if settings is None:
        settings = TrainerSettings(**overrides)
    elif overrides:
        settings = settings.replace(**overrides)
    if settings.runtime == "hogwild":
        return HogwildTrainer(root_dir, settings, policy_factory)
    cls = OffPolicyTrainer if settings.off_policy else Trainer
    return cls(root_dir, settings, policy_factory)

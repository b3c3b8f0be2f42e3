"""What a resumed run may change: its config.gin against the resuming command's.

A run is resumed from its newest checkpoint with the bindings of the command
that resumes it (its saved ``config.gin`` plus any ``--gin_param``, or new gin
files). ``config_changes(old, new)`` lists every binding whose effective value
differs (a binding present on one side only is compared with the parameter's
default), each marked allowed or not:

- allowed (how the run is carried out, not what it learns): the budget, the
  checkpoint and logging intervals, N, K, W, S, the backend and its Ray
  settings, evaluation, fault tolerance, memory limits, threads, the
  learners' device and precision and the image encoders' memory format
  (``RESUMABLE``);
- anything else (the env, the networks, the algorithm, the learner's
  hyperparameters, the seed) is refused by the train command, which names each
  with both values, unless ``--allow_config_change`` is given.

``binding_values()`` reads the bindings gin holds now as text, keyed by
``[scope/]Configurable.parameter`` with the configurable's registered name.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import json
import os
import time
from typing import Dict, List, Sequence

import gin

from alf_async.utils.files import append_line

CHANGES_FILE = "config_changes.jsonl"
UNBOUND = "(not bound: the default)"

# Bindings a resumed run may change (fnmatch patterns of Configurable.parameter).
RESUMABLE = (
    "Trainer.num_env_steps", "Trainer.num_iterations", "Trainer.checkpoint_interval",
    "Trainer.num_actors", "Trainer.num_envs", "Trainer.num_env_workers",
    "Trainer.env_splits", "Trainer.acting_env_workers", "Trainer.backend",
    "Trainer.eval_interval_env_steps", "Trainer.eval_episodes",
    "Trainer.max_actor_restarts", "Trainer.actor_timeout_s", "Trainer.fatal_env_errors",
    "Trainer.max_trajectory_memory_gb", "Trainer.learner_num_threads",
    "Replay.max_replay_memory_gb", "MetricsRecorder.*", "Checkpointer.*", "RayBackend.*",
    "KLWatch.*",
    "PPOLearner.device", "SACLearner.device",
    # How the networks compute; checkpoints are float32 under either (utils.precision)
    # and load under either memory format (networks.encoders).
    "PPOLearner.precision", "SACLearner.precision", "ImageEncoder.memory_format",
)


@dataclasses.dataclass(frozen=True)
class ConfigChange:
    """One binding whose value differs between the run and the resuming command."""

    name: str  # [scope/]Configurable.parameter
    old: str
    new: str
    allowed: bool

    def describe(self) -> str:
        return f"{self.name}: {self.old} -> {self.new}"


def _text(value) -> str:
    """A binding's value as gin source text."""
    selector = getattr(value, "selector", None)
    if selector is not None:  # a configurable reference (@name or @name())
        name = selector.split(".")[-1]
        return f"@{name}()" if getattr(value, "evaluate", False) else f"@{name}"
    return repr(value)


def _configurable_name(selector: str) -> str:
    """The registered (short) name of a gin selector ('alf_async.settings.Trainer'
    -> 'Trainer')."""
    return selector.split(".")[-1]


def binding_values() -> Dict[str, str]:
    """Every binding of gin's current config: ``[scope/]Configurable.param`` ->
    its value as text."""
    values = {}
    for (scope, selector), params in gin.config._CONFIG.items():  # noqa: SLF001
        prefix = f"{scope}/" if scope else ""
        for param, value in params.items():
            values[f"{prefix}{_configurable_name(selector)}.{param}"] = _text(value)
    return values


def _default_text(name: str) -> str:
    """The default of a parameter named ``[scope/]Configurable.param``, as text."""
    selector, _, param = name.split("/")[-1].rpartition(".")
    try:
        configurable = gin.config._REGISTRY.get_match(selector)  # noqa: SLF001
        target = configurable.wrapped if configurable else None
        parameter = inspect.signature(target).parameters.get(param) if target else None
    except (TypeError, ValueError):
        parameter = None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return UNBOUND
    return repr(parameter.default)


def is_resumable(name: str) -> bool:
    """Whether a resumed run may change the binding ``name`` (scopes ignored)."""
    unscoped = name.split("/")[-1]
    return any(fnmatch.fnmatchcase(unscoped, pattern) for pattern in RESUMABLE)


def config_changes(old: Dict[str, str], new: Dict[str, str]) -> List[ConfigChange]:
    """The bindings whose effective values differ, sorted by name."""
    changes = []
    for name in sorted(set(old) | set(new)):
        before = old.get(name) or _default_text(name)
        after = new.get(name) or _default_text(name)
        if before != after:
            changes.append(ConfigChange(name, before, after, is_resumable(name)))
    return changes


def record_changes(root_dir: str, changes: Sequence[ConfigChange], forced: bool,
                   checkpoint: str) -> None:
    """Append the changes a resume applied to ``<root_dir>/config_changes.jsonl``
    (one JSON line per resume that changed something)."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "checkpoint": checkpoint,
              "allow_config_change": forced,
              "changes": [dataclasses.asdict(c) for c in changes]}
    append_line(os.path.join(root_dir, CHANGES_FILE), json.dumps(record))

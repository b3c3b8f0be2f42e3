"""What a sweep learns from the gin configuration before any trial starts.

- ``check_space``: a search space is refused (``ConfigError`` naming the
  ``--sweep``) when a binding is unknown to gin, when a numeric distribution
  (``uniform``, ``loguniform``, ``int``) is put on a binding whose value is not a
  number (``Trainer.env_name``), when ``uniform``/``loguniform`` is put on an
  integer binding (use ``int(a, b)``), when a ``choice`` option does not parse,
  or when a value the space can give (each ``choice`` option, a range's ends)
  breaks the rule its settings field declares (``Trainer.num_actors=choice(1,
  0)``: an integer >= 1), which would otherwise fail only when that trial starts.
- ``default_objective_metric``: ``eval_return`` when the runs evaluate
  (``Trainer.eval_interval_env_steps > 0``), else ``episode_return``.
- ``default_prune_after_env_steps``: a third of a trial's budget
  (``trial_budget_env_steps``).
- ``trial_cpus``: the CPUs one trial reserves on a Ray node, from the
  ``sampling_choice`` rules run backwards (see its docstring).

These parse the configuration into gin's global state; the sweep process
trains nothing itself, so nothing else reads it.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import gin

from alf_async.config import parse_config
from alf_async.sampling_choice import AUTO, choose_sampling
from alf_async.sweep.grid import is_label
from alf_async.sweep.space import NUMERIC_KINDS, Dimension
from alf_async.utils.validation import ConfigError, Rule, check_rule

_UNSET = object()


def binding_value(binding: str) -> Any:
    """The value ``binding`` has in the parsed configuration: the one bound in
    gin, else the configurable's default (``_UNSET`` if it has none).
    Raises ``ConfigError`` if gin knows no such configurable or parameter."""
    try:
        return gin.query_parameter(binding)
    except ValueError as e:
        if "has no value bound" not in str(e):
            raise ConfigError(str(e)) from None
    configurable_name, _, parameter = binding.rpartition(".")
    from gin import config as gin_config

    configurable = gin_config._REGISTRY.get_match(configurable_name.rpartition("/")[2])
    default = inspect.signature(configurable.wrapped).parameters[parameter].default
    return _UNSET if default is inspect.Parameter.empty else default


def field_rule(binding: str) -> Optional[Rule]:
    """The ``Rule`` a settings dataclass declares for ``binding``'s field
    (``Trainer.num_actors``: an integer >= 1), None where the configurable is
    not such a dataclass (the learners check their arguments when built)."""
    from gin import config as gin_config

    configurable_name, _, parameter = binding.rpartition(".")
    configurable = gin_config._REGISTRY.get_match(configurable_name.rpartition("/")[2])
    wrapped = getattr(configurable, "wrapped", None)
    if wrapped is None or not dataclasses.is_dataclass(wrapped):
        return None
    for f in dataclasses.fields(wrapped):
        if f.name == parameter:
            return f.metadata.get("rule")
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_space(dimensions: Sequence[Dimension], gin_files: Sequence[str],
                gin_params: Sequence[str] = ()) -> None:
    """Refuse a search space that cannot run (see the module docstring);
    raises ``ConfigError`` naming the ``--sweep`` and the binding."""
    parse_config(gin_files, gin_params)
    for dimension in dimensions:
        where = f"--sweep={dimension.text!r}"
        for name in dimension.names:
            if is_label(name):
                continue
            try:
                value = binding_value(name)
            except ConfigError as e:
                raise ConfigError(f"{where}: unknown binding {name!r} ({e})") from None
            if dimension.kind not in NUMERIC_KINDS or value is _UNSET or value is None:
                continue
            if not _is_number(value):
                raise ConfigError(
                    f"{where}: {name} is not numeric (its value is {value!r}), so "
                    f"{dimension.kind}() cannot draw it; use choice(...) to search over "
                    "its values")
            if isinstance(value, int) and dimension.kind != "int":
                raise ConfigError(f"{where}: {name} is an integer (its value is "
                                  f"{value!r}); draw it with int(low, high)")
        rows = dimension.rows or ((repr(dimension.low),), (repr(dimension.high),))
        names = [n for n in dimension.names if not is_label(n)]
        for row in rows:
            bindings = [f"{n}={v}" for n, v in zip(dimension.names, row) if not is_label(n)]
            try:
                parse_config(gin_files, list(gin_params) + bindings)
                for name in names:
                    declared = field_rule(name)
                    if declared is not None:
                        owner, _, parameter = name.rpartition(".")
                        check_rule(owner, parameter, binding_value(name), declared)
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None


def default_objective_metric(gin_files: Sequence[str], gin_params: Sequence[str] = ()
                             ) -> str:
    """``eval_return`` if the runs evaluate, else ``episode_return`` (the mean
    training return of the last 100 episodes)."""
    parse_config(gin_files, gin_params)
    interval = binding_value("Trainer.eval_interval_env_steps")
    return "eval_return" if _is_number(interval) and interval > 0 else "episode_return"


def default_prune_after_env_steps(gin_files: Sequence[str], gin_params: Sequence[str] = ()
                                  ) -> int:
    """Env steps a trial runs before a pruner may stop it, when the user gives
    none: a third of its budget (``Trainer.num_env_steps``), the share the
    rl-baselines3-zoo's tuner also lets a trial run before judging it (the
    returns of the first iterations are mostly noise; a HalfCheetah search
    that pruned from the start stopped trials at 16k-49k of 300k env steps,
    where every trial still walks at random)."""
    return trial_budget_env_steps(gin_files, gin_params) // 3


def trial_budget_env_steps(gin_files: Sequence[str], gin_params: Sequence[str] = ()
                           ) -> int:
    """A trial's budget, ``Trainer.num_env_steps`` (0 if it has none)."""
    parse_config(gin_files, gin_params)
    budget = binding_value("Trainer.num_env_steps")
    return int(budget) if _is_number(budget) and budget > 0 else 0


@dataclass(frozen=True)
class TrialResources:
    """What one trial reserves on a Ray node and the bindings that make its
    "auto" sampling settings fit that reservation.

    cpus: 1 + W per actor (the actor process and its env workers), plus one for
    the learner where it trains while the actors step (N >= 2, or SAC); a
    synchronous PPO run's learner waits while its one actor steps and shares
    its core. An "auto" W resolves, by ``sampling_choice``'s rule, from these
    CPUs (one per actor: W = 0), and is passed to the trial as explicit
    ``Trainer.num_env_workers``/``Trainer.env_splits`` bindings, since the train
    process on a node would otherwise resolve it from every core of the node.
    """

    cpus: int
    gin_params: Tuple[str, ...] = ()


def trial_resources(gin_files: Sequence[str], gin_params: Sequence[str]) -> TrialResources:
    """The ``TrialResources`` of a trial with these bindings (1 CPU if its
    configuration does not build: the trial then fails and says why)."""
    from alf_async.settings import TrainerSettings

    try:
        parse_config(gin_files, gin_params)
        settings = TrainerSettings()
    except (ConfigError, TypeError, ValueError):
        return TrialResources(cpus=1)
    workers, splits = settings.configured_sampling
    actors = settings.num_actors
    learner_overlaps = settings.runtime != "hogwild" and (
        actors >= 2 or settings.algorithm == "sac")
    pinned: List[str] = []
    if AUTO in (workers, splits):
        choice = choose_sampling(workers, splits, cores=actors + int(learner_overlaps),
                                 num_actors=actors, num_envs=settings.num_envs,
                                 runtime=settings.runtime, algorithm=settings.algorithm)
        workers, splits = choice.num_env_workers, choice.env_splits
        pinned = [f"Trainer.num_env_workers={workers}", f"Trainer.env_splits={splits}"]
    return TrialResources(cpus=actors * (1 + int(workers)) + int(learner_overlaps),
                          gin_params=tuple(pinned))

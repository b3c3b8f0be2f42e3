"""One validator for every configurable value: the error names the parameter.

``check(owner, name, value, ...)`` raises ``ConfigError`` with a sentence such as
``Trainer.num_envs must be an integer >= 1, got 0``. Settings dataclasses declare
their rules once, as ``Rule`` metadata on each field (``rule(...)``), and call
``validate_fields(obj, owner)`` in ``__post_init__``; other configurables (the
learners, the checkpointer) call ``check`` directly.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Optional, Sequence


class ConfigError(ValueError):
    """A configuration problem, explained in one paragraph for the user."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a value must be.

    kind: "int", "number", "bool", "str" or "choice".
    low, high: inclusive bounds (``low_open``: low is exclusive).
    choices: allowed values for kind "choice".
    optional: None is allowed too.
    auto: the string "auto" is allowed too (resolved later by the owner).
    """

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    choices: Sequence[Any] = ()
    optional: bool = False
    auto: bool = False


def rule(kind: str, **kwargs: Any) -> dict:
    """Field metadata for a settings dataclass: ``field(default=..., metadata=rule(...))``."""
    return {"rule": Rule(kind, **kwargs)}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _describe(r: Rule) -> str:
    if r.kind == "bool":
        return "True or False"
    if r.kind == "choice":
        return f"one of {tuple(r.choices)}"
    if r.kind == "str":
        return "a non-empty string"
    bounds = []
    if r.low is not None:
        bounds.append(f"{'>' if r.low_open else '>='} {r.low:g}")
    if r.high is not None:
        bounds.append(f"<= {r.high:g}")
    text = f"{'an integer' if r.kind == 'int' else 'a number'} {' and '.join(bounds)}".rstrip()
    return f"{text} or 'auto'" if r.auto else text


def check(owner: str, name: str, value: Any, kind: str, **kwargs: Any) -> None:
    """Raise ``ConfigError`` naming ``owner.name`` if ``value`` breaks the rule."""
    check_rule(owner, name, value, Rule(kind, **kwargs))


def check_rule(owner: str, name: str, value: Any, r: Rule) -> None:
    if (value is None and r.optional) or (value == "auto" and r.auto):
        return
    if r.kind == "bool":
        ok = isinstance(value, bool) or type(value).__name__ == "bool_"
    elif r.kind == "choice":
        ok = value in tuple(r.choices)
    elif r.kind == "str":
        ok = isinstance(value, str) and bool(value)
    else:
        ok = _is_int(value) if r.kind == "int" else _is_number(value)
        if ok and r.low is not None:
            ok = value > r.low if r.low_open else value >= r.low
        if ok and r.high is not None:
            ok = value <= r.high
    if not ok:
        shown = f"'{value}'" if r.kind == "choice" and isinstance(value, str) else repr(value)
        raise ConfigError(f"{owner}.{name} must be {_describe(r)}, got {shown}")


def validate_fields(obj: Any, owner: str) -> None:
    """Check every field of dataclass ``obj`` that carries a ``rule`` in its metadata."""
    for f in dataclasses.fields(obj):
        r = f.metadata.get("rule")
        if r is not None:
            check_rule(owner, f.name, getattr(obj, f.name), r)

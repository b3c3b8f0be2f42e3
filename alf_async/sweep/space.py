"""Search spaces: the ``--sweep`` syntax extended to distributions.

A search (``alf-sweep --search optuna|random``) draws each trial's bindings
from one dimension per ``--sweep``::

    PPOLearner.learning_rate=loguniform(1e-5, 1e-3)   # log-uniform float in [a, b]
    PPOLearner.clip_ratio=uniform(0.1, 0.3)            # uniform float in [a, b]
    PPOLearner.num_epochs=int(4, 20)                   # integer in [a, b], ends included
    Trainer.num_actors=choice(1, 2)                    # one of the gin values
    Trainer.num_envs=[8, 16]                           # a grid list: a choice too
    Trainer.num_actors,:mode=[(1, sync), (2, async)]   # tied: a choice of its rows

``uniform``, ``loguniform`` and ``int`` take two numbers with ``a < b``
(``loguniform`` also ``a > 0``); ``choice`` takes one or more gin values, as a
grid list does. A trial's value is written back as gin text: a float with
Python's ``repr`` (``0.00031622776601683794``), an int as digits, a choice as
its text. Which bindings exist and which are numeric is checked against the
gin configuration (``trial_config.check_space``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

from alf_async.sweep.grid import Sweep, SweepSyntaxError, parse_sweep, split_top_level

DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")
# NAME=kind(args): the kind and its parenthesized arguments.
_DISTRIBUTION = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.DOTALL)
NUMERIC_KINDS = ("uniform", "loguniform", "int")


@dataclass(frozen=True)
class Dimension:
    """One searched ``--sweep``: its names and what a trial draws for them.

    ``kind`` is one of ``DISTRIBUTIONS``. A numeric kind has one name and its
    range ``low``..``high``; a choice has ``rows``, one tuple of gin value texts
    (one per name) per option.
    """

    text: str
    names: Tuple[str, ...]
    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    rows: Tuple[Tuple[str, ...], ...] = ()

    @property
    def key(self) -> str:
        """The parameter's name in the study: the names joined by ','."""
        return ",".join(self.names)

    @property
    def options(self) -> List[str]:
        """A choice's options as the study stores them (one text per row)."""
        return [row[0] if len(row) == 1 else "(" + ", ".join(row) + ")" for row in self.rows]

    def values_of(self, drawn: Union[int, float, str]) -> Tuple[Tuple[str, str], ...]:
        """(name, gin value text) pairs for the value the study drew."""
        if self.kind == "choice":
            row = self.rows[self.options.index(str(drawn))]
            return tuple(zip(self.names, row))
        if self.kind == "int":
            return ((self.names[0], str(int(drawn))),)
        return ((self.names[0], repr(float(drawn))),)

    def describe(self) -> str:
        if self.kind == "choice":
            return f"{self.key} in {{{', '.join(self.options)}}}"
        return f"{self.key} ~ {self.kind}({self.low:g}, {self.high:g})"


def is_distribution(text: str) -> bool:
    """Whether a ``--sweep`` value draws from a distribution (``NAME=kind(...)``)."""
    _, _, value = text.partition("=")
    match = _DISTRIBUTION.match(value)
    return bool(match) and match.group(1) in DISTRIBUTIONS


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SweepSyntaxError(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise SweepSyntaxError(f"{what} must be finite, got {text!r}")
    return value


def parse_dimension(text: str) -> Dimension:
    """Parse one ``--sweep`` of a search (a distribution or a grid list)."""
    name_text, equals, value = text.partition("=")
    match = _DISTRIBUTION.match(value) if equals else None
    if not match:
        sweep: Sweep = parse_sweep(text)  # a grid list: a choice of its rows
        return Dimension(text, sweep.names, "choice", rows=sweep.values)
    kind, inner = match.group(1), match.group(2)
    usage = ("distributions are uniform(a, b), loguniform(a, b), int(a, b) with a < b, "
             "or choice(v1, v2, ...)")
    if kind not in DISTRIBUTIONS:
        raise SweepSyntaxError(f"--sweep={text!r}: unknown distribution {kind!r}; {usage}")
    names = tuple(n.strip() for n in name_text.split(","))
    placeholder = "0" if len(names) == 1 else "(" + ", ".join("0" for _ in names) + ")"
    parse_sweep(f"{name_text}=[{placeholder}]")  # the names follow the grid's rules
    args = split_top_level(inner) if inner.strip() else []
    if kind == "choice":
        if not args or any(a == "" for a in args):
            raise SweepSyntaxError(f"--sweep={text!r}: choice() needs one or more values; "
                                   f"{usage}")
        grid = parse_sweep(f"{name_text}=[{', '.join(args)}]")
        return Dimension(text, grid.names, "choice", rows=grid.values)
    if len(names) != 1:
        raise SweepSyntaxError(f"--sweep={text!r}: {kind}() draws one binding; tie "
                               "bindings with choice((a1, b1), (a2, b2)) instead")
    if len(args) != 2:
        raise SweepSyntaxError(f"--sweep={text!r}: {kind}() takes two numbers (low, high), "
                               f"got {len(args)}; {usage}")
    low, high = (_number(a, f"--sweep={text!r}: {kind}() bound") for a in args)
    if kind == "int":
        if low != int(low) or high != int(high):
            raise SweepSyntaxError(f"--sweep={text!r}: int() bounds must be integers")
    if not low < high:
        raise SweepSyntaxError(f"--sweep={text!r}: the range [{args[0]}, {args[1]}] is "
                               f"empty or a single value; {kind}() needs low < high")
    if kind == "loguniform" and low <= 0:
        raise SweepSyntaxError(f"--sweep={text!r}: loguniform() needs 0 < low, got {args[0]}")
    return Dimension(text, names, kind, low, high)


def parse_space(texts: Sequence[str]) -> List[Dimension]:
    """Every ``--sweep`` of a search as a ``Dimension``; no binding twice."""
    dimensions = [parse_dimension(t) for t in texts]
    seen: Dict[str, str] = {}
    for dimension in dimensions:
        for name in dimension.names:
            if name in seen:
                raise SweepSyntaxError(f"'{name}' is searched twice (--sweep={seen[name]!r} "
                                       f"and --sweep={dimension.text!r})")
            seen[name] = dimension.text
    return dimensions


def optuna_distribution(dimension: Dimension):
    """The ``optuna.distributions`` object a dimension draws from."""
    from optuna import distributions

    if dimension.kind == "choice":
        return distributions.CategoricalDistribution(dimension.options)
    if dimension.kind == "int":
        return distributions.IntDistribution(int(dimension.low), int(dimension.high))
    return distributions.FloatDistribution(dimension.low, dimension.high,
                                           log=dimension.kind == "loguniform")


def trial_params(dimensions: Sequence[Dimension], drawn: Dict[str, object]
                 ) -> Tuple[Tuple[str, str], ...]:
    """A trial's (name, gin value text) pairs, in ``--sweep`` order."""
    pairs: List[Tuple[str, str]] = []
    for dimension in dimensions:
        pairs.extend(dimension.values_of(drawn[dimension.key]))
    return tuple(pairs)

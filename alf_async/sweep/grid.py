"""The ``--sweep`` syntax, grid expansion and run names.

A sweep names one or more gin bindings and the values they take::

    Trainer.num_envs=[32, 48, 96]                       # one binding, 3 values
    Trainer.num_actors,Trainer.slots_per_actor=[(1, 1), (2, 1), (2, 2)]   # tied
    Trainer.num_actors,:mode=[(1, sync), (2, async)]    # tied, with a label

Values are gin source text and are passed to gin unchanged (``'a string'``,
``(64, 64)``, ``@relu``, ``%MACRO``, ``True``). Names listed together before ``=``
are *tied*: they vary together, and each value is a parenthesized tuple with one
element per name. A name starting with ``:`` is a *label*: it is not a gin
binding; it names the run (in place of the other names of its sweep) and shows in
the summary table. The grid is the Cartesian product of the sweeps, the first
sweep varying slowest.

A run's name is ``key=value`` pairs joined by ``,``, e.g.
``num_envs=32,num_actors=2``: the key is the binding's parameter name (the full
binding when two sweeps share a parameter name), the value is the gin text with
quotes and brackets removed and any character other than letters, digits and
``._+-`` replaced by ``-``. Names depend only on the swept values, so the same
sweep always maps a run to the same directory.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

LABEL_PREFIX = ":"
MAX_NAME_LENGTH = 120
_NAME = re.compile(r"^:?[A-Za-z_][A-Za-z0-9_./]*$")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


class SweepSyntaxError(ValueError):
    """A ``--sweep`` value that does not follow the documented syntax."""


@dataclass(frozen=True)
class Sweep:
    """One ``--sweep``: tied names and, per grid point, one value text per name."""

    names: Tuple[str, ...]
    values: Tuple[Tuple[str, ...], ...]

    @property
    def has_label(self) -> bool:
        return any(is_label(n) for n in self.names)


@dataclass(frozen=True)
class RunSpec:
    """One point of the grid: its directory name and its (name, value) pairs."""

    name: str
    params: Tuple[Tuple[str, str], ...]

    @property
    def gin_params(self) -> List[str]:
        """The gin bindings of this point (labels excluded), as ``name=value``."""
        return [f"{n}={v}" for n, v in self.params if not is_label(n)]

    def as_dict(self) -> Dict[str, str]:
        """Column name (labels without their ':') -> value text."""
        return {display_name(n): v for n, v in self.params}


def is_label(name: str) -> bool:
    return name.startswith(LABEL_PREFIX)


def display_name(name: str) -> str:
    """A swept name as shown in tables: labels lose their ':' prefix."""
    return name[len(LABEL_PREFIX):] if is_label(name) else name


def split_top_level(text: str, sep: str = ",") -> List[str]:
    """Split ``text`` at ``sep`` outside brackets and quotes; parts are stripped.

    >>> split_top_level("1, (2, 3), 'a,b'")
    ['1', '(2, 3)', "'a,b'"]
    """
    parts, depth_stack, current = [], [], []
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            current.append(ch)
            if ch == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch in _OPEN:
            depth_stack.append(ch)
            current.append(ch)
        elif ch in _CLOSE:
            if not depth_stack or depth_stack[-1] != _CLOSE[ch]:
                raise SweepSyntaxError(f"unbalanced '{ch}' in {text!r}")
            depth_stack.pop()
            current.append(ch)
        elif ch == sep and not depth_stack:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    if quote:
        raise SweepSyntaxError(f"unterminated string in {text!r}")
    if depth_stack:
        raise SweepSyntaxError(f"unclosed '{depth_stack[-1]}' in {text!r}")
    parts.append("".join(current).strip())
    return parts


def _strip_brackets(text: str, open_char: str) -> str:
    """The inside of ``text`` if it is exactly one ``open_char ... close`` group."""
    text = text.strip()
    close = _OPEN[open_char]
    if not (text.startswith(open_char) and text.endswith(close)):
        raise SweepSyntaxError(f"expected {open_char}...{close}, got {text!r}")
    # The first bracket must close at the very end (not "(1) + (2)").
    depth = 0
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                raise SweepSyntaxError(f"expected one {open_char}...{close} group, got {text!r}")
    return text[1:-1]


def _items(inner: str, what: str) -> List[str]:
    items = split_top_level(inner)
    if items and items[-1] == "":
        items.pop()  # a trailing comma
    if not items:
        raise SweepSyntaxError(f"{what} is empty")
    if any(item == "" for item in items):
        raise SweepSyntaxError(f"{what} has an empty element")
    return items


def parse_sweep(text: str) -> Sweep:
    """Parse one ``--sweep`` value (see the module docstring for the syntax)."""
    usage = ("use NAME=[v1, v2, ...] or tied NAME1,NAME2=[(a1, b1), (a2, b2), ...], "
             "e.g. --sweep='Trainer.num_envs=[32, 64]'")
    depth = 0
    split_at = -1
    for i, ch in enumerate(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == "=" and depth == 0:
            split_at = i
            break
    if split_at < 0:
        raise SweepSyntaxError(f"--sweep={text!r}: no '='; {usage}")
    names = tuple(n.strip() for n in text[:split_at].split(","))
    for name in names:
        if not _NAME.match(name):
            raise SweepSyntaxError(
                f"--sweep={text!r}: {name!r} is not a gin binding name (e.g. "
                f"Trainer.num_envs) or a label (e.g. :mode); {usage}")
    if len(set(names)) != len(names):
        raise SweepSyntaxError(f"--sweep={text!r}: a name is repeated")
    if all(is_label(n) for n in names):
        raise SweepSyntaxError(f"--sweep={text!r}: labels must be tied to a gin binding")
    try:
        inner = _strip_brackets(text[split_at + 1:], "[")
        items = _items(inner, "the value list")
        if len(names) == 1:
            values = tuple((item,) for item in items)
        else:
            rows = []
            for item in items:
                try:
                    row = tuple(_items(_strip_brackets(item, "("), f"tuple {item}"))
                except SweepSyntaxError:
                    raise SweepSyntaxError(
                        f"tied names need a ({', '.join(names)}) tuple per point, got "
                        f"{item!r}") from None
                if len(row) != len(names):
                    raise SweepSyntaxError(
                        f"{item!r} has {len(row)} values for {len(names)} tied names "
                        f"({', '.join(names)})")
                rows.append(row)
            values = tuple(rows)
    except SweepSyntaxError as e:
        raise SweepSyntaxError(f"--sweep={text!r}: {e}; {usage}") from None
    return Sweep(names=names, values=values)


def expand_grid(sweeps: Sequence[Sweep]) -> List[Tuple[Tuple[str, str], ...]]:
    """The grid points: the product of the sweeps, the first sweep slowest.

    Each point is a tuple of (name, value text) pairs in sweep order.
    """
    seen: Dict[str, int] = {}
    for i, sweep in enumerate(sweeps):
        for name in sweep.names:
            if name in seen:
                raise SweepSyntaxError(f"'{name}' is swept twice (sweeps {seen[name] + 1} "
                                       f"and {i + 1}); tie them in one --sweep instead")
            seen[name] = i
    points = []
    for combo in itertools.product(*(sweep.values for sweep in sweeps)):
        point = []
        for sweep, row in zip(sweeps, combo):
            point.extend(zip(sweep.names, row))
        points.append(tuple(point))
    return points


def sanitize_value(text: str) -> str:
    """A file-system safe rendering of a gin value text (see module docstring)."""
    text = re.sub(r"[()\[\]{}'\"@%]", " ", text).strip()
    text = re.sub(r"[^A-Za-z0-9._+-]+", "-", text)
    return text or "empty"


def _keys(sweeps: Sequence[Sweep]) -> Dict[str, str]:
    """Name -> key used in run names: the parameter name, unless ambiguous."""
    names = [n for sweep in sweeps for n in sweep.names]

    def short(name: str) -> str:
        return display_name(name).rsplit("/", 1)[-1].rsplit(".", 1)[-1]

    counts: Dict[str, int] = {}
    for name in names:
        counts[short(name)] = counts.get(short(name), 0) + 1
    return {n: short(n) if counts[short(n)] == 1 else sanitize_value(display_name(n))
            for n in names}


def _digest(params: Tuple[Tuple[str, str], ...]) -> str:
    return hashlib.sha1(repr(params).encode("utf-8")).hexdigest()[:8]


def run_specs(sweeps: Sequence[Sweep]) -> List[RunSpec]:
    """Every grid point with its unique, stable directory name."""
    points = expand_grid(sweeps)
    keys = _keys(sweeps)
    named = set()
    for sweep in sweeps:
        named.update(n for n in sweep.names if is_label(n) or not sweep.has_label)
    names = []
    for point in points:
        parts = [f"{keys[n]}={sanitize_value(v)}" for n, v in point if n in named]
        name = ",".join(parts) or "base"
        if len(name) > MAX_NAME_LENGTH:
            name = name[:MAX_NAME_LENGTH - 10] + "~" + _digest(point)
        names.append(name)
    counts: Dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return [RunSpec(name=(name if counts[name] == 1 else f"{name}~{_digest(point)}"),
                    params=point)
            for name, point in zip(names, points)]

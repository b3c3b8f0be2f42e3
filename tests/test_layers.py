"""Imports run one way: from higher layers to lower ones, never back.

Every ``import alf_async.X`` / ``from alf_async.X import`` in the package (also
inside functions) is checked against the layer table below; a module may import
its own package and lower layers only, and no two packages may import each other.
Inside a package, no file may reach itself through a chain of imports (no import
circle between files), and a training loop reaches the run's life cycle only
through ``training/loop.py``. A new package must be placed in the table
(docs/architecture.md, "Layers").
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Set, Tuple

import alf_async

PACKAGE_DIR = os.path.dirname(os.path.abspath(alf_async.__file__))

# package or top-level module -> layer (higher may import lower)
LAYERS = {
    "utils": 0,
    # What settings.py builds on: the meaning of "auto" sampling, Ray's settings.
    "sampling_choice": 0.5, "ray_settings": 0.5,
    "settings": 1, "config": 1, "config_changes": 1,
    "envs": 2, "networks": 3,
    "runtime": 3,
    "algorithms": 4, "iteration_record": 4, "kl_watch": 4,
    "checkpoint": 5, "metrics": 5, "resources": 5, "signals": 5, "hogwild": 5,
    "env_failure_log": 5,
    "training": 6,
    "reporting": 7, "playback": 7,
    "sweep": 8, "gin_reference": 8,
    # The Python API: loading a policy (on playback), training (on training/).
    "policy_api": 8, "train_api": 8,
    "bin": 9,
    # Scripts of the Python API (``import alf_async``; alf_async.train, load).
    "examples": 10,
}


def _unit(module_path: str) -> str:
    """'alf_async/runtime/actor.py' -> 'runtime'; 'alf_async/signals.py' -> 'signals'."""
    rel = os.path.relpath(module_path, PACKAGE_DIR)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".py") else first


def _imports() -> Dict[Tuple[str, str], Set[str]]:
    """(importing unit, imported unit) -> files where it happens."""
    edges: Dict[Tuple[str, str], Set[str]] = {}
    for root, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            source = _unit(path)
            if source == "__init__":
                continue
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for node in ast.walk(tree):
                targets = []
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    targets = [node.module]
                for target in targets:
                    parts = target.split(".")
                    if parts[0] != "alf_async" or len(parts) < 2:
                        continue
                    edges.setdefault((source, parts[1]), set()).add(
                        os.path.relpath(path, PACKAGE_DIR))
    return edges


def test_every_package_has_a_layer():
    units = {_unit(os.path.join(PACKAGE_DIR, n)) for n in os.listdir(PACKAGE_DIR)
             if n.endswith(".py") or os.path.isdir(os.path.join(PACKAGE_DIR, n))}
    units -= {"__init__", "__pycache__"}
    missing = sorted(u for u in units if u not in LAYERS)
    assert not missing, f"place these in the layer table of tests/test_layers.py: {missing}"


def test_imports_point_down_only():
    wrong = [f"{src} imports {dst} in {sorted(files)}"
             for (src, dst), files in _imports().items()
             if src != dst and LAYERS.get(src, 99) <= LAYERS.get(dst, -1)]
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_no_two_packages_import_each_other():
    edges = _imports()
    cycles = sorted({tuple(sorted((a, b))) for (a, b) in edges
                     if a != b and (b, a) in edges})
    assert not cycles, f"packages that import each other: {cycles}"


# The life cycle's own files: a loop (any other file of training/) imports none.
# (launch: the start of a run from gin files, shared by the train command and
# alf_async.train.)
LIFE_CYCLE_INTERNALS = {"alf_async.training.trainer", "alf_async.training.parts",
                        "alf_async.training.launch"}


def _module_name(path: str) -> str:
    """'.../alf_async/runtime/actor.py' -> 'alf_async.runtime.actor' (a package's
    __init__.py -> the package)."""
    rel = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _file_imports() -> Dict[str, Set[str]]:
    """module -> the package's modules it imports by name (also inside functions;
    ``from alf_async.a import b`` counts ``alf_async.a.b`` when that is a module)."""
    paths = {}
    for root, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                paths[_module_name(path)] = path
    edges: Dict[str, Set[str]] = {}
    for module, path in paths.items():
        targets: Set[str] = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets.update(f"{node.module}.{a.name}" for a in node.names)
        edges[module] = {t for t in targets if t in paths and t != module}
    return edges


def import_circles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm,
    iterative): each is an import circle."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    circles: List[List[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_the_circle_finder_finds_circles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(edges) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_files():
    circles = import_circles(_file_imports())
    assert not circles, "files that import each other (through a chain):\n" + "\n".join(
        " -> ".join(c) for c in circles)


def test_loops_reach_the_life_cycle_only_through_its_interface():
    wrong = sorted(f"{module} imports {target}"
                   for module, targets in _file_imports().items()
                   if module.startswith("alf_async.training.")
                   and module not in LIFE_CYCLE_INTERNALS
                   for target in targets & LIFE_CYCLE_INTERNALS)
    assert not wrong, ("a training loop imports the life cycle's internals (use "
                       "training/loop.py's RunContext):\n" + "\n".join(wrong))

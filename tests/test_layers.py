"""Imports run one way: from higher layers to lower ones, never back.

Every ``import alf_async.X`` / ``from alf_async.X import`` in the package (also
inside functions) is checked against the layer table below; a module may import
its own package and lower layers only, and no two packages may import each other.
A new package must be placed in the table (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Set, Tuple

import alf_async

PACKAGE_DIR = os.path.dirname(os.path.abspath(alf_async.__file__))

# package or top-level module -> layer (higher may import lower)
LAYERS = {
    "utils": 0,
    "settings": 1, "config": 1,
    "envs": 2, "networks": 3,
    "runtime": 3,
    "algorithms": 4,
    "checkpoint": 5, "metrics": 5, "resources": 5, "signals": 5,
    "trainer": 6,
    "off_policy_trainer": 7, "hogwild": 7,
    "reporting": 7, "playback": 7, "examples": 7,
    "trainers": 8,
    "sweep": 8, "gin_reference": 8,
    "bin": 9,
}


def _unit(module_path: str) -> str:
    """'alf_async/runtime/actor.py' -> 'runtime'; 'alf_async/trainer.py' -> 'trainer'."""
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

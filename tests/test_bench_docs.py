"""Every ``python -m bench.<script> --flag`` that bench/README.md, README.md and
docs/*.md show names a script that exists and flags it takes."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from typing import Dict, Set

import pytest

from conftest import REPO_ROOT

COMMAND = re.compile(r"python -m bench\.([a-z_]+)((?: +[^`|]*)?)")


def documented_commands() -> Dict[str, Set[str]]:
    """script -> the --flags written after ``python -m bench.<script>`` (code
    spans and table cells; a backslash line break continues the command)."""
    paths = [os.path.join(REPO_ROOT, "README.md"), os.path.join(REPO_ROOT, "bench", "README.md"),
             *glob.glob(os.path.join(REPO_ROOT, "docs", "*.md"))]
    commands: Dict[str, Set[str]] = {}
    for path in paths:
        text = open(path, encoding="utf-8").read().replace("\\\n", " ")
        # Prose wraps commands over lines: join the lines of a paragraph.
        text = re.sub(r"(?<!\n)\n(?!\n)", " ", text)
        for match in COMMAND.finditer(text):
            tail = match.group(2).split("`")[0]
            flags = set(re.findall(r"(?<![\w-])--([a-z_0-9]+)", tail))
            commands.setdefault(match.group(1), set()).update(flags)
    return commands


DOCUMENTED = documented_commands()


def test_the_docs_show_bench_commands():
    assert {"suite", "pong_learning", "peer_throughput"} <= set(DOCUMENTED)


@pytest.mark.parametrize("script", sorted(DOCUMENTED))
def test_a_documented_bench_command_exists_with_its_flags(script):
    path = os.path.join(REPO_ROOT, "bench", f"{script}.py")
    assert os.path.isfile(path), f"the docs show python -m bench.{script}: no {path}"
    result = subprocess.run([sys.executable, "-m", f"bench.{script}", "--help"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    defined = set(re.findall(r"--([a-z_0-9]+)", result.stdout + result.stderr))
    missing = sorted(DOCUMENTED[script] - defined)
    assert not missing, f"the docs show bench.{script} with --{', --'.join(missing)}, " \
        "which it does not take"

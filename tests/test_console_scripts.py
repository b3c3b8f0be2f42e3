"""Every command is a console script (alf-train, alf-sweep, alf-eps-report,
alf-play, alf-gen-config-docs) whose target exists; ``python -m`` keeps working."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


def console_scripts():
    tree = ast.parse(open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    return dict(item.value.split("=", 1) for item in value.elts)
    raise AssertionError("setup.py declares no console_scripts")


def test_every_command_has_a_console_script():
    scripts = console_scripts()
    for name in ("alf-train", "alf-sweep", "alf-eps-report", "alf-play",
                 "alf-gen-config-docs"):
        assert name in scripts, f"{name} missing from setup.py"
    for name, target in scripts.items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), name


def documented_flags(command: str) -> set:
    """The --flags that README.md and docs/*.md write after this command
    (``python -m alf_async.bin.<command>`` or its console script)."""
    import glob
    import re

    script = "alf-" + command.replace("_", "-")
    flags = set()
    for path in [os.path.join(REPO_ROOT, "README.md"),
                 *glob.glob(os.path.join(REPO_ROOT, "docs", "*.md"))]:
        text = open(path, encoding="utf-8").read().replace("\\\n", " ")
        for line in text.splitlines():
            for start in (f"python -m alf_async.bin.{command} ", f"{script} "):
                if start in line:
                    tail = line.split(start, 1)[1].split("`")[0]
                    flags |= set(re.findall(r"(?<![\w-])--([a-z_]+)", tail))
    return flags


@pytest.mark.parametrize("command", ["train", "sweep", "eps_report", "play"])
def test_python_dash_m_still_works(command):
    result = subprocess.run([sys.executable, "-m", f"alf_async.bin.{command}", "--help"],
                            capture_output=True, text=True, timeout=60)
    # absl prints the flags and exits with status 1 after --help.
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "--root_dir" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    # Every flag the docs show with this command exists (a bool as --x or --nox).
    import re

    full = subprocess.run([sys.executable, "-m", f"alf_async.bin.{command}", "--helpfull"],
                          capture_output=True, text=True, timeout=60)
    defined = set(re.findall(r"--(?:\[no\])?([a-z_]+)", full.stdout + full.stderr))
    for flag in documented_flags(command):
        assert flag in defined or (flag.startswith("no") and flag[2:] in defined), (
            f"the docs show --{flag} with {command}, which has no such flag")

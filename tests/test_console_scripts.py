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


@pytest.mark.parametrize("command", ["train", "sweep", "eps_report", "play"])
def test_python_dash_m_still_works(command):
    result = subprocess.run([sys.executable, "-m", f"alf_async.bin.{command}", "--help"],
                            capture_output=True, text=True, timeout=60)
    # absl prints the flags and exits with status 1 after --help.
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "--root_dir" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr

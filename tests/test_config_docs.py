"""docs/configuration.md is generated from the code and must be current."""

from __future__ import annotations

import importlib
import os
import pkgutil

import gin

import alf_async
from alf_async.bin.gen_config_docs import default_output, gen_config_docs
from alf_async.config import CONFIGURABLE_MODULES
from alf_async.gin_reference import (
    collect, describe, generate, parse_args_section, render_markdown)
from conftest import REPO_ROOT

DOC = os.path.join(REPO_ROOT, "docs", "configuration.md")


def test_committed_reference_is_current():
    with open(DOC, encoding="utf-8") as f:
        committed = f.read()
    assert committed == generate(), (
        "docs/configuration.md is stale: run python -m alf_async.bin.gen_config_docs")


def test_every_configurable_module_is_listed():
    for info in pkgutil.walk_packages(alf_async.__path__, "alf_async."):
        if not info.name.startswith("alf_async.examples"):
            importlib.import_module(info.name)
    defining = set()
    for info in pkgutil.walk_packages(alf_async.__path__, "alf_async."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) == info.name and callable(obj):
                try:
                    gin.get_configurable(obj)
                except ValueError:
                    continue
                defining.add(info.name)
    assert defining <= set(CONFIGURABLE_MODULES), (
        f"add {sorted(defining - set(CONFIGURABLE_MODULES))} to "
        "alf_async.config.CONFIGURABLE_MODULES")


def test_reference_lists_each_configurable_with_parameters_and_defaults():
    docs = {d.name: d for d in collect()}
    assert {"Trainer", "PPOLearner", "ActorNetwork", "ValueNetwork", "Checkpointer",
            "MetricsRecorder", "RunningNormalizer"} <= set(docs)
    trainer = {p.name: p for p in docs["Trainer"].parameters}
    assert trainer["num_envs"].default == "8" and trainer["num_envs"].annotation == "int"
    assert trainer["num_envs"].description.startswith("K, envs per actor")
    assert "root_dir" not in trainer  # a command-line flag, not a setting
    assert docs["Trainer"].summary.startswith("The settings of a training run")
    text = generate()
    assert "| `num_envs` | `int` | `8` | K, envs per actor. EPS = K / T. |" in text
    assert "- [Trainer](#trainer) (`alf_async.settings`)" in text


def test_args_section_parsing():
    doc = """Summary line.

    More text.

    Args:
        a: first
            continued.
        b, c: shared: with a colon.
        d:
            on the next line.

    Returns:
        nothing: ignored.
    """
    assert parse_args_section(doc) == {"a": "first continued.", "b": "shared: with a colon.",
                                       "c": "shared: with a colon.", "d": "on the next line."}
    assert parse_args_section(None) == {}


@gin.configurable
def _documented(x: int, scale: float = 0.5, name: str = "k", fn=len, *args, **kwargs):
    """Does nothing.

    Args:
        x: an input.
        scale: a factor.
    """


def test_describe_renders_types_defaults_and_descriptions():
    doc = describe(_documented, __name__)
    assert [(p.name, p.annotation, p.default, p.description) for p in doc.parameters] == [
        ("x", "int", "", "an input."), ("scale", "float", "0.5", "a factor."),
        ("name", "str", "'k'", ""), ("fn", "", "@len", "")]
    text = render_markdown([doc])
    assert "| `x` | `int` | (set by alf_async) | an input. |" in text
    assert "| `scale` | `float` | `0.5` | a factor. |" in text


def test_check_mode_detects_a_stale_file(tmp_path, capsys):
    path = str(tmp_path / "configuration.md")
    assert gen_config_docs(path, check=True) == 1  # missing
    assert gen_config_docs(path) == 0
    assert gen_config_docs(path, check=True) == 0
    with open(path, "a") as f:
        f.write("edited by hand\n")
    assert gen_config_docs(path, check=True) == 1
    assert "not current" in capsys.readouterr().err
    assert default_output() == DOC

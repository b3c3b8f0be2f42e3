"""The configuration reference (docs/configuration.md), generated from the code.

For every gin-configurable defined in ``alf_async.config.CONFIGURABLE_MODULES``
it lists the parameters with their type, default and description, taken from the
signature and from the ``Args:`` section of the docstring. The output depends only
on the code (no dates), so a test can check that the committed file is current.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from alf_async.reporting.tables import markdown_table

GENERATOR = "python -m alf_async.bin.gen_config_docs"


@dataclass
class ParameterDoc:
    name: str
    annotation: str
    default: str
    description: str


@dataclass
class ConfigurableDoc:
    name: str  # the gin name
    module: str
    summary: str
    parameters: List[ParameterDoc]
    python_name: str = ""  # the class or function, where it differs from the gin name


def parse_args_section(docstring: Optional[str]) -> Dict[str, str]:
    """Parameter name -> description from a Google-style ``Args:`` section.

    ``a, b: text`` documents both ``a`` and ``b``; indented continuation lines are
    joined to the description.
    """
    if not docstring:
        return {}
    lines = inspect.cleandoc(docstring).splitlines()
    out: Dict[str, str] = {}
    in_args, names, indent = False, [], None
    entry = re.compile(r"^(\s+)([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*:\s*(.*)$")
    for line in lines:
        if not in_args:
            in_args = line.strip() == "Args:"
            continue
        if line.strip() and not line.startswith(" "):
            break  # the next section
        m = entry.match(line)
        if m and (indent is None or len(m.group(1)) <= indent):
            indent = len(m.group(1))
            names = [n.strip() for n in m.group(2).split(",")]
            for name in names:
                out[name] = m.group(3).strip()
        elif line.strip() and names:
            for name in names:
                out[name] = (out[name] + " " + line.strip()).strip()
    return out


def first_line(docstring: Optional[str]) -> str:
    return inspect.cleandoc(docstring).splitlines()[0].strip() if docstring else ""


def _annotation_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", str(annotation))


def _default_text(default: Any) -> str:
    if default is inspect.Parameter.empty:
        return ""
    if callable(default) and hasattr(default, "__name__"):
        return f"@{default.__name__}"
    return repr(default)


def is_configurable(obj: Any) -> bool:
    """Whether ``obj`` is registered with gin."""
    import gin

    try:
        gin.get_configurable(obj)
    except (ValueError, KeyError):
        return False
    return True


def describe(obj: Any, module: str) -> ConfigurableDoc:
    """The documentation of one configurable class or function."""
    doc = inspect.getdoc(obj)
    args = parse_args_section(doc)
    params = []
    for p in inspect.signature(obj).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        params.append(ParameterDoc(p.name, _annotation_text(p.annotation),
                                   _default_text(p.default), args.get(p.name, "")))
    # A class registered under another name (TrainerSettings as "Trainer")
    # says so in its ``gin_name`` attribute.
    return ConfigurableDoc(getattr(obj, "gin_name", obj.__name__), module, first_line(doc),
                           params, obj.__name__)


def collect(modules: Optional[Sequence[str]] = None) -> List[ConfigurableDoc]:
    """Every configurable defined in ``modules`` (default: CONFIGURABLE_MODULES),
    in module order, then definition order."""
    if modules is None:
        from alf_async.config import CONFIGURABLE_MODULES

        modules = CONFIGURABLE_MODULES
    docs = []
    for name in modules:
        module = importlib.import_module(name)
        for obj in list(vars(module).values()):
            if (getattr(obj, "__module__", None) == name and callable(obj)
                    and is_configurable(obj)):
                docs.append(describe(obj, name))
    return docs


def _anchor(name: str) -> str:
    return name.lower()


def render_markdown(docs: Sequence[ConfigurableDoc]) -> str:
    """The reference as markdown."""
    parts = [
        "# Configuration reference\n",
        f"<!-- Generated from the code by `{GENERATOR}`; do not edit by hand. -->\n",
        "Every gin-configurable of alf_async with its parameters. Bind a parameter in "
        "a gin file (`Trainer.num_envs = 32`) or on the command line "
        "(`--gin_param='Trainer.num_envs=32'`). Parameters without a default are "
        "passed by alf_async itself (e.g. the run directory, the observation size).\n",
        "## Finding gin files\n",
        "A `--gin_file` given by name is looked for in the current directory, the "
        "project's `gin_configs/`, each `--gin_search_path` folder, then each folder of "
        "`$ALF_ASYNC_CONFIG_PATH`. An `include 'x.gin'` inside a gin file is looked for "
        "first in the folder of the including file, then in `gin_configs/`, the "
        "`--gin_search_path` folders and `$ALF_ASYNC_CONFIG_PATH` (not the current "
        "directory), so a config folder works from any working directory. A run saves "
        "its bindings, with their `import` lines, as `<root_dir>/config.gin`: resuming "
        "needs neither the original files nor their folder.\n",
        "## Contents\n",
        "\n".join(f"- [{d.name}](#{_anchor(d.name)}) (`{d.module}`): {d.summary}"
                  for d in docs) + "\n",
    ]
    for d in docs:
        rows = [[f"`{p.name}`", f"`{p.annotation}`" if p.annotation else "",
                 f"`{p.default}`" if p.default else "(set by alf_async)", p.description]
                for p in d.parameters]
        parts.append(f"## {d.name}\n\n`{d.module}.{d.python_name or d.name}`: {d.summary}\n\n"
                     + markdown_table(["parameter", "type", "default", "description"],
                                      rows))
    return "\n".join(parts)


def generate() -> str:
    """The full text of docs/configuration.md."""
    return render_markdown(collect())

"""gin configuration: finding gin files and parsing them with clear errors.

Where a gin file is looked for:

- a file given on the command line (``--gin_file``) by a bare or relative name:
  the current directory, the project's ``gin_configs/``, the folders given with
  ``--gin_search_path`` (``extra_search_path``), then each folder listed in the
  environment variable ``ALF_ASYNC_CONFIG_PATH`` (separated by ``os.pathsep``);
- a file named by an ``include`` statement inside a gin file: first the folder of
  the including file, then ``gin_configs/``, the ``--gin_search_path`` folders and
  ``ALF_ASYNC_CONFIG_PATH`` (never the current directory, so a config folder
  works the same from any working directory).

alf_async resolves includes itself and hands gin only resolved text, so gin's
own global include search path is never used. A file is parsed piece by piece
between its ``include`` lines, in order, so later bindings override earlier ones
exactly as if the included text stood in place of the ``include``.

Every problem (a missing file or include, a syntax error, an ``import`` of a
module that cannot be imported, an unknown configurable or parameter) raises
``ConfigError`` whose one-paragraph message names the file and line.

``register_configurables()`` imports every module that defines a gin-configurable,
so that bindings to any of them parse (and unknown names are reported).
"""

from __future__ import annotations

import importlib
import os
import re
import tokenize
from typing import List, Optional, Sequence, Tuple

import gin

from alf_async.utils.validation import ConfigError  # noqa: F401  (re-exported)

# Modules that define gin-configurables.
CONFIGURABLE_MODULES = (
    "alf_async.algorithms.ppo_learner",
    "alf_async.algorithms.sac_learner",
    "alf_async.networks.actor_critic",
    "alf_async.networks.encoders",
    "alf_async.networks.sac",
    "alf_async.algorithms.normalizer",
    "alf_async.algorithms.policy",
    "alf_async.checkpoint",
    "alf_async.metrics",
    "alf_async.kl_watch",
    "alf_async.settings",
    "alf_async.ray_settings",
)

CONFIG_PATH_ENV = "ALF_ASYNC_CONFIG_PATH"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_INCLUDE = re.compile(r"""^\s*include\s+(['"])(.+?)\1\s*(?:#.*)?$""")
_GIN_IMPORT = re.compile(r"^\s*import\s+([A-Za-z_][\w.]*)\s*(?:#.*)?$")
_UNKNOWN = re.compile(r"No configurable matching '([^']+)'")
_NO_PARAM = re.compile(r"Configurable '([^']+)' doesn't have a parameter named '([^']+)'")
_GIN_LINE = re.compile(r"In bindings string line (\d+)")


def register_configurables() -> None:
    """Import every module that defines a gin-configurable."""
    for module in CONFIGURABLE_MODULES:
        importlib.import_module(module)


def _package_gin_configs() -> List[str]:
    """The shipped gin files' folder: ``alf_async/gin_configs`` inside an installed
    package (setup.py maps the repository's ``gin_configs/`` there), or the
    repository's top-level ``gin_configs/`` in a source checkout or an editable
    install."""
    installed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gin_configs")
    checkout = os.path.join(PACKAGE_ROOT, "gin_configs")
    in_checkout = os.path.isfile(os.path.join(PACKAGE_ROOT, "setup.py"))
    candidates = (installed,) + ((checkout,) if in_checkout else ())
    return [c for c in candidates if os.path.isdir(c)]


def _environment_path() -> List[str]:
    extra = os.environ.get(CONFIG_PATH_ENV, "")
    return [os.path.abspath(d) for d in extra.split(os.pathsep) if d]


def gin_search_path(extra_search_path: Sequence[str] = ()) -> List[str]:
    """Folders searched for a ``--gin_file`` given by a bare name, in order."""
    return ([os.getcwd()] + _package_gin_configs()
            + [os.path.abspath(d) for d in extra_search_path] + _environment_path())


def include_search_path(including_file: str, extra_search_path: Sequence[str] = ()
                        ) -> List[str]:
    """Folders searched for an ``include`` of ``including_file``, in order."""
    return ([os.path.dirname(os.path.abspath(including_file))] + _package_gin_configs()
            + [os.path.abspath(d) for d in extra_search_path] + _environment_path())


def find_gin_file(name: str, search_path: Optional[Sequence[str]] = None,
                  context: str = "") -> str:
    """Absolute path of gin file ``name`` (a path, or a name on the search path)."""
    search_path = list(search_path or gin_search_path())
    if os.path.isabs(name):
        if os.path.isfile(name):
            return name
    else:
        for directory in search_path:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
    listing = "; ".join(search_path) if not os.path.isabs(name) else "(an absolute path)"
    raise ConfigError(
        f"gin file '{name}'{context} was not found. Searched, in order: {listing}. Give a path, "
        f"or add its folder with --gin_search_path or ${CONFIG_PATH_ENV}.")


def _explain_gin_error(error: BaseException, source: str, line_offset: int = 0) -> ConfigError:
    """A ``ConfigError`` naming ``source`` (and the line) for an error of gin."""
    text = str(error)
    m = _GIN_LINE.search(text)
    where = source
    if source.startswith("--gin_param"):
        pass  # one line: no line number to give
    elif isinstance(error, tokenize.TokenError) and len(error.args) > 1:
        where = f"{source}, line {error.args[1][0] + line_offset}"
    elif isinstance(error, SyntaxError) and error.lineno:
        where = f"{source}, line {error.lineno + line_offset}"
    elif m:
        where = f"{source}, line {int(m.group(1)) + line_offset}"
    m = _NO_PARAM.search(text)
    if m:
        return ConfigError(
            f"Unknown gin parameter '{m.group(2)}' of '{m.group(1)}' in {where}. "
            f"See docs/configuration.md for the parameters of each configurable.")
    m = _UNKNOWN.search(text)
    if m:
        return ConfigError(
            f"Unknown gin configurable '{m.group(1)}' in {where}. "
            f"See docs/configuration.md for the configurables alf_async defines.")
    if isinstance(error, ImportError):
        return ConfigError(
            f"{where} imports a module that cannot be imported ({type(error).__name__}: "
            f"{text.strip().splitlines()[0]}); install it or put its folder on PYTHONPATH.")
    if isinstance(error, tokenize.TokenError):
        return ConfigError(f"Syntax error in {where}: {error.args[0]} (an unclosed bracket "
                           "or string?)")
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if isinstance(error, SyntaxError):
        return ConfigError(f"Syntax error in {where}: {error.msg or first}")
    return ConfigError(f"Invalid gin configuration in {where}: {first}")


def _parse_text(text: str, source: str, first_line: int = 1) -> None:
    """Parse gin ``text`` that starts at line ``first_line`` of ``source``."""
    try:
        # Leading newlines make gin's line numbers the file's line numbers.
        gin.parse_config("\n" * (first_line - 1) + text)
    except (ValueError, KeyError, SyntaxError, TypeError, ImportError,
            tokenize.TokenError) as e:
        raise _explain_gin_error(e, source) from None


def _parse_file(path: str, extra_search_path: Sequence[str], stack: Tuple[str, ...]) -> None:
    """Parse ``path``, resolving its includes (recursively) relative to it first."""
    if path in stack:
        chain = " -> ".join(stack + (path,))
        raise ConfigError(f"gin files include each other in a cycle: {chain}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"could not read gin file {path}: {e}") from None
    source = f"gin file {path}"
    start = 0
    for number, line in enumerate(lines):
        m = _INCLUDE.match(line)
        if not m:
            continue
        _parse_text("".join(lines[start:number]), source, start + 1)
        included = find_gin_file(m.group(2), include_search_path(path, extra_search_path),
                                 context=f" (included at {path}, line {number + 1})")
        _parse_file(included, extra_search_path, stack + (path,))
        start = number + 1
    _parse_text("".join(lines[start:]), source, start + 1)


def parse_config(gin_files: Sequence[str], gin_params: Sequence[str] = (),
                 search_path: Optional[Sequence[str]] = None,
                 extra_search_path: Sequence[str] = ()) -> List[str]:
    """Clear gin, then parse ``gin_files`` and the ``gin_params`` bindings.

    Args:
        gin_files: paths or bare names (see the module docstring for the search).
        gin_params: bindings such as ``Trainer.num_actors=2``, parsed last.
        search_path: overrides the folders searched for ``gin_files``.
        extra_search_path: folders searched after ``gin_configs/`` for gin files
            and includes (the ``--gin_search_path`` flag).
    Returns:
        The absolute paths of the files parsed. Raises ``ConfigError``.
    """
    search_path = list(search_path or gin_search_path(extra_search_path))
    register_configurables()
    gin.clear_config()
    paths = [find_gin_file(name, search_path) for name in gin_files]
    for path in paths:
        _parse_file(path, extra_search_path, ())
    for binding in gin_params:
        try:
            gin.parse_config(binding)
        except (ValueError, KeyError, SyntaxError, TypeError, ImportError,
                tokenize.TokenError) as e:
            raise _explain_gin_error(e, f"--gin_param='{binding}'") from None
    return paths


def gin_imports(config_text: str) -> List[str]:
    """Modules a gin config imports (``import my_envs`` lines), in order.

    Processes that never parse the config themselves (env workers) import these
    so that env ids the modules register exist there too.
    """
    modules = []
    for line in config_text.splitlines():
        m = _GIN_IMPORT.match(line)
        if m and m.group(1) not in modules:
            modules.append(m.group(1))
    return modules

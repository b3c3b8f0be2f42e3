"""gin configuration: finding gin files and parsing them with clear errors.

A gin file given by bare name is looked up, in order, in the current directory,
the project's ``gin_configs/`` directory, then each directory listed in the
environment variable ``ALF_ASYNC_CONFIG_PATH`` (separated by ``os.pathsep``).
``include`` statements inside gin files are resolved through the same path.

``register_configurables()`` imports every module that defines a gin-configurable,
so that bindings to any of them parse (and unknown names are reported).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from typing import List, Optional, Sequence

import gin

from alf_async.utils.validation import ConfigError  # noqa: F401  (re-exported)

# Modules that define gin-configurables.
CONFIGURABLE_MODULES = (
    "alf_async.algorithms.ppo_learner",
    "alf_async.networks.actor_critic",
    "alf_async.algorithms.normalizer",
    "alf_async.checkpoint",
    "alf_async.metrics",
    "alf_async.settings",
    "alf_async.trainer",
)


def register_configurables() -> None:
    """Import every module that defines a gin-configurable."""
    import importlib

    for module in CONFIGURABLE_MODULES:
        importlib.import_module(module)

CONFIG_PATH_ENV = "ALF_ASYNC_CONFIG_PATH"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gin_search_path() -> List[str]:
    """Directories searched for gin files, in order."""
    path = [os.getcwd()]
    for candidate in (os.path.join(PACKAGE_ROOT, "gin_configs"),
                      os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                   "gin_configs")):
        if os.path.isdir(candidate):
            path.append(candidate)
    extra = os.environ.get(CONFIG_PATH_ENV, "")
    path += [os.path.abspath(d) for d in extra.split(os.pathsep) if d]
    return path


def find_gin_file(name: str, search_path: Optional[Sequence[str]] = None) -> str:
    """Absolute path of gin file ``name`` (a path, or a bare name on the search path)."""
    search_path = list(search_path or gin_search_path())
    if os.path.isabs(name):
        if os.path.isfile(name):
            return name
    else:
        for directory in search_path:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
    listing = "\n".join(f"  - {d}" for d in search_path)
    raise ConfigError(
        f"gin file '{name}' was not found. Searched (in order):\n{listing}\n"
        f"Give a path, or add its directory to ${CONFIG_PATH_ENV}.")


_UNKNOWN = re.compile(r"No configurable matching '([^']+)'")
_NO_PARAM = re.compile(r"Configurable '([^']+)' doesn't have a parameter named '([^']+)'")


def _explain_gin_error(error: Exception, source: str) -> ConfigError:
    text = str(error)
    m = _NO_PARAM.search(text)
    if m:
        return ConfigError(
            f"Unknown gin parameter '{m.group(2)}' of '{m.group(1)}' in {source}. "
            f"See docs/configuration.md for the parameters of each configurable.")
    m = _UNKNOWN.search(text)
    if m:
        return ConfigError(
            f"Unknown gin configurable '{m.group(1)}' in {source}. "
            f"See docs/configuration.md for the configurables alf_async defines.")
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return ConfigError(f"Invalid gin configuration in {source}: {first}")


@contextlib.contextmanager
def _quiet_root_logging():
    """gin's package-resource reader logs each search-path miss of an ``include``
    ("Path not found") on the root logger; those are not errors for us."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(level)


def parse_config(gin_files: Sequence[str], gin_params: Sequence[str] = (),
                 search_path: Optional[Sequence[str]] = None) -> List[str]:
    """Clear gin, then parse ``gin_files`` and the ``gin_params`` bindings.

    Returns the absolute paths of the files parsed. Raises ``ConfigError``.
    """
    search_path = list(search_path or gin_search_path())
    register_configurables()
    gin.clear_config()
    # gin keeps include search paths across calls: start again from the current ones.
    prefixes = getattr(getattr(gin, "config", None), "_LOCATION_PREFIXES", None)
    if isinstance(prefixes, list):
        prefixes[:] = [""]
    for directory in search_path:
        gin.add_config_file_search_path(directory)
    paths = [find_gin_file(name, search_path) for name in gin_files]
    for path in paths:
        try:
            with _quiet_root_logging():
                gin.parse_config_file(path)
        except (ValueError, KeyError, SyntaxError, TypeError, IOError) as e:
            if isinstance(e, IOError) and "include" not in str(e).lower():
                raise ConfigError(f"could not read gin file {path}: {e}") from None
            raise _explain_gin_error(e, f"gin file {path}") from None
    for binding in gin_params:
        try:
            gin.parse_config(binding)
        except (ValueError, KeyError, SyntaxError, TypeError) as e:
            raise _explain_gin_error(e, f"--gin_param='{binding}'") from None
    return paths


_GIN_IMPORT = re.compile(r"^\s*import\s+([A-Za-z_][\w.]*)\s*(?:#.*)?$")


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

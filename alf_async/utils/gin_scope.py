"""Parsing a config for a while: gin's global bindings put back afterwards.

gin keeps one global configuration per process. Code that parses a run's
config only to build something from it (``alf_async.load``, ``alf_async.train``)
runs inside ``restored_gin_config()``, so that the caller's own bindings are
the same before and after.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def restored_gin_config() -> Iterator[None]:
    """A block that may clear and parse gin's global config; when it ends (on
    every path) the bindings from before it are back: gin's config is cleared
    and the text of ``gin.config_str()`` taken on entry is parsed again (the
    same bindings and ``import`` lines; nothing when the config was empty).
    gin's operative config (the record of the bindings that were used) starts
    empty afterwards."""
    import gin

    saved = gin.config_str()
    try:
        yield
    finally:
        gin.clear_config()
        if saved.strip():
            gin.parse_config(saved)

"""The errors of batched envs: an env that failed, a value it should not have
returned, a lost env-worker process, and the text that describes a failure.

``EnvError`` is what callers catch; ``NonFiniteEnvValue`` is raised where an env
is stepped (and handled like any exception of the env); ``_WorkerLost`` is the
``EnvError`` a ``BatchedEnv`` raises for a worker that died, hung or closed its
pipe, before it replaces the worker.
"""

from __future__ import annotations

import sys
import traceback
from typing import Optional


class EnvError(RuntimeError):
    """An environment raised in step or reset, or its worker process died.

    Attributes:
        env_name: the gymnasium id.
        env_index: index k of the failing env inside the batch (None if unknown).
        details: the env's traceback or the worker's exit status.
    """

    def __init__(self, env_name: str, env_index: Optional[int], details: str):
        self.env_name = env_name
        self.env_index = env_index
        self.details = details
        where = f"env {env_index}" if env_index is not None else "an env"
        super().__init__(f"{where} of {env_name} failed:\n{details}")

    def __reduce__(self):
        return (EnvError, (self.env_name, self.env_index, self.details))


class NonFiniteEnvValue(RuntimeError):
    """An env returned NaN or inf in an observation or a reward.

    Handled like an exception of the env: caught where the env is stepped, before
    the value reaches the policy, the normalizer or the learner.
    """


def _failure_text() -> str:
    """The failure description of the exception being handled: a traceback, or
    the one-line message of a non-finite value (its traceback says nothing more)."""
    error = sys.exc_info()[1]
    if isinstance(error, NonFiniteEnvValue):
        return f"{type(error).__name__}: {error}"
    return traceback.format_exc()


class _WorkerLost(EnvError):
    """A worker process died, hung or closed its pipe."""

    def __reduce__(self):
        return (_WorkerLost, (self.env_name, self.env_index, self.details))

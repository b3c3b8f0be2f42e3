"""alf_async: synchronous and asynchronous PPO on batched simulators.

The package is split by responsibility:

- ``alf_async.envs``: gymnasium env loading and the shared-memory ``BatchedEnv``.
- ``alf_async.networks``: actor and value networks.
- ``alf_async.algorithms``: GAE, the PPO loss and the PPO learner.
- ``alf_async.runtime``: trajectory slots, the weight store, actors and backends.
- ``alf_async.training``: the run's life cycle and the training loops it drives.
- ``alf_async.bin``: command-line entry points.

The Python API (docs/python_api.md), Stable-Baselines3 style:

- ``alf_async.train(gin_file, root_dir, bindings=...)``: train or resume a run,
  returning its final counters (``train_api``);
- ``alf_async.load(root_dir_or_checkpoint)``: a trained ``alf_async.Policy``
  with ``predict``, ``make_env`` and ``export`` (``policy_api``).

Importing the top-level package is cheap on purpose: env-worker processes import
it and must not pay for torch. The API's names are imported on first use
(``__getattr__``).
"""

from typing import Any, List

__version__ = "0.1.0"

# name -> the module that defines it, imported on first access.
_LAZY = {
    "train": "alf_async.train_api",
    "load": "alf_async.policy_api",
    "Policy": "alf_async.policy_api",
    "PolicyLoadError": "alf_async.policy_api",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'alf_async' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> List[str]:
    return sorted(list(globals()) + list(_LAZY))

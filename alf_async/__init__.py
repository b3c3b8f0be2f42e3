"""alf_async: synchronous and asynchronous PPO on batched simulators.

The package is split by responsibility:

- ``alf_async.envs``: gymnasium env loading and the shared-memory ``BatchedEnv``.
- ``alf_async.networks``: actor and value networks.
- ``alf_async.algorithms``: GAE, the PPO loss and the PPO learner.
- ``alf_async.runtime``: trajectory slots, the weight store, actors and backends.
- ``alf_async.training``: the run's life cycle and the training loops it drives.
- ``alf_async.bin``: command-line entry points.

Importing the top-level package is cheap on purpose: env-worker processes import
it and must not pay for torch.
"""

__version__ = "0.1.0"

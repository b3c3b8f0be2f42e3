"""Hogwild runs: N worker processes, each with its own envs, learner step and
optimizer, training one set of networks held in shared memory.

``shared_state`` holds the global networks and binds a worker's learner to
them ("shared" or "synced" mode); ``worker`` is a worker process;
``trainer.HogwildTrainer`` owns the run (run directory, checkpoints, metrics,
restarts). See docs/hogwild.md.
"""

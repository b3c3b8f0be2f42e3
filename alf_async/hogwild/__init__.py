"""Hogwild runs: N worker processes, each with its own envs, learner step and
optimizer, training one set of networks held in shared memory.

``shared_state`` holds the global networks and binds a worker's learner to
them ("shared" or "synced" mode); ``worker`` is a worker process;
``workers.WorkerGroup`` starts, replaces and stops the worker processes for
``training.hogwild_loop.HogwildLoop``, which drives them. See docs/hogwild.md.
"""

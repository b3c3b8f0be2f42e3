"""The machine's raw env throughput, for the benchmark scripts in bench/.

Random actions, no policy, no communication while stepping: what a sampler's
figures are set against (``sampler_efficiency.py``, ``env_throughput.py``,
``peer_throughput.py``). Rates are env steps per second of wall time.
"""

from __future__ import annotations

import time
from typing import Dict, Tuple

import numpy as np


def raw_env_steps_per_s(env, num_steps: int, warmup_steps: int = 10,
                        seed: int = 0) -> Dict[str, float]:
    """Env steps/s of ``env`` (a BatchedEnv) under uniform random actions.

    Actions are drawn before timing so that only ``env.step`` is measured.
    Returns {"steps_per_s", "seconds", "env_steps", "episodes"} (episodes: those
    finished during the timed steps; resets cost time, so compare episode rates
    when comparing with an unroll under a policy).
    """
    rng = np.random.default_rng(seed)
    K, A = env.num_envs, env.action_dim
    actions = rng.uniform(-1.0, 1.0, size=(warmup_steps + num_steps, K, A)).astype(np.float32)
    for t in range(warmup_steps):
        env.step(actions[t])
    env.pop_finished_episodes()
    start = time.perf_counter()
    for t in range(warmup_steps, warmup_steps + num_steps):
        env.step(actions[t])
    seconds = time.perf_counter() - start
    episodes = len(env.pop_finished_episodes())
    return {"steps_per_s": K * num_steps / seconds, "seconds": seconds,
            "env_steps": K * num_steps, "episodes": episodes}


def measure_raw_env(env_name: str, num_envs: int, num_workers: int, num_steps: int,
                    warmup_steps: int = 10, seed: int = 0) -> Dict[str, float]:
    """Build a BatchedEnv, measure ``raw_env_steps_per_s`` on it, close it."""
    from alf_async.envs.batched_env import BatchedEnv

    with BatchedEnv(env_name, num_envs, num_workers, seed=seed) as env:
        env.reset()
        return raw_env_steps_per_s(env, num_steps, warmup_steps, seed)


def _raw_stepper_process(env_name: str, num_envs: int, seed: int, conn) -> None:
    """One process of ``RawSteppers``: steps its envs when told, reports the time.

    Ends when told (None), and also, quietly, when its parent is gone (the
    pipe's other end closed: a bench killed mid-measurement), so that a killed
    bench leaves neither these processes nor a traceback from each of them."""
    from alf_async.envs.batched_env import BatchedEnv

    with BatchedEnv(env_name, num_envs, 0, seed=seed) as env:
        env.reset()
        rng = np.random.default_rng(seed)
        try:
            conn.send("ready")
            while True:
                num_steps = conn.recv()
                if num_steps is None:
                    return
                actions = rng.uniform(-1.0, 1.0, size=(num_steps, num_envs, env.action_dim))
                actions = actions.astype(np.float32)
                conn.recv()  # "go": every process is ready, all start together
                start = time.time()
                for t in range(num_steps):
                    env.step(actions[t])
                conn.send((start, time.time()))
        except (EOFError, BrokenPipeError):
            return  # the parent is gone: nobody is left to report to


class RawSteppers:
    """The machine's raw limit, measured again and again: ``num_processes``
    persistent processes stepping ``num_envs`` envs between them (random
    actions, no policy, no communication while they step). ``step(n)`` steps
    every env n times, all processes at once, and returns (env steps, seconds
    from the first start to the last end). Interleaving these with the
    measured configuration, chunk by chunk, sets both against the same machine
    even when its speed drifts (this VM's does, by 10-30% within a minute)."""

    def __init__(self, env_name: str, num_envs: int, num_processes: int, seed: int = 0):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        shares = [num_envs // num_processes + (i < num_envs % num_processes)
                  for i in range(num_processes)]
        self._conns, self._procs = [], []
        for i, k in enumerate(shares):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_raw_stepper_process,
                               args=(env_name, k, seed + 1000 * i, child), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self.num_envs = num_envs
        for conn in self._conns:
            if conn.recv() != "ready":
                raise RuntimeError("a raw stepping process did not start")

    def step(self, num_steps: int) -> Tuple[int, float]:
        for conn in self._conns:
            conn.send(num_steps)
        for conn in self._conns:
            conn.send("go")
        times = [conn.recv() for conn in self._conns]
        return self.num_envs * num_steps, max(e for _, e in times) - min(s for s, _ in times)

    def close(self, timeout_s: float = 10.0) -> None:
        """Tell every process to end; any still stepping after ``timeout_s``
        seconds (a measurement cut short by Ctrl-C or SIGTERM: it reads the
        message only after its steps) is terminated."""
        for conn in self._conns:
            try:
                conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in self._conns:
            conn.close()


def measure_raw_env_processes(env_name: str, num_envs: int, num_processes: int,
                              num_steps: int, seed: int = 0) -> Dict[str, float]:
    """The machine's raw limit for ``num_envs`` envs over ``num_processes``
    processes, measured once (``RawSteppers``, after 10 warm-up steps): each
    steps its share at the same time; steps_per_s = all their steps over the
    time from the first start to the last end. With one process this is the
    one-process rate (``measure_raw_env`` at W = 0)."""
    steppers = RawSteppers(env_name, num_envs, num_processes, seed)
    try:
        steppers.step(10)
        steps, seconds = steppers.step(num_steps)
    finally:
        steppers.close()
    return {"steps_per_s": steps / seconds, "seconds": seconds, "env_steps": steps,
            "processes": num_processes}

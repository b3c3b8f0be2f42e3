"""How long one env takes per step: the figure "auto" sampling settings are
chosen with (``sampling_choice.py``).

``probe_env_step_seconds`` measures it in a child process forked from the
forkserver (milliseconds to start), so that an env that crashes or kills its
process when stepped (a simulator's segfault, ``os._exit``) ends the probe, not
the trainer: the run then starts without the measurement and its actors meet
the failure where failures are handled."""

from __future__ import annotations

import os
import time
from typing import Optional, Sequence

import numpy as np

from alf_async.envs.gym_env import EnvAdapter, import_env_modules, make_env, quiet_stdout
from alf_async.utils.process import (ENV_PROBE_PROCESS_NAME, init_child_process, start_child,
                                     stop_processes, torch_child_context)

# Enough steps for a stable mean on a cheap env, few enough (a time budget) that
# a slow simulator does not delay the start noticeably.
PROBE_STEPS = 200
PROBE_BUDGET_S = 0.2


def env_step_seconds(env: EnvAdapter, seed: int = 0, max_steps: int = PROBE_STEPS,
                     budget_s: float = PROBE_BUDGET_S) -> Optional[float]:
    """Mean seconds per ``env.step`` with uniformly random actions, resets
    included where episodes end (the env is reset first; 5 steps at least,
    then until ``max_steps`` or ``budget_s`` seconds).

    An env that raises while probed ends the probe: the mean of the steps
    before it, or None without any (the run's actors handle env failures; the
    probe must not turn one into a start-up error)."""
    rng = np.random.default_rng(seed)
    spec = env.action_spec
    steps, start = 0, time.perf_counter()
    try:
        with quiet_stdout():  # PyBullet prints 'argv[0]=' when it connects, at the reset
            env.reset(seed=seed)
        start = time.perf_counter()
        while steps < max_steps and (steps < 5 or time.perf_counter() - start < budget_s):
            if spec.discrete:
                action = rng.integers(0, np.asarray(spec.nvec)).astype(np.float32)
            else:
                action = rng.uniform(-1.0, 1.0, spec.dim).astype(np.float32)
            _, _, terminated, truncated, _ = env.step(action)
            steps += 1
            if terminated or truncated:
                env.reset()
    except Exception:  # noqa: BLE001  (see above)
        pass
    return (time.perf_counter() - start) / steps if steps else None


def _probe_main(conn, env_name: str, max_episode_steps: Optional[int], time_feature: bool,
                seed: int, env_modules: Sequence[str], parent_pid: int) -> None:
    init_child_process(expected_parent=parent_pid, name=ENV_PROBE_PROCESS_NAME)
    seconds = None
    try:
        import_env_modules(env_modules)
        env = make_env(env_name, max_episode_steps=max_episode_steps, time_feature=time_feature)
        try:
            seconds = env_step_seconds(env, seed=seed)
        finally:
            env.close()
    except Exception:  # noqa: BLE001  (no measurement: the caller goes on without it)
        pass
    conn.send(seconds)
    conn.close()


def probe_env_step_seconds(env_name: str, max_episode_steps: Optional[int] = None,
                           time_feature: bool = False, seed: int = 0,
                           env_modules: Sequence[str] = (),
                           timeout_s: float = 30.0) -> Optional[float]:
    """``env_step_seconds`` of a new env, measured in a child process; None if
    the env could not be made or stepped, the child died, or it took longer than
    ``timeout_s`` seconds."""
    ctx = torch_child_context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = start_child(ctx, _probe_main, (sender, env_name, max_episode_steps,
                                             time_feature, seed, tuple(env_modules),
                                             os.getpid()), name="alf_async-env-probe")
    sender.close()
    try:
        return receiver.recv() if receiver.poll(timeout_s) else None
    except (EOFError, OSError):  # the child died before answering
        return None
    finally:
        receiver.close()
        stop_processes([process], grace_s=1.0)

"""``EnvGroup``: the envs of a batch that one process steps (an env-worker
process, or the calling process when a ``BatchedEnv`` has no workers), reading
actions from and writing results to the batch arrays.
"""

from __future__ import annotations

import traceback
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from alf_async.envs.env_errors import EnvError, NonFiniteEnvValue, _failure_text
from alf_async.envs.gym_env import make_env, quiet_stdout
from alf_async.envs.worker_protocol import EnvCommand
from alf_async.utils.seeding import derive_seed


class EnvGroup:
    """Envs ``indices`` of a batch, reading actions from and writing results to
    the batch arrays (shared or private). Used by workers and by W = 0.

    Env k is seeded with ``seed + k`` at reset. An env that raises is recreated
    with a derived seed (unless ``fatal_env_errors``); ``step`` returns the
    failures as (env index, traceback) pairs.
    """

    def __init__(self, env_name: str, indices: Sequence[int], seed: int,
                 arrays: Dict[str, np.ndarray], max_episode_steps: Optional[int] = None,
                 fatal_env_errors: bool = False, time_feature: bool = False,
                 terminal_on_life_loss: bool = False):
        self.env_name = env_name
        self.indices = list(indices)
        self.seed = seed
        self.arrays = arrays
        self.max_episode_steps = max_episode_steps
        self.time_feature = time_feature
        self.terminal_on_life_loss = terminal_on_life_loss
        self.fatal_env_errors = fatal_env_errors
        self.recreated = 0
        self.episode_steps = {k: 0 for k in self.indices}
        self.envs = {}
        for k in self.indices:
            self.envs[k] = self._guard(k, self._make)

    def _make(self):
        return make_env(self.env_name, max_episode_steps=self.max_episode_steps,
                        time_feature=self.time_feature,
                        terminal_on_life_loss=self.terminal_on_life_loss)

    def _guard(self, k: int, fn):
        try:
            return fn()
        except Exception:
            raise EnvError(self.env_name, k, traceback.format_exc()) from None

    def _finite(self, k: int, field: str, value):
        """``value`` if it is all finite, else raise ``NonFiniteEnvValue``."""
        if not np.all(np.isfinite(value)):
            where = ("at reset" if self.episode_steps[k] == 0
                     else f"at step {self.episode_steps[k]} of its episode")
            bad = np.asarray(value, np.float64).reshape(-1)
            index = int(np.flatnonzero(~np.isfinite(bad))[0])
            detail = f"{bad[index]}" if bad.size == 1 else f"{bad[index]} at index {index}"
            raise NonFiniteEnvValue(f"env {k} of {self.env_name} returned a non-finite "
                                    f"{field} ({detail}) {where}")
        return value

    def _recreate(self, k: int) -> np.ndarray:
        """Replace env k by a new one with a fresh seed; returns its first obs."""
        try:
            self.envs[k].close()
        except Exception:
            pass
        self.recreated += 1
        self.envs[k] = self._guard(k, self._make)
        seed = derive_seed(self.seed, k, self.recreated)
        self.episode_steps[k] = 0
        with quiet_stdout():
            return self._guard(k, lambda: self._finite(
                k, "observation", self.envs[k].reset(seed=seed)))

    def set_seed(self, seed: int) -> List[Tuple[int, str]]:
        """Use ``seed + k`` for env k from now on, and reset all envs with it."""
        self.seed = seed
        return self.reset()

    def reset(self) -> List[Tuple[int, str]]:
        a = self.arrays
        failures = []
        with quiet_stdout():  # PyBullet prints 'argv[0]=' when it connects
            for k, env in self.envs.items():
                self.episode_steps[k] = 0
                try:
                    a["observation"][k] = self._finite(k, "observation",
                                                       env.reset(seed=self.seed + k))
                except Exception:
                    if self.fatal_env_errors:
                        raise EnvError(self.env_name, k, _failure_text()) from None
                    failures.append((k, _failure_text()))
                    a["observation"][k] = self._recreate(k)
        a["terminated"][self.indices] = False
        a["truncated"][self.indices] = False
        a["env_failed"][self.indices] = False
        a["life_lost"][self.indices] = False
        return failures

    def step(self, split: Optional[Tuple[int, int]] = None) -> List[Tuple[int, str]]:
        """Step the group's envs, or those of ``split`` = (s, S): envs k with
        k % S == s."""
        a = self.arrays
        failures = []
        for k, env in self.envs.items():
            if split is not None and k % split[1] != split[0]:
                continue
            failed = life_lost = False
            try:
                o, r, term, trunc, info = env.step(a["action"][k])
                life_lost = bool(term and info.get("life_lost", False))
                self.episode_steps[k] += 1
                self._finite(k, "reward", r)
                self._finite(k, "observation", o)
                if term or trunc:
                    a["final_observation"][k] = o
                    self.episode_steps[k] = 0
                    o = self._finite(k, "observation", env.reset())
            except Exception:
                if self.fatal_env_errors:
                    raise EnvError(self.env_name, k, _failure_text()) from None
                failures.append((k, _failure_text()))
                failed = True
                # Drop the episode: a truncation at the last good observation.
                a["final_observation"][k] = a["observation"][k]
                r, term, trunc, life_lost = 0.0, False, True, False
                o = self._recreate(k)
            a["reward"][k] = r
            a["terminated"][k] = term
            a["truncated"][k] = trunc and not term
            a["env_failed"][k] = failed
            a["life_lost"][k] = life_lost
            a["observation"][k] = o
        return failures

    def run(self, command: EnvCommand, args: Tuple = ()) -> List[Tuple[int, str]]:
        """Carry out ``command`` (not CLOSE); returns the env failures it met."""
        if command is EnvCommand.STEP:
            return self.step(*args)
        if command is EnvCommand.RESET:
            return self.reset()
        if command is EnvCommand.SET_SEED:
            return self.set_seed(*args)
        raise ValueError(f"EnvGroup cannot run {command}")

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:
                pass
        self.envs = {}

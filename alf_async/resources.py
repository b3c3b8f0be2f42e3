"""Up-front checks that a run fits the machine, before any actor or worker starts.

``check_resources`` refuses (``ConfigError``, naming the settings to change) a
run whose trajectory slots exceed ``Trainer.max_trajectory_memory_gb``, do not fit
in the free space of the shared-memory directory, or together with the learner's
copies of one batch do not fit in available memory. ``check_replay_memory`` does
the same for an off-policy run's replay buffer (``Replay.max_replay_memory_gb``).
``estimate_run_memory`` adds up the resident memory of every process the run
will start (measuring what one more env of ``Trainer.env_name`` costs) and
``check_run_memory`` refuses a run that would not fit in the available memory.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Callable, Union

import psutil

from alf_async.envs.gym_env import quiet_stdout
from alf_async.envs.spaces import ObservationSpec, as_observation_spec
from alf_async.runtime.replay_buffer import replay_nbytes
from alf_async.runtime.trajectory import trajectory_nbytes
from alf_async.settings import ReplaySettings, TrainerSettings
from alf_async.utils.shared_memory import shm_directory
from alf_async.utils.validation import ConfigError

GIB = 2 ** 30
MIB = 2 ** 20
# Resident memory of a process before its envs, measured on Linux x86-64 with
# Python 3.11 and the CPU build of torch 2.13: an actor (or Hogwild worker)
# imports torch and builds its policy (~400 MiB); an env worker imports
# gymnasium and the simulator, not torch (~60 MiB).
ACTOR_PROCESS_BYTES = 400 * MIB
ENV_WORKER_BYTES = 60 * MIB


@dataclass
class MemoryEstimate:
    """The resident memory a run will need, in bytes.

    trainer: this process (as measured now) plus the learner's copies of one
    batch and the shared blocks it owns (trajectory slots, replay buffer); per
    actor: its process, its K envs (``env_bytes`` each, measured) and its W env
    workers; the evaluator (with ``Trainer.eval_interval_env_steps``): a process
    like an actor's and its ``evaluator_envs`` envs. ``total`` counts them all.
    """

    trainer: int
    num_actors: int
    actor_process: int
    num_envs: int
    env_bytes: int
    num_env_workers: int
    env_worker: int
    evaluator_envs: int = 0

    @property
    def per_actor(self) -> int:
        return (self.actor_process + self.num_envs * self.env_bytes
                + self.num_env_workers * self.env_worker)

    @property
    def evaluator(self) -> int:
        if not self.evaluator_envs:
            return 0
        return self.actor_process + self.evaluator_envs * self.env_bytes

    @property
    def total(self) -> int:
        return self.trainer + self.num_actors * self.per_actor + self.evaluator

    def describe(self) -> str:
        text = (f"about {self.total / GIB:.1f} GiB: trainer {self.trainer / GIB:.2f} GiB + "
                f"{self.num_actors} actor(s) x ({self.actor_process / GIB:.2f} GiB + "
                f"{self.num_envs} envs x {self.env_bytes / MIB:.1f} MiB + "
                f"{self.num_env_workers} env workers x {self.env_worker / MIB:.0f} MiB)")
        if self.evaluator_envs:
            text += (f" + evaluator ({self.actor_process / GIB:.2f} GiB + "
                     f"{self.evaluator_envs} envs x {self.env_bytes / MIB:.1f} MiB)")
        return text


def env_memory_bytes(make_env: Callable[[], object]) -> int:
    """Resident bytes one more env costs: the growth of this process's memory
    when a second env is made and reset (the first absorbs one-time imports)."""
    process = psutil.Process()
    first = make_env()
    try:
        with quiet_stdout():  # PyBullet prints 'argv[0]=' when it connects
            first.reset(seed=0)
        before = process.memory_info().rss
        second = make_env()
        try:
            with quiet_stdout():
                second.reset(seed=1)
            return max(0, process.memory_info().rss - before)
        finally:
            second.close()
    finally:
        first.close()


def estimate_run_memory(settings: TrainerSettings, env_bytes: int,
                        shared_bytes: int) -> MemoryEstimate:
    """The run's memory (see ``MemoryEstimate``); ``shared_bytes``: the shared
    blocks and learner copies the trainer will hold beside its current memory."""
    s = settings
    return MemoryEstimate(
        trainer=psutil.Process().memory_info().rss + shared_bytes, num_actors=s.num_actors,
        actor_process=ACTOR_PROCESS_BYTES, num_envs=s.num_envs, env_bytes=env_bytes,
        num_env_workers=s.num_env_workers, env_worker=ENV_WORKER_BYTES,
        evaluator_envs=s.eval_episodes if s.eval_interval_env_steps else 0)


def check_run_memory(estimate: MemoryEstimate) -> None:
    """``ConfigError`` if ``estimate`` does not fit in the available memory."""
    available = psutil.virtual_memory().available
    if estimate.total > available:
        raise ConfigError(
            f"The run would need {estimate.describe()}, but {available / GIB:.1f} GiB of "
            "memory is available; use fewer envs per actor (Trainer.num_envs) or fewer "
            "actors (Trainer.num_actors), or free memory")


def check_shared_memory_free(need: int, what: str, advice: str) -> None:
    """Raise ``ConfigError`` if ``need`` bytes (with 5% to spare) do not fit in
    the shared-memory directory; the message names ``what`` and gives ``advice``."""
    free = shutil.disk_usage(shm_directory()).free
    if need * 1.05 > free:
        raise ConfigError(
            f"{what} would need {need / GIB:.2f} GiB of shared memory but "
            f"{shm_directory()} has {free / GIB:.2f} GiB free; {advice}, or enlarge "
            "/dev/shm")


def check_replay_memory(replay: ReplaySettings, observation: Union[ObservationSpec, int],
                        action_dim: int, num_buffers: int = 1) -> int:
    """Bytes of an off-policy run's replay buffers (one, or one per Hogwild
    worker); ``ConfigError`` if they exceed ``Replay.max_replay_memory_gb``, the
    free shared memory or the available memory."""
    obs = as_observation_spec(observation)
    need = num_buffers * replay_nbytes(replay.capacity, obs, action_dim)
    what = ("The replay buffer" if num_buffers == 1 else
            f"The {num_buffers} replay buffers (one per Hogwild worker)")
    if need > replay.max_replay_memory_gb * GIB:
        raise ConfigError(
            f"{what} would need {need / GIB:.2f} GiB (Replay.capacity="
            f"{replay.capacity} transitions of observation {obs} and action "
            f"{action_dim}), over Replay.max_replay_memory_gb={replay.max_replay_memory_gb}; "
            "lower Replay.capacity or raise the limit")
    check_shared_memory_free(need, what, "lower Replay.capacity")
    available = psutil.virtual_memory().available
    if need > available:
        raise ConfigError(
            f"{what} would need {need / GIB:.2f} GiB of memory but "
            f"{available / GIB:.2f} GiB is available; lower Replay.capacity")
    return need


def check_resources(settings: TrainerSettings, observation: Union[ObservationSpec, int],
                    action_dim: int) -> int:
    """Raise ``ConfigError`` if the run's shared memory exceeds what it may use;
    returns the bytes of the trajectory slots and the learner's batch copies
    (observations counted in their own dtype: uint8 frames at a byte a pixel)."""
    s, obs = settings, as_observation_spec(observation)
    one_batch = trajectory_nbytes(s.unroll_length, s.num_envs, obs, action_dim,
                                  next_observation=s.off_policy)
    need = one_batch * s.num_actors * s.slots_per_actor
    if need > s.max_trajectory_memory_gb * GIB:
        raise ConfigError(
            f"The trajectory slots would need {need / GIB:.1f} GiB of shared memory "
            f"(num_actors={s.num_actors} x slots_per_actor={s.slots_per_actor} x "
            f"unroll_length={s.unroll_length} x num_envs={s.num_envs} x observation "
            f"{obs}), over Trainer.max_trajectory_memory_gb="
            f"{s.max_trajectory_memory_gb}; shorten unroll_length or use fewer envs")
    check_shared_memory_free(need, "The trajectory slots",
                             "shorten unroll_length, use fewer envs or actors")
    # The learner works on copies of one batch (normalized observations,
    # advantages, returns; frames become float32 a minibatch at a time inside
    # the network): count three batches for it.
    available = psutil.virtual_memory().available
    if need + 3 * one_batch > available:
        raise ConfigError(
            f"The run would need about {(need + 3 * one_batch) / GIB:.1f} GiB of memory "
            f"(trajectory slots plus the learner's copies of one batch of "
            f"unroll_length={s.unroll_length} x num_envs={s.num_envs}) but "
            f"{available / GIB:.1f} GiB is available; shorten unroll_length or use "
            "fewer envs or actors")
    return need + 3 * one_batch

"""Up-front checks that a run fits the machine, before any process starts.

``check_resources`` refuses (``ConfigError``, naming the settings to change) a
run whose trajectory slots exceed ``Trainer.max_trajectory_memory_gb``, do not fit
in the free space of the shared-memory directory, or together with the learner's
copies of one batch do not fit in available memory. ``check_replay_memory`` does
the same for an off-policy run's replay buffer (``Replay.max_replay_memory_gb``).
"""

from __future__ import annotations

import shutil

import psutil

from alf_async.runtime.replay_buffer import replay_nbytes
from alf_async.runtime.trajectory import trajectory_nbytes
from alf_async.settings import ReplaySettings, TrainerSettings
from alf_async.utils.shared_memory import shm_directory
from alf_async.utils.validation import ConfigError

GIB = 2 ** 30


def check_shared_memory_free(need: int, what: str, advice: str) -> None:
    """Raise ``ConfigError`` if ``need`` bytes (with 5% to spare) do not fit in
    the shared-memory directory; the message names ``what`` and gives ``advice``."""
    free = shutil.disk_usage(shm_directory()).free
    if need * 1.05 > free:
        raise ConfigError(
            f"{what} would need {need / GIB:.2f} GiB of shared memory but "
            f"{shm_directory()} has {free / GIB:.2f} GiB free; {advice}, or enlarge "
            "/dev/shm")


def check_replay_memory(replay: ReplaySettings, observation_dim: int, action_dim: int,
                        num_buffers: int = 1) -> int:
    """Bytes of an off-policy run's replay buffers (one, or one per Hogwild
    worker); ``ConfigError`` if they exceed ``Replay.max_replay_memory_gb``, the
    free shared memory or the available memory."""
    need = num_buffers * replay_nbytes(replay.capacity, observation_dim, action_dim)
    what = ("The replay buffer" if num_buffers == 1 else
            f"The {num_buffers} replay buffers (one per Hogwild worker)")
    if need > replay.max_replay_memory_gb * GIB:
        raise ConfigError(
            f"{what} would need {need / GIB:.2f} GiB (Replay.capacity="
            f"{replay.capacity} transitions of observation {observation_dim} and action "
            f"{action_dim}), over Replay.max_replay_memory_gb={replay.max_replay_memory_gb}; "
            "lower Replay.capacity or raise the limit")
    check_shared_memory_free(need, what, "lower Replay.capacity")
    available = psutil.virtual_memory().available
    if need > available:
        raise ConfigError(
            f"{what} would need {need / GIB:.2f} GiB of memory but "
            f"{available / GIB:.2f} GiB is available; lower Replay.capacity")
    return need


def check_resources(settings: TrainerSettings, observation_dim: int, action_dim: int) -> None:
    """Raise ``ConfigError`` if the run's memory needs exceed what it may use."""
    s = settings
    one_batch = trajectory_nbytes(s.unroll_length, s.num_envs, observation_dim, action_dim,
                                  next_observation=s.off_policy)
    need = one_batch * s.num_actors * s.slots_per_actor
    if need > s.max_trajectory_memory_gb * GIB:
        raise ConfigError(
            f"The trajectory slots would need {need / GIB:.1f} GiB of shared memory "
            f"(num_actors={s.num_actors} x slots_per_actor={s.slots_per_actor} x "
            f"unroll_length={s.unroll_length} x num_envs={s.num_envs} x obs "
            f"{observation_dim}), over Trainer.max_trajectory_memory_gb="
            f"{s.max_trajectory_memory_gb}; shorten unroll_length or use fewer envs")
    check_shared_memory_free(need, "The trajectory slots",
                             "shorten unroll_length, use fewer envs or actors")
    # The learner works on float32 copies of one batch (normalized observations,
    # advantages, returns): count three batches for it.
    available = psutil.virtual_memory().available
    if need + 3 * one_batch > available:
        raise ConfigError(
            f"The run would need about {(need + 3 * one_batch) / GIB:.1f} GiB of memory "
            f"(trajectory slots plus the learner's copies of one batch of "
            f"unroll_length={s.unroll_length} x num_envs={s.num_envs}) but "
            f"{available / GIB:.1f} GiB is available; shorten unroll_length or use "
            "fewer envs or actors")

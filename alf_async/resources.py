"""Up-front checks that a run fits the machine, before any process starts.

``check_resources`` refuses (``ConfigError``, naming the settings to change) a
run whose trajectory slots exceed ``Trainer.max_trajectory_memory_gb``, do not fit
in the free space of the shared-memory directory, or together with the learner's
copies of one batch do not fit in available memory.
"""

from __future__ import annotations

import shutil

import psutil

from alf_async.runtime.trajectory import trajectory_nbytes
from alf_async.settings import TrainerSettings
from alf_async.utils.shared_memory import shm_directory
from alf_async.utils.validation import ConfigError

GIB = 2 ** 30


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
    free = shutil.disk_usage(shm_directory()).free
    if need * 1.05 > free:
        raise ConfigError(
            f"The trajectory slots would need {need / GIB:.2f} GiB of shared memory "
            f"but {shm_directory()} has {free / GIB:.2f} GiB free; shorten "
            "unroll_length, use fewer envs or actors, or enlarge /dev/shm")
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

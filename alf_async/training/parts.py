"""The parts a run is assembled from, chosen by ``Trainer.algorithm`` and
``Trainer.runtime``.

| algorithm \\ runtime | "actor_learner"                     | "hogwild"    |
|---------------------|-------------------------------------|--------------|
| "ppo"               | PPOLearner + OnPolicyLoop           | PPOLearner + HogwildLoop |
| "sac"               | SACLearner + OffPolicyLoop (replay) | SACLearner + HogwildLoop |

All of it runs before a file is written or a process starts: the learner's
device checked first (``learner_device``: a device this machine lacks, or a GPU
for Hogwild, is a ``ConfigError`` before an env is built), then its precision
(``check_learner_precision``), the env's spaces read
(a bad env id is a ``ConfigError``), memory and /dev/shm checked.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple, Optional, Tuple

import gin
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.sac_learner import SACLearner
from alf_async.algorithms.sac_policy import SACPolicy
from alf_async.config import gin_imports
from alf_async.envs.gym_env import EnvOptionError, UnknownEnvError, env_spec, make_env
from alf_async.envs.spaces import ActionSpec, ObservationSpec, UnsupportedSpaceError
from alf_async.envs.step_cost import probe_env_step_seconds
from alf_async.resources import (MemoryEstimate, check_replay_memory, check_resources,
                                 check_run_memory, env_memory_bytes, estimate_run_memory)
from alf_async.runtime.policy import PolicyFactory
from alf_async.settings import HogwildSettings, ReplaySettings, TrainerSettings
from alf_async.training.hogwild_loop import HogwildLoop
from alf_async.training.loop import TrainingLoop
from alf_async.training.off_policy import OffPolicyLoop
from alf_async.training.on_policy import OnPolicyLoop
from alf_async.utils.devices import DEVICE_BINDINGS, resolve_device
from alf_async.utils.precision import PRECISION_BINDINGS, check_precision
from alf_async.utils.validation import ConfigError


class RunParts(NamedTuple):
    """A run's settings ("auto" sampling resolved for the env), learner and loop,
    what they were built for (the env's observations and actions, replay
    settings or None), the run's memory."""

    settings: TrainerSettings
    learner: Any
    loop: TrainingLoop
    observation: ObservationSpec
    action_spec: ActionSpec
    replay: Optional[ReplaySettings]
    memory: MemoryEstimate


def read_env_spec(s: TrainerSettings) -> Tuple[ObservationSpec, ActionSpec]:
    """(observation spec, action spec) of ``Trainer.env_name``, or a ``ConfigError``."""
    try:
        observation, action_spec, _ = env_spec(s.env_name, s.max_episode_steps,
                                               s.time_feature, s.terminal_on_life_loss)
    except (UnknownEnvError, EnvOptionError, UnsupportedSpaceError) as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # noqa: BLE001  (the env's own constructor failed)
        raise ConfigError(f"the env {s.env_name!r} cannot be created: "
                          f"{type(e).__name__}: {e}") from None
    return observation, action_spec


def _bound_value(parameter: str) -> Any:
    """The value gin binds to ``parameter`` ("Configurable.name"), or None."""
    try:
        return gin.query_parameter(parameter)
    except ValueError:
        return None


def learner_device(settings: TrainerSettings) -> torch.device:
    """The device the run's learner will train on (``PPOLearner.device`` or
    ``SACLearner.device``, as bound in gin), checked against this machine;
    a ``ConfigError`` names the binding. Hogwild runs train on the CPU only:
    their workers share the networks through shared memory
    (``share_memory_()`` does nothing for CUDA tensors) and a file lock, which
    does not order a GPU's asynchronous kernels."""
    binding = DEVICE_BINDINGS[settings.algorithm]
    owner = binding.split(".")[0]
    value = _bound_value(binding)
    if value is None:
        learner = SACLearner if settings.off_policy else PPOLearner
        value = inspect.signature(learner.__init__).parameters["device"].default
    device = resolve_device(owner, value)
    if settings.runtime == "hogwild" and device.type != "cpu":
        resolved = f" (resolved to {str(device)!r} on this machine)" if value == "auto" else ""
        raise ConfigError(
            f"{binding}={value!r}{resolved} puts the learner on a GPU, but "
            f"Trainer.runtime='hogwild' trains on the CPU only: its workers share the "
            f"networks through shared memory, which CUDA tensors cannot use, and a file "
            f"lock that does not order a GPU's asynchronous kernels. Bind "
            f"{binding}='cpu', or use Trainer.runtime='actor_learner' for a GPU learner")
    return device


def check_learner_precision(settings: TrainerSettings) -> None:
    """Check the run's ``PPOLearner.precision`` or ``SACLearner.precision``
    (as bound in gin) before anything is built: a ``ConfigError`` names the
    binding. "auto" is resolved by the learner, which knows its networks."""
    binding = PRECISION_BINDINGS[settings.algorithm]
    value = _bound_value(binding)
    if value is not None:
        check_precision(binding.split(".")[0], value)


def make_learner(settings: TrainerSettings, observation: ObservationSpec,
                 action_spec: ActionSpec) -> Any:
    """The learner of ``settings.algorithm`` (its batch sizes checked for PPO)."""
    if settings.off_policy:
        rnn = _bound_value("ActorCritic.rnn")
        if rnn is not None:
            raise ConfigError(
                f"ActorCritic.rnn={rnn!r} makes PPO's networks recurrent; "
                f"Trainer.algorithm='sac' has feed-forward networks only so far: "
                f"remove the binding or use Trainer.algorithm='ppo'")
        return SACLearner(observation, action_spec, seed=settings.seed)
    learner = PPOLearner(observation, action_spec, seed=settings.seed)
    try:
        learner.check_batch_size(settings.unroll_length, settings.num_envs)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return learner


def build_parts(settings: TrainerSettings, policy_factory: Optional[PolicyFactory] = None,
                replay: Optional[ReplaySettings] = None,
                hogwild: Optional[HogwildSettings] = None) -> RunParts:
    """Check the run's resources and build its learner and loop."""
    learner_device(settings)  # first: a wrong device is reported before an env is made
    check_learner_precision(settings)
    observation, action_spec = read_env_spec(settings)
    s = settings
    if s.step_time_matters and s.backend != "ray":  # "auto" weighs the env's step time
        env_step_s = probe_env_step_seconds(s.env_name, s.max_episode_steps, s.time_feature,
                                            s.seed, gin_imports(gin.config_str()))
        if env_step_s is not None:
            s = s.fitted_to_env(env_step_s)
    shared = check_resources(s, observation, action_spec.dim)
    if s.off_policy:
        replay = replay or ReplaySettings()
        shared += check_replay_memory(replay, observation, action_spec.dim,
                                      num_buffers=s.num_actors if s.runtime == "hogwild" else 1)
    else:
        replay = None
    env_bytes = env_memory_bytes(lambda: make_env(
        s.env_name, max_episode_steps=s.max_episode_steps, time_feature=s.time_feature))
    memory = estimate_run_memory(s, env_bytes, shared)
    check_run_memory(memory)
    if s.learner_num_threads:
        torch.set_num_threads(s.learner_num_threads)
    learner = make_learner(s, observation, action_spec)
    if s.runtime == "hogwild":
        loop: TrainingLoop = HogwildLoop(s, learner, hogwild or HogwildSettings(), replay)
    elif s.off_policy:
        loop = OffPolicyLoop(s, learner, policy_factory or SACPolicy, replay,
                             observation, action_spec.dim)
    else:
        loop = OnPolicyLoop(s, learner, policy_factory or NeuralPolicy, observation,
                            action_spec.dim)
    return RunParts(s, learner, loop, observation, action_spec, replay, memory)

"""The evaluator process: deterministic episodes of the learner's weights.

The trainer (``training.evaluation``) sends an ``EvalRequest`` with a copy of the
learner's weights (the policy and the observation normalizer, as published to
actors) whenever an evaluation is due; this process plays ``num_episodes``
episodes with the mean action (``deterministic=True``: PPO's Gaussian mean or
argmax, SAC's tanh(mean)) on envs of its own, made as the run makes them, and
answers with an ``EvalResult``. Episode i of every evaluation starts from the
reset seed ``seed + i``, so that two evaluations of the same weights give the
same returns and evaluations along a run are comparable.

Training never waits for this process and shares no random state with it: a
seeded run trains the same with evaluation on or off.
"""

from __future__ import annotations

import functools
import pickle
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from alf_async.runtime.policy import act_with_state, start_states
from alf_async.utils.process import started_by


@dataclass(frozen=True)
class EvaluatorLaunch:
    """What the evaluator process needs. algorithm: "ppo" or "sac" (the policy
    class); env options as ``Trainer.*``; seed: the first episode's reset seed;
    gin_config: the run's bindings (network sizes, env modules); parent_pid: the
    trainer's (the process exits when it is gone)."""

    algorithm: str
    env_name: str
    max_episode_steps: Optional[int]
    time_feature: bool
    num_episodes: int
    seed: int
    observation: Any  # the env's ObservationSpec
    action_spec: Any
    gin_config: str
    parent_pid: int


@dataclass(frozen=True)
class EvalRequest:
    """Evaluate ``weights`` (``learner.weight_arrays()``), taken after training
    iteration ``iteration`` at ``env_steps`` env steps and ``wall_time`` s."""

    iteration: int
    env_steps: int
    wall_time: float
    weights: Dict[str, np.ndarray]


@dataclass(frozen=True)
class EvalResult:
    """The episodes of one evaluation: returns and lengths [num_episodes];
    eval_s: seconds the evaluation took."""

    iteration: int
    env_steps: int
    wall_time: float
    returns: List[float]
    lengths: List[int]
    eval_s: float


@dataclass(frozen=True)
class EvalFailed:
    """The evaluator could not go on (its env or policy failed): the traceback."""

    error: str


@dataclass(frozen=True)
class StopEvaluator:
    """End the process."""


def play_episodes(policy: Any, envs: Sequence[Any], seed: int) -> Tuple[List[float], List[int]]:
    """One episode on each of ``envs`` (E of them, stepped in lockstep, actions
    of the still-running ones computed in one batch), env i reset with seed
    ``seed + i``; returns (returns [E], lengths [E])."""
    observations = [env.reset(seed=seed + i) for i, env in enumerate(envs)]
    returns = [0.0] * len(envs)
    lengths = [0] * len(envs)
    running = list(range(len(envs)))
    states = start_states(policy, len(envs))  # [E, S] of a recurrent policy, else None
    while running:
        actions, next_states = act_with_state(
            policy, np.stack([observations[i] for i in running]),
            None if states is None else states[running])
        if states is not None:
            states[running] = next_states
        still_running = []
        for row, i in enumerate(running):
            observation, reward, terminated, truncated, _ = envs[i].step(actions[row])
            observations[i] = observation
            returns[i] += reward
            lengths[i] += 1
            if not (terminated or truncated):
                still_running.append(i)
        running = still_running
    return returns, lengths


def _build(launch: EvaluatorLaunch) -> Tuple[Any, List[Any]]:
    """(deterministic policy, envs) of the run, in this process: the policy is
    built the way an actor process builds its own (``build_policy_factory``:
    one torch thread, the run's network bindings)."""
    from alf_async.config import gin_imports
    from alf_async.envs.gym_env import import_env_modules, make_env
    from alf_async.runtime.actor_process import build_policy_factory

    import_env_modules(gin_imports(launch.gin_config))
    if launch.algorithm == "sac":
        from alf_async.algorithms.sac_policy import SACPolicy as policy_class
    else:
        from alf_async.algorithms.policy import NeuralPolicy as policy_class
    factory = build_policy_factory(
        pickle.dumps(functools.partial(policy_class, deterministic=True)), launch.gin_config)
    policy = factory(launch.observation, launch.action_spec, 0)
    envs = [make_env(launch.env_name, max_episode_steps=launch.max_episode_steps,
                     time_feature=launch.time_feature) for _ in range(launch.num_episodes)]
    return policy, envs


def _serve(conn, launch: EvaluatorLaunch, policy: Any, envs: Sequence[Any]) -> None:
    while True:
        if not conn.poll(1.0):
            if not started_by(launch.parent_pid):
                return
            continue
        request = conn.recv()
        if isinstance(request, StopEvaluator):
            return
        start = time.monotonic()
        policy.load_weights(request.weights)
        returns, lengths = play_episodes(policy, envs, launch.seed)
        conn.send(EvalResult(request.iteration, request.env_steps, request.wall_time,
                             returns, lengths, time.monotonic() - start))


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


def evaluator_process_main(launch: EvaluatorLaunch, conn) -> None:
    """Entry point of the evaluator process: serve requests until told to stop."""
    from alf_async.utils.process import EVALUATOR_PROCESS_NAME, init_child_process

    init_child_process(signal.SIGTERM, expected_parent=launch.parent_pid,
                       name=EVALUATOR_PROCESS_NAME)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    envs: List[Any] = []
    try:
        policy, envs = _build(launch)
        _serve(conn, launch, policy, envs)
    except (SystemExit, KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except BaseException:  # noqa: BLE001 - reported to the trainer, which goes on
        try:
            conn.send(EvalFailed(traceback.format_exc()))
        except (OSError, ValueError):
            pass
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def summarize(result: EvalResult) -> Mapping[str, float]:
    """eval_return (mean), eval_return_std, eval_episode_length (mean) of a result."""
    returns = np.asarray(result.returns, dtype=np.float64)
    return {"eval_return": float(returns.mean()), "eval_return_std": float(returns.std()),
            "eval_episode_length": float(np.mean(result.lengths))}

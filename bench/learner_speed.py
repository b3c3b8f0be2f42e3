"""Learner and actor speed per network kind under each precision (issue 56).

For each network kind (``KINDS``) and each precision ("fp32", "bf16";
``utils.precision``) in this process, with ``--threads`` torch threads:

- ``learner_s``: one learner iteration: PPO's ``train`` on a [T, K] batch
  (T at least the kind's unroll and long enough for ``--minibatches``
  minibatches), one epoch over it (``gradient_steps`` minibatches;
  ``gradient_step_ms``: per minibatch), or, for SAC, ``--minibatches``
  gradient steps of 256 transitions;
- ``actor_s``: the acting policy's inference over one unroll's worth of steps
  (T calls of ``act`` on K observations, with the weights the learner
  published, so in the same precision), without env stepping, on one torch
  thread as in an actor process;
- ``log_ratio_max`` / ``log_ratio_std``: the on-policy check: |log pi - log mu|
  over the batch, mu the actor's log-probabilities, pi the learner's for the
  same weights and observations, computed as the first minibatch of a sync
  iteration computes it (PPO kinds);
- ``bf16_speedup``: fp32 seconds over bf16 seconds, learner and actor, per kind.
- ``channels_last_speedup`` (image kinds, with ``--memory_formats
  channels_last,contiguous``): the convolutions' memory format
  (``ImageEncoder.memory_format``): "contiguous" seconds over "channels_last"
  seconds, learner and actor, per kind and precision, measured interleaved:
  two learners and two policies, one per format, from the same weights,
  timed call by call in alternation for ``--repeats`` rounds, so that a
  machine whose speed drifts (a shared VM) moves both sides alike; the
  median of the rounds' ratios and their range. The per-format figures of
  every format after the first listed are keyed "<precision>@<format>".

Each time is the minimum over ``--repeats`` after one warm-up (oneDNN builds
its kernels on the first call of each shape). The JSON line names the CPU (model
name, the bf16 flags of ``utils.precision.NATIVE_CPU_FLAGS`` it has, torch's
threads), which decides whether bf16 is native or emulated, and what "auto"
would pick for each kind on this machine.

Sizes (Pong's learner: 16 Adam steps on 256-frame minibatches; here T = 128,
K = 8, 4 minibatches of 256 for the image kinds; T = 256, K = 16 and
minibatches of 1024 for the vectors; SAC's defaults, (400, 300), batch 256).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Any, Callable, Dict, List

import gin
import numpy as np
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.sac_learner import SACLearner
from alf_async.algorithms.sac_policy import SACPolicy
from alf_async.envs.spaces import ActionSpec, ObservationSpec
from alf_async.networks.encoders import MEMORY_FORMATS
from alf_async.reporting.machine import cpu_model
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.utils.precision import choose_precision, cpu_bf16_flags
from bench import benchlib

FRAMES = ObservationSpec((4, 84, 84), "uint8")
PONG_ACTIONS = ActionSpec("discrete", 1, (6,), (0,))

#: kind -> (observation, action spec, gin bindings, T, K, minibatch size).
KINDS: Dict[str, tuple] = {
    "nature_cnn": (FRAMES, PONG_ACTIONS, {"ImageEncoder.architecture": "nature",
                                          "ActorNetwork.hidden_sizes": (),
                                          "ValueNetwork.hidden_sizes": ()}, 128, 8, 256),
    "impala_cnn": (FRAMES, PONG_ACTIONS, {"ImageEncoder.architecture": "impala",
                                          "ActorNetwork.hidden_sizes": (),
                                          "ValueNetwork.hidden_sizes": ()}, 128, 8, 256),
    "mlp_64_64": (ObservationSpec((28,), "float32"), ActionSpec.continuous(8),
                  {"ActorNetwork.hidden_sizes": (64, 64),
                   "ValueNetwork.hidden_sizes": (64, 64)}, 256, 16, 1024),
    "mlp_256_256": (ObservationSpec((28,), "float32"), ActionSpec.continuous(8),
                    {"ActorNetwork.hidden_sizes": (256, 256),
                     "ValueNetwork.hidden_sizes": (256, 256)}, 256, 16, 1024),
    "lstm": (ObservationSpec((4,), "float32"), ActionSpec("discrete", 1, (2,), (0,)),
             {"ActorCritic.rnn": "lstm", "ActorNetwork.hidden_sizes": (64,),
              "ValueNetwork.hidden_sizes": (64,)}, 128, 8, 256),
    "sac_critics": (ObservationSpec((26,), "float32"), ActionSpec.continuous(6), {},
                    1, 1, 256),
}
PRECISIONS = ("fp32", "bf16")


def cpu_description() -> Dict[str, Any]:
    """The CPU's model (``cpu_model``), bf16 flags and torch's threads."""
    return {"model_name": cpu_model(), "bf16_flags": list(cpu_bf16_flags()),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside (actor processes run so:
    ``runtime.actor_process``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def best_time(fn: Callable[[], Any], repeats: int) -> float:
    """Minimum seconds of ``fn()`` over ``repeats`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _acted_batch(policy, observation: ObservationSpec, action_dim: int, T: int, K: int,
                 state_size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    """A [T, K] trajectory of random observations acted by ``policy``."""
    batch = allocate_trajectory(T, K, observation, action_dim, state_size=state_size)
    obs = batch["observation"]
    if observation.dtype == "uint8":
        obs[:] = rng.integers(0, 256, obs.shape, dtype=np.uint8)
    else:
        obs[:] = rng.standard_normal(obs.shape)
    state = np.zeros((K, state_size), np.float32) if state_size else None
    for t in range(T):
        if state is None:
            batch["action"][t], batch["log_prob"][t], batch["value"][t] = policy.act(obs[t])
        else:
            batch["action"][t], batch["log_prob"][t], batch["value"][t], state = policy.act(
                obs[t], state)
    if state_size:
        batch["episode_start"][0] = True
    batch["reward"][:] = rng.standard_normal((T, K))
    return batch


def _unroll(policy, observations: np.ndarray, state_size: int) -> None:
    """The policy's inference over T steps of observations [T, K, *O] (no
    env stepping)."""
    state = np.zeros((observations.shape[1], state_size), np.float32) if state_size else None
    for obs in observations:
        if state is None:
            policy.act(obs)
        else:
            state = policy.act(obs, state)[3]


def _log_ratio(learner: PPOLearner, batch: Dict[str, np.ndarray]) -> np.ndarray:
    """log pi - log mu [T * K] of the batch under the learner's weights,
    computed as the learner's first minibatch of a sync iteration does."""
    t = {k: torch.as_tensor(v) for k, v in batch.items()}
    T, K = t["reward"].shape
    with torch.no_grad(), learner._compute():
        if learner.state_size:
            dist, _, _ = learner.model.sequence(t["observation"], t["initial_state"],
                                                t["episode_start"])
        else:
            dist, _ = learner.model.evaluate(
                t["observation"].reshape((T * K,) + tuple(t["observation"].shape[2:])))
    log_prob = dist.log_prob(t["action"].reshape(T * K, -1))
    return (log_prob - t["log_prob"].reshape(-1)).numpy()


def is_image_kind(kind: str) -> bool:
    """Whether ``kind``'s network has an image encoder (a memory format to set)."""
    return KINDS[kind][0].is_image


def _ppo_parts(kind: str, precision: str, minibatches: int,
               memory_format: str = MEMORY_FORMATS[0]):
    """A learner of ``kind`` (seed 0), a policy with its weights and a batch
    [batch_T, K] that policy acted."""
    observation, action_spec, bindings, T, K, mini = KINDS[kind]
    gin.clear_config()
    for name, value in bindings.items():
        gin.bind_parameter(name, value)
    if observation.is_image:
        gin.bind_parameter("ImageEncoder.memory_format", memory_format)
    learner = PPOLearner(observation, action_spec, num_epochs=1, mini_batch_size=mini,
                         precision=precision, seed=0)
    policy = NeuralPolicy(observation, action_spec, seed=0)
    policy.load_weights(learner.weight_arrays())
    rng = np.random.default_rng(0)
    batch_T = max(T, mini * minibatches // K)
    batch = _acted_batch(policy, observation, action_spec.dim, batch_T, K,
                         learner.state_size, rng)
    return learner, policy, batch


def measure_ppo(kind: str, precision: str, repeats: int, minibatches: int,
                memory_format: str = MEMORY_FORMATS[0]) -> Dict[str, Any]:
    observation, action_spec, bindings, T, K, mini = KINDS[kind]
    learner, policy, batch = _ppo_parts(kind, precision, minibatches, memory_format)
    batch_T = len(batch["reward"])
    ratio = _log_ratio(learner, batch)
    # Timed as a sync iteration: the batch acted by the learner's current weights.
    learner_s = best_time(lambda: learner.train(batch, behaviour_version=learner.iteration),
                          repeats)
    with one_thread():  # as in an actor process
        actor_s = best_time(lambda: _unroll(policy, batch["observation"][:T],
                                            learner.state_size), repeats)
    steps = batch_T * K // mini
    return {"learner_s": learner_s, "gradient_step_ms": 1e3 * learner_s / steps,
            "gradient_steps": steps, "actor_s": actor_s,
            "actor_ms_per_step": 1e3 * actor_s / T, "T": T, "K": K,
            **({"memory_format": memory_format} if observation.is_image else {}),
            "log_ratio_max": float(np.abs(ratio).max()),
            "log_ratio_std": float(ratio.std()),
            "auto_would_pick": choose_precision("PPOLearner", "auto", torch.device("cpu"),
                                                learner.model).name}


def interleaved_layout_speedup(kind: str, precision: str, rounds: int,
                               minibatches: int) -> Dict[str, Any]:
    """"contiguous" seconds over "channels_last" seconds for an image kind's
    learner iteration and actor unroll, the two formats timed in alternation
    (the order swapped each round, after one untimed round): the median of
    ``rounds`` ratios and their [min, max]."""
    T = KINDS[kind][3]
    parts = {f: _ppo_parts(kind, precision, minibatches, f) for f in MEMORY_FORMATS}
    times: Dict[str, Dict[str, List[float]]] = {f: {"learner": [], "actor": []}
                                                for f in MEMORY_FORMATS}
    for r in range(rounds + 1):
        for memory_format in MEMORY_FORMATS if r % 2 else MEMORY_FORMATS[::-1]:
            learner, policy, batch = parts[memory_format]
            start = time.perf_counter()
            learner.train(batch, behaviour_version=learner.iteration)
            trained = time.perf_counter()
            with one_thread():
                _unroll(policy, batch["observation"][:T], learner.state_size)
            if r:  # round 0 warms both up
                times[memory_format]["learner"].append(trained - start)
                times[memory_format]["actor"].append(time.perf_counter() - trained)
    gin.clear_config()
    out: Dict[str, Any] = {"rounds": rounds}
    for part in ("learner", "actor"):
        ratios = [c / l for c, l in zip(times["contiguous"][part],
                                        times["channels_last"][part])]
        out[part] = statistics.median(ratios)
        out[f"{part}_range"] = [min(ratios), max(ratios)]
    return out


def measure_sac(precision: str, repeats: int, minibatches: int) -> Dict[str, Any]:
    observation, action_spec, _, _, _, batch_size = KINDS["sac_critics"]
    gin.clear_config()
    learner = SACLearner(observation, action_spec, batch_size=batch_size,
                         precision=precision, seed=0)
    rng = np.random.default_rng(0)
    A = action_spec.dim
    batch = {"observation": rng.standard_normal((batch_size, 26)).astype(np.float32),
             "action": rng.uniform(-1, 1, (batch_size, A)).astype(np.float32),
             "reward": rng.standard_normal(batch_size).astype(np.float32),
             "next_observation": rng.standard_normal((batch_size, 26)).astype(np.float32),
             "terminated": np.zeros(batch_size, np.float32)}

    def steps() -> None:
        for _ in range(minibatches):
            learner.train_step(batch)

    learner_s = best_time(steps, repeats)
    policy = SACPolicy(observation, action_spec, seed=0)
    policy.load_weights(learner.weight_arrays())
    T, K = 128, 16
    observations = rng.standard_normal((T, K, 26)).astype(np.float32)

    def unroll() -> None:
        for obs in observations:
            policy.act(obs)

    with one_thread():  # as in an actor process
        actor_s = best_time(unroll, repeats)
    return {"learner_s": learner_s, "gradient_step_ms": 1e3 * learner_s / minibatches,
            "gradient_steps": minibatches, "actor_s": actor_s,
            "actor_ms_per_step": 1e3 * actor_s / T, "T": T, "K": K,
            "auto_would_pick": choose_precision("SACLearner", "auto", torch.device("cpu"),
                                                learner.actor, learner.critic).name}


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated network kinds of {list(KINDS)}")
    parser.add_argument("--precisions", default=",".join(PRECISIONS),
                        help="comma-separated precisions (fp32, bf16)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed calls per figure after one warm-up (the minimum is kept)")
    parser.add_argument("--minibatches", type=int, default=4,
                        help="gradient steps of one timed learner iteration")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--memory_formats", default=MEMORY_FORMATS[0],
                        help=f"comma-separated ImageEncoder.memory_format values of "
                             f"{list(MEMORY_FORMATS)} for the image kinds (the first "
                             f"gives the plain figures)")
    args = parser.parse_args(argv)
    benchlib.claim_stdout()
    benchlib.setup_logging()
    torch.set_num_threads(args.threads)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown --kinds {unknown}; choose from {list(KINDS)}")
    precisions = [p for p in args.precisions.split(",") if p]
    formats = [f for f in args.memory_formats.split(",") if f]
    if not formats or set(formats) - set(MEMORY_FORMATS):
        parser.error(f"--memory_formats takes values of {list(MEMORY_FORMATS)}, "
                     f"got {args.memory_formats!r}")

    def key(precision: str, memory_format: str) -> str:
        """The results' key of a precision's figures under a memory format."""
        return precision if memory_format == formats[0] else f"{precision}@{memory_format}"

    results: Dict[str, Dict[str, Any]] = {}
    for kind in kinds:
        results[kind] = {}
        for precision in precisions:
            for memory_format in formats if is_image_kind(kind) else formats[:1]:
                name = key(precision, memory_format)
                benchlib.logger.info("%s, %s ...", kind, name)
                results[kind][name] = (
                    measure_sac(precision, args.repeats, args.minibatches)
                    if kind == "sac_critics" else
                    measure_ppo(kind, precision, args.repeats, args.minibatches,
                                memory_format))
                benchlib.logger.info("%s, %s: %s", kind, name, results[kind][name])
    gin.clear_config()
    speedup = {kind: {part: r["fp32"][f"{part}_s"] / r["bf16"][f"{part}_s"]
                      for part in ("learner", "actor")}
               for kind, r in results.items() if {"fp32", "bf16"} <= set(r)}
    layout: Dict[str, Dict[str, Any]] = {}
    if set(MEMORY_FORMATS) <= set(formats):
        for kind in filter(is_image_kind, kinds):
            for precision in precisions:
                benchlib.logger.info("%s, %s: the formats interleaved ...", kind, precision)
                layout.setdefault(kind, {})[precision] = interleaved_layout_speedup(
                    kind, precision, args.repeats, args.minibatches)
                benchlib.logger.info("%s, %s: %s", kind, precision, layout[kind][precision])
    benchlib.emit({"bench": "learner_speed", "cpu": cpu_description(),
                   **benchlib.machine_info(), "threads": args.threads,
                   "memory_formats": formats, "results": results, "bf16_speedup": speedup,
                   **({"channels_last_speedup": layout} if layout else {})})


if __name__ == "__main__":
    main()

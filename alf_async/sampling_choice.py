"""What "auto" means for an actor's sampling settings.

``Trainer.num_env_workers`` (W, env-worker processes per actor) and
``Trainer.env_splits`` (S, groups the actor's K envs are stepped in) accept
"auto" (their default, and what the shipped PyBullet configs use). The trainer
resolves it once, before anything starts, from the cores this process may run on
(its CPU affinity) and the number of actors, and logs the values chosen:

1. Cores for sampling: all C cores in a synchronous PPO run (N = 1: the
   learner is idle while the actor unrolls) and in a Hogwild run (each worker
   trains between its own unrolls); C - 1 where the learner trains while the
   actors step: asynchronous runs (N >= 2) and SAC (its learner takes the
   gradient steps of one batch while the actors collect the next).
2. Cores per actor P = max(those // N, 1).
3. W = 0 when P < 2: an actor with one core steps its envs fastest itself, as
   env workers would only add a pipe round trip per step. Otherwise W = min(P,
   K // 2): one env worker per core, each with at least 2 envs so that S = 2
   can overlap them.
   Unless the envs are cheap: when stepping all K envs once takes less than
   ``CHEAP_BATCH_STEP_S`` (3 ms) in one process (K x the mean step time of
   one env, measured before the run starts in a child process:
   ``envs.step_cost``, only where it can change the choice: an "auto" W
   that the cores alone resolve to 1 or more), W = 0. Below that the
   pipe round trips and the second inference call of S = 2 cost more than
   parallel stepping saves (measured on 2 cores: InvertedPendulum, K = 8, 0.9
   ms: W = 2 with S = 2 ran at 0.94x W = 0; HalfCheetah, K = 16, 12 ms: 1.3x).
4. S = 2 when W >= 1 and every worker has >= 2 envs (the actor computes the
   actions of one half of its envs while the workers step the other half),
   else 1.
5. The Ray backend: actors run on nodes whose cores the trainer cannot see, so
   "auto" gives W = 0, S = 1; set both (and ``RayBackend.num_cpus_per_actor``)
   for the cluster's nodes.

A value set explicitly is kept; "auto" for only one of the two is resolved
given the other (W = 0 gives S = 1; an explicit S keeps W at most K // S).

On this 2-core machine a synchronous PyBullet run thus gets W = 2, S = 2 and
an asynchronous one (N = 2) W = 0, S = 1 (docs/async_guide.md has the
measurements behind the rule). Envs that step in microseconds (gymnasium's
classic control) lose more to the pipes than the workers win: their configs set
W = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

AUTO = "auto"
# Seconds of stepping all K envs once in one process below which env workers
# do not pay (rule 3).
CHEAP_BATCH_STEP_S = 3e-3

IntOrAuto = Union[int, str]


@dataclass(frozen=True)
class SamplingChoice:
    """The resolved W and S, and a sentence saying why (for the start-up log;
    empty when neither setting was "auto")."""

    num_env_workers: int
    env_splits: int
    reason: str = ""


def sampling_cores(cores: int, num_actors: int, runtime: str, algorithm: str) -> int:
    """Cores per actor left for sampling (rules 1 and 2 of the module doc)."""
    learner_overlaps = runtime != "hogwild" and (num_actors >= 2 or algorithm == "sac")
    for_sampling = cores - 1 if learner_overlaps else cores
    return max(for_sampling // max(num_actors, 1), 1)


def choose_sampling(num_env_workers: IntOrAuto, env_splits: IntOrAuto, *, cores: int,
                    num_actors: int, num_envs: int, runtime: str = "actor_learner",
                    algorithm: str = "ppo", backend: str = "process",
                    env_step_s: Optional[float] = None) -> SamplingChoice:
    """Resolve "auto" in W and S (see the module doc for the rule).

    Args:
        num_env_workers: W as configured: an int, or "auto".
        env_splits: S as configured: an int, or "auto".
        cores: cores the run may use (``utils.process.usable_cores()``).
        num_actors: N (actors, or Hogwild workers).
        num_envs: K, envs per actor.
        runtime: ``Trainer.runtime``.
        algorithm: ``Trainer.algorithm``.
        backend: ``Trainer.backend``.
        env_step_s: mean seconds of one env step (``envs.step_cost``); None
            (not measured yet) leaves the cheap-env part of rule 3 out.
    """
    auto_w, auto_s = num_env_workers == AUTO, env_splits == AUTO
    if not (auto_w or auto_s):
        return SamplingChoice(int(num_env_workers), int(env_splits))
    per_actor = sampling_cores(cores, num_actors, runtime, algorithm)
    cheap = env_step_s is not None and num_envs * env_step_s < CHEAP_BATCH_STEP_S
    if not auto_w:
        w = int(num_env_workers)
    elif backend == "ray" or per_actor < 2 or cheap:
        w = 0
    else:
        w = min(per_actor, num_envs // 2)
        if not auto_s:  # an explicit S needs >= S envs per worker
            w = min(w, num_envs // max(int(env_splits), 1))
    if auto_s:
        s = 2 if w >= 1 and num_envs // w >= 2 else 1
    else:
        s = int(env_splits)
    where = ("the Ray backend: the actors' nodes are not known here" if backend == "ray"
             else f"{cores} usable core(s), {num_actors} "
                  f"{'worker' if runtime == 'hogwild' else 'actor'}(s) -> {per_actor} "
                  f"core(s) per actor for sampling, {num_envs} envs per actor")
    if env_step_s is not None and backend != "ray":
        where += (f"; one env steps in {env_step_s * 1e3:.2f} ms, all {num_envs} in "
                  f"{num_envs * env_step_s * 1e3:.1f} ms"
                  + (f" < {CHEAP_BATCH_STEP_S * 1e3:g} ms: cheap" if cheap else ""))
    chosen = ", ".join(text for text, auto in (
        (f"Trainer.num_env_workers='auto' -> {w}", auto_w),
        (f"Trainer.env_splits='auto' -> {s}", auto_s)) if auto)
    return SamplingChoice(w, s, f"{chosen} ({where})")

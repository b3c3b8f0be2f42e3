"""The settings of a training run, declared once.

``TrainerSettings`` is the single declaration of every run setting: the Trainer,
the actor pools, each actor process and the checkpoint read this one frozen
object. gin fills it from the ``Trainer.*`` bindings (the configurable is
registered under the name ``Trainer``, so gin files and sweeps write
``Trainer.num_envs = 16``). Each field carries its validation rule; a bad value
raises ``ConfigError`` naming ``Trainer.<field>`` before anything is started.

Groups (by concern):

- what to train and for how long: algorithm, runtime, env_name, max_episode_steps,
  time_feature, terminal_on_life_loss, seed,
  num_env_steps, num_iterations;
- the actors: num_envs (K), num_env_workers (W), env_splits, acting_env_workers,
  num_actors (N), unroll_length,
  slots_per_actor, backend;
- checkpoints: checkpoint_interval, reseed_at_checkpoints;
- evaluation: eval_interval_env_steps, eval_episodes;
- faults: max_actor_restarts, actor_timeout_s, fatal_env_errors;
- resources: max_trajectory_memory_gb, learner_num_threads;
- policy lag: max_lag.

``RayBackendSettings`` (gin ``RayBackend.*``, in ``ray_settings.py``) holds
what only the Ray backend reads: where the cluster is, and what each Ray actor
asks of it.
``ReplaySettings`` (gin ``Replay.*``) holds what only off-policy runs read: the
replay buffer and the env-steps : gradient-steps ratio.
``HogwildSettings`` (gin ``Hogwild.*``) holds what only Hogwild runs read: how
the workers share the networks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional, Union

import gin

from alf_async.ray_settings import RAY_REQUIREMENT, ray_installed
from alf_async.sampling_choice import AUTO, choose_sampling
from alf_async.utils.process import usable_cores
from alf_async.utils.seeding import derive_seed
from alf_async.utils.validation import ConfigError, rule, validate_fields

BACKENDS = ("process", "inprocess", "ray")
ALGORITHMS = ("ppo", "sac")
RUNTIMES = ("actor_learner", "hogwild")
HOGWILD_MODES = ("shared", "synced")
HOGWILD_GIN_NAME = "Hogwild"
GIN_NAME = "Trainer"
REPLAY_GIN_NAME = "Replay"


def eval_seed(seed: int) -> int:
    """The reset seed of the first episode of every evaluation of a run seeded
    with ``seed`` (``Trainer.seed``; episode i: + i), apart from the seeds of
    its training envs (``TrainerSettings.env_seed``)."""
    return derive_seed(seed, 3)


@gin.configurable(GIN_NAME)
@dataclass(frozen=True)
class TrainerSettings:
    """The settings of a training run, bound in gin as ``Trainer.<name>``.

    Args:
        algorithm: "ppo" (on-policy: the learner trains on each actor batch,
            ``PPOLearner.*``) or "sac" (off-policy: actor batches go into a
            replay buffer the learner samples from, ``SACLearner.*`` and
            ``Replay.*``; an iteration is one actor batch received).
        runtime: "actor_learner" (N actors feed one learner through the actor
            pool) or "hogwild" (N worker processes each step their own K envs
            and train the one set of networks they share, lock-free; see
            ``Hogwild.*`` and docs/hogwild.md). Hogwild runs use the process
            backend; N is ``num_actors``.
        env_name: gymnasium id, e.g. ``HumanoidBulletEnv-v0``.
        num_envs: K, envs per actor. EPS = K / T.
        num_env_workers: W, env-worker processes per actor (0: envs step inside
            the actor process), or "auto": chosen from the cores this process may
            use and N, and logged at start (the rule: ``sampling_choice.py``,
            docs/async_guide.md).
        env_splits: S, groups the actor's K envs are stepped in (double-buffered
            sampling), or "auto" (as for W). With S = 2 and W >= 1 every env
            worker steps its envs in two halves: the actor computes the actions
            of one worker's half as soon as that worker answers, while the
            worker steps its other half and the other workers step theirs, so
            inference leaves the critical path and no worker waits for another;
            with W = 0 splitting changes nothing but the order of work. Each env
            worker needs >= S envs.
            Trajectories are the same for any S given the same actions (a
            stochastic policy draws its samples in another order, and a
            network's outputs may differ in the last bits with the batch size).
        acting_env_workers: with W >= 1, each env worker acts for its own envs
            with a numpy copy of the policy and unrolls them by itself, writing
            every step into shared memory (one message per unroll instead of
            one per step and group; ``envs.acting_workers``). Applies to
            feed-forward policies on vector observations (the PPO actors'
            numpy inference); other policies, SAC and recurrent or image
            networks, act in the actor. Same trajectories as acting in the
            actor wherever each group of envs is one worker's (W = 1 or
            S >= 2). False: the actor acts for every step.
        num_actors: N actor processes. 1 = synchronous, >= 2 = asynchronous.
        unroll_length: steps per env per trajectory.
        slots_per_actor: trajectories an actor may have in flight; 1 (default)
            makes each actor wait for the learner to train on its batch.
        num_env_steps: budget in env steps (0 = no limit; one budget must be set).
        num_iterations: budget in training iterations (0 = no limit).
        seed: seeds the learner, the actors' sampling and the envs. A
            synchronous run repeats itself bit for bit with the same seed on
            the same CPU model (bench rows' ``cpu_model``: name, family,
            model, vector extensions) and library versions; on another
            model the float kernels round differently from the first
            batch on, and the run is another sample of the config. It also
            needs the same sampling layout: each group of envs (set by
            ``num_env_workers`` and ``env_splits`` as resolved, which "auto"
            derives from the machine's usable cores) draws its actions from a
            stream of its own, so another layout is another sample from the
            first step on. An asynchronous run (N >= 2) differs from run to
            run.
        backend: "process" (actor processes), "inprocess" (N = 1 only; the
            actor runs in the trainer's process) or "ray" (each actor is a Ray
            actor, on any node of a Ray cluster; see ``RayBackend.*`` and
            docs/distributed.md).
        checkpoint_interval: iterations between checkpoints (a final one is
            always written).
        reseed_at_checkpoints: at each periodic checkpoint the actor just
            released reseeds its envs and sampling from (seed, actor, iteration)
            and resets its envs (running episodes are dropped). A synchronous run
            resumed from such a checkpoint then repeats the uninterrupted run
            exactly. False keeps episodes running across checkpoints.
        eval_interval_env_steps: env steps between deterministic evaluations
            of the learner's weights (0: none). Each time the run's env steps
            pass a multiple of it, and when the budget is reached, an evaluator
            process plays ``eval_episodes`` episodes with the mean action on
            envs of its own (the rl-baselines3-zoo's way; training does not
            wait for it and trains the same without it) and the mean return is
            reported as ``eval_return`` (eval.jsonl, metrics, TensorBoard
            ``eval/return``, the console). The evaluator shares the machine's
            cores with the actors and the learner, so where they already use
            every core, T and EPS of a run with evaluation are lower than
            without it; measure throughput without it (the bench/ throughput
            scripts do).
        eval_episodes: episodes per evaluation (episode i resets with the same
            seed at every evaluation).
        max_actor_restarts: actor failures tolerated before the run stops.
        actor_timeout_s: an actor silent (no batch, no heartbeat) for this many
            seconds is taken as hung, killed and restarted (0: never).
        fatal_env_errors: an env that raises (or an env worker that dies) stops
            the run instead of being recreated with its episode dropped.
        max_episode_steps: override of the env's time limit (None keeps it); for
            an Atari game, in env steps of 4 frames.
        time_feature: append the fraction of the time limit elapsed, t / limit
            in [0, 1], to each observation (gymnasium's TimeAwareObservation; the
            TimeFeature of rl-baselines3-zoo's PyBullet configs, there 1 - t /
            limit). Needs a time limit. The play command adds it too.
        terminal_on_life_loss: Atari games only: a lost life ends the training
            episode (no bootstrap past it) while the game goes on, the usual
            setting for games with lives (Breakout); episode returns in the
            metrics stay whole games' scores, and evaluation and the play
            command play whole games. False: only the game's end ends an
            episode.
        max_trajectory_memory_gb: refuse configurations whose trajectory slots
            (N * slots_per_actor * one trajectory) would need more shared memory.
        learner_num_threads: torch CPU threads of the learner (0 keeps torch's
            default, one per core). The default 1 suits the small MLPs of PPO and
            leaves the cores to the actors: with several threads on a machine
            whose cores are busy with actors, intra-op threads wait on each other
            (measured here: 15x slower training on 2 busy cores). Raise it for
            large networks trained on the CPU of a machine with spare cores.
        max_lag: a batch acted by a policy more than this many versions older
            than the learner is dropped instead of trained on (counted in the
            metrics as dropped_batches / dropped_env_steps; its env steps do not
            count towards the budget). None: no cap (lag <= N - 1 anyway with one
            slot per actor).
        weights_mid_unroll: an actor that acts for its envs itself loads the
            weights the learner publishes during its unroll before its next
            step, instead of at the start of its next unroll: the later part of
            an async batch is acted by the version the learner trains it with
            (the batch's ``behaviour_version`` column holds the version of each
            step; the learner normalizes each step with its own version's
            statistics and reports ``step_lag``, the mean over the batch's
            steps). Process backend only; env workers that act for their envs
            (``acting_env_workers``) and a synchronous run (no weights are
            published during an unroll) are unchanged.
    """

    gin_name: ClassVar[str] = GIN_NAME

    algorithm: str = field(default="ppo", metadata=rule("choice", choices=ALGORITHMS))
    runtime: str = field(default="actor_learner", metadata=rule("choice", choices=RUNTIMES))
    env_name: str = field(default="InvertedPendulumBulletEnv-v0", metadata=rule("str"))
    num_envs: int = field(default=8, metadata=rule("int", low=1))
    num_env_workers: Union[int, str] = field(default=AUTO, metadata=rule("int", low=0, auto=True))
    env_splits: Union[int, str] = field(default=AUTO, metadata=rule("int", low=1, auto=True))
    acting_env_workers: bool = field(default=True, metadata=rule("bool"))
    num_actors: int = field(default=1, metadata=rule("int", low=1))
    unroll_length: int = field(default=128, metadata=rule("int", low=1))
    slots_per_actor: int = field(default=1, metadata=rule("int", low=1))
    num_env_steps: int = field(default=0, metadata=rule("int", low=0))
    num_iterations: int = field(default=0, metadata=rule("int", low=0))
    seed: int = field(default=0, metadata=rule("int"))
    backend: str = field(default="process", metadata=rule("choice", choices=BACKENDS))
    checkpoint_interval: int = field(default=20, metadata=rule("int", low=1))
    reseed_at_checkpoints: bool = field(default=True, metadata=rule("bool"))
    eval_interval_env_steps: int = field(default=0, metadata=rule("int", low=0))
    eval_episodes: int = field(default=10, metadata=rule("int", low=1))
    max_actor_restarts: int = field(default=3, metadata=rule("int", low=0))
    actor_timeout_s: float = field(default=120.0, metadata=rule("number", low=0))
    fatal_env_errors: bool = field(default=False, metadata=rule("bool"))
    max_episode_steps: Optional[int] = field(default=None,
                                             metadata=rule("int", low=1, optional=True))
    time_feature: bool = field(default=False, metadata=rule("bool"))
    terminal_on_life_loss: bool = field(default=False, metadata=rule("bool"))
    max_trajectory_memory_gb: float = field(default=8.0, metadata=rule(
        "number", low=0, low_open=True))
    learner_num_threads: int = field(default=1, metadata=rule("int", low=0))
    max_lag: Optional[int] = field(default=None, metadata=rule("int", low=0, optional=True))
    weights_mid_unroll: bool = field(default=False, metadata=rule("bool"))

    def __post_init__(self) -> None:
        validate_fields(self, GIN_NAME)
        self._resolve_sampling()
        w = self.num_env_workers
        if w > self.num_envs:
            raise ConfigError(f"Trainer.num_env_workers must be an integer in "
                              f"[0, num_envs={self.num_envs}], got {w!r}")
        if self.num_envs // max(w, 1) < self.env_splits:
            raise ConfigError(
                f"Trainer.env_splits={self.env_splits} needs at least that many envs per "
                f"env worker: num_envs={self.num_envs} over num_env_workers={w} gives "
                f"{self.num_envs // max(w, 1)}")
        if not (self.num_env_steps or self.num_iterations):
            raise ConfigError(
                "Set a budget: Trainer.num_env_steps and/or Trainer.num_iterations must be "
                f"> 0 (got num_env_steps={self.num_env_steps}, "
                f"num_iterations={self.num_iterations})")
        if self.backend == "ray" and not ray_installed():
            raise ConfigError(
                "Trainer.backend='ray' needs Ray, which is not installed; install it with "
                f"pip install -e \".[ray]\" (from the alf_async checkout) or "
                f"pip install \"{RAY_REQUIREMENT}\"")
        if self.runtime == "hogwild" and self.backend != "process":
            raise ConfigError(f"Trainer.runtime='hogwild' runs its workers as processes of "
                              f"this machine; set Trainer.backend='process' (got "
                              f"{self.backend!r})")
        if self.weights_mid_unroll and self.backend != "process":
            raise ConfigError("Trainer.weights_mid_unroll=True needs actor processes that "
                              "read the learner's shared weight store; set "
                              f"Trainer.backend='process' (got {self.backend!r})")
        if self.backend == "inprocess" and self.num_actors != 1:
            raise ConfigError("Trainer.backend='inprocess' runs one actor; set "
                              f"Trainer.num_actors=1 (got {self.num_actors}) or use 'process'")

    def _resolve_sampling(self, env_step_s: Optional[float] = None) -> None:
        """Replace "auto" in num_env_workers / env_splits by the values
        ``choose_sampling`` gives for this machine; the configured values stay in
        ``configured_sampling`` (``replace`` resolves them again) and the reason
        in ``sampling_reason`` (logged when the run starts)."""
        configured = getattr(self, "configured_sampling",
                             (self.num_env_workers, self.env_splits))
        choice = choose_sampling(*configured, cores=usable_cores(), num_actors=self.num_actors,
                                 num_envs=self.num_envs, runtime=self.runtime,
                                 algorithm=self.algorithm, backend=self.backend,
                                 env_step_s=env_step_s)
        object.__setattr__(self, "configured_sampling", configured)
        object.__setattr__(self, "sampling_reason", choice.reason)
        object.__setattr__(self, "num_env_workers", choice.num_env_workers)
        object.__setattr__(self, "env_splits", choice.env_splits)

    @property
    def sampling_is_auto(self) -> bool:
        """Whether num_env_workers or env_splits was configured as "auto"."""
        return AUTO in getattr(self, "configured_sampling", ())

    @property
    def step_time_matters(self) -> bool:
        """Whether an env's measured step time could change the resolved
        sampling settings: only an "auto" W that resolved to env workers, which
        cheap envs turn into W = 0 (rule 3 of ``sampling_choice``). The trainer
        probes the env only then (a child process, a fraction of a second of
        start-up)."""
        configured = getattr(self, "configured_sampling", (None, None))
        return configured[0] == AUTO and self.num_env_workers >= 1

    def fitted_to_env(self, env_step_s: float) -> "TrainerSettings":
        """A copy whose "auto" sampling settings also weigh the env's measured
        step time (seconds; rule 3 of ``sampling_choice``: cheap envs step in
        the actor); ``self`` when neither setting is "auto"."""
        if not self.sampling_is_auto:
            return self
        fitted = self.replace()
        fitted._resolve_sampling(env_step_s)
        return fitted

    # -- derived values -------------------------------------------------------
    @property
    def off_policy(self) -> bool:
        """Whether batches go into a replay buffer (their trajectories then
        carry ``next_observation``)."""
        return self.algorithm == "sac"

    @property
    def steps_per_batch(self) -> int:
        """Env steps in one actor batch: unroll_length * num_envs."""
        return self.unroll_length * self.num_envs

    def budget_reached(self, iteration: int, env_steps: int) -> bool:
        return bool((self.num_env_steps and env_steps >= self.num_env_steps)
                    or (self.num_iterations and iteration >= self.num_iterations))

    def progress(self, iteration: int, env_steps: int) -> float:
        """How much of the budget is used, 0..1: the larger of env_steps /
        num_env_steps and iteration / num_iterations (those that are set)."""
        shares = [env_steps / self.num_env_steps if self.num_env_steps else 0.0,
                  iteration / self.num_iterations if self.num_iterations else 0.0]
        return min(max(shares), 1.0)

    def env_seed(self, actor_id: int, epoch: int, generation: int) -> int:
        """Base seed of actor ``actor_id``'s envs (env k gets this + k).

        ``epoch`` is the iteration of the checkpoint the actor last reseeded at
        (actors reseed there, so a resumed synchronous run replays the
        uninterrupted one); ``generation`` counts the actor's restarts.
        """
        return derive_seed(self.seed, actor_id, epoch, generation, 1)

    def policy_seed(self, actor_id: int, epoch: int, generation: int) -> int:
        """Seed of actor ``actor_id``'s action sampling (see ``env_seed``)."""
        return derive_seed(self.seed, actor_id, epoch, generation, 2)

    def replace(self, **changes: Any) -> "TrainerSettings":
        """A copy with ``changes`` (validated again; "auto" sampling settings are
        resolved again for the copy's N and K)."""
        w, s = getattr(self, "configured_sampling", (self.num_env_workers, self.env_splits))
        return dataclasses.replace(self, **{"num_env_workers": w, "env_splits": s, **changes})

    def changes_since(self, saved: Dict[str, Any]) -> str:
        """'name old -> new, ...' for fields that differ from ``saved`` (as_dict())."""
        return ", ".join(f"{k} {v!r} -> {getattr(self, k)!r}" for k, v in sorted(saved.items())
                         if hasattr(self, k) and getattr(self, k) != v)

    def as_dict(self) -> Dict[str, Any]:
        """Plain values, for checkpoints and logs ("auto" settings resolved)."""
        return dataclasses.asdict(self)

    def configured_dict(self) -> Dict[str, Any]:
        """``as_dict`` with the sampling settings as configured ("auto" kept)."""
        w, s = getattr(self, "configured_sampling", (self.num_env_workers, self.env_splits))
        return {**self.as_dict(), "num_env_workers": w, "env_splits": s}


@gin.configurable(REPLAY_GIN_NAME)
@dataclass(frozen=True)
class ReplaySettings:
    """The replay buffer of an off-policy run and the pace of its learner.

    Read only when ``Trainer.algorithm = "sac"``; bound in gin as
    ``Replay.<name>``.

    Args:
        capacity: transitions the buffer holds (the oldest are overwritten).
        learning_starts: env steps collected (acting uniformly at random in
            a new run) before the first gradient step.
        env_steps_per_gradient_step: r, the ratio held between env steps and
            gradient steps whatever the speeds of sampling and training: the
            learner waits for data when it is ahead, the actors wait (their
            slots are not handed back) when they are ahead. 1.0 is SB3's SAC
            default; 0.5 takes two gradient steps per env step.
        strict: actors may be ahead of the learner by the batches of their
            slots only (N = 1 with one slot: exactly "collect a batch, then
            take its gradient steps", the sync algorithm); False lets each run
            one more batch ahead, so that sampling and training overlap.
        save_replay_buffer: checkpoints hold the buffer (resume continues
            with it); False keeps checkpoints small, and a resumed run starts
            with an empty buffer that refills for ``learning_starts`` steps.
        max_replay_memory_gb: refuse a buffer larger than this.
        publish_interval: gradient steps between two weight versions published
            to the actors.
    """

    gin_name: ClassVar[str] = REPLAY_GIN_NAME

    capacity: int = field(default=1_000_000, metadata=rule("int", low=1))
    learning_starts: int = field(default=10_000, metadata=rule("int", low=0))
    env_steps_per_gradient_step: float = field(default=1.0, metadata=rule(
        "number", low=0, low_open=True))
    strict: bool = field(default=False, metadata=rule("bool"))
    save_replay_buffer: bool = field(default=True, metadata=rule("bool"))
    max_replay_memory_gb: float = field(default=8.0, metadata=rule("number", low=0,
                                                                   low_open=True))
    publish_interval: int = field(default=8, metadata=rule("int", low=1))

    def __post_init__(self) -> None:
        validate_fields(self, REPLAY_GIN_NAME)

    def lead(self, num_actors: int, steps_per_batch: int, slots_per_actor: int = 1) -> int:
        """Env steps the actors may be ahead of what the learner has paid for:
        every slot's batch (strict), or one more batch per actor."""
        extra = 0 if self.strict else num_actors
        return (num_actors * slots_per_actor + extra) * steps_per_batch


@gin.configurable(HOGWILD_GIN_NAME)
@dataclass(frozen=True)
class HogwildSettings:
    """How the workers of a Hogwild run (``Trainer.runtime = "hogwild"``) share
    the networks; bound in gin as ``Hogwild.<name>``.

    Args:
        mode: "shared" (the parameters live in shared memory; every worker's
            optimizer steps them in place, without locks, and every worker
            acts and trains with the newest values) or "synced" (each worker
            trains a local copy; every ``sync_interval`` updates it adds its
            change since the last sync to the global parameters and copies the
            result back: A3C-style).
        sync_interval: updates between two syncs in "synced" mode: SAC
            gradient steps, or PPO training iterations (one batch's epochs).
        sync_timeout_s: seconds the run waits for each worker's optimizer
            state at a checkpoint before writing it with the worker's previous
            one.
    """

    gin_name: ClassVar[str] = HOGWILD_GIN_NAME

    mode: str = field(default="shared", metadata=rule("choice", choices=HOGWILD_MODES))
    sync_interval: int = field(default=8, metadata=rule("int", low=1))
    sync_timeout_s: float = field(default=60.0, metadata=rule("number", low=0,
                                                                low_open=True))

    def __post_init__(self) -> None:
        validate_fields(self, HOGWILD_GIN_NAME)

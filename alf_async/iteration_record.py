"""One training iteration as every output reads it: ``IterationRecord`` (a row
of metrics.jsonl, the console line, TensorBoard scalars, the reports) and the
TensorBoard tag of each metrics-file key (``TENSORBOARD_TAGS``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping

NAN = float("nan")


@dataclass
class IterationRecord:
    """Everything recorded about one training iteration (one row of metrics.jsonl).

    Times are seconds. The console line, TensorBoard, ``metrics.jsonl`` and the
    reporting code (``reporting.run_metrics``) all read this one record; in the
    file the ``learner`` statistics are written as top-level keys beside the
    fields.

    Counters after the iteration: iteration, env_steps, episodes, wall_time
    (training-loop seconds, summed over resumes).
    Run shape: num_envs (K), num_actors (N), unroll_length.
    Throughput: T (seconds since the previous iteration ended), EPS = K / T,
    env_steps_per_s = K * unroll_length / T.
    Time split: learner_train_s, learner_wait_s (waiting for a batch),
    actor_unroll_s, actor_wait_s, actor_inference_s, actor_env_s (of the actor
    whose batch was trained on).
    Async: actor_id, queue_length, behaviour_version, behaviour_digest, lag
    (learner version at training minus behaviour_version).
    Faults and lag: actor_restarts, env_failures, dropped_batches (lost with a
    failed actor or older than Trainer.max_lag), dropped_env_steps (of batches
    dropped for lag); totals of this process's run.
    Distribution (Ray backend): actor_node (id of the node the trained actor
    runs on; "" for the process backends), bytes_moved (payload bytes moved
    between learner and actors since the previous iteration: trajectories in,
    weights out; 0 for the process backends, whose data stays in shared memory).
    Episodes: episodes_finished (in this batch), episode_return and
    episode_length (means over the recent-episodes window; NaN before any).
    Evaluation: eval_return, the mean return of the deterministic evaluation
    whose result arrived since the previous row (NaN in other rows), of the
    weights at eval_env_steps env steps (0 in other rows); every evaluation is
    also a row of eval.jsonl (``EVAL_FILE``).
    learner: the learner's statistics (PPO: policy_loss, value_loss, entropy,
    approx_kl, clip_fraction, grad_norm, explained_variance, action_std,
    mean_outside_box (continuous actions: the fraction of the policy mean's
    entries outside [-1, 1], where the env clips the mean itself; 0 with
    ``ActorNetwork.squash_mean``), failed_steps, ...).
    """

    iteration: int
    env_steps: int
    episodes: int
    wall_time: float
    num_envs: int
    num_actors: int
    unroll_length: int
    T: float
    EPS: float
    env_steps_per_s: float
    learner_train_s: float
    learner_wait_s: float
    actor_id: int
    actor_unroll_s: float
    actor_wait_s: float
    actor_inference_s: float
    actor_env_s: float
    queue_length: int
    behaviour_version: int
    behaviour_digest: int
    lag: int
    episodes_finished: int
    actor_restarts: int
    env_failures: int
    dropped_batches: int = 0
    dropped_env_steps: int = 0
    startup_s: float = NAN
    actor_node: str = ""
    bytes_moved: int = 0
    episode_return: float = NAN
    episode_length: float = NAN
    eval_return: float = NAN
    eval_env_steps: int = 0
    learner: Dict[str, float] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The metrics-file row: fields and learner statistics, NaN as null."""
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "learner"}
        row.update(self.learner)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in row.items()}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> "IterationRecord":
        """Inverse of ``to_json`` (null -> NaN; missing fields of older files -> 0/NaN)."""
        names = {f.name: f for f in dataclasses.fields(cls) if f.name != "learner"}
        values: Dict[str, Any] = {}
        for name, f in names.items():
            value = row.get(name)
            if value is None:
                value = (NAN if f.type in ("float", float) else
                         "" if f.type in ("str", str) else 0)
            values[name] = value
        learner = {k: (NAN if v is None else v) for k, v in row.items()
                   if k not in names and isinstance(v, (int, float, type(None)))}
        return cls(**values, learner=learner)

    def get(self, key: str, default: Any = None) -> Any:
        """A field or a learner statistic by its metrics-file key (the reporting
        code's generic access, e.g. ``mean_of(records, "clip_fraction")``)."""
        if key != "learner" and key in self.__dataclass_fields__:
            return getattr(self, key)
        return self.learner.get(key, default)

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, KeyError)
        if value is KeyError:
            raise KeyError(key)
        return value

    def scalars(self) -> Dict[str, float]:
        """Every finite numeric value by metrics-file key (for TensorBoard)."""
        return {k: v for k, v in self.to_json().items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v)}


# metrics-file key -> TensorBoard tag
TENSORBOARD_TAGS = {
    "episode_return": "episode/return",
    "episode_length": "episode/length",
    "T": "throughput/T",
    "EPS": "throughput/EPS",
    "env_steps_per_s": "throughput/env_steps_per_s",
    "learner_train_s": "time/learner_train_s",
    "learner_wait_s": "time/learner_wait_s",
    "actor_unroll_s": "time/actor_unroll_s",
    "actor_wait_s": "time/actor_wait_s",
    "actor_inference_s": "time/actor_inference_s",
    "actor_env_s": "time/actor_env_s",
    "startup_s": "time/startup_s",
    "queue_length": "async/queue_length",
    "lag": "async/lag",
    "step_lag": "async/step_lag",
    "bytes_moved": "async/bytes_moved",
    "policy_loss": "ppo/policy_loss",
    "value_loss": "ppo/value_loss",
    "entropy": "ppo/entropy",
    "approx_kl": "ppo/approx_kl",
    "clip_fraction": "ppo/clip_fraction",
    "explained_variance": "ppo/explained_variance",
    "grad_norm": "ppo/grad_norm",
    "action_std": "ppo/action_std",
    "mean_outside_box": "ppo/mean_outside_box",
    "importance_weight": "ppo/importance_weight",
    "truncated_fraction": "ppo/truncated_fraction",
    "truncated_weight": "ppo/truncated_weight",
    "behaviour_kl": "ppo/behaviour_kl",
    "learning_rate": "ppo/learning_rate",
    "clip_ratio": "ppo/clip_ratio",
    "kl_early_stop": "ppo/kl_early_stop",
    "failed_steps": "ppo/failed_steps",
    "critic_loss": "sac/critic_loss",
    "actor_loss": "sac/actor_loss",
    "alpha": "sac/alpha",
    "alpha_loss": "sac/alpha_loss",
    "q_mean": "sac/q_mean",
    "policy_entropy": "sac/policy_entropy",
    "gradient_steps_total": "replay/gradient_steps",
    "ratio_recent": "replay/ratio_recent",
    "ratio_overall": "replay/ratio_overall",
    "buffer_fill": "replay/buffer_fill",
    "learner_throttled_s": "replay/learner_throttled_s",
    "actors_throttled_s": "replay/actors_throttled_s",
    "data_age": "replay/data_age",
    "gradient_steps_per_s": "hogwild/gradient_steps_per_s",
    "syncs": "hogwild/syncs",
}

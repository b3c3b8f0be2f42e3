"""The PPO2 learner: trains the actor-critic on one [T, K] trajectory batch.

One call of ``train(batch)`` is one training iteration:

1. normalize the batch's observations with the statistics its acting policy
   used (``observation_stats``), then add them to the running statistics;
2. compute GAE advantages and lambda-returns from the rollout-time values (or
   V-trace's, or from recomputed values: ``lag_correction``,
   ``recompute_values``); steps whose env failed are no transitions
   (``value_ops``);
3. ``num_epochs`` passes over shuffled minibatches of ``mini_batch_size`` samples,
   each an Adam step on the PPO loss with global-norm gradient clipping (failed
   steps left out of the losses and counted: ``failed_steps``).

A recurrent network (``ActorCritic.rnn``) first re-runs the whole batch from the
states the actor stored with it, and its minibatches are whole env sequences
or chunks of them (``sequence_batches``; docs/recurrent.md).

The learner owns the model, optimizer, normalizer and its shuffling RNG; all of
them are in ``state_dict()`` for checkpoints, and ``weight_arrays()`` is what the
actors receive.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gin
import numpy as np
import torch

from alf_async.algorithms.adam import Adam
from alf_async.algorithms.guarded_step import GuardedStep
from alf_async.algorithms.normalizer import (PublishedStatistics, RunningNormalizer,
                                            VersionNormalizer)
from alf_async.algorithms.ppo_loss import ppo_loss
from alf_async.algorithms.sequence_batches import BatchColumns
from alf_async.algorithms.step_size import StepSizeControl
from alf_async.algorithms.value_ops import advantages_and_returns, explained_variance_tensor
from alf_async.envs.spaces import ActionSpec, ObservationSpec, as_observation_spec
from alf_async.networks import ActorCritic
from alf_async.runtime.weight_store import pack_weights
from alf_async.utils.devices import resolve_device, to_device, to_host
from alf_async.utils.precision import (check_precision, choose_precision, compute_context,
                                       precision_flag)
from alf_async.utils.validation import ConfigError, check


@gin.configurable
class PPOLearner:
    """PPO2 on whole trajectory batches.

    Args:
        observation: the env's ``ObservationSpec`` (an integer O: a float32
            vector of O values).
        action_spec: the env's action space (``envs.spaces.ActionSpec``; an
            integer A means A continuous dimensions).
        num_epochs: passes over the batch per training iteration.
        mini_batch_size: samples per gradient step (<= T * K). Each pass uses
            floor(T * K / mini_batch_size) minibatches; the remainder of the
            shuffled samples waits for the next pass.
        learning_rate: Adam step size (where a schedule starts).
        learning_rate_schedule: "constant" (the default) or "linear" (down to
            learning_rate * learning_rate_end_fraction at the end of the
            budget); ``algorithms.step_size``.
        learning_rate_end_fraction: where "linear" ends (0 <= f <= 1).
        anneal_clip_ratio: with "linear", clip_ratio falls by the same factor
            as the learning rate (the zoo's Atari lin_0.1); default False.
        target_kl: None (the default) or the KL budget of one iteration: its
            remaining gradient steps are skipped once a minibatch's approximate
            KL to the iteration's starting policy exceeds 1.5 * target_kl
            (SB3's target_kl; ``algorithms.step_size``).
        adam_epsilon: Adam's epsilon.
        max_grad_norm: global-norm gradient clipping threshold (0 disables).
        clip_ratio: PPO's epsilon for the importance-ratio clip.
        value_loss_weight: weight of the squared value loss.
        entropy_coef: weight of the entropy bonus.
        gamma: discount.
        gae_lambda: GAE's lambda.
        normalize_advantages: normalize advantages per minibatch.
        advantage_moments: where that normalization takes its mean and std on
            a batch with proximal log-probs (the lag corrections but "none"):
            "behaviour" (the default: the minibatch as the acting policy
            sampled it, PPO2's) or "proximal" (importance-weighted by
            pi_prox / mu, untruncated: the moments under the learner's
            policy; ``ppo_loss.ppo_loss``). The same up to float rounding on
            on-policy data, where every weight is 1.
        normalize_observations: keep running observation statistics and feed
            normalized observations to the networks (vector observations only:
            uint8 image frames are divided by 255 inside the network instead,
            float frames reach it as the env gives them).
        reward_scale: rewards are multiplied by this before GAE.
        reward_clip: rewards are clipped to [-reward_clip, reward_clip] before
            the scaling (None: not clipped); Atari's usual 1.0 gives every point
            the same weight in training, while episode returns (metrics,
            evaluation) stay the game's score.
        device: the learner's torch device: "cpu", "cuda", "cuda:N" or "auto"
            (CUDA where this machine has it); checked before the run starts
            (``utils.devices``). Actors always act on the CPU. A run resumed
            on a machine without the device its saved config names trains on
            the CPU and logs so.
        max_skipped_updates: a gradient step whose loss or gradient is NaN or
            infinite is skipped (never applied) and counted (``skipped_updates``
            in the metrics); more than this many in a row stop the run with
            ``NonFiniteError``.
        lag_correction: how a batch acted by an older policy (lag) is corrected:
            "decoupled" (the default; Hilton et al. 2021: the clip is centred on
            the proximal policy, the learner's weights at the start of the
            iteration, and the loss is weighted by min(pi_prox / mu, rho_bar));
            "none" (PPO2: the clip is centred on the behaviour policy mu);
            "vtrace" (value targets and advantages from V-trace with rho_bar
            and c_bar, and the decoupled policy step); "vtrace_gae" (as
            "vtrace", but the policy advantages keep GAE's shape: the first
            step's TD error plus gamma * lambda times the trace-corrected
            advantage of the next step). On-policy data gives PPO2 with
            "none", "decoupled" and "vtrace_gae", and with "vtrace" only for
            gae_lambda = 1 (otherwise its advantage r + gamma * vs' - V is
            GAE's with lambda = 1 for the first step), with or without
            observation normalization (``observation_stats``). A batch acted
            by the learner's current weights (its behaviour version is the
            learner's ``iteration``: every batch of a sync run) has pi_prox
            = mu, and the actor's log-probs and values serve as the
            learner's: its importance weights are exactly 1 and none is
            truncated. The default comes from
            the HalfCheetah study in docs/async_guide.md (PPO2 needed 1.6x
            sync's env steps at N = 2, decoupled 1.16x).
        rho_bar: truncation of the importance weights (decoupled and both V-traces).
        c_bar: truncation of V-trace's trace coefficients (<= rho_bar).
        recompute_values: recompute the batch's values with the learner's
            current value network before computing advantages (the behaviour
            values of a stale batch come from an older network): V(s_t), the
            bootstrap value V(s_T) from the trajectory's bootstrap_observation
            and the truncation values from its final observations (env k's
            first R truncations of the unroll, ``runtime.trajectory``; the
            actor's beyond them, and for a batch without these fields).
            Recurrent networks recompute V(s_t) only. A batch acted by the
            current weights is not recomputed (its values are the learner's).
        observation_stats: which observation statistics normalize a batch:
            "behaviour" (the default: the statistics its acting policy used,
            published with its weights version and kept for the newest 64
            versions; for a batch without a version, the statistics of the
            last ``weight_arrays()``; the current ones if neither was
            published in this process), so that actor and learner feed the
            networks the same inputs and on-policy data has ratio 1, as in
            Stable-Baselines3; or "updated" (the default before: the
            statistics after adding the batch, which the acting policy had
            not seen). Either way the batch is then added to the statistics.
        chunk_length: recurrent networks (``ActorCritic.rnn``) only: the
            minibatches are sets of L = chunk_length consecutive steps of one
            env, re-run from the state the network had at their first step in a
            pass over the whole batch with the iteration's starting weights;
            None (default): whole env sequences of the unroll (L = T, from the
            state the actor started the unroll with). ``mini_batch_size`` then
            counts samples: a minibatch has mini_batch_size // L chunks.
        precision: the networks' compute precision: "fp32" (the default),
            "bf16" (bfloat16 autocast of the forward passes; float32 weights,
            optimizer moments, losses, value targets, normalizer and
            log-probabilities) or "auto" (bf16 where the learner is on a CPU
            that runs it natively and the network is convolutional, other
            than the Nature CNN, whose bf16 Pong runs fell short of fp32's
            best; fp32 for an MLP, whose actors would act slower, and on a
            CUDA device, where the steps are launch-bound and bf16 measured
            slower); resolved once, logged at start (``utils.precision``) and
            published with the weights, so that the actors infer in the same
            precision. Checkpoints are float32 under any precision.
        seed: seeds the model initialization and the minibatch shuffling.
    """

    def __init__(self, observation: Union[ObservationSpec, int],
                 action_spec: Union[ActionSpec, int],
                 num_epochs: int = 20,
                 mini_batch_size: int = 4096, learning_rate: float = 3e-4,
                 learning_rate_schedule: str = "constant",
                 learning_rate_end_fraction: float = 0.0, anneal_clip_ratio: bool = False,
                 target_kl: Optional[float] = None,
                 adam_epsilon: float = 1e-5, max_grad_norm: float = 0.5,
                 clip_ratio: float = 0.2, value_loss_weight: float = 0.5,
                 entropy_coef: float = 1e-2, gamma: float = 0.99,
                 gae_lambda: float = 0.95, normalize_advantages: bool = True,
                 advantage_moments: str = "behaviour",
                 normalize_observations: bool = True, reward_scale: float = 1.0,
                 reward_clip: Optional[float] = None,
                 device: str = "cpu", max_skipped_updates: int = 10,
                 lag_correction: str = "decoupled", rho_bar: float = 1.0, c_bar: float = 1.0,
                 recompute_values: bool = False, observation_stats: str = "behaviour",
                 chunk_length: Optional[int] = None, precision: str = "fp32",
                 seed: int = 0):
        for name, value, kind, bounds in (
                ("num_epochs", num_epochs, "int", dict(low=1)),
                ("mini_batch_size", mini_batch_size, "int", dict(low=1)),
                ("max_grad_norm", max_grad_norm, "number", dict(low=0)),
                ("clip_ratio", clip_ratio, "number", dict(low=0, low_open=True)),
                ("value_loss_weight", value_loss_weight, "number", dict(low=0)),
                ("entropy_coef", entropy_coef, "number", dict(low=0)),
                ("gamma", gamma, "number", dict(low=0, high=1)),
                ("gae_lambda", gae_lambda, "number", dict(low=0, high=1)),
                ("reward_scale", reward_scale, "number", dict(low=0, low_open=True)),
                ("reward_clip", reward_clip, "number", dict(low=0, low_open=True,
                                                             optional=True)),
                ("max_skipped_updates", max_skipped_updates, "int", dict(low=0)),
                ("lag_correction", lag_correction, "choice",
                 dict(choices=("none", "decoupled", "vtrace", "vtrace_gae"))),
                ("rho_bar", rho_bar, "number", dict(low=0, low_open=True)),
                ("c_bar", c_bar, "number", dict(low=0, low_open=True)),
                ("recompute_values", recompute_values, "bool", {}),
                ("observation_stats", observation_stats, "choice",
                 dict(choices=("behaviour", "updated"))),
                ("normalize_advantages", normalize_advantages, "bool", {}),
                ("advantage_moments", advantage_moments, "choice",
                 dict(choices=("behaviour", "proximal"))),
                ("normalize_observations", normalize_observations, "bool", {}),
                ("chunk_length", chunk_length, "int", dict(low=1, optional=True))):
            check("PPOLearner", name, value, kind, **bounds)
        check_precision("PPOLearner", precision)
        if c_bar > rho_bar:
            raise ConfigError(f"PPOLearner.c_bar={c_bar} must not exceed "
                              f"PPOLearner.rho_bar={rho_bar} (V-trace needs c_bar <= rho_bar)")
        self.num_epochs = int(num_epochs)
        self.mini_batch_size = int(mini_batch_size)
        self.step_size = StepSizeControl(learning_rate, learning_rate_schedule,
                                         learning_rate_end_fraction, target_kl,
                                         anneal_clip_ratio)
        self.max_grad_norm = max_grad_norm
        self.clip_ratio = clip_ratio
        self.value_loss_weight = value_loss_weight
        self.entropy_coef = entropy_coef
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.normalize_advantages = normalize_advantages
        self.advantage_moments = advantage_moments
        spec = as_observation_spec(observation)
        # uint8 frames are divided by 255 inside the network instead (ImageEncoder).
        self.normalize_observations = normalize_observations and not spec.is_image
        self.reward_scale = reward_scale
        self.reward_clip = reward_clip
        self.lag_correction = lag_correction
        self.rho_bar = float(rho_bar)
        self.c_bar = float(c_bar)
        self.recompute_values = recompute_values
        self.chunk_length = chunk_length
        self.observation_stats = observation_stats
        self._published_stats = PublishedStatistics()  # the acting statistics
        self._step = GuardedStep(max_skipped_updates)
        self.device = resolve_device("PPOLearner", device)
        torch.manual_seed(seed)
        self.model = ActorCritic(spec, action_spec).to(self.device)
        self.precision = choose_precision("PPOLearner", precision, self.device, self.model)
        self.normalizer = RunningNormalizer(spec.dim)
        self.optimizer = Adam(self.model.parameters(), lr=learning_rate, eps=adam_epsilon)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.iteration = 0

    @property
    def state_size(self) -> int:
        """S of the network's recurrent state (0: feed-forward)."""
        return self.model.state_size

    def columns(self, unroll_length: int, num_envs: int) -> BatchColumns:
        """How a [T, K] batch is cut into minibatches (``sequence_batches``)."""
        if not self.state_size:
            return BatchColumns(unroll_length, num_envs, 1)
        return BatchColumns(unroll_length, num_envs, self.chunk_length or unroll_length)

    def hogwild_tensors(self) -> Dict[str, torch.Tensor]:
        """The tensors Hogwild workers share (the model's parameters and
        buffers, by name; the objects themselves, so that rebinding their
        storage rebinds the model). The normalizer's statistics are numpy and
        shared separately (``hogwild.shared_state``)."""
        return {f"model.{k}": v for k, v in self.model.state_dict(keep_vars=True).items()}

    def local_state(self) -> Dict[str, object]:
        """What a Hogwild worker owns beside the shared networks: the optimizer
        (its moments), the shuffling RNG and the iteration count."""
        return {"optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "iteration": self.iteration}

    def load_local_state(self, state: Mapping[str, object]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.iteration = int(state["iteration"])

    def check_batch_size(self, unroll_length: int, num_envs: int) -> None:
        """Raise ValueError if the minibatch cannot be drawn from T * K samples
        (or, for a recurrent network, the chunks do not fit the unroll)."""
        if self.state_size and self.chunk_length is not None:
            if unroll_length % self.chunk_length:
                raise ValueError(
                    f"PPOLearner.chunk_length={self.chunk_length} must divide "
                    f"Trainer.unroll_length={unroll_length}")
        if self.mini_batch_size > unroll_length * num_envs:
            raise ValueError(
                f"PPOLearner.mini_batch_size={self.mini_batch_size} is larger than one "
                f"batch of unroll_length * num_envs = {unroll_length} * {num_envs} = "
                f"{unroll_length * num_envs} samples; lower mini_batch_size or raise "
                f"unroll_length/num_envs")

    def weight_arrays(self) -> Dict[str, np.ndarray]:
        """What actors need to act (``NeuralPolicy.load_weights``): the network
        parameters, the precision to infer in (``utils.precision.PRECISION_KEY``)
        and, when observations are normalized, the normalizer's
        statistics. Without normalization no statistics are shipped, so actors
        feed raw observations to the networks exactly as the learner does."""
        groups = {"param": to_host(self.model.state_dict()),
                  "precision": {"bf16": precision_flag(self.precision.bf16)}}
        if self.normalize_observations:
            groups["normalizer"] = self.normalizer.state_arrays()
            # The learner's version is its iteration (the loops publish
            # weights version i after i iterations).
            self._published_stats.publish(self.iteration, groups["normalizer"])
        return pack_weights(groups)

    def _compute(self):
        """The context the networks' forward passes run in (``precision``)."""
        return compute_context(self.device, self.precision.bf16)

    def _batch_normalizer(self, raw: np.ndarray, behaviour_version: Optional[int],
                          step_versions: Optional[torch.Tensor] = None,
                          versions: Sequence[int] = ()
                          ) -> Union[None, RunningNormalizer, VersionNormalizer]:
        """The normalizer the batch's observations are trained with (None:
        observations are not normalized, see ``observation_stats``); adds the
        batch's raw observations [T, K, O] to the running statistics.
        ``step_versions`` [T, K] (on the device): the version of each step of a
        batch acted by several, ``versions`` (``Trainer.weights_mid_unroll``):
        each step is normalized with its own version's statistics."""
        if not self.normalize_observations:
            return None
        acting = None
        if self.observation_stats == "behaviour":
            if step_versions is None:
                acting = self._acting_normalizer(behaviour_version)
            else:
                acting = VersionNormalizer(
                    {v: self._acting_normalizer(v) for v in versions}, step_versions)
        self.normalizer.update(raw)
        return self.normalizer if acting is None else acting

    def _acting_normalizer(self, version: Optional[int]) -> RunningNormalizer:
        """The statistics published with ``version`` (the current ones where they
        were not published in this process)."""
        acting = self._published_stats.normalizer(version, self.normalizer)
        if acting is None:
            acting = RunningNormalizer(self.normalizer.dim, self.normalizer.clip,
                                       self.normalizer.epsilon)
            acting.load_state_arrays(self.normalizer.state_arrays())
        return acting

    def _acted_by_current_weights(self, behaviour_version: Optional[int]) -> bool:
        """Whether the batch was acted by the weights the learner has now,
        on the inputs it trains on (then pi_prox = mu and V = the actor's values)."""
        return (behaviour_version is not None and int(behaviour_version) == self.iteration
                and self._trains_on_acting_inputs())

    def _trains_on_acting_inputs(self) -> bool:
        """Whether the networks see a batch's observations as its actor did
        (raw, or normalized with the acting version's statistics)."""
        return not self.normalize_observations or self.observation_stats == "behaviour"

    def _state_values(self, observation: torch.Tensor,
                      normalizer: Optional[RunningNormalizer]) -> torch.Tensor:
        """V [M] of raw observations [M, *O] (feed-forward networks), frames
        ``mini_batch_size`` at a time."""
        x = observation if normalizer is None else normalizer.normalize(observation)
        rows = self.mini_batch_size if self.model.observation_spec.is_image else len(x)
        with self._compute():
            return torch.cat([self.model.state_value(x[i:i + rows])
                              for i in range(0, len(x), max(rows, 1))])

    def _recomputed_ends(self, t: Mapping[str, torch.Tensor],
                         normalizer: Optional[RunningNormalizer]
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(bootstrap_value [K], truncation_value [T, K]) under the current
        value network: V(bootstrap_observation [K, *O]) and V(s_final) of the
        final observations the trajectory kept (``final_observation`` [R, K, *O]
        at ``final_observation_row`` [T, K]); the actor's values where it kept
        none, and both the actor's for a batch without these fields."""
        if "bootstrap_observation" not in t or self.state_size:
            return t["bootstrap_value"], t["truncation_value"]
        K = t["bootstrap_value"].shape[0]
        rows = t["final_observation_row"].long()
        steps, envs = torch.nonzero(rows >= 0, as_tuple=True)
        observations = torch.cat([t["bootstrap_observation"],
                                  t["final_observation"][rows[steps, envs], envs]])
        if isinstance(normalizer, VersionNormalizer):  # s_T as the last step's version saw it
            versions = normalizer.step_versions
            normalizer = normalizer.for_rows(torch.cat([versions[-1], versions[steps, envs]]))
        values = self._state_values(observations, normalizer)
        truncation_value = t["truncation_value"].clone()
        truncation_value[steps, envs] = values[K:]
        return values[:K], truncation_value

    def train(self, batch: Mapping[str, np.ndarray],
              behaviour_version: Optional[int] = None,
              progress: Optional[float] = None) -> Dict[str, float]:
        """One training iteration on a trajectory batch.

        Args:
            batch: arrays of one actor's unroll (``runtime.trajectory``):
                observation [T, K, *O], action [T, K, A], reward/terminated/
                truncated/log_prob/value/truncation_value [T, K],
                bootstrap_value [K]; where present env_failed [T, K] (failed
                steps are left out of the losses), behaviour_version [T, K]
                (the version that acted each step, read when
                ``behaviour_version`` is given: steps of several versions are
                normalized and corrected each as its own) and, for
                ``recompute_values``, bootstrap_observation [K, *O],
                final_observation [R, K, *O] and final_observation_row [T, K];
                for a recurrent network also initial_state [K, S] and
                episode_start [T, K].
            behaviour_version: the weight version that acted (the first, for
                a batch of several; None: the
                weights of the last ``weight_arrays()``, or older ones; see
                ``observation_stats`` and ``lag_correction``).
            progress: env steps trained on before this batch / the run's
                budget (for ``learning_rate_schedule``).
        Returns:
            Scalar statistics averaged over the gradient steps taken (the
            loss's, grad_norm and, for continuous actions, mean_outside_box:
            the fraction of the minibatch's policy-mean entries outside
            [-1, 1]), plus learning_rate, clip_ratio, gradient_steps,
            failed_steps (steps of the batch whose env failed, left out of
            the losses), step_lag (with ``behaviour_version`` and the
            batch's column: this version minus each step's, averaged over
            the steps) and, with
            ``target_kl``, kl_early_stop (1.0 if the KL budget ended the
            iteration early).
        """
        learning_rate = self.step_size.learning_rate_at(progress)
        clip_ratio = self.step_size.clip_ratio_at(self.clip_ratio, progress)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        dev = self.device
        t = {k: to_device(v, dev) for k, v in batch.items()}
        T, K = t["reward"].shape
        # Episode starts stay on the host too: a recurrent re-run reads where
        # the episodes are cut from them, not from the device.
        host_starts = (torch.as_tensor(np.asarray(batch["episode_start"]))
                       if self.state_size else None)
        # A batch acted by more than one version (Trainer.weights_mid_unroll).
        host_versions = (np.asarray(batch["behaviour_version"])
                         if behaviour_version is not None and "behaviour_version" in batch
                         else None)
        mixed = host_versions is not None and host_versions.min() != host_versions.max()
        step_versions = t["behaviour_version"].long() if mixed else None
        normalizer = self._batch_normalizer(
            np.asarray(batch["observation"]), behaviour_version, step_versions,
            np.unique(host_versions).tolist() if mixed else ())
        obs = t["observation"] if normalizer is None else normalizer.normalize(
            t["observation"])  # [T, K, *O]
        layout = self.columns(T, K)
        values, proximal_log_prob, start_states = t["value"], None, None
        ends = t
        # Acted by these weights: pi_prox = mu, and the values are the learner's.
        current = not mixed and self._acted_by_current_weights(behaviour_version)
        recompute = self.recompute_values and not current
        proximal = self.lag_correction != "none" and not current
        if self.lag_correction != "none" and current:
            proximal_log_prob = t["log_prob"]
        with torch.no_grad(), self._compute():
            if self.state_size:  # one pass over the batch from the actors' states
                dist, all_values, states = self.model.sequence(
                    obs, t["initial_state"], host_starts, keep_every=layout.L)
                start_states = layout.start_states(states)
                if recompute:
                    values = all_values.reshape(T, K)
                if proximal:
                    proximal_log_prob = dist.log_prob(
                        t["action"].reshape(T * K, -1)).reshape(T, K)
            elif recompute or proximal:
                log_prob, all_values = self.model.log_prob_and_value(
                    obs.reshape((T * K,) + tuple(obs.shape[2:])), t["action"].reshape(T * K, -1),
                    self.mini_batch_size if self.model.observation_spec.is_image else None)
                if recompute:
                    values = all_values.reshape(T, K)
                if proximal:
                    proximal_log_prob = log_prob.reshape(T, K)
            if recompute:
                bootstrap_value, truncation_value = self._recomputed_ends(t, normalizer)
                ends = {**t, "bootstrap_value": bootstrap_value,
                        "truncation_value": truncation_value}
            if proximal and mixed and self._trains_on_acting_inputs():
                # the steps acted by these weights: pi_prox = mu exactly
                proximal_log_prob = torch.where(step_versions == self.iteration,
                                                t["log_prob"], proximal_log_prob)
        rewards = t["reward"]  # [T, K]
        if self.reward_clip is not None:
            rewards = rewards.clamp(-self.reward_clip, self.reward_clip)
        advantages, returns = advantages_and_returns(
            rewards * self.reward_scale, values, ends, self.gamma, self.gae_lambda,
            log_rho=(proximal_log_prob - t["log_prob"]
                     if self.lag_correction.startswith("vtrace") else None),
            rho_bar=self.rho_bar, c_bar=self.c_bar,
            gae_advantages=self.lag_correction == "vtrace_gae")
        col = layout.columns
        samples = {"action": col(t["action"]), "old_log_prob": col(t["log_prob"]),
                   "advantages": col(advantages), "returns": col(returns)}
        if proximal_log_prob is not None:
            samples["proximal"] = col(proximal_log_prob)
        failed = np.asarray(batch.get("env_failed", False))
        valid = None  # the steps that are transitions (None: all)
        if failed.any():
            valid = ~t["env_failed"].bool()
            samples["valid"] = col(valid)
        obs_columns = col(obs)
        starts = col(host_starts) if self.state_size else None  # [L, M] on the host
        # Statistics are summed on the device and read once, at the end.
        keys: List[str] = []
        totals: Optional[torch.Tensor] = None  # [len(keys) + 1] float64: sums, grad_norm's last
        steps = skipped = 0
        per_minibatch = layout.columns_per_minibatch(self.mini_batch_size)
        num_columns = layout.num_columns
        kl_stopped = False
        continuous = not self.model.action_spec.discrete

        def where() -> str:  # the step, for a NonFiniteError
            return (f"training iteration {self.iteration}, epoch pass "
                    f"{(steps - 1) // (num_columns // per_minibatch)}")

        for _ in range(self.num_epochs):
            if kl_stopped:
                break
            host_order = torch.randperm(num_columns, generator=self.generator)
            order = to_device(host_order, dev)
            for first in range(0, num_columns - per_minibatch + 1, per_minibatch):
                idx = order[first:first + per_minibatch]
                with self._compute():  # float32 outputs whatever the precision
                    if self.state_size:
                        dist, value, _ = self.model.sequence(
                            obs_columns[:, idx], start_states[idx],
                            starts[:, host_order[first:first + per_minibatch]])
                    else:
                        dist, value = self.model.evaluate(obs_columns[0, idx])
                mb = {k: layout.pick(v, idx) for k, v in samples.items()}
                out = ppo_loss(dist.log_prob(mb["action"]), mb["old_log_prob"],
                               mb["advantages"], value, mb["returns"],
                               dist.entropy(), clip_ratio,
                               self.value_loss_weight, self.entropy_coef,
                               self.normalize_advantages, mb.get("proximal"), self.rho_bar,
                               mb.get("valid"), self.advantage_moments)
                if continuous:  # where the env clips the mean itself
                    out.stats["mean_outside_box"] = (
                        dist.mode().detach().abs() > 1.0).float().mean()
                grad_norm = self._step.backward(self.model, self.optimizer, out.loss,
                                                self.max_grad_norm)
                finite = self._step.finite(out.loss, grad_norm)
                checks = [finite]
                if self.step_size.target_kl is not None:
                    checks.append(out.stats["approx_kl"].to(finite.dtype))
                read = torch.stack(checks).tolist()  # the step's one read from the device
                if len(read) > 1 and self.step_size.over_budget(read[1]):
                    self.optimizer.zero_grad(set_to_none=True)
                    kl_stopped = True  # this minibatch's step is not taken
                    break
                steps += 1
                if not self._step.apply(self.optimizer, read[0] > 0, out.loss, grad_norm,
                                        where):
                    skipped += 1
                    continue
                keys = keys or list(out.stats)
                step_stats = torch.stack([out.stats[k] for k in keys]
                                         + [grad_norm.detach()]).double()
                totals = step_stats if totals is None else totals + step_stats
        # The iteration's one read: the sums, explained variance, action std.
        extras = [explained_variance_tensor(values.reshape(-1), returns.reshape(-1),
                                            None if valid is None else valid.reshape(-1))]
        action_std = self.model.actor.action_std_tensor()
        if action_std is not None:
            extras.append(action_std.detach())
        read = torch.stack(extras).double()
        read = (read if totals is None else torch.cat([totals, read])).tolist()
        stats = {k: v / max(steps - skipped, 1)
                 for k, v in zip(keys + ["grad_norm"], read[:len(read) - len(extras)])}
        stats["skipped_updates"] = float(skipped)
        stats["explained_variance"] = read[len(read) - len(extras)]
        stats["failed_steps"] = float(failed.sum())
        if host_versions is not None:
            # versions between the acting weights and these, over the batch's steps
            stats["step_lag"] = float(self.iteration - host_versions.mean(dtype=np.float64))
        if action_std is not None:
            stats["action_std"] = read[-1]
        stats["gradient_steps"] = float(steps - skipped)
        stats["learning_rate"] = learning_rate
        stats["clip_ratio"] = clip_ratio
        if self.step_size.target_kl is not None:
            stats["kl_early_stop"] = float(kl_stopped)
        self.iteration += 1
        return stats

    def all_finite(self) -> bool:
        """Whether the weights, optimizer moments and normalizer statistics are finite."""
        tensors = list(self.model.state_dict().values())
        for group in self.optimizer.state.values():
            tensors += [v for v in group.values() if torch.is_tensor(v)]
        arrays = self.normalizer.state_arrays().values()
        return (all(bool(torch.isfinite(t).all()) for t in tensors)
                and all(bool(np.isfinite(a).all()) for a in arrays))

    def state_dict(self) -> Dict[str, object]:
        """Everything needed to continue training (tensors and plain values)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "normalizer": self.normalizer.state_dict(),
            "generator": self.generator.get_state(),
            "iteration": self.iteration,
        }

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.normalizer.load_state_dict(state["normalizer"])
        self.generator.set_state(state["generator"])
        self.iteration = int(state["iteration"])


"""The SAC learner: one gradient step at a time on transitions from a replay buffer.

Soft Actor-Critic (Haarnoja et al. 2018) with twin Q networks, Polyak-averaged
target networks and an automatically tuned entropy temperature alpha (target
entropy -|A| by default). Defaults follow the rl-baselines3-zoo PyBullet
hyperparameters (HalfCheetahBulletEnv-v0): lr 7.3e-4, batch 256, gamma 0.98,
tau 0.02, (400, 300) ReLU networks. The zoo's gSDE exploration is
``SquashedGaussianActor.use_sde`` (on in the shipped gin configs; off by default
here, which samples plain state-dependent Gaussian noise).

A gradient step (``train_step``) on a batch of B transitions ([B, ...] arrays
from ``ReplayBuffer.sample``):

1. critic: y = r + gamma (1 - terminated) (min Q'(s', a') - alpha log pi(a'|s')),
   a' ~ pi(s'), Q' the target networks; both Q networks regress on y;
2. actor: minimize alpha log pi(a|s) - min Q(s, a), a ~ pi(s) reparameterized;
3. temperature: log alpha follows -(log pi + target_entropy);
4. target networks: Q' <- (1 - tau) Q' + tau Q.

Actions are stored rows in [-1, 1] (``envs.spaces``), the policy's tanh range.
The learner publishes the policy network (``weight_arrays``) for the actors'
``SACPolicy``, with a flag that makes them act uniformly at random until the
first gradient step (as SB3 does before ``learning_starts``).
"""

from __future__ import annotations

import copy
import math
from typing import Dict, Mapping, Optional, Union

import gin
import numpy as np
import torch

from alf_async.algorithms.adam import Adam
from alf_async.algorithms.guarded_step import NonFiniteError
from alf_async.algorithms.sac_loss import (actor_loss, critic_loss, critic_target,
                                           polyak_update, temperature_loss)
from alf_async.envs.spaces import (ActionSpec, ObservationSpec, as_action_spec,
                                   as_observation_spec)
from alf_async.networks.sac import SquashedGaussianActor, TwinQNetwork
from alf_async.runtime.weight_store import pack_weights
from alf_async.utils.devices import resolve_device, sampling_generator, to_device, to_host
from alf_async.utils.precision import (check_precision, choose_precision, compute_context,
                                       precision_flag)
from alf_async.utils.validation import ConfigError, check


#: The statistics of a gradient step (``SACLearner.train_step``), in order.
SAC_STATS = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "q_mean", "policy_entropy")


@gin.configurable
class SACLearner:
    """Soft Actor-Critic on a continuous action space.

    Args:
        observation: the env's ``ObservationSpec`` (an integer O: a vector of
            O values). Images keep their dtype in the replay buffer and reach
            the networks' image encoders as stored (``networks.sac``).
        action_spec: the env's action space; must be continuous.
        learning_rate: Adam's step size for the actor, the critics and alpha.
        batch_size: B, transitions per gradient step.
        gamma: discount.
        tau: Polyak rate of the target networks (per gradient step).
        initial_alpha: entropy temperature at start.
        target_entropy: None means -A.
        learn_alpha: tune alpha automatically (False keeps ``initial_alpha``).
        reward_scale: rewards are multiplied by this before training.
        device: the learner's torch device: "cpu", "cuda", "cuda:N" or "auto"
            (CUDA where this machine has it); checked before the run starts
            (``utils.devices``). On a GPU the policy's noise is drawn there, from
            a generator of that device seeded like the CPU one. A run resumed on
            a machine without the device its saved config names trains on the
            CPU and logs so.
        precision: the networks' compute precision, "fp32" (the default),
            "bf16" or "auto", as ``PPOLearner.precision`` (``utils.precision``;
            "auto" looks at the actor and the critics together). The critic
            targets, losses, temperature and Polyak averages stay float32; the
            actors' ``SACPolicy`` infers in the published precision.
        seed: seeds the networks' initialization and the learner's sampling.
    """

    def __init__(self, observation: Union[ObservationSpec, int],
                 action_spec: Union[ActionSpec, int], learning_rate: float = 7.3e-4, batch_size: int = 256, gamma: float = 0.98,
                 tau: float = 0.02, initial_alpha: float = 1.0,
                 target_entropy: Optional[float] = None, learn_alpha: bool = True,
                 reward_scale: float = 1.0, device: str = "cpu", precision: str = "fp32",
                 seed: int = 0):
        spec = as_action_spec(action_spec)
        if spec.discrete:
            raise ConfigError(f"SAC needs a continuous (Box) action space; this env's is "
                              f"{spec.kind} (use PPO for discrete actions)")
        for name, value, kind, bounds in (
                ("learning_rate", learning_rate, "number", dict(low=0, low_open=True)),
                ("batch_size", batch_size, "int", dict(low=1)),
                ("gamma", gamma, "number", dict(low=0, high=1)),
                ("tau", tau, "number", dict(low=0, high=1, low_open=True)),
                ("initial_alpha", initial_alpha, "number", dict(low=0, low_open=True)),
                ("learn_alpha", learn_alpha, "bool", {}),
                ("reward_scale", reward_scale, "number", dict(low=0, low_open=True)),
                ("target_entropy", target_entropy, "number", dict(optional=True))):
            check("SACLearner", name, value, kind, **bounds)
        check_precision("SACLearner", precision)
        self.device = resolve_device("SACLearner", device)
        self.action_dim = spec.dim
        self.batch_size = int(batch_size)
        self.gamma, self.tau, self.reward_scale = float(gamma), float(tau), float(reward_scale)
        self.learn_alpha = learn_alpha
        self.target_entropy = float(-spec.dim if target_entropy is None else target_entropy)
        torch.manual_seed(seed)
        observation = as_observation_spec(observation)
        self.actor = SquashedGaussianActor(observation, spec.dim).to(self.device)
        self.critic = TwinQNetwork(observation, spec.dim).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.precision = choose_precision("SACLearner", precision, self.device, self.actor,
                                          self.critic)
        self.log_alpha = torch.tensor(float(np.log(initial_alpha)), device=self.device,
                                      requires_grad=True)
        self.optimizers: Dict[str, Adam] = {  # for the actor, the critics and log alpha
            "actor": Adam(self.actor.parameters(), lr=learning_rate),
            "critic": Adam(self.critic.parameters(), lr=learning_rate),
            "alpha": Adam([self.log_alpha], lr=learning_rate)}
        # On the CPU whatever the device: a checkpoint's RNG state then loads
        # on any machine (the play command runs on the CPU). The policy's
        # noise is drawn on the learner's device (``_noise_generator``; the
        # same generator on the CPU), so that a GPU step never waits for a
        # draw and copy on the host.
        self.generator = torch.Generator().manual_seed(seed + 1)
        self._noise_generator = (self.generator if self.device.type == "cpu"
                                 else sampling_generator(self.device, seed + 1))
        self.gradient_steps = 0

    @property
    def alpha(self) -> float:
        return float(self._alpha())

    def _alpha(self) -> torch.Tensor:
        """alpha as a 0-d tensor on the device (not read back)."""
        return self.log_alpha.detach().exp()

    def hogwild_tensors(self) -> Dict[str, torch.Tensor]:
        """The tensors Hogwild workers share, by name: the actor, the critics,
        the target critics (the objects themselves, so that rebinding their
        storage rebinds the networks) and log alpha."""
        out: Dict[str, torch.Tensor] = {"log_alpha": self.log_alpha}
        for name in ("actor", "critic", "critic_target"):
            out.update({f"{name}.{k}": v for k, v in
                        getattr(self, name).state_dict(keep_vars=True).items()})
        return out

    def local_state(self) -> Dict[str, object]:
        """What a Hogwild worker owns beside the shared networks: its
        optimizers, sampling RNG and gradient-step count."""
        return copy.deepcopy({
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "generator": self.generator.get_state(), "gradient_steps": self.gradient_steps})

    def load_local_state(self, state: Mapping[str, object]) -> None:
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])
        self.generator.set_state(state["generator"])
        self.gradient_steps = int(state["gradient_steps"])

    def weight_arrays(self) -> Dict[str, np.ndarray]:
        """What actors need (``SACPolicy.load_weights``): the policy network,
        whether to act uniformly at random (before the first gradient step)
        and the precision to infer in (``utils.precision.PRECISION_KEY``)."""
        return pack_weights({"param": to_host(self.actor.state_dict()),
                             "explore": {"uniform": np.array(
                                 [1.0 if self.gradient_steps == 0 else 0.0], np.float32)},
                             "precision": {"bf16": precision_flag(self.precision.bf16)}})

    def _compute(self):
        """The context the networks' forward passes run in (``precision``)."""
        return compute_context(self.device, self.precision.bf16)

    def _tensors(self, batch: Mapping[str, np.ndarray]) -> Dict[str, torch.Tensor]:
        """The fields a gradient step reads (not, e.g., the buffer's inserted_at),
        on the device (``utils.devices.to_device``: pinned, non-blocking copies)."""
        return {k: to_device(batch[k], self.device)
                for k in ("observation", "action", "reward", "next_observation", "terminated")}

    def train_step(self, batch: Mapping[str, np.ndarray]) -> Dict[str, float]:
        """One gradient step on transitions ([B, ...] arrays of the replay fields).

        Returns losses and diagnostics: critic_loss, actor_loss, alpha,
        alpha_loss, q_mean, policy_entropy (mean -log pi of the actor's samples),
        read back from the device at once: the step's one wait for it, which
        also checks that they are finite (``NonFiniteError`` otherwise).
        """
        b = self._tensors(batch)
        obs, next_obs = b["observation"], b["next_observation"]
        opt = self.optimizers
        alpha = self._alpha()
        with torch.no_grad():
            with self._compute():  # the networks' outputs are float32 under any precision
                next_action, next_log_prob = self.actor.sample(next_obs,
                                                               self._noise_generator)
                next_q1, next_q2 = self.critic_target(next_obs, next_action)
            target = critic_target(b["reward"] * self.reward_scale, b["terminated"],
                                   next_q1, next_q2, next_log_prob, alpha, self.gamma)
        with self._compute():
            q1, q2 = self.critic(obs, b["action"])
        loss_q = critic_loss(q1, q2, target)
        opt["critic"].zero_grad(set_to_none=True)
        loss_q.backward()
        opt["critic"].step()

        with self._compute():
            action, log_prob = self.actor.sample(obs, self._noise_generator)
            self.critic.requires_grad_(False)
            try:
                pi_q1, pi_q2 = self.critic(obs, action)
            finally:
                self.critic.requires_grad_(True)
        loss_pi = actor_loss(pi_q1, pi_q2, log_prob, alpha)
        opt["actor"].zero_grad(set_to_none=True)
        loss_pi.backward()
        opt["actor"].step()

        loss_alpha = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
        if self.learn_alpha:
            opt["alpha"].zero_grad(set_to_none=True)
            loss_alpha.backward()
            opt["alpha"].step()
        polyak_update(self.critic_target.parameters(), self.critic.parameters(), self.tau)
        self.gradient_steps += 1
        values = torch.stack([loss_q.detach(), loss_pi.detach(), loss_alpha.detach(),
                              self._alpha(), q1.detach().mean(), -log_prob.detach().mean()])
        stats = dict(zip(SAC_STATS, values.tolist()))  # the step's one read
        if not all(math.isfinite(v) for v in stats.values()):
            raise NonFiniteError(f"SAC gradient step {self.gradient_steps} gave "
                                    f"non-finite values: {stats}")
        return stats

    def all_finite(self) -> bool:
        tensors = [*self.actor.state_dict().values(), *self.critic.state_dict().values(),
                   *self.critic_target.state_dict().values(), self.log_alpha]
        return all(bool(torch.isfinite(t).all()) for t in tensors)

    def state_dict(self) -> Dict[str, object]:
        """Networks, target networks, optimizers, temperature, sampling RNG: a
        copy that later steps do not change (an optimizer's ``state_dict`` holds
        its live moment tensors, and a learner loading them would share them)."""
        return copy.deepcopy({
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "generator": self.generator.get_state(),
            **self._noise_generator_state(),
            "gradient_steps": self.gradient_steps})

    def _load_noise_generator(self, saved: Optional[Mapping[str, object]]) -> None:
        """Restore the device's noise generator from ``_noise_generator_state``'s
        entry; one written on another kind of device (or none: a checkpoint
        of a CPU run) starts a new stream seeded from the CPU generator."""
        noise = self._noise_generator
        if noise is None or noise is self.generator:
            return
        if saved is not None and saved.get("device") == self.device.type:
            noise.set_state(saved["state"])
        else:
            noise.manual_seed(int(torch.randint(2 ** 62, (1,), generator=self.generator)))

    def _noise_generator_state(self) -> Dict[str, object]:
        """{"noise_generator": {"device": type, "state": bytes}} on a GPU, else {}."""
        noise = self._noise_generator
        if noise is None or noise is self.generator:
            return {}
        return {"noise_generator": {"device": self.device.type, "state": noise.get_state()}}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])
        self.generator.set_state(state["generator"])
        self.gradient_steps = int(state["gradient_steps"])
        self._load_noise_generator(state.get("noise_generator"))

"""Advantage and return computation, as pure functions.

All tensors are time-major: T = unroll length, K = number of envs.

Each step t of env k carries whether the episode ended *at* that step:
``terminated[t, k]`` (a terminal state: the future is worth 0) or
``truncated[t, k]`` (cut by a time limit: the future is worth V(s_final), which the
actor evaluated at rollout time as ``truncation_value[t, k]``). After an ended step,
``values[t + 1, k]`` belongs to a new episode and must not be bootstrapped from.

A step whose env failed (``failed[t, k]``: the env raised or its worker died, and
it was recreated; the trajectory's ``env_failed``) is no transition: its reward
and next state are not the env's. Its TD error is taken as 0 and the recursion
stops there, so its own advantage is 0 (the losses leave it out anyway) and step
t - 1, whose next state s_t is real, bootstraps from V(s_t) with no trace
through it, as at a time-limit truncation.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

import torch


def next_state_values(values: torch.Tensor, terminated: torch.Tensor,
                      truncated: torch.Tensor, truncation_value: torch.Tensor,
                      bootstrap_value: torch.Tensor) -> torch.Tensor:
    """The value of the state reached by each step.

    v'[t] = 0                      if terminated[t]
          = truncation_value[t]    if truncated[t]
          = values[t + 1]          otherwise (bootstrap_value for t = T - 1)

    Args:
        values: [T, K] V(s_t) from the behaviour policy.
        terminated, truncated: [T, K] bool.
        truncation_value: [T, K] V(final observation) where truncated.
        bootstrap_value: [K] V(s_T), the state after the last step.
    Returns:
        [T, K] float tensor.
    """
    following = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    following = torch.where(truncated, truncation_value, following)
    return torch.where(terminated, torch.zeros_like(following), following)


def generalized_advantage_estimation(
        rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
        truncated: torch.Tensor, truncation_value: torch.Tensor,
        bootstrap_value: torch.Tensor, gamma: float, gae_lambda: float,
        failed: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and lambda-returns for a [T, K] unroll.

    delta[t] = r[t] + gamma * v'[t] - V(s_t)           (v' from next_state_values)
             = 0                                        where failed[t]
    A[t]     = delta[t] + gamma * lambda * (1 - done[t]) * A[t + 1],   A[T] = 0
    R[t]     = A[t] + V(s_t)
    where done[t] = terminated[t] or truncated[t] or failed[t] cuts the
    recursion at episode ends.

    Args:
        rewards: [T, K] rewards r_t.
        values, terminated, truncated, truncation_value, bootstrap_value: see
            ``next_state_values``.
        gamma: discount in [0, 1].
        gae_lambda: lambda in [0, 1].
        failed: [T, K] bool, the env failed at t (module docstring); None: none did.
    Returns:
        (advantages [T, K], returns [T, K]).
    """
    terminated = terminated.bool()
    truncated = truncated.bool()
    next_values = next_state_values(values, terminated, truncated, truncation_value,
                                    bootstrap_value)
    deltas = _no_failed(rewards + gamma * next_values - values, failed)
    continues = _continues(terminated, truncated, failed, rewards.dtype)
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values


def _no_failed(x: torch.Tensor, failed: Optional[torch.Tensor]) -> torch.Tensor:
    """x [T, K] with 0 where the env failed (``failed`` [T, K] bool or None)."""
    return x if failed is None else torch.where(failed.bool(), torch.zeros_like(x), x)


def _continues(terminated: torch.Tensor, truncated: torch.Tensor,
               failed: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """1 - done [T, K] in ``dtype``: 0 where the episode ended or the env failed."""
    done = terminated | truncated
    if failed is not None:
        done = done | failed.bool()
    return (~done).to(dtype)


def vtrace(log_rho: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
           terminated: torch.Tensor, truncated: torch.Tensor, truncation_value: torch.Tensor,
           bootstrap_value: torch.Tensor, gamma: float, trace_lambda: float = 1.0,
           rho_bar: float = 1.0, c_bar: float = 1.0, gae_advantages: bool = False,
           failed: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets and advantages for off-policy data (Espeholt et al., 2018).

    With rho[t] = min(rho_bar, pi/mu), c[t] = lambda * min(c_bar, pi/mu):

    delta[t] = rho[t] * (r[t] + gamma * v'[t] - V(s_t))     (v' from next_state_values;
                                                              0 where failed[t])
    A[t]     = delta[t] + gamma * c[t] * (1 - done[t]) * A[t + 1],   A[T] = 0
    vs[t]    = V(s_t) + A[t]                                  (value targets)
    adv[t]   = r[t] + gamma * vs'[t] - V(s_t)                 (policy advantages)

    where vs'[t] is vs[t + 1] inside an episode, bootstrap_value after the last
    step, 0 after a terminal state and truncation_value after a time limit: the
    traces never cross an episode boundary, nor a failed step (whose adv is 0). IMPALA's policy gradient weights adv
    by rho[t]; a PPO loss applies its own ratio to it instead.

    With ``gae_advantages`` the policy advantages keep GAE's shape instead:

    adv[t]   = r[t] + gamma * v'[t] - V(s_t) + gamma * lambda * (1 - done[t]) * A[t + 1]

    (the first step's TD error unweighted, as in IMPALA's form, the later ones
    corrected by the traces; A[T] = 0).

    On-policy (log_rho = 0, rho_bar = c_bar = 1) vs equals GAE(lambda)'s returns;
    adv equals GAE(lambda)'s advantages with ``gae_advantages`` and otherwise
    only for lambda = 1.

    Args:
        log_rho: [T, K] log pi(a_t|s_t) - log mu(a_t|s_t) (target minus behaviour).
        rewards: [T, K] rewards r_t.
        values, terminated, truncated, truncation_value, bootstrap_value: see
            ``next_state_values`` (V under whichever value network the caller uses).
        gamma: discount in [0, 1].
        trace_lambda: lambda of the c-traces in [0, 1].
        rho_bar, c_bar: truncation levels of the importance weights (rho_bar >= c_bar).
        gae_advantages: GAE-shaped policy advantages (above) instead of IMPALA's.
        failed: [T, K] bool, the env failed at t (module docstring); None: none did.
    Returns:
        (vs [T, K], adv [T, K]).
    """
    terminated = terminated.bool()
    truncated = truncated.bool()
    ratio = torch.exp(log_rho)
    rho = torch.clamp(ratio, max=rho_bar)
    c = trace_lambda * torch.clamp(ratio, max=c_bar)
    next_values = next_state_values(values, terminated, truncated, truncation_value,
                                    bootstrap_value)
    td_errors = _no_failed(rewards + gamma * next_values - values, failed)
    deltas = rho * td_errors
    continues = _continues(terminated, truncated, failed, rewards.dtype)
    corrections = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * c[t] * continues[t] * running
        corrections[t] = running
    vs = values + corrections
    if gae_advantages:
        following = torch.cat([corrections[1:], torch.zeros_like(corrections[:1])], dim=0)
        return vs, td_errors + gamma * trace_lambda * continues * following
    next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    next_vs = torch.where(truncated, truncation_value, next_vs)
    next_vs = torch.where(terminated, torch.zeros_like(next_vs), next_vs)
    return vs, _no_failed(rewards + gamma * next_vs - values, failed)


def advantages_and_returns(
        rewards: torch.Tensor, values: torch.Tensor, batch: Mapping[str, torch.Tensor],
        gamma: float, gae_lambda: float, log_rho: Optional[torch.Tensor] = None,
        rho_bar: float = 1.0, c_bar: float = 1.0,
        gae_advantages: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """(advantages [T, K], returns [T, K]) of a trajectory batch: GAE, or
    V-trace when ``log_rho`` [T, K] (log target / behaviour probability) is given
    (with GAE-shaped advantages if ``gae_advantages``; see ``vtrace``).

    ``rewards`` and ``values`` [T, K] are the ones to use (already clipped and
    scaled; rollout-time or recomputed); ``batch`` gives terminated, truncated,
    truncation_value [T, K], bootstrap_value [K] and, where present, env_failed
    [T, K] (failed steps: module docstring).
    """
    ends = (batch["terminated"], batch["truncated"], batch["truncation_value"],
            batch["bootstrap_value"])
    failed = batch.get("env_failed")
    if log_rho is None:
        return generalized_advantage_estimation(rewards, values, *ends, gamma, gae_lambda,
                                                failed)
    returns, advantages = vtrace(log_rho, rewards, values, *ends, gamma, gae_lambda,
                                 rho_bar, c_bar, gae_advantages, failed)
    return advantages, returns


def explained_variance_tensor(predicted: torch.Tensor, target: torch.Tensor,
                              valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """1 - Var(target - predicted) / Var(target) over samples [N] (those where
    ``valid`` [N] bool is True, if given), as a 0-d tensor on the inputs'
    device (read with a learner's other statistics); nan when Var(target) is 0.
    Without ``valid`` nothing is read back to the host."""
    if valid is not None:
        predicted, target = predicted[valid], target[valid]
    var_target = torch.var(target, unbiased=False)
    ev = 1.0 - torch.var(target - predicted, unbiased=False) / var_target
    return torch.where(var_target == 0, torch.full_like(ev, float("nan")), ev)

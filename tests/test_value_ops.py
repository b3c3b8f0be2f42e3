"""GAE(lambda) in ``alf_async.algorithms.value_ops`` is correct.

Proves that ``generalized_advantage_estimation``:

- matches advantages and returns worked out by hand for a small [T, K] unroll in
  which one env terminates (bootstrap from 0), one is truncated by a time limit in
  the middle of the unroll (bootstrap from ``truncation_value``) and one is
  truncated at the last step (``truncation_value``, not ``bootstrap_value``); the
  recursion is cut after both kinds of episode end;
- reduces to Monte-Carlo returns minus values for gamma = lambda = 1 and to the
  one-step TD error for lambda = 0;
- equals an independent, straightforward numpy double loop on random data with
  random terminations and truncations.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alf_async.algorithms.value_ops import (generalized_advantage_estimation,
                                            next_state_values)


def _t(rows):
    """[T][K] nested list -> float64 tensor [T, K]."""
    return torch.tensor(rows, dtype=torch.float64)


def _hand_case():
    """T = 4 steps, K = 3 envs; columns are envs.

    env 0: terminated at t = 1 (its truncation_value there must be ignored).
    env 1: truncated at t = 2, truncation_value 10.
    env 2: truncated at t = 3 (the last step), truncation_value 4; the
           bootstrap value 100 must be ignored.
    """
    rewards = _t([[1, 1, 0], [2, 2, 0], [3, 3, 0], [4, 4, 1]])
    values = _t([[0.5, 2, 1], [1.0, 4, 1], [1.5, 6, 1], [2.0, 8, 1]])
    terminated = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=torch.bool)
    truncation_value = _t([[0, 0, 0], [50, 0, 0], [0, 10, 0], [0, 0, 4]])
    bootstrap_value = torch.tensor([3.0, 12.0, 100.0], dtype=torch.float64)
    return rewards, values, terminated, truncated, truncation_value, bootstrap_value


def test_gae_hand_computed_with_termination_and_truncation():
    gamma, lam = 0.5, 0.5  # gamma * lambda = 0.25
    r, v, term, trunc, tv, boot = _hand_case()
    adv, ret = generalized_advantage_estimation(r, v, term, trunc, tv, boot, gamma, lam)

    # env 0: v' = [V1=1.0, 0 (terminated), V3=2.0, bootstrap=3.0]
    #   deltas: 1 + .5*1 - .5 = 1.0 | 2 + 0 - 1 = 1.0 | 3 + .5*2 - 1.5 = 2.5
    #           | 4 + .5*3 - 2 = 3.5
    #   A3 = 3.5; A2 = 2.5 + .25*3.5 = 3.375; A1 = 1.0 (cut: terminated);
    #   A0 = 1.0 + .25*1.0 = 1.25
    # env 1: v' = [4, 6, 10 (truncation_value), 12 (bootstrap)]
    #   deltas: 1 + 2 - 2 = 1 | 2 + 3 - 4 = 1 | 3 + 5 - 6 = 2 | 4 + 6 - 8 = 2
    #   A3 = 2; A2 = 2 (cut: truncated); A1 = 1 + .25*2 = 1.5; A0 = 1 + .25*1.5 = 1.375
    # env 2: v' = [1, 1, 1, 4 (truncation_value at the last step, not 100)]
    #   deltas: -.5 | -.5 | -.5 | 1 + .5*4 - 1 = 2
    #   A3 = 2; A2 = -.5 + .25*2 = 0; A1 = -.5 + 0 = -.5; A0 = -.5 + .25*-.5 = -.625
    expected_adv = _t([[1.25, 1.375, -0.625],
                       [1.0, 1.5, -0.5],
                       [3.375, 2.0, 0.0],
                       [3.5, 2.0, 2.0]])
    torch.testing.assert_close(adv, expected_adv, rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, expected_adv + v, rtol=0, atol=1e-12)
    assert adv.shape == ret.shape == (4, 3)


def test_next_state_values_hand_computed():
    r, v, term, trunc, tv, boot = _hand_case()
    nv = next_state_values(v, term, trunc, tv, boot)
    expected = _t([[1.0, 4, 1], [0.0, 6, 1], [2.0, 10, 1], [3.0, 12, 4]])
    torch.testing.assert_close(nv, expected, rtol=0, atol=0)


def test_gae_accepts_float_done_flags():
    """Flags stored as 0/1 floats (as in a trajectory buffer) give the same result."""
    r, v, term, trunc, tv, boot = _hand_case()
    a_bool, _ = generalized_advantage_estimation(r, v, term, trunc, tv, boot, 0.5, 0.5)
    a_float, _ = generalized_advantage_estimation(r, v, term.double(), trunc.double(),
                                                  tv, boot, 0.5, 0.5)
    torch.testing.assert_close(a_bool, a_float)


def test_gae_lambda_one_gamma_one_is_monte_carlo():
    """gamma = lambda = 1: A[t] = (sum of rewards to the episode end + tail) - V(s_t)."""
    r, v, term, trunc, tv, boot = _hand_case()
    adv, ret = generalized_advantage_estimation(r, v, term, trunc, tv, boot, 1.0, 1.0)
    # env 0: episode [0, 1] terminated -> returns 1+2=3, 2; episode [2, 3] -> 3+4+boot 3 = 10, 7
    # env 1: episode [0..2] truncated with tail 10 -> 1+2+3+10 = 16, 15, 13; [3] -> 4+12 = 16
    # env 2: episode [0..3] truncated at the last step with tail 4 -> 5, 5, 5, 5
    expected_ret = _t([[3, 16, 5], [2, 15, 5], [10, 13, 5], [7, 16, 5]])
    torch.testing.assert_close(ret, expected_ret, rtol=0, atol=1e-12)
    torch.testing.assert_close(adv, expected_ret - v, rtol=0, atol=1e-12)


def test_gae_lambda_zero_is_td_error():
    r, v, term, trunc, tv, boot = _hand_case()
    gamma = 0.9
    adv, _ = generalized_advantage_estimation(r, v, term, trunc, tv, boot, gamma, 0.0)
    nv = _t([[1.0, 4, 1], [0.0, 6, 1], [2.0, 10, 1], [3.0, 12, 4]])
    torch.testing.assert_close(adv, r + gamma * nv - v, rtol=0, atol=1e-12)


def _numpy_gae(rewards, values, terminated, truncated, truncation_value, bootstrap,
               gamma, lam):
    """Reference: per env, walk backwards through time with scalar arithmetic."""
    T, K = rewards.shape
    adv = np.zeros((T, K))
    for k in range(K):
        acc = 0.0
        for t in reversed(range(T)):
            if terminated[t, k]:
                next_value, acc = 0.0, 0.0
            elif truncated[t, k]:
                next_value, acc = truncation_value[t, k], 0.0
            elif t == T - 1:
                next_value = bootstrap[k]
            else:
                next_value = values[t + 1, k]
            delta = rewards[t, k] + gamma * next_value - values[t, k]
            acc = delta + gamma * lam * acc
            adv[t, k] = acc
    return adv, adv + values


@pytest.mark.parametrize("seed,gamma,lam", [(0, 0.99, 0.95), (1, 0.9, 0.5), (2, 0.97, 1.0)])
def test_gae_matches_numpy_reference_on_random_data(seed, gamma, lam):
    rng = np.random.default_rng(seed)
    T, K = 37, 6
    rewards = rng.normal(size=(T, K))
    values = rng.normal(size=(T, K))
    ends = rng.random((T, K))
    terminated = ends < 0.08
    truncated = (ends >= 0.08) & (ends < 0.16)
    truncation_value = rng.normal(size=(T, K))
    bootstrap = rng.normal(size=K)
    assert terminated.any() and truncated.any()
    expected_adv, expected_ret = _numpy_gae(rewards, values, terminated, truncated,
                                            truncation_value, bootstrap, gamma, lam)
    adv, ret = generalized_advantage_estimation(
        torch.tensor(rewards), torch.tensor(values), torch.tensor(terminated),
        torch.tensor(truncated), torch.tensor(truncation_value), torch.tensor(bootstrap),
        gamma, lam)
    np.testing.assert_allclose(adv.numpy(), expected_adv, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ret.numpy(), expected_ret, rtol=1e-10, atol=1e-10)


def test_gae_float32_close_to_float64_reference():
    """The learner feeds float32 tensors; results agree with float64 to float32 precision."""
    rng = np.random.default_rng(7)
    T, K = 64, 4
    rewards = rng.normal(size=(T, K))
    values = rng.normal(size=(T, K))
    terminated = rng.random((T, K)) < 0.05
    truncated = (rng.random((T, K)) < 0.05) & ~terminated
    truncation_value = rng.normal(size=(T, K))
    bootstrap = rng.normal(size=K)
    expected_adv, _ = _numpy_gae(rewards, values, terminated, truncated, truncation_value,
                                 bootstrap, 0.99, 0.95)
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    adv, _ = generalized_advantage_estimation(
        f32(rewards), f32(values), torch.tensor(terminated), torch.tensor(truncated),
        f32(truncation_value), f32(bootstrap), 0.99, 0.95)
    assert adv.dtype == torch.float32
    np.testing.assert_allclose(adv.numpy(), expected_adv, rtol=1e-4, atol=1e-4)


def test_a_failed_step_is_no_transition():
    """env 0 fails at t = 2 (reward 0, a truncation at its last good
    observation, truncation value 7): its own advantage is 0, and step 1
    bootstraps from V(s_2) with no trace through step 2, as at a time limit.
    env 1 (no failure) is unchanged by the flag of env 0."""
    gamma, lam = 0.5, 0.5
    rewards = _t([[1, 1], [2, 2], [0, 3], [4, 4]])
    values = _t([[0.5, 2], [1.0, 4], [1.5, 6], [2.0, 8]])
    no = torch.zeros(4, 2, dtype=torch.bool)
    failed = no.clone()
    failed[2, 0] = True
    truncation_value = _t([[0, 0], [0, 0], [7, 0], [0, 0]])
    boot = torch.tensor([3.0, 12.0], dtype=torch.float64)
    adv, ret = generalized_advantage_estimation(rewards, values, no, failed, truncation_value,
                                                boot, gamma, lam, failed=failed)
    # env 0: deltas 1 + .5 - .5 = 1 | 2 + .5 * 1.5 - 1 = 1.75 | 0 (failed) | 4 + 1.5 - 2 = 3.5
    #   A3 = 3.5; A2 = 0; A1 = 1.75 (cut at the failed step); A0 = 1 + .25 * 1.75
    torch.testing.assert_close(adv[:, 0], _t([1.4375, 1.75, 0.0, 3.5]), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret[:, 0], adv[:, 0] + values[:, 0], rtol=0, atol=1e-12)
    plain, _ = generalized_advantage_estimation(rewards, values, no, no, truncation_value,
                                                boot, gamma, lam)
    torch.testing.assert_close(adv[:, 1], plain[:, 1], rtol=0, atol=0)
    # Without the flag the failed step's TD error 0 + .5 * 7 - 1.5 would be trained on.
    unflagged, _ = generalized_advantage_estimation(rewards, values, no, failed,
                                                    truncation_value, boot, gamma, lam)
    assert unflagged[2, 0] == 2.0


def test_vtrace_on_policy_with_a_failed_step_equals_gae():
    from alf_async.algorithms.value_ops import vtrace

    g = torch.Generator().manual_seed(3)
    rewards, values = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    no = torch.zeros(6, 3, dtype=torch.bool)
    failed = no.clone()
    failed[[1, 4], [0, 2]] = True
    tv, boot = torch.randn(6, 3, generator=g), torch.randn(3, generator=g)
    adv, ret = generalized_advantage_estimation(rewards, values, no, failed, tv, boot,
                                                0.9, 0.8, failed=failed)
    vs, vadv = vtrace(torch.zeros(6, 3), rewards, values, no, failed, tv, boot, 0.9, 0.8,
                      gae_advantages=True, failed=failed)
    torch.testing.assert_close(vs, ret)
    torch.testing.assert_close(vadv, adv)
    assert (adv[failed] == 0).all()

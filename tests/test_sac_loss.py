"""SAC's losses and networks against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from alf_async.algorithms.sac_loss import (actor_loss, critic_loss, critic_target,
                                           polyak_update, temperature_loss)
from alf_async.networks.sac import SquashedGaussianActor, TwinQNetwork, squash_correction
from alf_async.utils.validation import ConfigError


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_critic_target_bootstraps_unless_terminated():
    # Transition 0 continues, 1 terminated, 2 truncated (bootstraps like 0).
    y = critic_target(reward=t(1.0, 2.0, 3.0), terminated=torch.tensor([False, True, False]),
                      next_q1=t(10.0, 10.0, 4.0), next_q2=t(8.0, 9.0, 6.0),
                      next_log_prob=t(-1.0, -1.0, 2.0), alpha=0.5, gamma=0.9)
    # 1 + 0.9 (8 + 0.5) = 8.65; 2; 3 + 0.9 (4 - 1) = 5.7
    torch.testing.assert_close(y, t(8.65, 2.0, 5.7))


def test_critic_loss_is_the_sum_of_both_mse_and_ignores_target_gradients():
    q1, q2 = t(1.0, 2.0).requires_grad_(), t(0.0, 0.0).requires_grad_()
    target = t(2.0, 2.0).requires_grad_()
    loss = critic_loss(q1, q2, target)
    assert loss.item() == pytest.approx((1 + 0) / 2 + (4 + 4) / 2)
    loss.backward()
    assert target.grad is None
    torch.testing.assert_close(q1.grad, t(-1.0, 0.0))


def test_actor_loss_uses_the_smaller_q():
    loss = actor_loss(t(3.0, 1.0), t(2.0, 5.0), log_prob=t(-2.0, 0.0), alpha=0.1)
    assert loss.item() == pytest.approx(((0.1 * -2 - 2) + (0 - 1)) / 2)


def test_temperature_moves_towards_the_target_entropy():
    log_alpha = torch.zeros((), requires_grad=True)
    # Entropy -log pi = 1 below the target 3: the loss falls as log_alpha rises.
    temperature_loss(log_alpha, log_prob=t(-1.0, -1.0), target_entropy=3.0).backward()
    assert log_alpha.grad.item() == pytest.approx(-2.0)
    log_alpha.grad = None
    temperature_loss(log_alpha, log_prob=t(-5.0), target_entropy=3.0).backward()
    assert log_alpha.grad.item() == pytest.approx(2.0)


def test_polyak_update():
    target, source = [t(0.0, 10.0)], [t(1.0, 0.0)]
    polyak_update(target, source, tau=0.25)
    torch.testing.assert_close(target[0], t(0.25, 7.5))


def test_squash_correction_matches_the_direct_formula():
    u = t(-3.0, -0.5, 0.0, 0.7, 4.0).reshape(1, 5)
    direct = torch.log(1 - torch.tanh(u) ** 2).sum(-1)
    torch.testing.assert_close(squash_correction(u), direct, rtol=1e-4, atol=1e-5)
    # Stable where the direct formula is not: tanh(40)^2 rounds to 1.
    big = t(40.0).reshape(1, 1)
    assert torch.isfinite(squash_correction(big)).all()
    assert squash_correction(big).item() == pytest.approx(2 * (math.log(2) - 40), abs=1e-4)


def test_squashed_gaussian_log_prob_is_the_change_of_variables():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, hidden_sizes=(8,))
    obs = torch.randn(5, 3)
    action, log_prob = actor.sample(obs, torch.Generator().manual_seed(1))
    assert action.shape == (5, 2) and log_prob.shape == (5,)
    assert (action.abs() < 1).all()
    mean, std = actor.distribution(obs)
    u = torch.atanh(action.clamp(-1 + 1e-6, 1 - 1e-6))
    expected = (torch.distributions.Normal(mean, std).log_prob(u).sum(-1)
                - torch.log(1 - action ** 2).sum(-1))
    torch.testing.assert_close(log_prob, expected, rtol=1e-3, atol=1e-3)
    # Deterministic action: tanh of the mean; sampling is reparameterized.
    det, _ = actor.sample(obs, deterministic=True)
    torch.testing.assert_close(det, torch.tanh(mean))
    action.sum().backward()
    assert actor.mean.weight.grad is not None and actor.log_std.weight.grad is not None


def test_gsde_std_noise_and_log_prob_against_hand_values():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, hidden_sizes=(8,), use_sde=True,
                                  initial_log_std=-1.0, sde_clip_mean=0.5)
    with torch.no_grad():
        actor.mean.bias.fill_(3.0)   # drives every mean past the clip
    obs = torch.randn(4, 3)
    mean, std, h = actor.features(obs)
    torch.testing.assert_close(mean, torch.full((4, 2), 0.5))
    # std_j = sqrt(sum_i h_i^2 exp(-1)^2 + 1e-6), by a loop.
    want = torch.empty(4, 2)
    for b in range(4):
        for j in range(2):
            want[b, j] = math.sqrt(sum(float(h[b, i].detach()) ** 2 * math.exp(-2.0)
                                       for i in range(8)) + 1e-6)
    torch.testing.assert_close(std, want)
    # A held exploration draw E: u = mean + h @ (sigma * E), log-prob under N(mean, std).
    draw = torch.randn(4, 8, 2, generator=torch.Generator().manual_seed(3))
    action, log_prob = actor.sample(obs, exploration=draw)
    u = mean + torch.einsum("bi,bij->bj", h, math.exp(-1.0) * draw)
    torch.testing.assert_close(action, torch.tanh(u))
    expected = (torch.distributions.Normal(mean, std).log_prob(u).sum(-1)
                - torch.log(1 - torch.tanh(u) ** 2).sum(-1))
    torch.testing.assert_close(log_prob, expected, rtol=1e-4, atol=1e-4)
    # The learner's reparameterized samples train sigma; h enters the std detached.
    _, log_prob = actor.sample(obs, torch.Generator().manual_seed(1))
    log_prob.sum().backward()
    assert actor.sde_log_sigma.grad is not None and actor.sde_log_sigma.grad.abs().sum() > 0
    assert not hasattr(actor, "log_std")
    with pytest.raises(ValueError, match="sde_sample_interval"):
        SquashedGaussianActor(3, 2, use_sde=True, sde_sample_interval=0)
    with pytest.raises(ValueError, match="use_sde"):
        SquashedGaussianActor(3, 2).sample(obs, exploration=draw)


def test_gsde_matrix_noise_has_the_per_state_normal_the_learner_samples():
    # Many held draws for one state: the noise h @ (sigma * E) is Normal(0, std^2)
    # per action, the distribution the learner draws each sample from.
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, hidden_sizes=(8,), use_sde=True,
                                  initial_log_std=-2.0, sde_clip_mean=100.0)
    obs = torch.randn(1, 3).expand(20000, 3)
    draw = torch.randn(20000, 8, 2, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        mean, std, h = actor.features(obs)
        u = mean + torch.einsum("bi,bij->bj", h, actor.sde_sigma() * draw)
    noise = u - mean
    torch.testing.assert_close(noise.std(0), std[0], rtol=0.03, atol=1e-4)
    assert noise.mean(0).abs().max() < 0.05 * std[0].max()


def test_twin_q_networks_are_independent():
    torch.manual_seed(0)
    q = TwinQNetwork(3, 2, hidden_sizes=(8,))
    q1, q2 = q(torch.randn(4, 3), torch.rand(4, 2))
    assert q1.shape == q2.shape == (4,)
    assert not torch.allclose(q1, q2)
    q1.sum().backward()
    assert all(p.grad is None for p in q.q2.parameters())


def _hidden_layers(module):
    return [m for m in module.body if isinstance(m, torch.nn.Linear)]


def test_hidden_init_orthogonal_or_torch_default():
    torch.manual_seed(0)
    ortho = SquashedGaussianActor(20, 3, hidden_sizes=(64, 32))
    default = SquashedGaussianActor(20, 3, hidden_sizes=(64, 32), hidden_init="torch_default")
    q = TwinQNetwork(20, 3, hidden_sizes=(64, 32), hidden_init="torch_default")
    for layer in _hidden_layers(ortho):
        w = layer.weight.detach()
        # Orthogonal rows or columns (whichever are fewer), scaled by sqrt(2).
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        assert torch.allclose(gram, 2.0 * torch.eye(len(gram)), atol=1e-4)
        assert torch.all(layer.bias == 0)
    for layer in _hidden_layers(default) + _hidden_layers(q.q1) + _hidden_layers(q.q2):
        bound = 1.0 / math.sqrt(layer.in_features)
        for p in (layer.weight, layer.bias):
            assert p.abs().max() <= bound
            # Spread over the interval, not zeros or a constant.
            assert p.std() > 0.4 * bound
    with pytest.raises(ConfigError, match="SquashedGaussianActor.hidden_init"):
        SquashedGaussianActor(4, 2, hidden_init="xavier")
    with pytest.raises(ConfigError, match="TwinQNetwork.hidden_init"):
        TwinQNetwork(4, 2, hidden_init="xavier")

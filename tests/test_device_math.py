"""The learners' math on a device that is not the CPU, without a GPU.

The learners run here on torch's "meta" device (tensors with shapes and dtypes
but no data), built with a non-CPU device string ("cuda") whose resolution
gives "meta". Two things a GPU learner must get right then show on any machine:

- no CPU tensor is mixed into a device computation (torch raises "Tensor on
  device cpu is not on the expected device meta", as CUDA raises for cuda);
- every value read back to the host (``item``, ``float``, ``bool``,
  ``tolist``, ``numpy``, ``cpu``, ...) is a read of a meta tensor, which
  ``bench.gpu_smoke.HostReads`` counts (and answers with ones) instead of
  failing (the bench counts the same reads on a real GPU). On a GPU
  each such read waits for every kernel queued before it; the learners'
  budgets:

  - ``PPOLearner.train``: one read per gradient step (whether the step is
    finite, with the KL budget's value when ``target_kl`` is set) and one per
    iteration (every statistic, summed on the device) for feed-forward, image
    and LSTM networks;
  - ``SACLearner.train_step``: one read per gradient step (its statistics,
    which also tell whether it was finite).

Reads of CPU tensors are not counted: they never wait for a device (Adam's
step counters live on the CPU whatever the device, as in ``torch.optim.Adam``;
a recurrent batch's episode starts are read on the host).
"""

from __future__ import annotations

import gin
import numpy as np
import pytest
import torch

from alf_async.algorithms import ppo_learner as ppo_module
from alf_async.algorithms import sac_learner as sac_module
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.ppo_loss import ppo_loss
from alf_async.algorithms.sac_learner import SACLearner
from alf_async.algorithms.value_ops import advantages_and_returns, vtrace
from alf_async.envs.spaces import ActionSpec, ObservationSpec
from bench.gpu_smoke import HostReads, synthetic_ppo_batch, synthetic_sac_batch

META = torch.device("meta")
CONTINUOUS_2 = ActionSpec.continuous(2)


@pytest.fixture
def on_meta(monkeypatch):
    """The learners' device strings resolve to "meta" (what "cuda" would be
    on a GPU machine)."""
    for module in (ppo_module, sac_module):
        monkeypatch.setattr(module, "resolve_device", lambda owner, value: META)


@pytest.fixture
def clear_gin():
    yield
    gin.clear_config()


PPO_CASES = {
    "feed_forward": dict(observation=ObservationSpec((3,), "float32"), bindings=""),
    "feed_forward_none_recompute": dict(
        observation=ObservationSpec((3,), "float32"), bindings="",
        kwargs=dict(lag_correction="none", recompute_values=True, target_kl=10.0)),
    "vtrace_gae": dict(observation=ObservationSpec((3,), "float32"), bindings="",
                       kwargs=dict(lag_correction="vtrace_gae")),
    "image": dict(observation=ObservationSpec((9, 9, 1), "uint8"),
                  bindings="ImageEncoder.architecture = 'small'"),
    "lstm": dict(observation=ObservationSpec((3,), "float32"),
                 bindings="ActorCritic.rnn = 'lstm'\nActorCritic.rnn_size = 8",
                 kwargs=dict(chunk_length=4)),
    "gru_whole_sequences": dict(observation=ObservationSpec((3,), "float32"),
                                 bindings="ActorCritic.rnn = 'gru'\nActorCritic.rnn_size = 8"),
}


@pytest.mark.parametrize("case", sorted(PPO_CASES))
def test_ppo_iteration_on_a_device_reads_back_once_per_step_and_once_more(
        case, on_meta, clear_gin):
    spec = PPO_CASES[case]
    gin.parse_config(spec["bindings"])
    learner = PPOLearner(spec["observation"], 2, device="cuda", num_epochs=2,
                         mini_batch_size=16, **spec.get("kwargs", {}))
    assert next(learner.model.parameters()).device == META
    batch = synthetic_ppo_batch(8, 4, spec["observation"], CONTINUOUS_2, learner.state_size)
    with HostReads() as reads:
        stats = learner.train(batch, progress=0.25)
    steps = int(stats["gradient_steps"])
    assert steps == 2 * (32 // 16)
    # one read per gradient step (finite? / KL), one for the iteration's statistics
    assert reads.count == steps + 1, "\n".join(reads.where)
    for key in ("policy_loss", "value_loss", "grad_norm", "explained_variance"):
        assert key in stats
    assert stats["learning_rate"] == pytest.approx(learner.step_size.learning_rate_at(0.25))


def test_sac_gradient_step_on_a_device_reads_back_once(on_meta):
    learner = SACLearner(3, 2, batch_size=16, device="cuda")
    assert learner.log_alpha.device == META
    batch = synthetic_sac_batch(16, ObservationSpec((3,), "float32"), 2)
    with HostReads() as reads:
        for _ in range(3):
            stats = learner.train_step(batch)
    assert reads.count == 3, "\n".join(reads.where)
    assert set(stats) == {"critic_loss", "actor_loss", "alpha_loss", "alpha", "q_mean",
                          "policy_entropy"}
    assert learner.gradient_steps == 3


def test_sac_image_gradient_step_on_a_device(on_meta):
    frame = ObservationSpec((9, 9, 1), "uint8")
    gin.parse_config("ImageEncoder.architecture = 'small'")
    try:
        learner = SACLearner(frame, 2, batch_size=8, device="cuda")
    finally:
        gin.clear_config()
    with HostReads() as reads:
        learner.train_step(synthetic_sac_batch(8, frame, 2))
    assert reads.count == 1, "\n".join(reads.where)


def test_a_cpu_tensor_in_a_meta_computation_fails():
    """What the tests above rely on: a CPU tensor created inside the math
    (``torch.zeros(n)`` without ``device=``, ``torch.as_tensor`` of an array)
    is an error on the meta device, as on a GPU."""
    with pytest.raises(RuntimeError, match="device"):
        torch.zeros(3, device=META) + torch.as_tensor(np.ones(3, np.float32))


def _meta(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(x).to(META)


@pytest.mark.parametrize("log_rho, gae_advantages", [(False, False), (True, False),
                                                     (True, True)])
def test_advantages_and_the_ppo_loss_stay_on_the_device(log_rho, gae_advantages):
    T, K, B = 6, 3, 18
    rng = np.random.default_rng(0)
    batch = {"terminated": _meta(rng.random((T, K)) < 0.2),
             "truncated": _meta(rng.random((T, K)) < 0.1),
             "truncation_value": _meta(rng.standard_normal((T, K)).astype(np.float32)),
             "bootstrap_value": _meta(rng.standard_normal(K).astype(np.float32))}
    rewards = _meta(rng.standard_normal((T, K)).astype(np.float32))
    values = _meta(rng.standard_normal((T, K)).astype(np.float32))
    rho = _meta(rng.standard_normal((T, K)).astype(np.float32)) if log_rho else None
    advantages, returns = advantages_and_returns(rewards, values, batch, 0.99, 0.95,
                                                 log_rho=rho, gae_advantages=gae_advantages)
    assert advantages.device == META and returns.shape == (T, K)
    if log_rho:
        vs, adv = vtrace(rho, rewards, values, batch["terminated"], batch["truncated"],
                         batch["truncation_value"], batch["bootstrap_value"], 0.99)
        assert vs.device == META and adv.device == META
    flat = {k: _meta(rng.standard_normal(B).astype(np.float32))
            for k in ("log_prob", "old", "advantages", "value", "returns", "entropy",
                      "proximal")}
    out = ppo_loss(flat["log_prob"], flat["old"], flat["advantages"], flat["value"],
                   flat["returns"], flat["entropy"], proximal_log_prob=flat["proximal"],
                   max_importance_weight=1.0)
    assert out.loss.device == META
    assert all(v.device == META for v in out.stats.values())


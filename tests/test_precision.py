"""The networks' compute precision (``PPOLearner.precision``,
``SACLearner.precision``; ``utils.precision``): what "auto" picks, bf16 and
fp32 learners agreeing on a gradient step, float32 checkpoints that load
under either precision, actors inferring in the precision the learner
published (the sync ratio stays ~1), a wrong value refused by name before
anything starts, and a bf16 run of the train command end to end."""

from __future__ import annotations

import io
import os
from typing import Dict, List, Optional

import gin
import numpy as np
import pytest
import torch

import alf_async.utils.precision as precision_module
from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.sac_learner import SACLearner
from alf_async.algorithms.sac_policy import SACPolicy
from alf_async.envs.spaces import ActionSpec, ObservationSpec
from alf_async.networks.encoders import ImageEncoder
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.utils.precision import (PRECISION_KEY, Bf16Inference, Float32Conv2d, Float32Layer,
                                       choose_precision, compute_context, published_bf16)
from alf_async.utils.validation import ConfigError
from reliability_helpers import read_metrics, train_in_this_process
from test_exact_on_policy import FirstMinibatch

FRAME = ObservationSpec((9, 9, 1), "uint8")
THREE_CHOICES = ActionSpec("discrete", 1, (3,), (0,))
VECTOR, CONTINUOUS = ObservationSpec((6,), "float32"), ActionSpec.continuous(2)


@pytest.fixture
def clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()


@pytest.fixture
def cpu_flags(monkeypatch):
    """Set the bf16 flags the capability probe reports for this CPU."""
    def set_flags(*flags: str) -> None:
        monkeypatch.setattr(precision_module, "cpu_bf16_flags", lambda: tuple(flags))
    return set_flags


def _image_learner(**kwargs) -> PPOLearner:
    gin.bind_parameter("ImageEncoder.architecture", "small")
    return PPOLearner(FRAME, THREE_CHOICES, seed=3, **kwargs)


def _acted_batch(learner: PPOLearner, observation: ObservationSpec, T: int = 8, K: int = 8,
                 seed: int = 0, arrays: Optional[Dict[str, np.ndarray]] = None
                 ) -> Dict[str, np.ndarray]:
    """A [T, K] batch of random observations acted by a policy holding the
    learner's published weights (so in the learner's published precision),
    or ``arrays``."""
    rng = np.random.default_rng(seed)
    policy = NeuralPolicy(observation, learner.model.action_spec, seed=seed)
    policy.load_weights(learner.weight_arrays() if arrays is None else arrays)
    batch = allocate_trajectory(T, K, observation, learner.model.action_spec.dim)
    if observation.dtype == "uint8":
        batch["observation"][:] = rng.integers(0, 256, batch["observation"].shape)
    else:
        batch["observation"][:] = rng.standard_normal(batch["observation"].shape)
    for t in range(T):
        batch["action"][t], batch["log_prob"][t], batch["value"][t] = policy.act(
            batch["observation"][t])
    batch["reward"][:] = rng.standard_normal((T, K))
    batch["terminated"][:] = rng.random((T, K)) < 0.1
    batch["final_observation_row"][:] = -1
    batch["bootstrap_value"][:] = policy.value(batch["observation"][-1])
    return batch


# -- "auto" -------------------------------------------------------------------------
def test_auto_picks_fp32_on_a_cpu_without_bf16(clear_gin, cpu_flags):
    cpu_flags()
    learner = _image_learner(precision="auto")
    assert not learner.precision.bf16
    assert "PPOLearner.precision='auto' -> fp32" in learner.precision.reason
    assert "none of amx_bf16 or avx512_bf16" in learner.precision.reason
    assert not published_bf16(learner.weight_arrays())
    assert not SACLearner(VECTOR, CONTINUOUS, precision="auto").precision.bf16


def test_auto_picks_fp32_for_a_cuda_learner_even_beside_an_amx_cpu(cpu_flags):
    """On an H200 the shipped conv learners ran slower in bf16 (launch-bound
    steps, bench.gpu_smoke): "auto" keeps a CUDA learner in fp32; the rule
    reads no CUDA state, so it is checked here on a device string."""
    cpu_flags("amx_bf16")
    conv = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3))
    for device in ("cuda", "cuda:1"):
        choice = choose_precision("PPOLearner", "auto", torch.device(device), conv)
        assert not choice.bf16
        assert f"PPOLearner.precision='auto' -> fp32 (a CUDA learner ({device})" in choice.reason
    assert choose_precision("PPOLearner", "auto", torch.device("cpu"), conv).bf16
    assert choose_precision("PPOLearner", "bf16", torch.device("cuda"), conv).bf16


@pytest.mark.parametrize("flag", ["amx_bf16", "avx512_bf16"])
def test_auto_picks_bf16_for_a_conv_net_and_fp32_for_any_mlp(clear_gin, cpu_flags, flag):
    cpu_flags(flag)
    conv = _image_learner(precision="auto")
    assert conv.precision.bf16, conv.precision.reason
    assert f"the CPU has {flag}; the network has convolutions" in conv.precision.reason
    gin.clear_config()
    small = PPOLearner(VECTOR, CONTINUOUS, precision="auto")  # (32, 32, 32)
    assert not small.precision.bf16
    assert "no convolution" in small.precision.reason
    # A wide MLP learns ~1.3x faster in bf16 but its actors, which follow the
    # learner's precision, act several times slower (bench/learner_speed.py).
    gin.bind_parameter("ActorNetwork.hidden_sizes", (256, 256))
    assert not PPOLearner(VECTOR, CONTINUOUS, precision="auto").precision.bf16
    # SAC's (400, 300) actor and critics: no convolution either.
    assert not SACLearner(VECTOR, CONTINUOUS, precision="auto").precision.bf16


def test_auto_keeps_the_nature_cnn_in_fp32_where_bf16_fell_short_on_pong(clear_gin,
                                                                          cpu_flags):
    """No bf16 Pong run of the Nature CNN reached a return of 0 in 2M env
    steps, where two of five fp32 runs did (docs/results.md#atari-pong):
    "auto" keeps it, and so the default encoder of frames of 36 x 36 pixels
    or more, in fp32 on a bf16 CPU, while the IMPALA CNN and the small one
    stay bf16; a binding of "bf16" still holds."""
    cpu_flags("amx_bf16")
    frames = ObservationSpec((36, 36, 1), "uint8")
    for architecture, bf16 in (("nature", False), ("auto", False), ("impala", True),
                               ("small", True)):
        gin.clear_config()
        gin.bind_parameter("ImageEncoder.architecture", architecture)
        choice = PPOLearner(frames, THREE_CHOICES, precision="auto").precision
        assert choice.bf16 is bf16, (architecture, choice.reason)
        if not bf16:
            assert choice.reason == ("PPOLearner.precision='auto' -> fp32 (the CPU has "
                                     "amx_bf16; no bf16 Pong run of the Nature CNN "
                                     "reached a return of 0 in 2M env steps, where two "
                                     "of five fp32 runs did (docs/results.md#atari-pong))")
    gin.clear_config()
    gin.bind_parameter("ImageEncoder.architecture", "nature")
    assert PPOLearner(frames, THREE_CHOICES, precision="bf16").precision.bf16


def test_the_resolved_precision_is_published_and_followed_by_the_policies(clear_gin):
    bf16 = _image_learner(precision="bf16")
    arrays = bf16.weight_arrays()
    assert arrays[PRECISION_KEY].tolist() == [1]
    policy = NeuralPolicy(FRAME, THREE_CHOICES)
    policy.load_weights(arrays)
    assert policy.bf16
    gin.clear_config()
    vector = PPOLearner(VECTOR, CONTINUOUS, precision="bf16")
    policy = NeuralPolicy(VECTOR, CONTINUOUS)
    policy.load_weights(vector.weight_arrays())
    # A bf16 policy acts with torch: no numpy copy, none for acting env workers.
    assert policy.bf16 and policy.acting_copy() is None
    policy.load_weights(PPOLearner(VECTOR, CONTINUOUS).weight_arrays())
    assert not policy.bf16 and policy.acting_copy() is not None
    sac = SACPolicy(VECTOR, CONTINUOUS)
    sac.load_weights(SACLearner(VECTOR, CONTINUOUS, precision="bf16").weight_arrays())
    assert sac.bf16


# -- agreement with float32 ---------------------------------------------------------
def _first_step_gradient(learner: PPOLearner, batch: Dict[str, np.ndarray]
                         ) -> torch.Tensor:
    """The flat gradient of the learner's first gradient step on ``batch``
    (the whole batch as one minibatch, unclipped)."""
    learner.train(batch, behaviour_version=0)
    return torch.cat([p.grad.reshape(-1) for p in learner.model.parameters()])


@pytest.mark.parametrize("kind", ["conv", "mlp"])
def test_bf16_and_fp32_learners_agree_on_the_first_gradient_step(clear_gin, kind):
    """Same weights, same batch: the bf16 gradient points where the float32
    one does (cosine >= 0.99) and its norm is within 5%; the weights after
    the step stay float32."""
    def learner(precision: str) -> PPOLearner:
        options = dict(num_epochs=1, mini_batch_size=64, max_grad_norm=0.0,
                       precision=precision)
        if kind == "conv":
            return _image_learner(**options)
        gin.bind_parameter("ActorNetwork.hidden_sizes", (256, 256))
        gin.bind_parameter("ValueNetwork.hidden_sizes", (256, 256))
        return PPOLearner(VECTOR, CONTINUOUS, seed=3, **options)

    fp32, bf16 = learner("fp32"), learner("bf16")
    batch = _acted_batch(fp32, FRAME if kind == "conv" else VECTOR)
    g32, g16 = _first_step_gradient(fp32, batch), _first_step_gradient(bf16, batch)
    cosine = float(torch.nn.functional.cosine_similarity(g32, g16, dim=0))
    assert cosine >= 0.99, cosine
    assert abs(float(g16.norm() / g32.norm()) - 1.0) <= 0.05
    assert all(t.dtype == torch.float32 for t in bf16.model.state_dict().values())
    # A bf16 step moved the weights as Adam's first step does: lr per entry at most.
    for a, b in zip(fp32.model.parameters(), bf16.model.parameters()):
        assert float((a - b).detach().abs().max()) <= 2 * 3e-4 + 1e-6


@pytest.mark.parametrize("kind", ["conv", "mlp", "sac"])
def test_output_layers_compute_in_float32_under_bf16(clear_gin, kind):
    """A policy's logits or mean, a value head and SAC's heads take and give
    float32 under a bf16 autocast (bfloat16 would round a logit of 4 to a
    step of 1/32, under PPO's annealed clip range), while the hidden layers
    before them compute in bfloat16; a network's output then equals the
    float32 product of its head with the bfloat16-computed features."""
    if kind == "sac":
        sac = SACLearner(VECTOR, CONTINUOUS, precision="bf16")
        network = sac.actor
        assert all(isinstance(q.head, Float32Layer) for q in (sac.critic.q1, sac.critic.q2))
    elif kind == "conv":
        network = _image_learner(precision="bf16").model
    else:
        network = PPOLearner(VECTOR, CONTINUOUS, precision="bf16").model
    layers = [m for m in network.modules() if isinstance(m, torch.nn.Linear)]
    heads = [m for m in layers if isinstance(m, Float32Layer)]
    assert heads and len(heads) < len(layers)
    seen = {}
    for layer in layers:
        layer.register_forward_hook(
            lambda module, inputs, output: seen.__setitem__(module, (inputs[0], output)))
    rng = np.random.default_rng(0)
    if kind == "conv":
        observation = torch.as_tensor(rng.integers(0, 256, (4, *FRAME.shape)), dtype=torch.uint8)
    else:
        observation = torch.as_tensor(rng.standard_normal((4, 6)), dtype=torch.float32)
    with compute_context(torch.device("cpu"), True):
        if kind == "sac":
            network.distribution(observation)
        else:
            network.evaluate(observation)
    for layer in layers:
        features, output = seen[layer]
        if layer in heads:
            assert output.dtype == torch.float32
            want = torch.nn.functional.linear(features.float(), layer.weight, layer.bias)
            torch.testing.assert_close(output, want, rtol=1e-6, atol=1e-6)
        else:
            assert output.dtype == torch.bfloat16, layer


@pytest.mark.parametrize("architecture", ["nature", "impala", "small"])
def test_an_image_encoders_first_convolution_computes_in_float32_under_bf16(architecture):
    """Under a bf16 autocast the convolution that reads the frames takes and
    gives float32 (in bfloat16 its weight gradient, a sum over every output
    position of a minibatch, strayed from float32's on trained Pong networks:
    bench/precision_gradients.py), the next one computes in bfloat16, and the
    acting copy keeps the first one's weights float32 (so it computes what the
    learner computes)."""
    encoder = ImageEncoder(ObservationSpec((36, 36, 4), "uint8"), architecture)
    first, second = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)][:2]
    dtypes = {}
    for name, layer in (("first", first), ("second", second)):
        layer.register_forward_hook(
            lambda module, inputs, output, name=name: dtypes.__setitem__(
                name, (inputs[0].dtype, output.dtype)))
    frames = torch.randint(0, 256, (2, 36, 36, 4), dtype=torch.uint8)
    with compute_context(torch.device("cpu"), True):
        encoder(frames)
    assert dtypes["first"] == (torch.float32, torch.float32)
    assert dtypes["second"][1] == torch.bfloat16
    copy = Bf16Inference(encoder).copy
    copied = [m for m in copy.modules() if isinstance(m, torch.nn.Conv2d)][:2]
    assert copied[0].weight.dtype == torch.float32
    assert copied[1].weight.dtype == torch.bfloat16


def test_a_bf16_sync_loop_keeps_the_first_minibatch_ratio_near_one(clear_gin, monkeypatch):
    """predict -> learn -> predict with a conv net in bf16: the actor's
    log-probabilities come from the same bf16 computation as the learner's
    (the actor's batches of 8 frames, the learner's of 16), so the first
    minibatch's |log pi - log mu| is 0 as in float32 (measured: exactly 0 on
    an AVX512-BF16 CPU; bounded here at float32 rounding), and the lag
    corrections see weights of 1. An actor that ignored the published
    precision (float32 against the bf16 learner) would not be."""
    first = FirstMinibatch(monkeypatch)
    learner = _image_learner(num_epochs=2, mini_batch_size=16, precision="bf16")
    for iteration in range(3):
        batch = _acted_batch(learner, FRAME, seed=iteration)
        stats = learner.train(batch, behaviour_version=iteration)
        assert stats["importance_weight"] == 1.0 and stats["truncated_fraction"] == 0.0
    largest = max(float(r.abs().max()) for r in first.log_ratios)
    assert largest <= 1e-6, largest
    float32_actor = learner.weight_arrays()
    float32_actor[PRECISION_KEY][:] = 0
    learner.train(_acted_batch(learner, FRAME, seed=3, arrays=float32_actor),
                  behaviour_version=3)
    assert float(first.log_ratios[-1].abs().max()) > 1e-6


def _bf16_weights(learner: PPOLearner, seed: int) -> Dict[str, np.ndarray]:
    """The learner's published bf16 weights with every parameter redrawn
    (seeded), so that two loads differ everywhere."""
    rng = np.random.default_rng(seed)
    arrays = learner.weight_arrays()
    for name, value in arrays.items():
        if name.startswith("param/"):
            arrays[name] = (0.1 * rng.standard_normal(value.shape)).astype(value.dtype)
    return arrays


@pytest.mark.parametrize("kind", ["conv", "mlp", "gsde", "lstm"])
def test_bf16_acting_layers_give_what_autocast_of_the_float32_model_gives(clear_gin, kind):
    """Under bf16 a policy acts through a copy whose linear and conv layers
    (but an image encoder's first, float32 under any precision) hold
    bfloat16 weights, rounded once a weight load (``Bf16Inference``),
    not at every step: its actions, log-probabilities and values equal, bit
    for bit, those of the float32 model under the same autocast, also after a
    second load (the copy follows the new weights)."""
    if kind == "conv":
        observation, actions = FRAME, THREE_CHOICES
        gin.bind_parameter("ImageEncoder.architecture", "small")
    else:
        observation, actions = VECTOR, CONTINUOUS
        gin.bind_parameter("ActorNetwork.hidden_sizes", (64, 64))
    if kind == "gsde":
        gin.bind_parameter("ActorNetwork.exploration", "state_dependent")
    if kind == "lstm":
        gin.bind_parameter("ActorCritic.rnn", "lstm")
    learner = PPOLearner(observation, actions, seed=3, precision="bf16")
    rng = np.random.default_rng(0)
    frames = (rng.integers(0, 256, (8, *observation.shape)) if observation.dtype == "uint8"
              else rng.standard_normal((8, *observation.shape))).astype(observation.dtype)
    policy, reference = (NeuralPolicy(observation, actions, seed=5) for _ in range(2))
    reference._inference_model = lambda: reference.model  # autocast casts per call
    for load in range(2):
        arrays = _bf16_weights(learner, seed=load)
        policy.load_weights(arrays)
        reference.load_weights(arrays)
        layers = [m for m in policy._inference_model().modules()
                  if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))
                  and not isinstance(m, Float32Layer)]
        assert layers and all(m.weight.dtype == torch.bfloat16 for m in layers)
        kept = [m for m in policy._inference_model().modules() if isinstance(m, Float32Layer)]
        assert kept and all(m.weight.dtype == torch.float32 for m in kept)
        assert all(p.dtype == torch.float32 for p in policy.model.parameters())
        state = (None if policy.state_size == 0
                 else rng.standard_normal((8, policy.state_size)).astype(np.float32))
        env_ids = np.arange(8)
        got = policy.act(frames, state=state, env_ids=env_ids)
        want = reference.act(frames, state=state, env_ids=env_ids)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(policy.value(frames, state), reference.value(frames, state))
        if load == 1:
            assert not np.array_equal(got[1], first_log_prob)
        first_log_prob = got[1]


def test_bf16_sac_actor_acts_as_autocast_of_the_float32_actor(clear_gin):
    learner = SACLearner(VECTOR, CONTINUOUS, precision="bf16")
    arrays = learner.weight_arrays()
    policy, reference = SACPolicy(VECTOR, CONTINUOUS, seed=2), SACPolicy(VECTOR, CONTINUOUS,
                                                                       seed=2)
    for p in (policy, reference):
        p.load_weights(arrays)
        p.uniform = False  # past the warm-up: the actor network acts
    reference._bf16.copy = reference.actor  # autocast casts per call
    assert policy._bf16.copy is not policy.actor
    obs = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    for a, b in zip(policy.act(obs), reference.act(obs)):
        np.testing.assert_array_equal(a, b)


# -- checkpoints --------------------------------------------------------------------
def _through_bytes(state: Dict) -> Dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _float_tensors(state) -> List[torch.Tensor]:
    if torch.is_tensor(state):
        return [state] if state.is_floating_point() else []
    if isinstance(state, dict):
        return [t for v in state.values() for t in _float_tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in _float_tensors(v)]
    return []


def _assert_no_half_tensors(state) -> None:
    """Weights and optimizer moments float32 (the step counters and the
    normalizer's statistics may be float64): nothing in 16 bits."""
    dtypes = {t.dtype for t in _float_tensors(state)}
    assert torch.float32 in dtypes and not dtypes & {torch.bfloat16, torch.float16}, dtypes


@pytest.mark.parametrize("saved,loaded", [("fp32", "bf16"), ("bf16", "fp32")])
def test_checkpoints_are_float32_and_load_under_either_precision(clear_gin, saved, loaded):
    trained = _image_learner(num_epochs=1, mini_batch_size=32, precision=saved)
    trained.train(_acted_batch(trained, FRAME), behaviour_version=0)
    state = _through_bytes(trained.state_dict())
    _assert_no_half_tensors(state)
    assert {t.dtype for t in _float_tensors(state["model"])} == {torch.float32}
    resumed = _image_learner(num_epochs=1, mini_batch_size=32, precision=loaded)
    resumed.load_state_dict(state)
    assert resumed.precision.name == loaded
    for a, b in zip(trained.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    stats = resumed.train(_acted_batch(resumed, FRAME, seed=1), behaviour_version=1)
    assert np.isfinite(stats["policy_loss"])

    sac = SACLearner(VECTOR, CONTINUOUS, batch_size=8, precision=saved)
    sac_state = _through_bytes(sac.state_dict())
    _assert_no_half_tensors(sac_state)
    SACLearner(VECTOR, CONTINUOUS, batch_size=8, precision=loaded).load_state_dict(sac_state)


# -- refused by name ----------------------------------------------------------------
def test_a_wrong_precision_is_refused_naming_the_binding(clear_gin):
    with pytest.raises(ConfigError, match=r"PPOLearner.precision must be one of "
                                          r"\('fp32', 'bf16', 'auto'\).*got 'fp16'"):
        PPOLearner(VECTOR, CONTINUOUS, precision="fp16")
    with pytest.raises(ConfigError, match=r"SACLearner.precision .*got 'bfloat16'"):
        SACLearner(VECTOR, CONTINUOUS, precision="bfloat16")


@pytest.mark.parametrize("gin_file,binding", [
    ("ppo_image_dot_centering.gin", "PPOLearner.precision"),
    ("sac_bullet_half_cheetah.gin", "SACLearner.precision")])
def test_the_train_command_exits_2_before_anything_starts(tmp_path, capsys, gin_file,
                                                          binding):
    root = tmp_path / "run"
    rc = train_in_this_process(str(root), [gin_file], [f"{binding}='half'"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{binding} must be one of ('fp32', 'bf16', 'auto')" in err and "'half'" in err
    assert not (root / "config.gin").exists() and not (root / "checkpoints").exists()


# -- end to end ---------------------------------------------------------------------
def test_a_bf16_run_of_the_image_env_trains_end_to_end(tmp_path):
    """The train command with PPOLearner.precision='bf16' on the image env:
    it logs the choice, its actor acts in bf16 and every sync batch is
    on-policy (no importance weight truncated)."""
    root = str(tmp_path / "run")
    rc = train_in_this_process(root, ["ppo_image_dot_centering.gin"], [
        "PPOLearner.precision='bf16'", "Trainer.num_env_steps=1024",
        "MetricsRecorder.tensorboard=False"])
    assert rc == 0
    rows = [r for r in read_metrics(root) if r.get("iteration")]
    assert rows and rows[-1]["env_steps"] >= 1024
    assert all(r["truncated_fraction"] == 0.0 for r in rows)
    assert all(np.isfinite(r["policy_loss"]) for r in rows)
    with open(os.path.join(root, "log.txt"), encoding="utf-8") as f:
        assert "precision: PPOLearner.precision='bf16'" in f.read()

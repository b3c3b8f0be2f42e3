"""The networks' compute precision: one rule for ``PPOLearner.precision`` and
``SACLearner.precision``, and the contexts the learners and policies compute in.

Values (``PRECISIONS``):

- "fp32" (the default): everything in float32, as before the setting existed.
- "bf16": the networks' forward passes (and so their backward passes) run
  under ``torch.autocast(device_type, dtype=torch.bfloat16)``: matrix products
  and convolutions take bfloat16 inputs and accumulate in float32. The
  weights, gradients and the optimizer's moments stay float32 (the master
  copy), and so do everything outside the networks: the losses, advantages
  and value targets, the observation normalizer and the action distributions'
  log-probabilities and entropies (each network's outputs are float32, from
  its float32 output layers below). So does an image encoder's first
  convolution (``Float32Conv2d``): under bfloat16 its weight gradient
  strays from float32's on a trained network, through the forward's
  rounding of its weights and of the scaled frames. So do the networks'
  output layers (``Float32Linear``: logits, means, log-stds, value and Q
  heads): a bfloat16 output would round a logit of 4 to a step of 1/32.
  Checkpoints hold float32 tensors only and load under either precision.
- "auto": "bf16" where the learner's device runs bfloat16 natively AND the
  network is one it suits, else "fp32" (``choose_precision``):

  1. native: a CPU whose /proc/cpuinfo flags include ``amx_bf16`` or
     ``avx512_bf16`` (``cpu_bf16_flags``); elsewhere (another CPU emulates
     bfloat16 several times slower than float32) never. Not a CUDA device
     either, though it runs bfloat16 natively: there a gradient step of the
     shipped configs' networks is bound by the host's kernel launches, not by
     the arithmetic, and autocast's casts add launches (``bench.gpu_smoke``
     on an H200, 2026-11-29, two machines: the Pong learner at 185 and 115
     gradient steps/s in bf16 against 194 and 187 in fp32), while the CPU
     actors, which follow the learner's precision, may lack bfloat16;
  2. suits: the network has a convolution and no image encoder that learned
     worse in bf16 (``bf16_suits``). Measured with ``bench/learner_speed.py``
     (docs/pixels.md has the figures): the Nature and IMPALA encoders learn
     2.2x and 3.4x faster in bf16 and their actors lose little or gain; an
     MLP gains at most 1.3x in the learner (a (256, 256) one) while its
     actors, which follow the learner's precision and give up their numpy
     inference under bf16, run 2-12x slower, so a run of vector
     observations, whose time the actors dominate, loses. But no bf16 Pong
     run of the Nature CNN reached a return of 0 in 2M env steps, where two
     of five fp32 runs did (``AUTO_FP32_ENCODERS``), so "auto" keeps it, and
     so Atari's default encoder, in fp32.

The learner publishes the precision it resolved with its weights
(``PRECISION_KEY``), and the acting policies (``NeuralPolicy``,
``SACPolicy``) run their inference under the same one, so that an actor's
log-probabilities come from the same computation as the learner's for the
same weights and observations (the first minibatch's ratio of a sync
iteration stays ~1: docs/pixels.md gives its spread under each precision).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import ContextManager, Tuple

import numpy as np
import torch
import torch.nn as nn

from alf_async.utils.cpuinfo import cpu_flags
from alf_async.utils.validation import ConfigError

PRECISIONS = ("fp32", "bf16", "auto")
#: The gin binding of each algorithm's learner precision (``Trainer.algorithm``).
PRECISION_BINDINGS = {"ppo": "PPOLearner.precision", "sac": "SACLearner.precision"}
#: The /proc/cpuinfo flags of a CPU that computes bfloat16 natively.
NATIVE_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
#: Image encoders (``ImageEncoder.architecture``) that did not learn as well
#: in bf16 as in fp32, so "auto" keeps a network holding one in fp32 (a
#: binding of "bf16" still holds), with the evidence. The Nature CNN on Pong
#: (the async file, first convolution in float32, 2026-11-30): three bf16
#: seeds reached a training return of -10 at 1.52-1.84M env steps, after
#: three of the four fp32 runs (0.94-1.24M; the fourth 1.92M), and ended 2M
#: at -8.6 to -7.0 where two fp32 runs reached 0; at 1M one bf16 seed was
#: below every fp32 run. In wall time the two were even to -10
#: (docs/results.md#atari-pong). Three runs since the output layers compute
#: in float32 (``Float32Linear``): all three inside the five fp32 runs'
#: spread at 1M and 2M (-0.7, -1.7 and -10.6 at 2M against -13.0 to +5.0),
#: two at -10 by 1.27M (fp32: four of five, 0.94-1.92M), none at 0 by 2M,
#: where two fp32 runs were.
AUTO_FP32_ENCODERS = {
    "nature": "no bf16 Pong run of the Nature CNN reached a return of 0 in 2M env "
              "steps, where two of five fp32 runs did (docs/results.md#atari-pong)",
}
#: Where the learner's published weights say which precision to act in
#: (``pack_weights`` group "precision", name "bf16": [1] uint8, 1 = bf16).
PRECISION_KEY = "precision/bf16"


@dataclass(frozen=True)
class PrecisionChoice:
    """The resolved precision (``bf16``: True for "bf16") and a sentence
    saying why, for the start-up log."""

    bf16: bool
    reason: str

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp32"


def check_precision(owner: str, value: object) -> None:
    """Raise ``ConfigError`` naming ``owner.precision`` unless ``value`` is
    one of ``PRECISIONS``."""
    if not (isinstance(value, str) and value in PRECISIONS):
        raise ConfigError(f"{owner}.precision must be one of {PRECISIONS} ('fp32': float32 "
                          f"everywhere; 'bf16': bfloat16 autocast of the networks; 'auto': "
                          f"bf16 where the processor has it natively and the network is "
                          f"convolutional, other than the Nature CNN), got {value!r}")


def cpu_bf16_flags() -> Tuple[str, ...]:
    """The ``NATIVE_CPU_FLAGS`` this machine's CPU reports in /proc/cpuinfo
    (empty where it reports none, or on a system without that file)."""
    flags = cpu_flags()
    return tuple(flag for flag in NATIVE_CPU_FLAGS if flag in flags)


def native_bf16(device: torch.device) -> Tuple[bool, str]:
    """(whether "auto" may pick bfloat16 on ``device``, why) (rule 1): a CPU
    that computes it natively; never a CUDA device (the module doc)."""
    if device.type == "cpu":
        flags = cpu_bf16_flags()
        return (bool(flags), f"the CPU has {' and '.join(flags)}" if flags
                else f"the CPU has none of {' or '.join(NATIVE_CPU_FLAGS)}")
    if device.type == "cuda":
        return False, (f"a CUDA learner ({device}) is bound by kernel launches at these "
                       f"sizes, which bf16's casts add to (bench.gpu_smoke)")
    return False, f"device {device.type!r} is not known to run bf16 natively"


def bf16_suits(*networks: nn.Module) -> Tuple[bool, str]:
    """(whether bfloat16 suits ``networks``, what decides it) (rule 2): True
    where one of them has a convolution and none holds an image encoder of
    ``AUTO_FP32_ENCODERS`` (a module whose ``architecture`` names one)."""
    for network in networks:
        for module in network.modules():
            architecture = getattr(module, "architecture", None)
            if isinstance(architecture, str) and architecture in AUTO_FP32_ENCODERS:
                return False, AUTO_FP32_ENCODERS[architecture]
    for network in networks:
        for module in network.modules():
            if isinstance(module, nn.modules.conv._ConvNd):
                return True, "the network has convolutions"
    return False, ("the network has no convolution (an MLP's actors run slower in bf16 "
                   "than its learner gains)")


def choose_precision(owner: str, value: str, device: torch.device,
                     *networks: nn.Module) -> PrecisionChoice:
    """Resolve ``owner.precision = value`` for ``networks`` on ``device``
    (the rule: the module doc); ``ConfigError`` for a value not in
    ``PRECISIONS``."""
    check_precision(owner, value)
    if value != "auto":
        return PrecisionChoice(value == "bf16", f"{owner}.precision={value!r}")
    native, why_native = native_bf16(device)
    suits, why_suits = bf16_suits(*networks)
    bf16 = native and suits
    because = f"{why_native}; {why_suits}" if native else why_native
    return PrecisionChoice(bf16, f"{owner}.precision='auto' -> "
                                 f"{'bf16' if bf16 else 'fp32'} ({because})")


def compute_context(device: torch.device, bf16: bool) -> ContextManager:
    """The context the networks' forward passes run in: bfloat16 autocast
    on ``device``'s type, or nothing (float32)."""
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


#: The layers whose weights a bfloat16 autocast casts to bfloat16 on every
#: call (matrix products and convolutions: weight and bias alike).
AUTOCAST_CAST_LAYERS = (nn.Linear, nn.modules.conv._ConvNd)


class Float32Layer:
    """A layer mixin (before the ``nn`` layer class in the bases) that
    computes in float32 under any autocast: its input is cast to float32 and
    autocast is off for its forward pass, so its output is float32. Its
    weights stay float32 in a bf16 acting copy (``Bf16Inference``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with float32_context(x):
            return super().forward(x.float())


class Float32Conv2d(Float32Layer, nn.Conv2d):
    """A 2-d convolution that computes in float32 under any autocast: an image
    encoder's first layer, the one that reads the frames (same parameters and
    state-dict keys as ``nn.Conv2d``; without autocast it is ``nn.Conv2d``).

    Under a bfloat16 autocast on a CPU the weight and bias gradients of the
    Nature CNN's first convolution came out far from float32's on trained
    Pong networks (cosine 0.4-0.9 per minibatch, norms off by up to 2x), where
    every later layer's agreed to 0.99 and better (``bench/precision_gradients.py``;
    docs/pixels.md). The cause is the forward's rounding of the weights and
    of the scaled frames (the gradients flow back through its output): a
    float32 weight gradient after a bfloat16 forward strays as much
    (docs/results.md#atari-pong). In float32 it agrees, at a cost (measured with
    ``bench/learner_speed.py``: a bf16 learner iteration 6-44% slower for
    the Nature CNN, 1-41% for the IMPALA CNN; results.md#atari-pong). Its
    float32 output is cast to bfloat16 by the next layer.
    """


class Float32Linear(Float32Layer, nn.Linear):
    """A linear layer that computes in float32 under any autocast: a network's
    output layer (a policy's logits or mean, a value or Q head; same parameters
    and state-dict keys as ``nn.Linear``; without autocast it is ``nn.Linear``).

    Under a bfloat16 autocast a linear layer's output is rounded to bfloat16,
    8 significant bits: a logit of 4 to a step of 1/32, a value of 300 to a
    step of 2. PPO's ratio and clip read the change of the log-probabilities
    between two gradient steps, which near the end of an annealed clip range
    (0.1 -> 0) is of the size of that step, and a value or Q target is
    regressed on at that step. In float32 these layers cost next to nothing
    (a [B, F] x [F, A] product with A of 1 to 18). Their inputs, the last
    hidden layer's features, keep bfloat16's rounding.
    """


class Bf16Inference:
    """A frozen inference copy of a float32 network for a bfloat16 autocast,
    with the weights of its ``AUTOCAST_CAST_LAYERS`` cast once, not per call.

    Under ``torch.autocast(..., dtype=torch.bfloat16)`` a linear or
    convolution layer with float32 weights rounds them to bfloat16 on every
    call (a Nature CNN's 1.7M weights at each of an actor's steps); autocast
    leaves weights that are already bfloat16 as they are and rounds them the
    same way (to nearest). So ``copy`` computes, under the same autocast,
    exactly what ``network`` computes, bit for bit. Every other parameter
    (log-stds, a recurrent core's weights, which run in float32 under any
    precision) stays float32. ``refresh`` after ``network``'s weights change.

    Args:
        network: the float32 module acting policies load their weights into.
    """

    def __init__(self, network: nn.Module):
        self.copy = copy.deepcopy(network)
        self.copy.eval()
        self.copy.requires_grad_(False)
        for module in self.copy.modules():
            if (isinstance(module, AUTOCAST_CAST_LAYERS)
                    and not isinstance(module, Float32Layer)):
                module.to(torch.bfloat16)
        self.source = network

    def refresh(self) -> None:
        """Copy the source network's current weights (rounded where bfloat16)."""
        self.copy.load_state_dict(self.source.state_dict())


def float32_context(tensor: torch.Tensor) -> ContextManager:
    """A context where autocast is off on ``tensor``'s device type, for
    math that must stay float32 whatever the caller's precision (the
    distributions' products); nothing where autocast is not on."""
    device_type = tensor.device.type
    if device_type in ("cpu", "cuda") and torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def precision_flag(bf16: bool) -> np.ndarray:
    """The published flag (``PRECISION_KEY``): [1] uint8."""
    return np.array([1 if bf16 else 0], np.uint8)


def published_bf16(arrays: dict) -> bool:
    """Whether published weights ``arrays`` (``pack_weights``'s flat dict)
    say to act in bfloat16 (weights without the flag: float32)."""
    flag = arrays.get(PRECISION_KEY)
    return bool(flag is not None and int(np.asarray(flag).reshape(-1)[0]) == 1)

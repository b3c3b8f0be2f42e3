"""Image encoders: frames in, one feature vector per frame out.

An image observation (``envs.spaces.ObservationSpec`` with ``is_image``) reaches
the networks as stored: [B, H, W, C], [B, C, H, W] or [B, H, W], uint8 for
frames of bytes. ``ImageEncoder`` turns it into floats (uint8 frames divided
by 255; float frames as they are, so an env that gives float images should
give them in a small range such as [0, 1]: the observation normalizer does not
run on images), puts the channels first and
runs a convolutional stack, then a linear layer and ReLU to ``feature_size``
features [B, F]. Architectures (``ImageEncoder.architecture``):

- "nature": the Nature DQN network (Mnih et al., 2015): convolutions of 32 8x8
  filters with stride 4, 64 4x4 with stride 2, 64 3x3 with stride 1, then 512
  features. Needs frames of at least 36 x 36 pixels (Atari's 84 x 84).
- "impala": the residual network of IMPALA (Espeholt et al., 2018): three
  stages of (16, 32, 32) channels, each a 3x3 convolution, a 3x3 max-pool with
  stride 2 and two residual blocks, then 256 features. Deeper and about 3x the
  compute of "nature"; often learns more per frame.
- "small": two 3x3 convolutions (16 filters, then 32 with stride 2) and 128
  features, for frames of a few pixels (tests, toy tasks).
- "auto" (default): "nature" for frames of at least 36 x 36 pixels, else
  "small".

Channel order: "auto" takes a last axis of at most 4 entries after a larger
first axis as channels-last (H, W, C), and channels-first (C, H, W) otherwise;
gymnasium's ``FrameStackObservation`` of grayscale Atari frames gives (4, 84, 84),
a colour frame (210, 160, 3). Set ``ImageEncoder.channels`` to "first" or
"last" where that guess is wrong.

Memory format (``ImageEncoder.memory_format``): "channels_last" (default)
keeps the convolutions' weights and activations in torch's channels-last
memory format (NHWC strides; the tensors' shapes stay [B, C, H, W], state
dicts load either way, and the outputs agree to float32 rounding), in
which oneDNN's CPU convolutions ran faster on the CPU below; "contiguous"
keeps torch's default (NCHW) layout. (On a GPU neither was measured.)
Measured with ``bench/learner_speed.py --memory_formats
channels_last,contiguous`` on an AVX2 CPU (AMD EPYC Zen 3, 2 threads,
float32; the two layouts timed in alternation): a learner iteration
1.07-1.28x faster in channels-last for the Nature CNN (medians of two runs)
and 1.41x for the IMPALA CNN; an actor's inference about 5% slower for the
Nature CNN (0.95-0.96x) and 1.78x faster for the IMPALA CNN
(docs/pixels.md). Under bfloat16 the first convolution's input was
channels-last before this setting existed; its weights were not.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import gin
import torch
import torch.nn as nn

from alf_async.envs.spaces import ObservationSpec
from alf_async.utils.precision import Float32Conv2d

ARCHITECTURES = ("auto", "nature", "impala", "small")
CHANNEL_ORDERS = ("auto", "first", "last")
MEMORY_FORMATS = ("channels_last", "contiguous")
NATURE_MIN_SIZE = 36
_DEFAULT_FEATURES = {"nature": 512, "impala": 256, "small": 128}


def channels_last(shape: Sequence[int], channels: str = "auto") -> bool:
    """Whether an image of ``shape`` (rank 3) keeps its channels last."""
    if channels != "auto":
        return channels == "last"
    return shape[-1] <= 4 < shape[0]


def image_layout(spec: ObservationSpec, channels: str = "auto") -> Tuple[int, int, int]:
    """(C, H, W) of an image observation."""
    shape = spec.shape
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if channels_last(shape, channels):
        return shape[2], shape[0], shape[1]
    return shape[0], shape[1], shape[2]


def _init_conv(layer: nn.Module) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = _init_conv(nn.Conv2d(channels, channels, 3, padding=1))
        self.conv1 = _init_conv(nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def _impala_stage(in_channels: int, channels: int, conv: type = nn.Conv2d) -> nn.Module:
    return nn.Sequential(_init_conv(conv(in_channels, channels, 3, padding=1)),
                         nn.MaxPool2d(3, stride=2, padding=1),
                         _ResidualBlock(channels), _ResidualBlock(channels))


def conv_stack(architecture: str, in_channels: int) -> nn.Module:
    """The convolutional part of ``architecture`` (not "auto"); its first
    convolution computes in float32 under any precision (``Float32Conv2d``)."""
    if architecture == "nature":
        return nn.Sequential(
            _init_conv(Float32Conv2d(in_channels, 32, 8, stride=4)), nn.ReLU(),
            _init_conv(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            _init_conv(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten())
    if architecture == "impala":
        return nn.Sequential(_impala_stage(in_channels, 16, Float32Conv2d), _impala_stage(16, 32),
                             _impala_stage(32, 32), nn.ReLU(), nn.Flatten())
    if architecture == "small":
        return nn.Sequential(
            _init_conv(Float32Conv2d(in_channels, 16, 3, padding=1)), nn.ReLU(),
            _init_conv(nn.Conv2d(16, 32, 3, stride=2, padding=1)), nn.ReLU(), nn.Flatten())
    raise ValueError(f"ImageEncoder.architecture must be one of {ARCHITECTURES}, "
                     f"got {architecture!r}")


@gin.configurable
class ImageEncoder(nn.Module):
    """Frames [B, *O] (uint8 or float) -> features [B, F] (see the module doc).

    Args:
        observation: the env's image ``ObservationSpec``.
        architecture: "auto", "nature", "impala" or "small".
        feature_size: F (None: 512 for "nature", 256 for "impala", 128 for
            "small").
        channels: "auto", "first" or "last": where the channels of a rank-3
            frame are.
        memory_format: "channels_last" or "contiguous": the layout the
            convolutions compute in (the module doc).
    """

    def __init__(self, observation: ObservationSpec, architecture: str = "auto",
                 feature_size: Optional[int] = None, channels: str = "auto",
                 memory_format: str = "channels_last"):
        super().__init__()
        if not observation.is_image:
            raise ValueError(f"ImageEncoder needs an image observation, got {observation}")
        if channels not in CHANNEL_ORDERS:
            raise ValueError(f"ImageEncoder.channels must be one of {CHANNEL_ORDERS}, "
                             f"got {channels!r}")
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"ImageEncoder.memory_format must be one of {MEMORY_FORMATS}, "
                             f"got {memory_format!r}")
        c, h, w = image_layout(observation, channels)
        if architecture == "auto":
            architecture = "nature" if min(h, w) >= NATURE_MIN_SIZE else "small"
        if architecture == "nature" and min(h, w) < NATURE_MIN_SIZE:
            raise ValueError(f"ImageEncoder.architecture='nature' needs frames of at least "
                             f"{NATURE_MIN_SIZE}x{NATURE_MIN_SIZE} pixels, got {h}x{w}; use "
                             f"'small' or 'impala'")
        self.architecture = architecture
        self.observation = observation
        self.scale = 1.0 / 255.0 if observation.dtype == "uint8" else 1.0
        self.permute = len(observation.shape) == 3 and channels_last(observation.shape,
                                                                     channels)
        self.convs = conv_stack(architecture, c)
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, c, h, w)).shape[1]
        self.channels_last = memory_format == "channels_last"
        if self.channels_last:  # the convolutions' 4-d weights; shapes unchanged
            self.convs.to(memory_format=torch.channels_last)
        self.feature_size = int(feature_size or _DEFAULT_FEATURES[architecture])
        self.head = nn.Sequential(nn.Linear(flat, self.feature_size), nn.ReLU())
        nn.init.orthogonal_(self.head[0].weight, gain=math.sqrt(2))
        nn.init.zeros_(self.head[0].bias)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [B, *O] -> features [B, F] (bfloat16 under a bfloat16
        autocast, else float32)."""
        return self.head(self.convs(self.conv_input(frames)))

    def conv_input(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [B, *O] as the convolutions' input [B, C, H, W], float32:
        scaled (uint8 / 255) in one new tensor, converted once from the
        stored dtype, in the encoder's memory format (``memory_format``).

        float32 under any precision: the first convolution computes in
        float32 (``Float32Conv2d``); under a bfloat16 autocast
        (``utils.precision``) the layers after it run in bfloat16.
        """
        if frames.dim() == 3:  # (H, W) frames: one channel
            frames = frames.unsqueeze(1)
        elif self.permute:
            frames = frames.permute(0, 3, 1, 2)  # a view: no copy yet
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        x = frames.to(dtype=torch.float32, memory_format=layout)
        if self.scale == 1.0:
            return x
        # In place where the conversion made a new tensor (a change of dtype,
        # as from frames of bytes); told by dtype, not by the data pointer,
        # which a traced tensor (torch.export, alf-export) does not have.
        return x.mul_(self.scale) if x.dtype != frames.dtype else x * self.scale

"""Exporting a trained policy's deterministic action as a TorchScript or ONNX file.

``export_policy(run, path, format)`` writes ``DeterministicActor`` of a loaded
run (``playback.player.LoadedRun``): one torch module from the raw
observations a user's env gives to the actions its ``step`` takes, with the
checkpoint's observation normalizer and the mapping of actions to the env's
bounds built in, so that the file needs neither alf_async nor the run.

The file's inputs and outputs (B, the batch, is dynamic):

- ``observation`` [B, *observation_space.shape], in the observation space's
  dtype (uint8 frames stay uint8);
- a recurrent policy also takes ``state`` [B, S] float32 (zeros at an
  episode's start) and returns ``next_state`` [B, S] after the action;
- ``action``: [B, *action_space.shape] in the space's dtype for a Box; int64
  choice indices for a Discrete space ([B]) or a MultiDiscrete one ([B, D]).

The actions are those of ``Policy.predict(..., deterministic=True)``.

Formats: "torchscript" (``torch.jit.trace``; load it with ``torch.jit.load``;
PyTorch deprecates TorchScript, so prefer ONNX for long-lived files) and
"onnx" (``torch.onnx.export`` with ``dynamo=True``, PyTorch's maintained
exporter, which needs the onnx and onnxscript packages; run the file with
onnxruntime). The file is written whole or not at all (``utils.files``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import warnings
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from alf_async.algorithms.normalizer import FrozenNormalizer
from alf_async.envs.spaces import EnvActions
from alf_async.utils.files import atomic_write

if TYPE_CHECKING:
    from alf_async.playback.player import LoadedRun

FORMATS = ("torchscript", "onnx")
ONNX_PACKAGES = ("onnx", "onnxscript")
EXPORT_EXTRA = ('pip install "alf_async[export]" (or pip install -e ".[export]" from the '
                'alf_async checkout)')
INPUT_NAMES = ("observation", "state")
OUTPUT_NAMES = ("action", "next_state")
# Rows of the example batch traced (not 1: an exporter may take a batch of one
# for a constant).
_EXAMPLE_BATCH = 2


class ExportError(ValueError):
    """A policy that cannot be exported as asked; the message says why and what to do."""


class DeterministicActor(nn.Module):
    """A loaded run's deterministic action as one module (see the module doc).

    ``forward(observation [B, *O])`` -> action [B, *A] for a feed-forward
    policy; ``forward(observation [B, *O], state [B, S])`` -> (action [B, *A],
    next state [B, S]) for a recurrent one.

    Args:
        run: a ``LoadedRun`` (``playback.player.load_run``); the module holds
            a copy of its policy's networks.
    """

    def __init__(self, run: "LoadedRun"):
        super().__init__()
        policy = run.policy
        self.sac = run.algorithm == "sac"
        # A copy without gradients: the file's outputs then need no detach().
        self.network = copy.deepcopy(policy.actor if self.sac else policy.model)
        self.network.requires_grad_(False)
        self.state_size = 0 if self.sac else int(policy.state_size)
        spec = run.observation_spec
        self.observation_shape = tuple(spec.shape)
        self.stored_dtype = torch.uint8 if spec.dtype == "uint8" else torch.float32
        self.normalizer = (FrozenNormalizer(policy.normalizer)
                           if not self.sac and policy.normalize else None)
        self.example_dtype = np.dtype(run.observation_space.dtype)
        self.example_shape = tuple(run.observation_space.shape)
        actions = EnvActions(run.action_space, run.action_spec)
        self.discrete = actions.spec.discrete
        self.action_shape = actions.shape
        if self.discrete:
            self.register_buffer("start", torch.from_numpy(actions.start))
        else:
            self.register_buffer("low", torch.from_numpy(actions.low))
            self.register_buffer("high", torch.from_numpy(actions.high))
            self.action_dtype = torch.from_numpy(np.zeros(0, actions.dtype)).dtype

    @property
    def recurrent(self) -> bool:
        return self.state_size > 0

    def forward(self, observation: torch.Tensor, state: Optional[torch.Tensor] = None
                ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        x = observation.reshape((-1,) + self.observation_shape).to(self.stored_dtype)
        if self.normalizer is not None:
            x = self.normalizer(x)
        if self.sac:
            rows = self.network.mode(x)
        else:
            rows, state = self.network.mode(x, state)
        action = self._env_action(rows)
        return action if state is None else (action, state)

    def _env_action(self, rows: torch.Tensor) -> torch.Tensor:
        """Stored rows [B, dim] as the env's actions (``envs.spaces.EnvActions``'s
        arithmetic; the mode's choice indices are in range already)."""
        if self.discrete:
            return (rows.to(torch.int64) + self.start).reshape((-1,) + self.action_shape)
        unit = rows.clamp(-1.0, 1.0).to(torch.float64)
        scaled = self.low + (unit + 1.0) * 0.5 * (self.high - self.low)
        return scaled.reshape((-1,) + self.action_shape).to(self.action_dtype)

    def example_inputs(self, batch: int = _EXAMPLE_BATCH) -> Tuple[torch.Tensor, ...]:
        """Zero inputs of ``batch`` rows: (observation,) or (observation, state)."""
        observation = torch.from_numpy(np.zeros((batch,) + self.example_shape,
                                                self.example_dtype))
        if not self.recurrent:
            return (observation,)
        return observation, torch.zeros((batch, self.state_size), dtype=torch.float32)


def check_format(format: str) -> None:
    """Raise ``ExportError`` unless ``format`` is one of ``FORMATS`` and its
    packages are installed (ONNX: onnx and onnxscript; the message names the
    extra that installs them)."""
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}: use one of "
                          f"{', '.join(FORMATS)}")
    if format == "onnx":
        missing = [p for p in ONNX_PACKAGES if importlib.util.find_spec(p) is None]
        if missing:
            raise ExportError(f"ONNX export needs the packages {', '.join(ONNX_PACKAGES)} "
                              f"(and onnxruntime to run the file); not installed: "
                              f"{', '.join(missing)}. Install them with {EXPORT_EXTRA}")


def describe_io(run: "LoadedRun") -> str:
    """The inputs and outputs of ``run``'s exported file, one line each, e.g.
    ``input observation [B, 4] float32`` and ``output action [B] int64``."""
    def shape(dims: Tuple[int, ...]) -> str:
        return "[" + ", ".join(["B"] + [str(n) for n in dims]) + "]"

    actions = EnvActions(run.action_space, run.action_spec)
    action_dtype = "int64" if actions.spec.discrete else actions.dtype.name
    lines = [f"input {INPUT_NAMES[0]} {shape(tuple(run.observation_space.shape))} "
             f"{np.dtype(run.observation_space.dtype).name}"]
    state_size = int(getattr(run.policy, "state_size", 0))
    if state_size:
        lines.append(f"input {INPUT_NAMES[1]} {shape((state_size,))} float32 (zeros at an "
                     "episode's start)")
    lines.append(f"output {OUTPUT_NAMES[0]} {shape(actions.shape)} {action_dtype}")
    if state_size:
        lines.append(f"output {OUTPUT_NAMES[1]} {shape((state_size,))} float32")
    return "\n".join(lines)


def export_policy(run: "LoadedRun", path: str, format: str = "torchscript") -> str:
    """Write the deterministic policy of ``run`` (a ``LoadedRun``) to ``path``
    as ``format`` ("torchscript" or "onnx"); returns the file's absolute path.
    Missing folders of ``path`` are created.

    Raises:
        ExportError: an unknown format, or ONNX without its packages (the
            message names the extra to install).
        OSError: the file cannot be written (it names the file).
    """
    check_format(format)
    module = DeterministicActor(run).eval()
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = _onnx_bytes(module) if format == "onnx" else None
    with atomic_write(path, "wb") as f:
        if data is not None:
            f.write(data)
        else:
            torch.jit.save(_traced(module), f)
    return path


def _traced(module: DeterministicActor) -> torch.jit.ScriptModule:
    with torch.no_grad(), warnings.catch_warnings():
        # torch.jit.trace warns that TorchScript is deprecated (module doc).
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.trace(module, module.example_inputs())


def _onnx_bytes(module: DeterministicActor) -> bytes:
    """The serialized ONNX model of ``module``, its batch dimension dynamic."""
    inputs = module.example_inputs()
    batch = torch.export.Dim("batch")
    with torch.no_grad(), warnings.catch_warnings(), _quiet_loggers(_EXPORTER_LOGGERS):
        warnings.simplefilter("ignore")  # deprecations inside the exporter
        program = torch.onnx.export(
            module, inputs, dynamo=True, verbose=False,
            input_names=list(INPUT_NAMES[:len(inputs)]),
            output_names=list(OUTPUT_NAMES[:len(inputs)]),
            dynamic_shapes=tuple({0: batch} for _ in inputs))
    return program.model_proto.SerializeToString()


# The exporter's loggers: notes on optional packages (torchvision) and the
# optimizer's passes, INFO lines that a command's logging (absl's) would print.
_EXPORTER_LOGGERS = ("torch.onnx", "torch.export", "onnxscript", "onnx_ir")


@contextlib.contextmanager
def _quiet_loggers(names: Sequence[str]) -> Iterator[None]:
    """The loggers ``names`` (and their children) pass only ERRORs in the block."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)

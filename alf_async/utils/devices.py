"""The learners' torch device: one rule for ``PPOLearner.device`` and
``SACLearner.device``, and how tensors cross between the host and it.

Values (``DEVICE_VALUES``):

- "cpu": the learner trains on the CPU (the default);
- "cuda": CUDA device 0 (torch's current device);
- "cuda:N": CUDA device N (0 <= N < the number of CUDA devices);
- "auto": "cuda" where this machine has a CUDA device, else "cpu".

Actors always act on the CPU, whatever the learner's device.

``resolve_device`` checks a value against this machine before anything is
built (the run's parts call it before an env or a process is started) and
raises a ``ConfigError`` naming the binding, the value and what the machine
has. ``fall_back_to_cpu`` lets a run that trained on a GPU resume on a machine
without one: a device that the run's saved config.gin binds (and this
command's own ``--gin_param`` does not) is rebound to "cpu", and the caller
logs what it did. Checkpoints hold CPU tensors and are loaded with
``map_location="cpu"``, so they load anywhere.

Moving data: ``to_device`` copies host arrays to the device through pinned
memory with ``non_blocking`` copies (where the device is not the CPU), so
that the host queues the copy and goes on instead of waiting for the GPU;
``to_host`` brings a set of tensors back in one copy per dtype (one wait for
the GPU instead of one per tensor).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from alf_async.utils.validation import ConfigError

DEVICE_VALUES = ("cpu", "cuda", "cuda:N", "auto")
#: The gin binding of each algorithm's learner device (``Trainer.algorithm``).
DEVICE_BINDINGS = {"ppo": "PPOLearner.device", "sac": "SACLearner.device"}
_FORM = re.compile(r"^(cpu|auto|cuda(:(\d+))?)$")


def cuda_device_count() -> int:
    """How many CUDA devices torch sees on this machine (0 without CUDA)."""
    try:
        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001  (a broken driver counts as none)
        return 0


def describe_machine() -> str:
    """What this machine has, for messages: "this machine has no CUDA device
    (...)", "this machine has CUDA device 0" or "... CUDA devices 0..3"."""
    count = cuda_device_count()
    if count == 0:
        why = (f"torch {torch.__version__} is built without CUDA" if torch.version.cuda is None
               else "torch sees none")
        return f"this machine has no CUDA device ({why})"
    if count == 1:
        return "this machine has CUDA device 0"
    return f"this machine has CUDA devices 0..{count - 1}"


def resolve_device(owner: str, value: Any) -> torch.device:
    """The torch device ``owner.device = value`` names on this machine.

    Raises ``ConfigError`` naming ``owner.device``, the value and what this
    machine has, if the value is not one of ``DEVICE_VALUES`` or names a CUDA
    device the machine does not have.
    """
    binding = f"{owner}.device"
    match = _FORM.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(f"{binding} must be 'cpu', 'cuda', 'cuda:N' (N: a CUDA device's "
                          f"index) or 'auto' (CUDA where there is one), got {value!r}; "
                          f"{describe_machine()}")
    if value == "cpu":
        return torch.device("cpu")
    count = cuda_device_count()
    if value == "auto":
        return torch.device("cuda" if count else "cpu")
    index = int(match.group(3) or 0)
    if index >= count:
        raise ConfigError(f"{binding}={value!r} names a CUDA device this machine does not "
                          f"have: {describe_machine()}. Bind {binding}='cpu' (or 'auto': "
                          f"CUDA where there is one)")
    return torch.device("cuda", index)


def _binding_name(param: str) -> str:
    """The configurable and parameter a ``--gin_param`` binds ("A.b = v" -> "A.b";
    a scope or module path before them is dropped)."""
    name = param.split("=", 1)[0].strip()
    return ".".join(name.split("/")[-1].split(".")[-2:])


def fall_back_to_cpu(user_params: Sequence[str]) -> List[str]:
    """Rebind to "cpu" every learner device that the parsed config binds to
    a device this machine does not have, unless ``user_params`` (this
    command's own ``--gin_param`` bindings) bind it; returns one sentence per
    rebinding, for the log.

    Call it only where the config is the run's saved one (a resume): a
    device the user asks for now is checked, never replaced.
    """
    import gin

    asked = {_binding_name(p) for p in user_params}
    done = []
    for binding in DEVICE_BINDINGS.values():
        if binding in asked:
            continue
        try:
            value = gin.query_parameter(binding)
        except ValueError:
            continue  # not bound: the default, "cpu"
        try:
            resolve_device(binding.split(".")[0], value)
        except ConfigError:
            if not (isinstance(value, str) and value.startswith("cuda")):
                continue  # not a device that is missing here: the check reports it
            gin.bind_parameter(binding, "cpu")
            done.append(f"{binding}={value!r} in the run's saved config names a CUDA "
                        f"device and {describe_machine()}: this resumed run trains on the "
                        f"CPU (the checkpoint loads there); give --gin_param="
                        f"\"{binding}='...'\" to choose the device yourself")
    return done


def to_device(value: Union[np.ndarray, torch.Tensor], device: torch.device) -> torch.Tensor:
    """``value`` (an array or a CPU tensor) as a tensor on ``device``.

    On the CPU it shares the array's memory where it can (no copy). On a CUDA
    device the host data is staged in pinned (page-locked) memory and copied
    with ``non_blocking=True``: the host only queues the copy; kernels queued
    after it on the same stream see the data, and torch's pinned-memory cache
    keeps the staging buffer until the copy is done.
    """
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if device.type == "cpu" or tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def to_host(tensors: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """CPU copies of ``tensors`` (e.g. a ``state_dict`` on a GPU), brought back
    with one copy per dtype: a GPU copy to the host waits for the kernels
    before it, and one wait costs less than one per tensor. CPU tensors are
    returned as they are."""
    out: Dict[str, torch.Tensor] = {}
    by_dtype: Dict[torch.dtype, List[str]] = {}
    for name, t in tensors.items():
        if t.device.type == "cpu":
            out[name] = t
        else:
            by_dtype.setdefault(t.dtype, []).append(name)
    for dtype, names in by_dtype.items():
        flat = torch.cat([tensors[n].detach().reshape(-1) for n in names]).cpu()
        for name, part in zip(names, flat.split([tensors[n].numel() for n in names])):
            out[name] = part.view(tensors[name].shape)
    return {name: out[name] for name in tensors}


def sampling_generator(device: torch.device, seed: int) -> Optional[torch.Generator]:
    """A random generator on ``device`` seeded with ``seed`` (so that sampling
    on a GPU draws there, with no host-side draw and copy); None on the
    "meta" device, which has none (it only carries shapes, in tests)."""
    if device.type == "meta":
        return None
    return torch.Generator(device=device).manual_seed(int(seed))

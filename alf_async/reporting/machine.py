"""A description of the machine a study runs on (CPU, GPU, library versions).

``describe_machine()`` returns plain JSON-serializable values so that a sweep can
store it (``machine.json``) next to its runs and a report built later, or on
another machine, still names the machine that produced the numbers.
"""

from __future__ import annotations

import os
import platform
from typing import Dict, Optional

from alf_async.utils.cpuinfo import CPUINFO_PATH, cpu_fields
from alf_async.utils.process import usable_cores

PACKAGES = ("torch", "gymnasium", "pybullet", "numpy", "gin-config", "alf_async")


# The vector and matrix extensions that change which float kernels torch runs,
# narrowest first; cpu_model() names the ones the CPU has.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_model(cpuinfo_path: str = CPUINFO_PATH) -> str:
    """The CPU's model, precise enough to tell two CPUs apart whose float
    kernels round differently.

    On Linux: /proc/cpuinfo's model name, then its x86 family / model /
    stepping and the extensions of ``KERNEL_FLAGS`` it has, e.g.
    ``"AMD EPYC (family 23 model 49 stepping 0; avx2)"``. A virtual machine
    often reports a bare name ("AMD EPYC") for CPUs of different generations:
    the numbers and flags are what differ. Elsewhere: platform.processor().
    """
    fields = cpu_fields(cpuinfo_path)
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine() or "unknown"
    ids = " ".join(f"{label} {fields[key]}" for key, label in
                   (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"))
                   if key in fields)
    flags = set(fields.get("flags", "").split())
    extensions = ", ".join(flag for flag in KERNEL_FLAGS if flag in flags)
    details = "; ".join(part for part in (ids, extensions) if part)
    return f"{name} ({details})" if details else name


def package_version(name: str) -> Optional[str]:
    """Installed version of distribution ``name`` (None if not installed)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        if name == "alf_async":
            import alf_async

            return alf_async.__version__
        return None


def gpu_names() -> list:
    """Names of the CUDA GPUs torch can see ([] without CUDA)."""
    try:
        import torch

        if torch.cuda.is_available():
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001  (a broken CUDA set-up is reported as no GPU)
        pass
    return []


def describe_machine() -> Dict[str, object]:
    """CPU count and model, memory, GPUs, OS and library versions."""
    try:
        import psutil

        memory_gb = round(psutil.virtual_memory().total / 2 ** 30, 1)
    except ImportError:
        memory_gb = None
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable_cores(),
        "cpu_model": cpu_model(),
        "memory_gb": memory_gb,
        "gpus": gpu_names(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: package_version(name) for name in PACKAGES},
    }

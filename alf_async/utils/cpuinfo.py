"""The first processor's entry of Linux's /proc/cpuinfo, as key -> value."""

from __future__ import annotations

from typing import Dict, FrozenSet

CPUINFO_PATH = "/proc/cpuinfo"


def cpu_fields(cpuinfo_path: str = CPUINFO_PATH) -> Dict[str, str]:
    """The first processor's block of ``cpuinfo_path`` (keys lower-cased,
    e.g. "model name", "cpu family", "flags"); {} where the file is missing
    (not Linux). The first block describes them all on the machines this
    library runs on."""
    fields: Dict[str, str] = {}
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags(cpuinfo_path: str = CPUINFO_PATH) -> FrozenSet[str]:
    """The CPU's feature flags (``avx2``, ``avx512_bf16``, ...); empty where
    unknown."""
    return frozenset(cpu_fields(cpuinfo_path).get("flags", "").split())

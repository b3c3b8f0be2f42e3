"""Human-readable durations and counts for console lines and reports."""

from __future__ import annotations

import math
from typing import Optional

MISSING = "-"


def format_duration(seconds: Optional[float], missing: str = MISSING) -> str:
    """'0.4s', '42s', '3m05s' or '1h40m'; ``missing`` for None or non-finite."""
    if seconds is None or not math.isfinite(seconds):
        return missing
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    h, m = divmod(minutes, 60)
    return f"{h}h{m:02d}m"


def format_count(n: float) -> str:
    """1234567 -> '1.23M', 45600 -> '45.60k', 12 -> '12'."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"

"""CSV and markdown tables (pure functions).

Markdown cells are formatted text; CSV cells keep full precision, with missing
values written as empty cells.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any, Optional, Sequence

from alf_async.utils.formatting import MISSING


def fmt_number(value: Optional[float], digits: int = 2) -> str:
    """``value`` with ``digits`` decimals; ``MISSING`` for None or non-finite."""
    if value is None or isinstance(value, bool):
        return MISSING
    value = float(value)
    if not math.isfinite(value):
        return MISSING
    return f"{value:.{digits}f}"


def fmt_seconds(value: Optional[float]) -> str:
    """Seconds with 2 decimals from 1 s up, 3 significant digits below (0.0364)."""
    if value is None or not math.isfinite(float(value)):
        return MISSING
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:#.3g}"


def fmt_int(value: Optional[float]) -> str:
    return MISSING if value is None else f"{int(value)}"


def _escape(cell: Any) -> str:
    return str(cell).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                   numeric: Optional[Sequence[bool]] = None) -> str:
    """A GitHub-flavoured markdown table; ``numeric`` columns are right-aligned."""
    numeric = list(numeric) if numeric is not None else [False] * len(headers)
    lines = ["| " + " | ".join(_escape(h) for h in headers) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_escape(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def csv_text(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """CSV text; None becomes an empty cell, floats keep full precision."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    for row in rows:
        writer.writerow(["" if c is None or (isinstance(c, float) and not math.isfinite(c))
                         else c for c in row])
    return out.getvalue()

"""bench/soak.py's verdicts on the resources it sampled: does anything grow?

Samples taken during the warm-up, and while the run is unsettled by a fault
(from the fault until ``--settle_s`` seconds after the run is whole again: a
restarted process warms up again, a stopped one holds still), are left out. The baseline is the median of the first quarter of the samples
kept, the final value the median of the last quarter; growth is their
difference in percent of the baseline, per role and for the whole run, for
RSS, open fds, threads, shared-memory bytes and the number of processes.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Sequence, Tuple

from bench.soak_resources import FIGURES, ROLES, ResourceSample


def settled(samples: Sequence[ResourceSample], unsettled: Sequence[Tuple[float, float]],
            warmup_s: float) -> List[ResourceSample]:
    """The samples after the warm-up and outside every (start, end) window of
    ``unsettled`` (soak seconds)."""
    return [s for s in samples if s.t_s >= warmup_s
            and not any(start <= s.t_s < end for start, end in unsettled)]


def growth_pct(base: float, final: float) -> float:
    """(final - base) / base in percent; 0 when both are 0, inf from a 0 base."""
    if base == 0:
        return 0.0 if final == 0 else float("inf")
    return (final - base) / base * 100.0


def _ends(values: List[float]) -> Dict[str, float]:
    quarter = max(1, len(values) // 4)
    base, final = statistics.median(values[:quarter]), statistics.median(values[-quarter:])
    return {"baseline": base, "final": final, "growth_pct": growth_pct(base, final)}


def resource_report(kept: Sequence[ResourceSample], target_pct: float) -> Dict:
    """Growth of every figure (per role and total) over the kept samples, and
    the verdicts: RSS grows less than ``target_pct``; fds, threads,
    shared-memory bytes and processes stay flat (grow less than
    ``target_pct`` too: a leak grows without bound, noise does not)."""
    if len(kept) < 2:
        return {"samples_kept": len(kept), "verdicts": {}, "problem":
                "fewer than 2 samples after the warm-up and away from faults"}
    out: Dict = {"samples_kept": len(kept), "total": {}, "roles": {}}
    for figure in FIGURES:
        out["total"][figure] = _ends([s.total(figure) for s in kept])
    for key, values in (("shm_bytes", [s.shm_bytes for s in kept]),
                        ("processes", [s.processes for s in kept])):
        out["total"][key] = _ends(values)
    for role in ROLES:
        if any(s.roles[role]["processes"] for s in kept):
            out["roles"][role] = {f: _ends([s.roles[role][f] for s in kept])
                                  for f in FIGURES + ("processes",)}
    total = out["total"]
    out["verdicts"] = {
        "rss_growth_below_target": total["rss_mib"]["growth_pct"] < target_pct,
        "fds_flat": total["fds"]["growth_pct"] < target_pct,
        "threads_flat": total["threads"]["growth_pct"] < target_pct,
        "shm_flat": total["shm_bytes"]["growth_pct"] < target_pct,
        "processes_flat": total["processes"]["growth_pct"] < target_pct,
    }
    return out

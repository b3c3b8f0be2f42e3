"""The sync/async EPS study: cells per (K, N), the EPS table and the time split.

A *cell* gathers the runs with the same K (envs per actor) and N (actors). Its T
is the mean of the runs' mean T (see ``run_metrics``), its EPS = K / T. N = 1 is
synchronous training, N >= 2 asynchronous. The time split shows where an
iteration's time goes, with U = actor unroll time and L = learner train time per
iteration:

- sync: an iteration costs about U + L (the learner waits while the actor
  unrolls, the actor waits while the learner trains);
- async: N actors unroll while the learner trains, so an iteration costs about
  max(L, (U + L) / N): the *ideal T* column. When the learner rarely waits for a
  batch (under ``LEARNER_IDLE_FRACTION`` of T) it is the bottleneck and more
  actors cannot help; when it waits longer, the actors are the bottleneck (more
  actors or env workers can help).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from alf_async.reporting.run_metrics import RunSummary
from alf_async.reporting.tables import MISSING, fmt_number, fmt_seconds

# Below this share of T spent waiting for batches, the learner is the bottleneck.
LEARNER_IDLE_FRACTION = 0.2


@dataclass
class Cell:
    """The runs of one (K, N) pair, averaged."""

    num_envs: int
    num_actors: int
    runs: int
    T: Optional[float]
    EPS: Optional[float]
    actor_unroll_s: Optional[float]
    actor_wait_s: Optional[float]
    learner_train_s: Optional[float]
    learner_wait_s: Optional[float]
    lag: Optional[float]
    warmup_fallback: bool

    @property
    def ideal_T(self) -> Optional[float]:
        """U + L for sync, max(L, (U + L) / N) for async."""
        U, L = self.actor_unroll_s, self.learner_train_s
        if U is None or L is None:
            return None
        return U + L if self.num_actors == 1 else max(L, (U + L) / self.num_actors)

    @property
    def learner_idle_fraction(self) -> Optional[float]:
        """Learner wait / T: the share of an iteration the learner waits for a batch."""
        if self.T is None or self.learner_wait_s is None or self.T <= 0:
            return None
        return self.learner_wait_s / self.T


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def make_cells(summaries: Sequence[RunSummary]) -> List[Cell]:
    """One cell per (K, N) among runs with throughput data, sorted by K then N."""
    groups: Dict[Tuple[int, int], List[RunSummary]] = {}
    for s in summaries:
        if s.num_envs is None or s.num_actors is None or s.mean_T is None:
            continue
        groups.setdefault((s.num_envs, s.num_actors), []).append(s)
    cells = []
    for (K, N), runs in sorted(groups.items()):
        T = _mean([r.mean_T for r in runs])
        cells.append(Cell(
            num_envs=K, num_actors=N, runs=len(runs), T=T,
            EPS=K / T if T else None,
            actor_unroll_s=_mean([r.actor_unroll_s for r in runs]),
            actor_wait_s=_mean([r.actor_wait_s for r in runs]),
            learner_train_s=_mean([r.learner_train_s for r in runs]),
            learner_wait_s=_mean([r.learner_wait_s for r in runs]),
            lag=_mean([r.mean_lag for r in runs]),
            warmup_fallback=any(r.warmup_fallback for r in runs)))
    return cells


def async_actor_counts(cells: Sequence[Cell]) -> List[int]:
    return sorted({c.num_actors for c in cells if c.num_actors >= 2})


def eps_table(cells: Sequence[Cell]) -> Tuple[List[str], List[List[str]]]:
    """(headers, rows) of ``K | sync T (s) | sync EPS | async T (s) | async EPS |
    async/sync EPS``; with several async N, one group of columns per N."""
    async_ns = async_actor_counts(cells)
    by_key = {(c.num_envs, c.num_actors): c for c in cells}
    headers = ["K", "sync T (s)", "sync EPS"]
    for n in async_ns:
        tag = "async" if len(async_ns) == 1 else f"async N={n}"
        headers += [f"{tag} T (s)", f"{tag} EPS", f"{tag}/sync EPS"]
    rows = []
    for K in sorted({c.num_envs for c in cells}):
        sync = by_key.get((K, 1))
        row = [str(K), fmt_seconds(sync.T if sync else None),
               fmt_number(sync.EPS if sync else None, 2)]
        for n in async_ns:
            cell = by_key.get((K, n))
            ratio = (cell.EPS / sync.EPS if cell and sync and cell.EPS and sync.EPS
                     else None)
            row += [fmt_seconds(cell.T if cell else None),
                    fmt_number(cell.EPS if cell else None, 2), fmt_number(ratio, 2)]
        row_cells = [by_key.get((K, n)) for n in [1] + async_ns]
        if any(c is not None and c.warmup_fallback for c in row_cells):
            row[0] += " *"
        rows.append(row)
    return headers, rows


def bottleneck(cell: Cell) -> str:
    """A short reading of the time split of one cell."""
    idle = cell.learner_idle_fraction
    if idle is None:
        return MISSING
    if cell.num_actors == 1:
        return f"sync: learner waits {idle:.0%} of T (the unroll)"
    if idle < LEARNER_IDLE_FRACTION:
        return f"learner-bound (learner waits only {idle:.0%} of T)"
    return f"actor-bound (learner waits {idle:.0%} of T)"


def time_split_table(cells: Sequence[Cell]) -> Tuple[List[str], List[List[str]]]:
    """(headers, rows): per (K, N) the mean time split of an iteration."""
    headers = ["K", "N", "T (s)", "actor unroll U (s)", "actor wait (s)",
               "learner train L (s)", "learner wait (s)", "lag", "ideal T (s)", "reading"]
    rows = []
    for c in cells:
        rows.append([str(c.num_envs), str(c.num_actors), fmt_number(c.T, 3),
                     fmt_number(c.actor_unroll_s, 3), fmt_number(c.actor_wait_s, 3),
                     fmt_number(c.learner_train_s, 3), fmt_number(c.learner_wait_s, 3),
                     fmt_number(c.lag, 2), fmt_number(c.ideal_T, 3), bottleneck(c)])
    return headers, rows

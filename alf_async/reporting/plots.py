"""PNG figures of the EPS report (matplotlib, Agg backend, no display needed).

Figures are drawn on ``matplotlib.figure.Figure`` objects with an Agg canvas
(not pyplot), so that nothing global changes and no window opens. Every figure is ``FIGSIZE`` inches at
``DPI``: ``PIXELS`` = (600, 400) pixels.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from alf_async.reporting.eps_study import Cell

FIGSIZE = (6.0, 4.0)
DPI = 100
PIXELS = (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))

# (env_steps, wall_time_s, mean return) points of one run
Curve = List[Tuple[int, float, float]]


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)  # render with Agg whatever pyplot's backend is
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    return path


def plot_eps_vs_k(cells: Sequence[Cell], path: str, title: str = "") -> str:
    """EPS against K, one line per N (N = 1: sync)."""
    fig, ax = _figure()
    for n in sorted({c.num_actors for c in cells}):
        points = sorted((c.num_envs, c.EPS) for c in cells
                        if c.num_actors == n and c.EPS is not None)
        if not points:
            continue
        label = "sync (N=1)" if n == 1 else f"async (N={n})"
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xlabel("K (envs per actor)")
    ax.set_ylabel("EPS = K / T (envs/s)")
    ax.set_ylim(bottom=0)  # ratios read honestly only from a zero baseline
    ax.set_title(title or "Throughput: EPS vs K")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, path)


def time_axis(max_seconds: float) -> Tuple[float, str]:
    """(divisor, unit) for a wall-clock axis reaching ``max_seconds``."""
    if max_seconds >= 2 * 3600:
        return 3600.0, "h"
    if max_seconds >= 120:
        return 60.0, "min"
    return 1.0, "s"


def plot_return_curves(curves: Dict[str, Curve], path: str, x: str = "time",
                       title: str = "") -> str:
    """Mean episode return against wall-clock time (``x='time'``) or env steps."""
    if x not in ("time", "steps"):
        raise ValueError(f"x must be 'time' or 'steps', got {x!r}")
    fig, ax = _figure()
    max_time = max((p[1] for curve in curves.values() for p in curve), default=0.0)
    divisor, unit = time_axis(max_time)
    for name, curve in curves.items():
        if not curve:
            continue
        xs = [p[1] / divisor for p in curve] if x == "time" else [p[0] for p in curve]
        ax.plot(xs, [p[2] for p in curve], label=name)
    ax.set_xlabel(f"wall-clock time ({unit})" if x == "time" else "env steps")
    ax.set_ylabel("mean episode return")
    ax.set_title(title or ("Return vs wall-clock time" if x == "time"
                           else "Return vs env steps"))
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return _save(fig, path)

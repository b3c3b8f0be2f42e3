"""The search's figure, ``<root_dir>/search.png`` (matplotlib, Agg backend):

- left: each trial's objective against its number (complete: dots, pruned:
  crosses at the objective it had when stopped), the best so far as a line;
- right: each trial's curve (the objective's metric against env steps), pruned
  trials dashed and ending in a cross.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from alf_async.sweep.objective import Curve

SEARCH_PLOT = "search.png"


def plot_search(trials: Sequence[str], states: Dict[str, str],
                objectives: Dict[str, Optional[float]], curves: Dict[str, Curve],
                metric: str, objective: str, path: str) -> str:
    """Draw the figure (see the module docstring) of ``trials`` (names in
    number order, e.g. "trial_0003"); returns ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 4.0), dpi=100)
    FigureCanvasAgg(fig)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    best: List[float] = []
    running_best = None
    for number, name in enumerate(trials):
        value, state = objectives.get(name), states.get(name, "")
        if value is not None and state == "complete":
            left.plot(number, value, "o", color="tab:blue")
            running_best = value if running_best is None else max(running_best, value)
        elif value is not None and state == "pruned":
            left.plot(number, value, "x", color="tab:red")
        best.append(running_best if running_best is not None else float("nan"))
    left.plot(range(len(trials)), best, "-", color="tab:green", label="best so far")
    left.plot([], [], "o", color="tab:blue", label="complete")
    left.plot([], [], "x", color="tab:red", label="pruned")
    from matplotlib.ticker import MaxNLocator

    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlabel("trial")
    left.set_ylabel(f"{objective} {metric}")
    left.set_title("Objective over trials")
    left.legend(fontsize="small")
    left.grid(True, alpha=0.3)
    for name in trials:
        curve = curves.get(name) or []
        if not curve:
            continue
        pruned = states.get(name) == "pruned"
        steps, values = [p[0] for p in curve], [p[1] for p in curve]
        line, = right.plot(steps, values, "--" if pruned else "-", linewidth=1,
                           label=name.replace("trial_", "#"))
        if pruned:
            right.plot(steps[-1], values[-1], "x", color=line.get_color())
    right.set_xlabel("env steps")
    right.set_ylabel(metric)
    right.set_title("Trials' curves (pruned: dashed, x)")
    right.grid(True, alpha=0.3)
    if len(trials) <= 20 and right.get_legend_handles_labels()[0]:
        right.legend(fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path

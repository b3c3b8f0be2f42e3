"""bench/soak.py's figure: the run's resources against time, faults marked."""

from __future__ import annotations

from typing import Dict, List, Sequence

from bench.soak_resources import ResourceSample

# One colour per fault kind (matplotlib's default cycle, by name).
_COLOURS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6")


def plot_soak(samples: Sequence[ResourceSample], faults: List[Dict], path: str,
              title: str) -> None:
    """Four panels against minutes of the soak: RSS (MiB) per role and in
    total, open fds, threads, MiB of the run's shared-memory blocks and its
    process count; a vertical line at each fault, coloured by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.t_s / 60.0 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    roles = [r for r in samples[0].roles if any(s.roles[r]["processes"] for s in samples)]
    for role in roles:
        axes[0].plot(minutes, [s.roles[role]["rss_mib"] for s in samples], label=role)
    axes[0].plot(minutes, [s.total("rss_mib") for s in samples], "k-", label="total")
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].plot(minutes, [s.total("fds") for s in samples], label="open fds")
    axes[1].plot(minutes, [s.total("threads") for s in samples], label="threads")
    axes[1].set_ylabel("count")
    axes[2].plot(minutes, [s.shm_bytes / 2 ** 20 for s in samples], label="/dev/shm blocks")
    axes[2].set_ylabel("shared memory (MiB)")
    axes[3].plot(minutes, [s.processes for s in samples], label="processes")
    axes[3].set_ylabel("processes")
    axes[3].set_xlabel("minutes of the soak")
    kinds = sorted({f["kind"] for f in faults})
    for fault in faults:
        colour = _COLOURS[kinds.index(fault["kind"]) % len(_COLOURS)]
        for ax in axes:
            ax.axvline(fault["at_s"] / 60.0, color=colour, linestyle=":", linewidth=1)
    for kind in kinds:  # legend entries for the fault lines
        axes[3].plot([], [], color=_COLOURS[kinds.index(kind) % len(_COLOURS)],
                     linestyle=":", label=kind)
    for ax in axes:
        ax.legend(fontsize=7, loc="upper left", ncol=3)
        ax.set_ylim(bottom=0)
    axes[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

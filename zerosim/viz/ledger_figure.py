"""Memory per rank from its ledger, phase by phase: what each rank holds at the end of each phase
(stacked by kind), and a black tick at the phase's peak — activations and communication buffers come
and go inside a phase, so the peak can stand above what the phase ends holding.
"""

from __future__ import annotations

from zerosim.viz.palette import PEAK_TICK, kind_colour, kind_label, kind_order


def ledger_figure(cluster, since: int = 0, ax=None, title: str = "What each GPU holds, phase by phase"):
    """Bars per (phase, rank) from `MemoryLedger.by_phase(since)`: bytes by kind at the phase's end, and
    a black tick (gid "peak") at the phase's peak. Returns the Axes; the legend sits outside them."""
    import matplotlib.pyplot as plt

    per_rank = [r.ledger.by_phase(since) for r in cluster.ranks]
    names = [p[0] or "(setup)" for p in per_rank[0]]
    order = kind_order(k for phases in per_rank for (_, _, holds) in phases for k in holds)
    n = len(cluster.ranks)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) * n + 3.5), 4.2), dpi=110)
    width = 0.8 / n
    drawn = set()
    xs, labels = [], []
    for r, phases in enumerate(per_rank):
        for j, (_, peak, holds) in enumerate(phases):
            x, bottom = j + (r - (n - 1) / 2) * width, 0
            for kind in order:
                h = holds.get(kind, 0)
                if not h:
                    continue
                (bar,) = ax.bar(x, h, width * 0.9, bottom=bottom, color=kind_colour(kind),
                                label=kind_label(kind) if kind not in drawn else None)
                bar.set_gid(f"kind:{kind}")
                drawn.add(kind)
                bottom += h
            tick = ax.hlines(peak, x - width * 0.45, x + width * 0.45, color=PEAK_TICK, lw=2.2,
                             label="peak within the phase" if (r, j) == (0, 0) else None)
            tick.set_gid("peak")
            xs.append(x)
            labels.append(f"GPU {cluster.ranks[r].index}")
    ax.set_xticks(xs, labels, minor=True, fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.tick_params(axis="x", which="major", pad=16, length=0)
    ax.set_ylabel("bytes")
    ax.set_title(title)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax

"""Memory per rank from its ledger: stacked bars of bytes by kind, one group of bars per phase."""

from __future__ import annotations


def ledger_figure(cluster, since: int = 0, ax=None, title: str = "What each rank holds at the peak of each phase"):
    """Bars per (phase, rank): bytes live by kind at the moment of that phase's peak (from the ledger)."""
    import matplotlib.pyplot as plt

    phases = [r.ledger.peaks_by_phase(since) for r in cluster.ranks]
    names = [p[0] or "(setup)" for p in phases[0]]
    kinds = sorted({k for rank in phases for (_, holds) in rank for k in holds})
    n = len(cluster.ranks)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 * len(names) * n + 2, 4))
    width = 0.8 / n
    for r, rank_phases in enumerate(phases):
        for j, (phase, holds) in enumerate(rank_phases):
            peak = sum(holds.values())
            x, bottom = j + (r - (n - 1) / 2) * width, 0
            for c, kind in enumerate(kinds):
                h = holds.get(kind, 0)
                ax.bar(x, h, width * 0.9, bottom=bottom, color=f"C{c % 10}", label=kind if (r, j) == (0, 0) else None)
                bottom += h
            ax.text(x, -0.02 * max(1, peak), f"r{cluster.ranks[r].index}", ha="center", va="top", fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel("bytes")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    return ax

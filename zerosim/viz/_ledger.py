"""Memory per rank from its ledger, phase by phase: what each rank holds at the end of each phase
(stacked by kind), and a black tick at the phase's peak — activations and communication buffers come
and go inside a phase, so the peak can stand above what the phase ends holding.
"""

from __future__ import annotations

from zerosim.viz._palette import PEAK_TICK, kind_colour, kind_label, kind_order


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


def stage_peaks_figure(clusters: dict, rank: int = 0, title: str = ""):
    """One panel per stage, `{panel title: cluster}` after the same step, on one shared byte axis: for each phase
    of rank `rank`'s ledger, what was live at the phase's peak moment (`MemoryLedger.peaks_by_phase`), stacked by
    kind (gids "kind:<kind>") and labelled with its total; the stage's highest bar labelled "peak N B" (gid "peak");
    a dashed line at what the rank rests at after the step (gid "resting"), its bytes in the panel's title.

    Why not the end of each phase: at ZeRO-1 seed 004's rank rests at 40 B after every phase, so six bars looked
    the same while the 48 B peak was a tick. One axis for all stages, so 48, 46 and 46 B are read side by side.
    Returns the Figure; the legend sits under the panels."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(clusters), figsize=(3.2 * len(clusters) + 1.0, 4.4), sharey=True,
                             squeeze=False, layout="constrained")
    handles, top = {}, 0
    for ax, (name, cluster) in zip(axes[0], clusters.items()):
        ledger = cluster.ranks[rank].ledger
        phases = ledger.peaks_by_phase()
        totals = [sum(held.values()) for _, held in phases]
        most = max(totals)
        for j, (_, held) in enumerate(phases):
            bottom = 0
            for kind in kind_order(held):
                (bar,) = ax.bar(j, held[kind], 0.6, bottom=bottom, color=kind_colour(kind), edgecolor="white", lw=0.5)
                bar.set_gid(f"kind:{kind}")
                handles.setdefault(kind, bar)
                bottom += held[kind]
            at_peak = bottom == most  # every phase that reaches the step's peak says so
            text = ax.annotate(f"peak {bottom} B" if at_peak else f"{bottom} B", (j, bottom), xytext=(0, 3),
                               textcoords="offset points", ha="center", va="bottom", fontsize=8.5,
                               fontweight="bold" if at_peak else "normal")
            text.set_gid("peak" if at_peak else "total")
        resting = ledger.current()
        line = ax.axhline(resting, color=PEAK_TICK, ls="--", lw=1)
        line.set_gid("resting")
        ax.set_xticks(range(len(phases)), [(p or "(setup)").replace("/", "/\n").replace(" ", "\n") for p, _ in phases],
                      fontsize=8)
        ax.set_xlim(-0.5, len(phases) - 0.5)
        ax.set_title(f"{name}: GPU {cluster.ranks[rank].index}\nrests at {resting} B after the step (dashed)",
                     fontsize=9.5)
        ax.spines[["top", "right"]].set_visible(False)
        top = max(top, max(totals))
    axes[0][0].set_ylim(0, top * 1.15)  # shared by every panel: the stages' bytes side by side
    axes[0][0].set_ylabel("bytes live at the phase's peak")
    order = kind_order(handles)
    fig.legend([handles[k] for k in order], [kind_label(k) for k in order], loc="outside lower center",
               ncol=min(4, len(order)), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig

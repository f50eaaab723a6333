"""The two-tier timeline: one step of each strategy on rank 0, its collectives on the link each one ran over.

Reads `zerosim.analysis.timeline.Timeline`s (the simulated times of the recorded events), never a formula. Each panel
is one strategy; its rows are rank 0's compute stream and its communication stream split by the tier of each call:
"NVLink" when the call's rings stay within nodes, "InfiniBand" when any hop leaves a node (the ring then runs at
InfiniBand's speed: zerosim/cluster/_mesh.py `Groups.tier`). One stream carries both: a call on InfiniBand delays
the NVLink call queued behind it, as on one NCCL stream. Bars take _timeline.py's colours by purpose.
"""

from __future__ import annotations

from zerosim.viz._timeline import COLOURS, EXPOSED, _unit

PURPOSE_COLOURS = {**COLOURS, "replicate grads": "#8cd17d"}  # HSDP's / MiCS's all-reduce across the replicas
ROWS = ("compute", "NVLink (within a node)", "InfiniBand (across nodes)")


def tier_rows(result, rank: int = 0) -> dict:
    """{row: [(start, end, category)]}: rank `rank`'s compute intervals, and its communication intervals by tier."""
    rows = {row: [] for row in ROWS}
    for iv in result.track(rank, "compute"):
        rows[ROWS[0]].append((iv.start, iv.end, iv.category))
    for iv in result.track(rank, "comm"):
        row = ROWS[2] if getattr(iv.event, "tier", "intra-node") == "inter-node" else ROWS[1]
        rows[row].append((iv.start, iv.end, iv.category))
    return rows


def tier_timeline_figure(results: dict, rank: int = 0, title: str | None = None):
    """`{panel title: Timeline}` one above the other on one time axis, rows compute / NVLink / InfiniBand of rank
    `rank`; bars carry gid "<row>:<category>". Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(results), 1, figsize=(12, 0.9 + 1.45 * len(results)), sharex=True, squeeze=False)
    span = max(r.span for r in results.values())
    scale, unit = _unit(span)
    seen = set()
    for ax, (name, result) in zip(axes[:, 0], results.items()):
        for y, (row, bars) in enumerate(tier_rows(result, rank).items()):
            by_cat = {}
            for start, end, cat in bars:
                by_cat.setdefault(cat, []).append((start / scale, (end - start) / scale))
            for cat, spans in by_cat.items():
                ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=PURPOSE_COLOURS.get(cat, "#7f7f7f"),
                               edgecolor="white", linewidth=0.2, gid=f"{row}:{cat}")
                seen.add(cat)
        hidden = [(a / scale, (b - a) / scale) for a, b in result.exposed_intervals(rank)]
        if hidden:
            ax.broken_barh(hidden, (0.38, 0.22), facecolors="none", edgecolor="#d62728", hatch="////", linewidth=0.6)
            seen.add(EXPOSED)
        ax.set_yticks(range(len(ROWS)), ROWS, fontsize=8)
        ax.set_ylim(len(ROWS) - 0.4, -0.6)
        ax.set_xlim(0, span / scale)
        ax.set_title(f"{name}: step {result.step_time / scale:.3g} {unit}, exposed communication "
                     f"{result.exposed_comm[rank] / scale:.3g} {unit}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"time ({unit}), rank {rank}")
    handles = [Patch(facecolor=PURPOSE_COLOURS[c], label=c) for c in PURPOSE_COLOURS if c in seen]
    if EXPOSED in seen:
        handles.append(Patch(facecolor="none", edgecolor="#d62728", hatch="////", label=EXPOSED + " (under compute)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig

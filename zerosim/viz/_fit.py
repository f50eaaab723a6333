"""Will it fit, drawn: one rank's peak by stage, stacked by kind, with the labelled estimates on top, against GPUs.

Reads `costs.measured.measure_by_stage` rows (the meta backend's ledgers at the moment of each stage's peak) and
`costs.overheads` estimates, never a formula. One panel per checkpointing strategy; a memory kind keeps its
colour (_palette.py); each GPU's capacity is a horizontal line named at the right edge.
"""

from __future__ import annotations

from zerosim.viz._palette import kind_colour, kind_label, kind_order

ESTIMATE = "#bdbdbd"  # grey and hatched: estimates, never a ledger kind's colour
GPU_STYLES = ("--", "-.", ":", (0, (5, 1)))


def fit_figure(runs: dict, gpus, ranks: int, reserve: float = 0.05, title: str | None = None):
    """`runs`: {panel title: measure_by_stage rows}; `gpus`: costs.GPU objects. Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from zerosim.analysis.costs import runtime_overheads

    GB = 1e9
    fig, axes = plt.subplots(1, len(runs), figsize=(4.6 * len(runs) + 2.2, 4.4), sharey=True, squeeze=False)
    kinds = kind_order({k for rows in runs.values() for r in rows for k in r["at_peak"]})
    top = max(r["peak"] for rows in runs.values() for r in rows) / GB
    for ax, (name, rows) in zip(axes[0], runs.items()):
        for r in rows:
            bottom = 0.0
            for k in kinds:
                h = r["at_peak"].get(k, 0) / GB
                if h:
                    ax.bar(r["stage"], h, bottom=bottom, color=kind_colour(k), gid=f"kind:{k}", width=0.6)
                bottom += h
            extra = sum(o.bytes for o in runtime_overheads(r["peak"], ranks, r["stage"], None, reserve)) / GB
            ax.bar(r["stage"], extra, bottom=bottom, color=ESTIMATE, hatch="///", edgecolor="white", width=0.6)
            top = max(top, bottom + extra)
        for g, style in zip(gpus, GPU_STYLES):
            ax.axhline(g.capacity / GB, color="black", linestyle=style, linewidth=1)
        ax.set_xticks([r["stage"] for r in rows], [f"ZeRO-{r['stage']}" for r in rows])
        ax.set_title(name, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("one rank at its peak (GB = 1e9 bytes)")
    for ax in axes[0]:
        ax.set_ylim(0, top * 1.08)
    handles = [Patch(color=kind_colour(k), label=kind_label(k)) for k in kinds]
    handles.append(Patch(facecolor=ESTIMATE, hatch="///", edgecolor="white", label="estimates: CUDA, NCCL, allocator"))
    from matplotlib.lines import Line2D

    handles += [
        Line2D([], [], color="black", linestyle=style, label=f"{g.name}: {g.capacity / GB:.1f} GB")
        for g, style in zip(gpus, GPU_STYLES)
    ]
    axes[0][-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig

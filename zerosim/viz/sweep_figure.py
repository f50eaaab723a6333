"""Step time and exposed communication against the number of ranks: the timeline sweep, drawn.

Reads `zerosim.timeline.sweep` rows (simulated steps of the real engine's schedule on the meta backend),
never a formula. One colour per stage, one line style per link, so the two panels read together.
"""

from __future__ import annotations

STAGE_COLOURS = {0: "#7f7f7f", 1: "#dd8452", 2: "#8fb0e0", 3: "#4c72b0"}  # ZeRO-3 takes the params' colour (palette.py)
LINK_STYLES = {"nvlink4": "-", "pcie5": "-.", "ib_ndr": "--", "100gbe": ":"}
LINK_NAMES = {"nvlink4": "NVLink 4", "pcie5": "PCIe 5", "ib_ndr": "InfiniBand NDR", "100gbe": "100 GbE"}


def sweep_figure(rows, title: str | None = None, fits=None, gpu: str | None = None):
    """Two panels over N (log scale): the step's time, and the share of it that is exposed communication.

    `fits`: one bool per row (None: all ran). A configuration that would not fit the GPU is not drawn as a step that
    ran: no line goes through it, only a faint ✗ where its time would be, and the legend says so. Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fits = [True] * len(rows) if fits is None else list(fits)
    ok = {id(r): f for r, f in zip(rows, fits)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    series = sorted({(r.link, r.stage) for r in rows})
    for link, stage in series:
        line = sorted((r for r in rows if r.link == link and r.stage == stage), key=lambda r: r.ranks)
        ran = [r for r in line if ok[id(r)]]
        colour = STAGE_COLOURS.get(stage, "black")
        style = dict(color=colour, linestyle=LINK_STYLES.get(link, "-"), marker="o", markersize=3.5,
                     label=f"ZeRO-{stage}, {LINK_NAMES.get(link, link)}" + ("" if ran else ": ✗ at every N"))
        left.plot([r.ranks for r in ran], [r.step for r in ran], **style)
        right.plot([r.ranks for r in ran], [100 * r.exposed_fraction for r in ran], **style)
        cannot = [r for r in line if not ok[id(r)]]
        if cannot:
            faint = dict(color=colour, marker="x", linestyle="none", markersize=6, alpha=0.45)
            left.plot([r.ranks for r in cannot], [r.step for r in cannot], **faint)
            right.plot([r.ranks for r in cannot], [100 * r.exposed_fraction for r in cannot], **faint)
    ticks = sorted({r.ranks for r in rows})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{n:,}" for n in ticks], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("data-parallel ranks N")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("step time (s)")
    left.set_title("one step, rank 0", fontsize=10)
    right.set_ylabel("exposed communication (% of the step)")
    right.set_ylim(0, 100)
    right.set_title("communication compute could not hide", fontsize=10)
    handles, labels = right.get_legend_handles_labels()
    if not all(fits):
        handles.append(Line2D([], [], color="grey", marker="x", linestyle="none", alpha=0.6))
        labels.append(f"✗ would not fit on one\n{gpu or 'GPU'}: not a step\nthat could run")
    right.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)  # outside
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig

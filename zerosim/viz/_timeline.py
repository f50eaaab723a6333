"""A Gantt chart of a simulated step: one row per (rank, stream), coloured by what each interval was for.

Reads a `zerosim.analysis.timeline.Timeline` (the times of the recorded events), never a formula. Exposed
communication (the communication stream busy while the compute stream idles) is drawn as hatched
red under each rank's compute row.
"""

from __future__ import annotations

# One colour per purpose: warm for compute, cool for communication, so the two streams read apart.
COLOURS = {
    "forward": "#f28e2b",
    "recompute": "#edc948",
    "backward": "#e15759",
    "loss": "#b07aa1",
    "optimizer step": "#9c755f",
    "gather params": "#4e79a7",
    "reduce grads": "#59a14f",
    "refresh params": "#76b7b2",
    "optimizer": "#17becf",
    "check": "#bab0ac",
    "collective": "#7f7f7f",
}
EXPOSED = "exposed communication"
UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def _unit(span: float):
    for scale, name in UNITS:
        if span >= 10 * scale:
            return scale, name
    return UNITS[-1]


def timeline_figure(result, ranks=None, ax=None, title: str | None = None, span: float | None = None):
    """Draw `result` (a `Timeline`): rows "rank r compute" / "rank r comm" for `ranks` (default all up to
    8, else the first 4), bars coloured by purpose, exposed communication hatched. `span`: seconds the time
    axis covers (default the result's own; pass the longest when panels share an axis). Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    n = result.world_size
    if ranks is None:
        ranks = list(range(n)) if n <= 8 else list(range(4))
    ranks = list(ranks)
    span = result.span if span is None else span
    scale, unit = _unit(span)
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.9 + 0.75 * len(ranks)))
    rows, seen = [], set()
    for r in ranks:
        for stream in ("compute", "comm"):
            y = len(rows)
            rows.append(f"rank {r} {stream}")
            by_colour = {}
            for iv in result.track(r, stream):
                by_colour.setdefault(iv.category, []).append((iv.start / scale, (iv.end - iv.start) / scale))
            for cat, bars in by_colour.items():
                ax.broken_barh(
                    bars, (y - 0.35, 0.7), facecolors=COLOURS.get(cat, "#7f7f7f"), edgecolor="white", linewidth=0.3
                )
                seen.add(cat)
            if stream == "compute":
                hidden = [(a / scale, (b - a) / scale) for a, b in result.exposed_intervals(r)]
                if hidden:
                    ax.broken_barh(
                        hidden, (y + 0.38, 0.22), facecolors="none", edgecolor="#d62728", hatch="////", linewidth=0.6
                    )
                    seen.add(EXPOSED)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.4, -0.6)  # rank 0 on top
    ax.set_xlim(0, max(span / scale, 1e-12))
    ax.set_xlabel(f"time ({unit})")
    hw = result.hardware
    shown = "" if len(ranks) == n else f", ranks {ranks[0]}..{ranks[-1]} of {n}"
    ax.set_title(title or f"{hw.device.name}, {hw.link.name}, {hw.compute}; overlap {'on' if result.overlap else 'off'}"
                 f"{shown}: step {result.step_time / scale:.3g} {unit}, exposed comm (max) "
                 f"{result.exposed_comm.max(initial=0.0) / scale:.3g} {unit}")
    handles = [Patch(facecolor=COLOURS[c], label=c) for c in COLOURS if c in seen]
    if EXPOSED in seen:
        handles.append(Patch(facecolor="none", edgecolor="#d62728", hatch="////", label=EXPOSED + " (under compute)"))
    # outside: hides no bar
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def zoom_window(result, rank: int = 0, units: int = 4) -> float:
    """Seconds from the step's start to the end of rank `rank`'s `units`-th forward computation (the whole step when
    it has fewer): the window `timelines_figure` zooms into."""
    ends = sorted(iv.end for iv in result.track(rank, "compute") if iv.category == "forward")
    return ends[units - 1] if len(ends) >= units else result.span


def timelines_figure(results: dict, rank: int = 0, title: str | None = None, zoom_units: int = 0):
    """Several simulated steps one above the other on one time axis, `{panel title: Timeline}`, rank `rank`'s
    two streams each (e.g. the same step without and with prefetch). Returns the Figure.

    `zoom_units` > 0: beside each whole step, the same two streams over the first `zoom_units` forward computations of
    the slowest step (`zoom_window`), on one shared axis (gid "zoom"): a step of 64 units draws each unit a pixel or
    two wide, a barcode in which no gather can be told from the computation it waits for; the zoom shows them. The
    window is shaded in the whole step's panel."""
    import matplotlib.pyplot as plt

    span = max(r.span for r in results.values())
    if not zoom_units:
        fig, axes = plt.subplots(len(results), 1, figsize=(11, 0.6 + 2.0 * len(results)), sharex=True, squeeze=False)
        for ax, (name, result) in zip(axes[:, 0], results.items()):
            timeline_figure(result, ranks=[rank], ax=ax, title=name, span=span)
        for ax in axes[:-1, 0]:
            ax.set_xlabel("")
        if title:
            fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        return fig
    slowest = max(results.values(), key=lambda r: r.span)
    window = zoom_window(slowest, rank, zoom_units)
    fig, axes = plt.subplots(len(results), 2, figsize=(13, 0.9 + 2.1 * len(results)), squeeze=False,
                             gridspec_kw=dict(width_ratios=(3, 2)), layout="constrained")
    for (whole, zoom), (name, result) in zip(axes, results.items()):
        timeline_figure(result, ranks=[rank], ax=whole, title=name, span=span)
        whole.get_legend().remove()  # one legend a row, beside the zoom
        scale, unit = _unit(span)
        whole.axvspan(0, window / scale, color="0.85", zorder=-1, lw=0)
        whole.set_title("")
        whole.set_title(name, fontsize=9, loc="left")
        timeline_figure(result, ranks=[rank], ax=zoom, span=window)
        zoom.set_title("")
        zoom.set_gid("zoom")
        zoom.set_yticks([])
        zoom.set_title(f"zoom: the first {window / scale:.3g} {unit} (shaded on the left)", fontsize=9, loc="right")
    for ax in axes[:-1].ravel():
        ax.set_xlabel("")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig

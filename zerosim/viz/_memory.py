"""Per-rank memory by ZeRO stage, stacked by kind: the ZeRO paper's Figure 1, drawn from ledgers.

`memory_by_stage_figure(stages)` takes what `zerosim.analysis.costs._measured.measure_by_stage` returns (one
dict per stage with the resting bytes by ledger kind) and draws one bar per stage, a segment per
kind, the total printed on top. It reads measurements only; the caller may pass the paper's printed
numbers (`printed`) to show beside the bars.

A stage that holds less than a twentieth of the tallest bar (ZeRO-3's 1.9 GB beside 120 GB) would be
a sliver, so it is drawn again, at its own scale, in an inset. With `log=True` there are no bars at
all: a stacked bar on a log axis lies (a segment's length there depends on what lies under it), so
each kind is a point per stage, with the total as a black line.
"""

from __future__ import annotations

from zerosim.analysis.costs import GB
from zerosim.viz._palette import PEAK_TICK, kind_colour, kind_label, kind_order

STAGE_NAMES = {
    0: "baseline\n(data parallel)",
    1: "ZeRO-1\n$P_{os}$",
    2: "ZeRO-2\n$P_{os+g}$",
    3: "ZeRO-3\n$P_{os+g+p}$",
}
INSET_BELOW = 1 / 20  # a stage under this fraction of the tallest gets an inset at its own scale


def _stack(ax, xs, stages, order, width, labels: bool) -> list:
    """Stacked bars of `stages` at `xs`, one segment per kind (gid "kind:<kind>"); returns the totals."""
    bottom = [0.0] * len(stages)
    for kind in order:
        heights = [s["resting"].get(kind, 0) / GB for s in stages]
        bars = ax.bar(xs, heights, width, bottom=bottom, label=kind_label(kind) if labels else None,
                      color=kind_colour(kind), edgecolor="white", linewidth=0.6)
        for bar in bars:
            bar.set_gid(f"kind:{kind}")
        bottom = [b + h for b, h in zip(bottom, heights)]
    return bottom


def memory_by_stage_figure(stages: list, title: str = "", printed: tuple | None = None, log: bool = False):
    """A matplotlib Figure: per-rank model states by stage (GB by kind), totals on top.

    Args:
        stages: [{"stage": int, "resting": {kind: bytes}}, ...] in stage order.
        title: the figure's title.
        printed: optional published totals in GB, one per stage, written under each measured total.
        log: points on a logarithmic axis instead of stacked bars (see the module's note).
    """
    import matplotlib.pyplot as plt

    order = kind_order(k for s in stages for k in s["resting"])
    fig, ax = plt.subplots(figsize=(9.5, 4.8), dpi=150)
    x = list(range(len(stages)))
    totals = [sum(s["resting"].values()) / GB for s in stages]
    if log:
        for j, kind in enumerate(order):  # kinds side by side: equal sizes (master, m, v) must not hide each other
            ys = [s["resting"].get(kind, 0) / GB for s in stages]
            dodge = (j - (len(order) - 1) / 2) * 0.08
            (line,) = ax.plot(
                [i + dodge for i in x], ys, "o-", color=kind_colour(kind), label=kind_label(kind), lw=1.2, ms=5
            )
            line.set_gid(f"kind:{kind}")
        ax.plot(x, totals, "s-", color=PEAK_TICK, label="total per rank", lw=1.6, ms=6)
        ax.set_yscale("log")
        ax.set_ylim(min(v for s in stages for v in s["resting"].values() if v) / GB / 2, max(totals) * 3)
    else:
        _stack(ax, x, stages, order, 0.6, labels=True)
        ax.set_ylim(0, max(totals) * 1.22)
    for i, total in enumerate(totals):
        text = f"{total:.4g} GB" + (f"\n(paper: {printed[i]:g})" if printed is not None else "")
        ax.annotate(
            text,
            (x[i], total),
            xytext=(0, 12 if log else 6),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    ax.set_xticks(x, [STAGE_NAMES.get(s["stage"], f"stage {s['stage']}") for s in stages])
    ax.set_xlim(-0.6, len(stages) - 0.4)
    ax.set_ylabel("model states per rank (GB, 1e9 bytes)" + (", log scale" if log else ""))
    ax.spines[["top", "right"]].set_visible(False)
    small = [i for i, t in enumerate(totals) if t < INSET_BELOW * max(totals)]
    if small and not log:
        _inset(ax, [stages[i] for i in small], order)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _inset(ax, stages: list, order: list) -> None:
    """The stages too small to see, again at their own scale, top right of the main axes."""
    inset = ax.inset_axes([0.66, 0.38, 0.3, 0.5])
    totals = _stack(inset, list(range(len(stages))), stages, order, 0.5, labels=False)
    inset.set_ylim(0, max(totals) * 1.3)
    inset.set_xlim(-0.6, len(stages) - 0.4)
    inset.set_xticks(
        range(len(stages)),
        [STAGE_NAMES.get(s["stage"], f"stage {s['stage']}").split("\n")[0] for s in stages],
        fontsize=8,
    )
    inset.tick_params(axis="y", labelsize=7)
    inset.set_title("zoomed in: GB per rank", fontsize=8)
    inset.set_gid("inset")

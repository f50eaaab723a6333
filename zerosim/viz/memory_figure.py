"""Per-rank memory by ZeRO stage, stacked by kind: the ZeRO paper's Figure 1, drawn from ledgers.

`memory_by_stage_figure(stages)` takes what `zerosim.costs.measured.measure_by_stage` returns (one
dict per stage with the resting bytes by ledger kind) and draws one bar per stage, a segment per
kind, the total printed on top. It reads measurements only; the caller may pass the paper's printed
numbers (`printed`) to show beside the bars.
"""

from __future__ import annotations

from zerosim.costs import GB

STAGE_NAMES = {0: "baseline\n(data parallel)", 1: "ZeRO-1\n$P_{os}$", 2: "ZeRO-2\n$P_{os+g}$", 3: "ZeRO-3\n$P_{os+g+p}$"}
KIND_STYLE = {  # kind -> (label, colour): 16-bit states blue, fp32 states warm, as the paper shades them
    "params": ("16-bit params", "#4c72b0"),
    "grads": ("16-bit grads", "#8fb0e0"),
    "grad32": ("fp32 grads", "#8fb0e0"),
    "master": ("fp32 master params", "#dd8452"),
    "optim:m": ("Adam m (fp32)", "#c44e52"),
    "optim:v": ("Adam v (fp32)", "#e59a9c"),
}
OTHER_COLOURS = ("#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")


def memory_by_stage_figure(stages: list, title: str = "", printed: tuple | None = None, log: bool = False):
    """A matplotlib Figure: one stacked bar per stage (GB per rank by kind), totals on top.

    Args:
        stages: [{"stage": int, "resting": {kind: bytes}}, ...] in stage order.
        title: the figure's title.
        printed: optional published totals in GB, one per stage, written under each measured total.
        log: a logarithmic y axis (stage 3 is often ~100x smaller than stage 0).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = []
    for s in stages:
        kinds += [k for k in s["resting"] if k not in kinds]
    order = [k for k in KIND_STYLE if k in kinds] + sorted(k for k in kinds if k not in KIND_STYLE)
    extra = iter(OTHER_COLOURS * 4)
    style = {k: KIND_STYLE.get(k) or (k.replace("optim:", "optimizer ") + " (fp32)", next(extra)) for k in order}

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=150)
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    for kind in order:
        heights = [s["resting"].get(kind, 0) / GB for s in stages]
        label, colour = style[kind]
        ax.bar(x, heights, 0.6, bottom=bottom, label=label, color=colour, edgecolor="white", linewidth=0.6)
        bottom = [b + h for b, h in zip(bottom, heights)]
    top = max(bottom) if bottom else 1.0
    for i, total in enumerate(bottom):
        text = f"{total:.4g} GB"
        if printed is not None:
            text += f"\n(paper: {printed[i]:g})"
        ax.annotate(text, (x[i], total), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [STAGE_NAMES.get(s["stage"], f"stage {s['stage']}") for s in stages])
    ax.set_ylabel("model states per rank (GB, 1e9 bytes)")
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, top * 1.22)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="upper right")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig

"""Seed 001 §5 drawn from the ledgers: the L² term against sequence length, and each checkpointing strategy's
peak beside its recompute cost.

`l_squared_figure(rows)` takes [(L, per_block)] where per_block is what one transformer block saved, by
name ({"block input": bytes, ..., "P": bytes}: `zerosim.analysis.costs._measured.measure_activations(...).per_block`):
the softmax output P against everything else, on log-log axes, so the slopes 1 and 2 show.
`strategies_figure(rows)` takes `zerosim.analysis.costs._measured.strategy_costs(...)`: peak activation bytes per
rank and extra FLOPs per step, one row per strategy, side by side. Both read measurements only.

Activations are one memory kind, in the palette's one colour for it (artists carry gid "kind:activations");
within it, P is told apart by its line style. Compute is not memory: its bars take a neutral grey.
"""

from __future__ import annotations

from zerosim.analysis.costs import GB
from zerosim.viz._palette import kind_colour, kind_label

COMPUTE = "#7f7f7f"  # FLOPs are not a memory kind: a neutral grey, never a kind's colour
STATISTICS = ("mean", "rstd")  # the LayerNorm statistics: counted with the linear terms (they grow with L too)


def _split(per_block: dict) -> tuple:
    """(bytes of P, bytes of everything else one block saved)."""
    p = sum(b for name, b in per_block.items() if name.split(".")[-1] == "P")
    return p, sum(per_block.values()) - p


def l_squared_figure(rows: list, title: str = "", ax=None):
    """Per-layer activation bytes against L: P (B·H·L², dashed) and the linear terms (solid); returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8.2, 4.6), dpi=150)
    Ls = [L for L, _ in rows]
    p, rest = zip(*(_split(per_block) for _, per_block in rows))
    colour = kind_colour("activations")
    (line,) = ax.plot(Ls, [b / GB for b in rest], "o-", color=colour, lw=2, ms=6,
                      label="linear terms: 14·B·L·d (+ LayerNorm statistics)")
    line.set_gid("kind:activations")
    (line,) = ax.plot(Ls, [b / GB for b in p], "s--", color=colour, lw=2, ms=6, label="P, the softmax output: B·H·L²")
    line.set_gid("kind:activations")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(Ls, [f"{L:,}" for L in Ls])
    ax.set_xlim(Ls[0] / 1.5, Ls[-1] * 1.5)
    ax.set_ylim(min(min(p), min(rest)) / GB / 4, max(max(p), max(rest)) / GB * 3)
    for L, b, r in zip(Ls, p, rest):  # at each L the larger value labelled above left, the smaller below right:
        for text, v, above in ((f"P {b / GB:.3g} GB", b, b > r), (f"{r / GB:.3g} GB", r, r >= b)):  # no label on a line
            ax.annotate(text, (L, v / GB), xytext=(-7, 6) if above else (7, -6), textcoords="offset points",
                        ha="right" if above else "left", va="bottom" if above else "top", fontsize=8)
    over = [i for i in range(1, len(rows)) if p[i - 1] <= rest[i - 1] and p[i] > rest[i]]
    if over:  # where P overtakes the rest, between two measured lengths
        i = over[0]
        ax.axvspan(Ls[i - 1], Ls[i], color=colour, alpha=0.15, lw=0)
        ax.annotate(
            "P overtakes\nthe linear terms",
            (Ls[i], ax.get_ylim()[0]),
            xytext=(-4, 4),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize=8,
        )
    ax.set_xlabel("sequence length L (tokens)")
    ax.set_ylabel("bytes one layer saves for backward (GB)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    if title:
        ax.set_title(title, fontsize=10)
    ax.figure.tight_layout()
    return ax


def _same_bars_note(rows: list) -> str:
    """Why "selective" and "flash" draw the same bars, in the measured numbers ("" when either is missing).

    Neither keeps P (B·H·L² per layer): selective drops it and rebuilds it from Q and K in backward, flash never
    forms it whole. What flash keeps instead is one fp32 log-sum-exp per row and head, B·H·L·4 bytes a layer: tens of
    MB against tens of GB, below the bars' third digit. Both pay for it by recomputing QKᵀ in backward."""
    by = {r["strategy"]: r for r in rows}
    if "selective" not in by or "flash" not in by:
        return ""
    sel, fl = by["selective"], by["flash"]
    gap = fl["peak"] - sel["peak"]
    return (f"selective and flash look the same: neither keeps P (B·H·L² per layer; selective rebuilds it in backward, "
            f"flash never forms it whole). Flash keeps an fp32 log-sum-exp per row instead: "
            f"{gap / 1e6:.1f} MB more ({fl['peak'] / GB:.4g} against {sel['peak'] / GB:.4g} GB); "
            f"both recompute QKᵀ: +{100 * sel['extra']:.2f}% and +{100 * fl['extra']:.2f}%.")


def strategies_figure(rows: list, title: str = "", capacity: int | None = None, gpu: str = ""):
    """Two panels sharing the strategies: peak activations per rank (GB) and extra FLOPs per step (%); a Figure.

    `capacity` (bytes): a GPU's memory, drawn as a vertical line (gid "capacity") named `gpu`; the memory axis ends
    just past the larger of it and the tallest bar. When both "selective" and "flash" are drawn, a note (gid "note")
    says why their bars are the same (`_same_bars_note`)."""
    import matplotlib.pyplot as plt

    note = _same_bars_note(rows)
    fig, (mem, flops) = plt.subplots(1, 2, figsize=(10, 4.6 if note else 4.2), dpi=150, sharey=True,
                                     layout="constrained")
    names = [r["strategy"] for r in rows]
    y = list(range(len(rows)))[::-1]  # the first strategy on top
    peaks = [r["peak"] / GB for r in rows]
    for bar in mem.barh(y, peaks, 0.6, color=kind_colour("activations"), label=kind_label("activations")):
        bar.set_gid("kind:activations")
    right = max(max(peaks), capacity / GB if capacity else 0) * 1.08
    for yi, v, r in zip(y, peaks, rows):
        where = "at the loss" if r["peak_at"].startswith("loss.") else f"rebuilding {r['peak_at'].split('.')[0]}"
        inside = v > 0.55 * right  # a long bar carries its label inside, so no label runs into the capacity line
        mem.annotate(f"{v:.3g} GB ({where})", (v, yi), xytext=(-4 if inside else 4, 0), textcoords="offset points",
                     va="center", ha="right" if inside else "left", fontsize=8)
    if capacity:
        line = mem.axvline(capacity / GB, color="black", lw=1.2)
        line.set_gid("capacity")
        mem.annotate(
            f"{gpu or 'GPU'}: {capacity / GB:.1f} GB in all (model states too)",
            (capacity / GB, max(y) + 0.45),
            xytext=(-3, 0),
            textcoords="offset points",
            ha="right",
            fontsize=8,
        )
    mem.set_xlim(0, right)
    mem.set_yticks(y, names)
    mem.set_xlabel("peak activations per rank (GB, 1e9 bytes)")
    extra = [100 * r["extra"] for r in rows]
    flops.barh(y, extra, 0.6, color=COMPUTE)
    third = 100 / 3
    for yi, v in zip(y, extra):  # a label whose bar ends just short of the seed's line starts past it, not across it
        at = third if third - 3 < v < third else v
        flops.annotate(f"+{v:.1f}%", (at, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    flops.axvline(third, color="black", ls=":", lw=1)
    flops.annotate("seed 001: ≈ 1/3", (third, max(y) + 0.45), xytext=(4, 0), textcoords="offset points", fontsize=8)
    flops.set_xlim(0, max(max(extra), third) * 1.35)
    flops.set_xlabel("extra FLOPs per step over no checkpointing (%)")
    for ax in (mem, flops):
        ax.spines[["top", "right"]].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    if note:
        import textwrap

        fig.get_layout_engine().set(h_pad=0.1)
        fig.supxlabel(textwrap.fill(note, 150), fontsize=8, ha="center").set_gid("note")
    return fig

"""Step time and exposed communication against the number of ranks: the timeline sweep, drawn.

Reads `zerosim.analysis.planner._sweep` rows (simulated steps of the real engine's schedule on the meta backend),
never a formula. One colour per link (NVLink green, InfiniBand purple: the link tiers' colours in
_palette.py) and one line style and marker per stage, so no two lines share both colour and style, and the
two panels read together. Both axes start at 0 (a cut axis makes 21.7 s against 22.0 s look like a gap),
and the exposed-communication axis ends just above what is drawn, not at 100 %.

A configuration that does not fit the GPU is not drawn at all: it is named in a note under the panels,
with the memory it would need. A second note (gid "why") says why ZeRO-3 takes the shortest step
although seed 001 §10 counts 1.5× the bytes for it: bytes are not time; what compute cannot hide is.
"""

from __future__ import annotations

import textwrap

from zerosim.analysis.costs import GB
from zerosim.viz._palette import TIERS

LINK_COLOURS = {"nvlink4": TIERS["intra-node"], "ib_ndr": TIERS["inter-node"], "pcie5": "#e6ab02",
                "100gbe": "#7f7f7f"}  # a link is no memory kind: none of the kinds' colours
STAGE_STYLES = {0: (":", "v"), 1: (":", "^"), 2: ("-.", "s"), 3: ("-", "o")}  # (line style, marker) per stage
LINK_NAMES = {"nvlink4": "NVLink 4", "pcie5": "PCIe 5", "ib_ndr": "InfiniBand NDR", "100gbe": "100 GbE"}


def why_zero3_is_fastest(rows, hypothetical: bool = False) -> str:
    """Seed 001 §10 against the simulated steps, in their own numbers ("" unless stages 1 (or 2) and 3 are in rows).

    Read on the link where ZeRO-1/2 expose the most, at the smallest N: each stage's communication (busy seconds)
    and the part of it compute could not hide. `hypothetical`: ZeRO-1/2 did not fit (their steps simulated anyway)."""
    stages = {r.stage for r in rows}
    if 3 not in stages or not stages & {1, 2}:
        return ""
    n = min(r.ranks for r in rows)
    at = [r for r in rows if r.ranks == n]
    link = max(at, key=lambda r: r.exposed if r.stage in (1, 2) else -1).link
    by = {r.stage: r for r in at if r.link == link}
    parts = [f"ZeRO-{s} {by[s].comm:.1f} s, {by[s].exposed:.1f} s of it exposed" for s in sorted(by) if s in (1, 2, 3)]
    return (f"Why ZeRO-3 takes the shortest step though seed 001 §10 counts 1.5× the bytes for it: bytes are not "
            f"time. Communication at N = {n:,} over {LINK_NAMES.get(link, link)}"
            + (" (ZeRO-1/2 simulated as if they fit)" if hypothetical else "") + ": " + "; ".join(parts) + ". "
            "ZeRO-3 gathers each unit while the one before computes and keeps its updated shard (no all-gather "
            "after the update). ZeRO-1 reduce-scatters its gradients after backward, ZeRO-2 as backward makes them, "
            "but both all-gather the new weights after the update, with nothing left to compute under it.")


def _not_fitting(rows, fits, gpu) -> str:
    out = []
    for stage in sorted({r.stage for r in rows}):
        mine = [(r, f) for r, f in zip(rows, fits) if r.stage == stage]
        if any(f for _, f in mine):
            continue  # a stage that fits somewhere is drawn; its misfits are its missing points
        peaks = [r.peak for r, _ in mine]
        need = (
            f"{min(peaks) / GB:.0f}–{max(peaks) / GB:.0f} GB" if min(peaks) != max(peaks) else f"{peaks[0] / GB:.0f} GB"
        )
        out.append(f"ZeRO-{stage} (needs {need} per GPU)")
    return ("Not drawn: " + " and ".join(out) + f" do{'es' if len(out) == 1 else ''} not fit on one "
            f"{gpu or 'GPU'} at any N.") if out else ""


def sweep_figure(rows, title: str | None = None, fits=None, gpu: str | None = None):
    """Two panels over N (log scale): the step's time, and the share of it that is exposed communication.

    `fits`: one bool per row (None: all ran). A configuration that would not fit the GPU named `gpu` is not drawn as
    a step that ran: no line or point goes through it; a stage that fits at no N is named in a note (gid "misfit")
    with the memory it needs. Lines carry gid "stage<s>:<link>". Returns the Figure."""
    import matplotlib.pyplot as plt

    fits = [True] * len(rows) if fits is None else list(fits)
    ok = {id(r): f for r, f in zip(rows, fits)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.0), layout="constrained")
    drawn = []
    for link, stage in sorted({(r.link, r.stage) for r in rows}):
        ran = sorted((r for r in rows if r.link == link and r.stage == stage and ok[id(r)]), key=lambda r: r.ranks)
        if not ran:
            continue
        style, marker = STAGE_STYLES.get(stage, ("-", "o"))
        kw = dict(color=LINK_COLOURS.get(link, "black"), linestyle=style, marker=marker, markersize=4,
                  label=f"ZeRO-{stage}, {LINK_NAMES.get(link, link)}")
        for ax, ys in ((left, [r.step for r in ran]), (right, [100 * r.exposed_fraction for r in ran])):
            (line,) = ax.plot([r.ranks for r in ran], ys, **kw)
            line.set_gid(f"stage{stage}:{link}")
        drawn += ran
    ticks = sorted({r.ranks for r in rows})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{n:,}" for n in ticks], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("data-parallel ranks N")
        ax.grid(True, alpha=0.3)
    top_step = max((r.step for r in drawn), default=1.0)
    left.set_ylim(0, top_step * 1.15)  # from 0: the links' 21.7 s and 22.0 s are 1 % apart, not a gap
    left.set_ylabel("step time (s)")
    left.set_title("one step, rank 0", fontsize=10)
    top_exposed = max((100 * r.exposed_fraction for r in drawn), default=0.0)
    right.set_ylim(0, max(5.0, top_exposed * 1.2))  # just above what is drawn: no empty 60 % of a panel
    right.set_ylabel("exposed communication (% of the step)")
    right.set_title("communication compute could not hide", fontsize=10)
    left.legend(loc="lower right", fontsize=8, framealpha=0.9)  # under the lines, which start high
    notes = [
        (gid, text)
        for gid, text in (("misfit", _not_fitting(rows, fits, gpu)), ("why", why_zero3_is_fastest(rows, not all(fits))))
        if text
    ]
    if notes:
        caption = "\n".join(textwrap.fill(text, 150) for _, text in notes)
        fig.supxlabel(caption, fontsize=8, ha="center").set_gid("+".join(gid for gid, _ in notes))
    if title:
        fig.suptitle(title, fontsize=11)
    return fig

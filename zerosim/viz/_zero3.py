"""ZeRO-3's per-layer sequence on one rank, from the event log: gather, compute, free, reduce-scatter.

Seeds 003/004: no rank holds a whole layer, so each use of a layer (forward, the recompute that
activation checkpointing adds, backward) gathers it first and frees it right after; after a layer's
backward its gradients are reduce-scattered at once. `zero3_sequence(trace, rank)` reads that story
from `trace.log` — the gather `Call`s, the ledger's free of each gathered copy, the `Compute` events,
the gradient `Call`s — and `zero3_figure` draws it: one row per layer, time running left to right in
the order things happened, each gathered copy a bar from its all-gather to its free.
"""

from __future__ import annotations

import re

from zerosim.viz._palette import PEAK_TICK, kind_colour

GATHERED = re.compile(r"layer (\d+) params \(gathered\)")  # parallel/data/_gather.py names each rank's gathered copy so
MARKS = {"forward": ">", "recompute": "D", "backward": "<", "loss": "o"}


def zero3_sequence(trace, rank: int = 0, step: int | None = None) -> dict:
    """What rank `rank` did in optimizer step `step` (default: the last), in order, from `trace.log`.

    Returns {"events": [(slot, what, layer, detail)], "spans": [{"layer", "gather", "free", "computes", "values"}],
    "names": {layer: name}}: `what` is "gather", "free", "compute" (detail: forward / recompute /
    backward / loss) or "reduce" (the layer's gradient reduce-scatter); a span is one gathered copy,
    from its all-gather's slot to its free's, with the computations that read it and (when the trace
    keeps values) the window it gathered.
    """
    from zerosim.cluster import Call, Compute, LedgerEvent, StepBoundary

    log = trace.log
    log = getattr(log, "held", log)  # a long run past its window: the entries held, at their places in that list
    begins = [
        i
        for i, e in enumerate(log)
        if isinstance(e, StepBoundary) and e.what == "begin" and (step is None or e.step == step)
    ]
    if not begins:
        raise ValueError(f"the trace holds no step{'' if step is None else ' ' + str(step)}: run engine.step first")
    events, spans, open_spans, names = [], [], {}, {}
    for e in log[begins[-1]:]:
        if isinstance(e, StepBoundary) and e.what == "end":
            break
        slot = len(events)
        if isinstance(e, Call) and e.purpose == "gather params":
            (layer,) = e.layers
            open_spans[layer] = {
                "layer": layer,
                "gather": slot,
                "free": None,
                "computes": [],
                "values": _gathered(trace, e.call),
            }
            events.append((slot, "gather", layer, e.call))
        elif isinstance(e, Call) and e.purpose == "reduce grads":
            events.append((slot, "reduce", e.layers[0] if e.layers else -1, e.call))
        elif isinstance(e, Compute) and e.rank == rank:
            names[e.layer] = e.name
            events.append((slot, "compute", e.layer, e.kind))
            if e.layer in open_spans:
                open_spans[e.layer]["computes"].append(e.kind)
        elif isinstance(e, LedgerEvent) and e.rank == rank and e.action == "free" and GATHERED.fullmatch(e.name):
            layer = int(GATHERED.fullmatch(e.name).group(1))
            span = open_spans.pop(layer)
            span["free"] = slot
            spans.append(span)
            events.append((slot, "free", layer, e.name))
    if open_spans:
        raise ValueError(f"gathered layers never freed on rank {rank}: {sorted(open_spans)}")
    return {"events": events, "spans": spans, "names": names}


def _gathered(trace, call: int):
    """The window an all-gather assembled (its shards in chunk order, from the hops), or None without values."""
    shards = {}
    for h in trace.events:
        if h.call == call and h.values is not None:
            shards.setdefault(h.chunk, h.values)
    if not shards:
        return None
    return [float(v) for c in sorted(shards) for v in shards[c]]


def zero3_figure(trace, rank: int = 0, step: int | None = None, ax=None, title: str | None = None):
    """One row per layer (and the loss), slots left to right; gathered copies as bars (gid "kind:params"),
    computations as markers, gradient reduce-scatters as down-triangles (gid "kind:grads"). Returns the Axes."""
    import matplotlib.pyplot as plt

    seq = zero3_sequence(trace, rank, step)
    layers = sorted(seq["names"], key=lambda layer: (layer < 0, layer))  # model order, the loss last
    row = {layer: i for i, layer in enumerate(layers)}
    if ax is None:
        _, ax = plt.subplots(figsize=(max(7.0, 0.42 * len(seq["events"]) + 3), 0.6 * len(layers) + 1.8), dpi=120)
    _gather_bars(ax, seq, row)
    _event_marks(ax, seq, row, len(layers))
    ax.set_yticks(range(len(layers)), [seq["names"][layer] for layer in layers])
    ax.set_ylim(len(layers) - 0.4, -0.8)
    ax.set_xlim(-0.8, len(seq["events"]) - 0.2)
    ax.set_xticks([])
    ax.set_xlabel("what rank {} did, in order (one slot per event in the trace's log)".format(rank))
    ax.spines[["top", "right"]].set_visible(False)
    _legend(ax)
    ax.set_title(
        title or f"ZeRO-3 on rank {rank}: {len(seq['spans'])} all-gathers, each copy freed right after its use",
        fontsize=10,
    )
    ax.figure.tight_layout()
    return ax


def _gather_bars(ax, seq: dict, row: dict) -> None:
    """Each gathered copy a bar on its layer's row, from its all-gather to its free, labelled with its first values."""
    for n, span in enumerate(seq["spans"]):
        y = row[span["layer"]]
        bar = ax.barh(
            y,
            span["free"] - span["gather"],
            left=span["gather"],
            height=0.55,
            color=kind_colour("params"),
            alpha=0.45,
            edgecolor=kind_colour("params"),
        )[0]
        bar.set_gid("kind:params")
        what = (
            ""
            if span["values"] is None
            else ": [" + ", ".join(f"{v:g}" for v in span["values"][:4]) + (", …]" if len(span["values"]) > 4 else "]")
        )
        ax.text(
            span["gather"],
            y - 0.36,
            f"all-gather #{n + 1}{what}",
            fontsize=7,
            va="bottom",
            ha="left",
            color=kind_colour("params"),
        )


def _event_marks(ax, seq: dict, row: dict, rows: int) -> None:
    """Each computation a marker of its kind, each gradient reduce-scatter a down-triangle (the loss's on the last
    row)."""
    for slot, what, layer, detail in seq["events"]:
        if what == "compute":
            ax.plot(slot, row[layer], MARKS[detail], color=PEAK_TICK, ms=7, zorder=3)
        elif what == "reduce":
            (mark,) = ax.plot(
                slot, row.get(layer, rows - 1), "v", color=kind_colour("grads"), mec="black", ms=11, zorder=3
            )
            mark.set_gid("kind:grads")


def _legend(ax) -> None:
    """The legend beside the axes: the computations' markers, the gathered bars, the reduce-scatters."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker=m, color=PEAK_TICK, label=k) for k, m in MARKS.items()]
    handles += [
        plt.Rectangle(
            (0, 0), 1, 1, color=kind_colour("params"), alpha=0.45, label="gathered params, all-gather to free"
        ),
        Line2D(
            [], [], ls="", marker="v", color=kind_colour("grads"), mec="black", ms=9, label="gradient reduce-scatter"
        ),
    ]
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))

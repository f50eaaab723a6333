"""Draw one ring collective from the trace, chunk by chunk: ranks as rows, ring steps as columns.

Column k shows what each rank sends at step k; an arrow carries it to the next rank, which shows in
column k + 1 what it made of it. The last column is the end: the shard each rank owns after a
reduce-scatter, the whole buffer after an all-gather. The values are the trace's (what really moved,
when the cluster keeps values); with the call's `inputs` and `outputs` the figure also writes each add
out — received partial + own copy = exact sum (float64) → what the wire format kept — and marks in magenta
where rounding lost something (notebook 02: 1 + 2048 = 2049 → 2048 in fp16).

The hop from rank N-1 to rank 0 wraps around the ring: its arrow leaves below rank N-1 and re-enters
above rank 0, so it crosses no other row; the leaving half is labelled "to rank 0 (top)", the entering half
"from rank N-1", both in the chunk's colour, so the two halves read as one hop.
"""

from __future__ import annotations

import numpy as np

from zerosim.viz._palette import LOSS, chunk_colour

ROW = 1.0  # data units between ranks
TEXT_END = 0.8  # a cell's text ends before this fraction of its column: the arrow starts there
MAX_SHOWN = 4  # values shown per chunk


def _num(x: float) -> str:
    return np.format_float_positional(float(x), trim="-")


def _vals(v) -> str:
    v = np.ravel(np.asarray(v, dtype=np.float64))
    if v.size == 1:
        return _num(v[0])
    more = ", …" if v.size > MAX_SHOWN else ""
    return "[" + ", ".join(_num(x) for x in v[:MAX_SHOWN]) + more + "]"


def _chunk_bounds(events, n: int) -> list:
    """[start, stop) of each chunk in the (padded) buffer, from the sizes the hops carried."""
    size = {}
    for e in events:
        size.setdefault(e.chunk, e.elements)
    offsets = np.concatenate([[0], np.cumsum([size.get(c, 0) for c in range(n)])]).astype(int)
    return [(int(offsets[c]), int(offsets[c + 1])) for c in range(n)]


def _sum_text(c: int, received, own, kept, fmt: str) -> tuple:
    """(text, lost?) for one add: received partial + own copy = exact → kept, in wire format `fmt`."""
    exact = np.asarray(received, np.float64) + np.asarray(own, np.float64)  # two <= 24-bit values: float64 is exact
    kept = np.asarray(kept, np.float64)
    lost = bool(np.any(exact != kept))
    text = f"chunk {c}: {_vals(received)} + {_vals(own)}\n= {_vals(exact)}"
    return (text + f" → {_vals(kept)} in {fmt}" if lost else text), lost


def _cells(events, info, inputs, outputs) -> dict:
    """{(column, rank): (text, chunk, lost)} for every cell the figure writes."""
    n, steps = info.world_size, max(e.step for e in events) + 1
    gather = info.op == "gather"
    sent = {(e.step, e.src): e for e in events}
    bounds = _chunk_bounds(events, n)
    cells = {}
    for (k, r), e in sent.items():
        what = "shard" if gather else "chunk"
        if e.values is None:
            cells[(k, r)] = (f"{what} {e.chunk}\n{e.elements} x {e.dtype}", e.chunk, False)
        elif gather or k == 0 or inputs is None:
            label = "own " if k == 0 else ("forwards " if gather else "partial sum ")
            cells[(k, r)] = (f"{what} {e.chunk}: {label}{_vals(e.values)}", e.chunk, False)
        else:  # what rank r sends at step k is the add it made after step k - 1
            prev = sent[(k - 1, (r - 1) % n)]
            a, b = bounds[e.chunk]
            text, lost = _sum_text(e.chunk, prev.values, np.ravel(inputs[r])[a:b], e.values, e.dtype)
            cells[(k, r)] = (text, e.chunk, lost)
    for r in range(n):  # the end: what each rank holds after the last step
        last = sent.get((steps - 1, (r - 1) % n))
        if outputs is None:
            if last is not None and gather:
                cells[(steps, r)] = ("holds every shard", r, False)
            continue
        out = np.ravel(outputs[r])
        if gather:
            cells[(steps, r)] = (f"holds {_vals(out)}", r, False)
        elif inputs is not None and last is not None and last.values is not None and info.op == "sum":
            a, b = bounds[r]
            text, lost = _sum_text(r, last.values[: out.size], np.ravel(inputs[r])[a : a + out.size], out, last.dtype)
            cells[(steps, r)] = ("owns " + text, r, lost)
        else:
            cells[(steps, r)] = (f"owns chunk {r}: {_vals(out)}", r, False)
    return cells


def ring_figure(trace, call: int, inputs=None, outputs=None, ax=None, title: str | None = None):
    """Plot call `call` of `trace` (recorded hop by hop), one column per ring step and one for the end.

    Args:
        trace: the cluster's `Trace` (granularity "hop"; values shown when the cluster keeps them).
        call: the call's number (e.g. from `trace.of_type(Call)`).
        inputs: the arrays the call was given, one per rank: each add is then written out and rounding
            losses marked.
        outputs: what the call returned, one per rank: drawn in the last column (the final shards).
        ax: draw into these axes (default: a new figure sized to the text).
    Returns the Axes.
    """
    import matplotlib.pyplot as plt

    events = [e for e in trace.events if e.call == call]
    if not events or any(e.step < 0 for e in events):
        raise ValueError(f"no hop events for call {call}; was the trace recorded with granularity 'hop'?")
    info = trace.call(call)
    n, steps = info.world_size, max(e.step for e in events) + 1
    cells = _cells(events, info, inputs, outputs)
    name = info.collective.replace("_", "-") + (
        " (its all-gather half)" if info.collective == "all_reduce" and info.op == "gather" else ""
    )
    caption = _caption(info, name, title, inputs)
    longest = max(len(line) for text, _, _ in cells.values() for line in text.splitlines())
    column_in = max(2.0, 0.072 * longest / TEXT_END)  # ~0.072 in per character at 8 pt
    width = max(column_in * (steps + 1) + 0.9, 0.075 * max(map(len, caption)) + 1.2)
    if ax is None:
        _, ax = plt.subplots(figsize=(width, 0.95 * n + 1.6), dpi=110)
    _draw_cells(ax, cells, n, steps)
    _draw_hops(ax, events, n)
    _style_axes(ax, info, n, steps, caption)
    ax.figure.tight_layout()
    return ax


def ring_steps_figure(world_size: int = 4):
    """Seed 001's ring all-reduce, chunk by chunk, live: reduce-scatter, then all-gather, on notebook 02's
    example (rank 0 holds 2048 in every element, the others 1, in fp16), so the rounding shows. Returns the Figure."""
    import matplotlib.pyplot as plt

    from zerosim.cluster import Cluster
    from zerosim.collectives import ShardLayout, all_reduce

    cluster = Cluster(world_size, keep_values=True)
    x = [np.full(world_size, 2048, np.float16)] + [np.ones(world_size, np.float16) for _ in range(world_size - 1)]
    full = all_reduce(cluster, x, tag="2048 + 1 + 1 + 1")
    layout = ShardLayout(world_size, world_size)
    owned = [f[slice(*layout.bounds(r))] for r, f in enumerate(full)]  # what the reduce-scatter half left on each rank
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 2 * (0.95 * world_size + 1.6)), dpi=110)
    ring_figure(cluster.trace, 0, inputs=x, outputs=owned, ax=top,
                title=f"all-reduce on {world_size} ranks, phase 1: reduce-scatter ({world_size - 1} steps), fp16 on "
                      "the wire")
    ring_figure(cluster.trace, 1, outputs=full, ax=bottom,
                title=f"phase 2: all-gather ({world_size - 1} steps): each rank forwards the chunk it just received")
    fig.tight_layout()
    return fig


def _caption(info, name: str, title: str | None, inputs) -> list:
    """The lines under the figure: what the call is, how to read an add, where the wrap-around arrow goes."""
    caption = [title or f"{name}, {info.op}, {info.dtype} on the wire{', ' + info.tag if info.tag else ''}"]
    if inputs is not None and info.op == "sum":
        caption.append(f"each add: received partial + own copy = exact sum (→ what {info.dtype} kept, in magenta "
                       "when it differs)")
    caption.append(f"the arrow from rank {info.world_size - 1} wraps around the ring to rank 0")
    return caption


def _draw_cells(ax, cells: dict, n: int, steps: int) -> None:
    """Each rank's row line, and each cell's text in its chunk's colour (a rounding loss in magenta, the end boxed)."""
    for r in range(n):
        ax.axhline(r * ROW, color="0.88", lw=0.8, zorder=0)
    for (k, r), (text, chunk, lost) in cells.items():
        final = k == steps
        ax.text(k + 0.04, r * ROW - 0.1, text, ha="left", va="bottom", fontsize=8, zorder=3,
                color=LOSS if lost else chunk_colour(chunk),
                bbox=dict(boxstyle="round,pad=0.25", fc="white", ec=chunk_colour(chunk) if final else "none",
                          lw=1.6 if final else 0))


def _draw_hops(ax, events: list, n: int) -> None:
    """Each hop an arrow from its sender's cell to its receiver's next one; the wrap-around hop in two labelled
    halves."""
    for e in events:
        style = dict(arrowstyle="->", color=chunk_colour(e.chunk), lw=1.4, shrinkA=0, shrinkB=2)
        start = (e.step + TEXT_END, e.src * ROW)
        if e.dst == (e.src + 1) % n and e.dst < e.src:  # the wrap-around hop: out at the bottom, in at the top
            # both halves are one hop: the one leaving the bottom says where it lands, the one entering the top where
            # it came from, each in the chunk's colour (gids "wrap-out" / "wrap-in"), so neither is a bare stub
            bottom, top = (n - 0.55) * ROW, -0.75 * ROW
            ax.annotate("", xy=(e.step + 0.9, bottom), xytext=start, arrowprops=style)
            out = ax.text(e.step + 0.93, bottom, f"to rank {e.dst} (top) ↺", ha="left", va="center", fontsize=7,
                          color=chunk_colour(e.chunk))
            out.set_gid("wrap-out")
            ax.annotate("", xy=(e.step + 1, 0), xytext=(e.step + 0.9, top), arrowprops=style)
            into = ax.text(e.step + 0.87, top, f"from rank {e.src} ↺", ha="right", va="center", fontsize=7,
                           color=chunk_colour(e.chunk))
            into.set_gid("wrap-in")
        else:
            ax.annotate("", xy=(e.step + 1, e.dst * ROW), xytext=start, arrowprops=style)


def _style_axes(ax, info, n: int, steps: int, caption: list) -> None:
    """The ranks down the side, the steps along the top, the caption below, no frame."""
    ax.set_yticks([r * ROW for r in range(n)], [f"rank {r}" for r in range(n)])
    ends = "owns its chunk" if info.op != "gather" else "holds all"
    ax.set_xticks([k + 0.4 for k in range(steps + 1)], [f"step {k}: sends" for k in range(steps)] + ["end: each rank "
                                                                                                     f"{ends}"])
    ax.xaxis.tick_top()
    ax.tick_params(axis="x", length=0)
    ax.set_ylim((n - 0.4) * ROW, -0.85 * ROW)
    ax.set_xlim(-0.05, steps + 1)
    ax.set_xlabel("\n".join(caption), fontsize=9)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)

"""Draw one ring collective from the trace: ranks as rows, ring steps as columns, one arrow per send.

Reads only `Trace` events (with values, when the cluster keeps them), so it shows what really moved.
"""

from __future__ import annotations

import numpy as np


def _label(e) -> str:
    if e.values is None:
        return f"chunk {e.chunk}\n{e.elements} x {e.dtype}"
    vals = ", ".join(np.format_float_positional(float(v), trim="-") for v in np.ravel(e.values)[:4])
    more = ", ..." if e.elements > 4 else ""
    return f"chunk {e.chunk}: [{vals}{more}]"


def ring_figure(trace, call: int, ax=None, title: str | None = None):
    """Plot call `call` of `trace` (hop granularity): arrow from (step, src) to (step + 1, dst) per send."""
    import matplotlib.pyplot as plt

    events = [e for e in trace.events if e.call == call]
    if not events:
        raise ValueError(f"no hop events for call {call}; was the trace recorded with granularity 'hop'?")
    info = trace.calls[call]
    n, steps = info.world_size, max(e.step for e in events) + 1
    if ax is None:
        _, ax = plt.subplots(figsize=(2.6 * (steps + 1), 0.9 * n + 1))
    for r in range(n):
        ax.axhline(r, color="0.9", zorder=0)
    for e in events:
        ax.annotate("", xy=(e.step + 1, e.dst), xytext=(e.step, e.src),
                    arrowprops=dict(arrowstyle="->", color=f"C{e.chunk % 10}", lw=1.5))
        # label a quarter of the way along its arrow, so crossing arrows keep their labels apart
        ax.text(e.step + 0.25, e.src + 0.25 * (e.dst - e.src), _label(e), ha="left", va="bottom", fontsize=8, color=f"C{e.chunk % 10}")
    ax.set_yticks(range(n), [f"rank {r}" for r in range(n)])
    ax.set_xticks(range(steps + 1), ["start"] + [f"after step {k}" for k in range(steps)])
    ax.set_ylim(n - 0.5, -0.7)
    ax.set_xlim(-0.3, steps + 0.3)
    ax.set_title(title or f"{info.collective.replace('_', '-')} ({info.op}, {info.dtype} on the wire{', ' + info.tag if info.tag else ''})")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax

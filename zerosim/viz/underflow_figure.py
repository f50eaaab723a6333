"""Where a run's gradients fall on fp16's number line, and where loss scaling moves them (Micikevicius et al.
2018, Figure 3: most activation gradients lie below fp16's smallest subnormal and would become 0).

The bars are log2|g| of the gradient values a real run's backward recorded (reference/underflow.py:
`backward_values`), computed in fp32 so that none is lost yet; the outline is the same values times
the loss scale S, as fp16 would receive them. Shaded: the magnitudes fp16 flushes to zero (below
2**-24, half of its smallest subnormal rounds away), its subnormals (fewer significant bits) and its
overflow (above 65504).
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import get_format
from zerosim.reference.underflow import flushed_share, log2_histogram
from zerosim.viz.palette import LOSS, format_colour


def underflow_figure(values, scale: float = 2.0**16, fmt: str = "fp16", lo: int = -44, hi: int = 20, ax=None,
                     title: str | None = None):
    """Histogram of log2|v| of `values` (nonzero ones) and of `scale`·v, against `fmt`'s range. Bars carry gid
    "unscaled", the outline "scaled"; the shaded bands "zero", "subnormal", "overflow"."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.8), dpi=130)
    f = get_format(fmt)
    v = np.asarray(values, dtype=np.float64)
    edges, counts, _ = log2_histogram(v, lo, hi)
    _, shifted, _ = log2_histogram(v * scale, lo, hi)
    share = 100.0 / max(1, np.count_nonzero(v))
    tiny, normal, top = np.log2(f.smallest_subnormal), np.log2(f.smallest_normal), np.log2(f.max)
    lost, lost_scaled = (100.0 * flushed_share(v, fmt, s) for s in (1.0, scale))
    bands = [(lo, tiny, LOSS, 0.12, "zero", f"below {fmt}'s smallest subnormal 2^{tiny:.0f}: becomes 0"),
             (tiny, normal, "0.6", 0.12, "subnormal", f"{fmt} subnormals: fewer significant bits"),
             (top, hi, "0.3", 0.12, "overflow", f"above {fmt}'s max {f.max:g}: inf")]
    handles = []
    for a, b, colour, alpha, gid, label in bands:
        span = ax.axvspan(a, b, color=colour, alpha=alpha, lw=0, label=label)
        span.set_gid(gid)
        handles.append(span)
    bars = ax.bar(edges[:-1], counts * share, width=1.0, align="edge", color=format_colour("fp32"), alpha=0.85,
                  label=f"gradients of the run (fp32): {lost:.0f}% at or below 2^{tiny - 1:.0f}, 0 in {fmt}")
    for bar in bars:
        bar.set_gid("unscaled")
    (line,) = ax.step(edges[:-1], shifted * share, where="post", color=format_colour(fmt), lw=2.0,
                      label=f"the same, times S = 2^{np.log2(scale):.0f}: {lost_scaled:.2f}% become 0")
    line.set_gid("scaled")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("log₂ |gradient|")
    ax.set_ylabel("% of the nonzero gradient values")
    ax.set_title(title or f"Gradients against {fmt}'s range, and loss scaling's shift", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(handles=[bars, line, *handles], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax

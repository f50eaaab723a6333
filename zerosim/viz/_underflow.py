"""Where a run's gradients fall on fp16's number line, and where loss scaling moves them (Micikevicius et al.
2018, Figure 3: most activation gradients lie below fp16's smallest subnormal and would become 0).

The bars are log2|g| of the gradient values a real run's backward recorded (analysis/numerics/_underflow.py:
`backward_values`), computed in fp32 so that none is lost yet; the outline is the same values times
the loss scale S, as fp16 would receive them; a second outline is the same values held in bf16
(`bf16`, unscaled: bf16 has fp32's exponent range, so nothing of this run is flushed without a scale).
Shaded: the magnitudes fp16 rounds to zero (at or below 2**-25, half its smallest subnormal 2**-24: the
half is a tie, and round-to-nearest-even picks 0; just above it rounds up to 2**-24), its subnormals
(fewer significant bits) and its overflow (above 65504).

Weight gradients (what the optimizer gets) and activation gradients (what a layer passes back) are
different populations; `underflow_panels` draws each in its own panel on one axis.
"""

from __future__ import annotations

import numpy as np

from zerosim.analysis.numerics import flushed_share, log2_histogram
from zerosim.precision import get_format
from zerosim.viz._palette import LOSS, format_colour


def underflow_figure(values, scale: float = 2.0**16, fmt: str = "fp16", lo: int = -44, hi: int = 20, ax=None,
                     title: str | None = None, bf16: bool = True):
    """Histogram of log2|v| of `values` (nonzero ones) and of `scale`·v, against `fmt`'s range. Bars carry gid
    "unscaled", the outline "scaled", the bf16 outline "bf16" (unless `bf16` is False); the shaded bands "zero",
    "subnormal", "overflow". Returns the Axes."""
    import matplotlib.pyplot as plt

    own = ax is None
    if own:
        _, ax = plt.subplots(figsize=(9.5, 4.8), dpi=130)
    f = get_format(fmt)
    v = np.asarray(values, dtype=np.float64)
    edges, counts, _ = log2_histogram(v, lo, hi)
    _, shifted, _ = log2_histogram(v * scale, lo, hi)
    share = 100.0 / max(1, np.count_nonzero(v))
    tiny, normal, top = np.log2(f.smallest_subnormal), np.log2(f.smallest_normal), np.log2(f.max)
    lost, lost_scaled = (100.0 * flushed_share(v, fmt, s) for s in (1.0, scale))
    # the zero band ends at half the smallest subnormal: at or below it a value rounds to 0, above it to 2^tiny
    bands = [(lo, tiny - 1, LOSS, 0.12, "zero", f"at or below 2^{tiny - 1:.0f} (half {fmt}'s smallest subnormal "
                                               f"2^{tiny:.0f}): rounds to 0"),
             (tiny - 1, normal, "0.6", 0.12, "subnormal", f"{fmt} subnormals: fewer significant bits"),
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
    drawn = [bars, line]
    if bf16:
        from zerosim.precision import cast

        held = np.asarray(cast(v, get_format("bf16")), dtype=np.float64)
        _, in_bf16, _ = log2_histogram(held, lo, hi)
        (b16,) = ax.step(edges[:-1], in_bf16 * share, where="post", color=format_colour("bf16"), lw=1.4, ls="--",
                         label=f"the same in bf16, unscaled: {100.0 * flushed_share(v, 'bf16'):.2f}% become 0 (its "
                               f"range reaches 2^{np.log2(get_format('bf16').smallest_subnormal):.0f})")
        b16.set_gid("bf16")
        drawn.append(b16)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("log₂ |gradient|")
    ax.set_ylabel("% of the nonzero gradient values")
    ax.set_title(title or f"Gradients against {fmt}'s range, and loss scaling's shift", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(handles=[*drawn, *handles], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if own:
        ax.figure.tight_layout()
    return ax


def underflow_panels(groups: dict, scale: float = 2.0**16, fmt: str = "fp16", lo: int = -44, hi: int = 20,
                     title: str | None = None):
    """One `underflow_figure` panel per `{name: values}` (e.g. weight and activation gradients), stacked on one
    log2 axis, each with its own shares in its own legend beside it. Returns the Figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(groups), 1, figsize=(12, 0.6 + 3.3 * len(groups)), sharex=True, squeeze=False,
                             layout="constrained")
    for ax, (name, values) in zip(axes[:, 0], groups.items()):
        underflow_figure(values, scale, fmt, lo, hi, ax=ax, title=f"{name}: {np.count_nonzero(values):,} nonzero "
                                                                       "values")
        ax.set_title("")
        ax.set_title(f"{name}: {np.count_nonzero(values):,} nonzero values", fontsize=10, loc="left")
    for ax in axes[:-1, 0]:
        ax.set_xlabel("")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig

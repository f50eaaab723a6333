"""Spacing between neighbouring numbers against magnitude, per format: seed 000's lost-update picture.

Each line is `zerosim.ulp` over magnitudes the format can hold (a staircase: the spacing doubles at
every power of two). An update of `delta` to a weight w is lost when it is below half the spacing at
w; the figure marks, at w = 1.0, whether `lost_update(1.0, delta, fmt)` says 1 + delta rounds back to
1 (a cross) or survives (a dot). Seed 000: with delta = 1e-5, fp16 (spacing 2**-10 at 1.0) loses it,
fp32 (2**-23) keeps it.

The other end of the line is underflow. Below its smallest normal a format's spacing stops shrinking (its
subnormals are evenly spaced, one smallest subnormal apart), and below half the smallest subnormal a value
rounds to zero (round to nearest even: exactly half rounds to the even neighbour, 0). The magnitudes start
below fp16's 2**-25, so fp16's flat subnormal step and its flush to zero are on the plot, each marked
(gid "underflow:<name>"), as are fp8's; fp32's and bf16's (near 1e-38) are far off it, and the legend says so.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import get_format, lost_update, ulp
from zerosim.viz._palette import LOSS, format_colour

FORMATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")


def spacing_figure(formats=FORMATS, delta: float = 1e-5, weight: float = 1.0, ax=None):
    """Log-log staircase of ulp(|w|) for each format, the threshold 2·delta, and the update at `weight`
    marked lost or kept. Lines carry gid "format:<name>", marks "lost:<name>" / "kept:<name>"."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.0, 6.2), dpi=130)
    mags = np.logspace(-8, 5, 6501)  # |w| from 1e-8 (below fp16's 2**-25 ≈ 2.98e-8: its underflow) to 1e5
    for name in formats:
        f = get_format(name)
        flush = f.smallest_subnormal / 2  # at or below it, a value rounds to 0 (round to nearest even)
        held = mags[(mags <= f.max) & (mags >= f.smallest_subnormal)]
        lost = bool(lost_update(weight, delta, f))
        label = (
            f"{name}: spacing {ulp(weight, f):.3g} at w = {weight:g}, so w + {delta:g} is {'lost' if lost else 'kept'}"
        )
        if flush < mags[0]:
            label += f"; underflows below {flush:.2g}, off the plot"
        (line,) = ax.step(held, ulp(held, f), where="post", color=format_colour(name), lw=1.6, label=label)
        line.set_gid(f"format:{name}")
        (mark,) = ax.plot([weight], [ulp(weight, f)], "X" if lost else "o", ms=9 if lost else 8,
                          color=LOSS if lost else format_colour(name), mec="black", mew=0.6, zorder=4)
        mark.set_gid(f"{'lost' if lost else 'kept'}:{name}")
        if flush >= mags[0]:  # where the format stops: below half its smallest subnormal, a value becomes 0
            (end,) = ax.plot([flush, f.smallest_subnormal], [f.smallest_subnormal] * 2, color=format_colour(name),
                             lw=1.6, ls=":")
            (bar,) = ax.plot([flush], [f.smallest_subnormal], "|", ms=14, mew=2, color=format_colour(name))
            bar.set_gid(f"underflow:{name}")
            end.set_gid(f"underflow:{name}")
            exponent = int(np.log2(flush))
            # the label sits above the flat subnormal step, where no line runs: to its left when 2.7 decades of
            # the plot are free there (fp8's), else to its right (fp16's, near the plot's edge)
            left = flush / 500 > mags[0]
            ax.annotate(f"{name}: 0 at or below 2^{exponent}", (flush, f.smallest_subnormal),
                        xytext=(-3 if left else 3, 4), textcoords="offset points", ha="right" if left else "left",
                        va="bottom", fontsize=7.5, color=format_colour(name))
    ax.axhline(2 * delta, color="0.3", ls="--", lw=1, label=f"spacing = 2 × {delta:g}: above it, an update of "
                                                            f"{delta:g} rounds away")
    ax.axvline(weight, color="0.6", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("magnitude of the weight |w|")
    ax.set_ylabel("spacing to the next number (ulp), log₂ scale")
    ax.set_title(f"Seed 000: where a {delta:g} update is lost — each format's spacing against magnitude", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    # below the axes, not on them: at slide sizes (_slides.py) an in-axes legend ran over the fp8 curves
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(0.0, -0.13))
    ax.figure.tight_layout()
    return ax

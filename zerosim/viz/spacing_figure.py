"""Spacing between neighbouring numbers against magnitude, per format: seed 000's lost-update picture.

Each line is `zerosim.ulp` over magnitudes the format can hold (a staircase: the spacing doubles at
every power of two). An update of `delta` to a weight w is lost when it is below half the spacing at
w; the figure marks, at w = 1.0, whether `lost_update(1.0, delta, fmt)` says 1 + delta rounds back to
1 (a cross) or survives (a dot). Seed 000: with delta = 1e-5, fp16 (spacing 2**-10 at 1.0) loses it,
fp32 (2**-23) keeps it.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import get_format, lost_update, ulp
from zerosim.viz.palette import LOSS, format_colour

FORMATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")


def spacing_figure(formats=FORMATS, delta: float = 1e-5, weight: float = 1.0, ax=None):
    """Log-log staircase of ulp(|w|) for each format, the threshold 2·delta, and the update at `weight`
    marked lost or kept. Lines carry gid "format:<name>", marks "lost:<name>" / "kept:<name>"."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.0, 5.0), dpi=130)
    mags = np.logspace(-3, 5, 4001)  # |w| from 1e-3 to 1e5
    for name in formats:
        f = get_format(name)
        held = mags[mags <= f.max]
        lost = bool(lost_update(weight, delta, f))
        label = (
            f"{name}: spacing {ulp(weight, f):.3g} at w = {weight:g}, so w + {delta:g} is {'lost' if lost else 'kept'}"
        )
        (line,) = ax.step(held, ulp(held, f), where="post", color=format_colour(name), lw=1.6, label=label)
        line.set_gid(f"format:{name}")
        (mark,) = ax.plot([weight], [ulp(weight, f)], "X" if lost else "o", ms=9 if lost else 8,
                          color=LOSS if lost else format_colour(name), mec="black", mew=0.6, zorder=4)
        mark.set_gid(f"{'lost' if lost else 'kept'}:{name}")
    ax.axhline(2 * delta, color="0.3", ls="--", lw=1, label=f"spacing = 2 × {delta:g}: above it, an update of "
                                                            f"{delta:g} rounds away")
    ax.axvline(weight, color="0.6", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("magnitude of the weight |w|")
    ax.set_ylabel("spacing to the next number (ulp), log₂ scale")
    ax.set_title(f"Seed 000: where a {delta:g} update is lost — each format's spacing against magnitude", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    ax.figure.tight_layout()
    return ax

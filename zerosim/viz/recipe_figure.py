"""How each gradient recipe's average strays from float64 as the number of ranks N grows (reference/recipe_error.py).

One line per recipe: the RMS error of the fp32 average it hands the optimizer, relative to the size of
the exact average, against N on log-log axes. A ring sum rounds N-1 times at the size of its partial
sums; for gradients of random sign those grow like √k, so the relative error grows like √N: the
dotted guide has that slope. An fp32 wire rounds at fp32's unit roundoff instead.
"""

from __future__ import annotations

import numpy as np

from zerosim.viz.palette import CHUNKS


def recipe_figure(errors: list, ax=None, title: str | None = None, guide: str | None = None):
    """Log-log RMS relative error against N for each label of `errors` ([RecipeError]), with a √N guide through
    the first point of `guide` (default: the first label). Lines carry gid "recipe:<label>", the guide "sqrt-n"."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.8), dpi=130)
    labels = list(dict.fromkeys(e.label for e in errors))
    styles = ["-", "--", "-.", ":"]
    for k, label in enumerate(labels):
        rows = [e for e in errors if e.label == label]
        ns, rms = np.array([e.n for e in rows]), np.array([e.rms for e in rows])
        (line,) = ax.plot(ns, rms, styles[(k // len(CHUNKS)) % len(styles)], marker="o", ms=4, lw=1.6,
                          color=CHUNKS[k % len(CHUNKS)], label=label)
        line.set_gid(f"recipe:{label}")
    first = [e for e in errors if e.label == (guide or labels[0])]
    if first:
        ns = np.array([e.n for e in first], dtype=float)
        (g,) = ax.plot(ns, first[0].rms * np.sqrt(ns / ns[0]), ":", color="0.3", lw=1.2, label="∝ √N")
        g.set_gid("sqrt-n")
    ax.set_xscale("log", base=2)
    every = sorted({e.n for e in errors})
    ax.set_xticks(every, [str(n) for n in every])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("ranks N")
    ax.set_ylabel("RMS error / RMS of the exact average")
    ax.set_title(title or "Each recipe's averaged gradient against float64, as N grows", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax

"""How each gradient recipe's average strays from float64 as the number of ranks N grows
(analysis/numerics/_recipe_error.py).

One line per recipe: the RMS error of the fp32 average it hands the optimizer, relative to the size of
the exact average, against N on log-log axes. A ring sum rounds N-1 times at the size of its partial
sums; for gradients of random sign those grow like √k, so the relative error grows like √N: the
dotted guide has that slope. An fp32 wire rounds at fp32's unit roundoff instead.

Recipes whose errors are the same at every N (the same averages: DDP's and DeepSpeed's ZeRO-1/2 on an fp16
wire) are one line with both names, not two lines drawn on top of each other; every line has its own
marker and line style as well as its colour. With `compare`, a second panel divides each of those recipes'
error by the first one's at the same N, on a linear axis, so recipes a few percent apart on the log axis
(the fp16 ones) can be told apart.
"""

from __future__ import annotations

import numpy as np

from zerosim.viz._palette import CHUNKS

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
STYLES = ("-", "--", "-.", ":")


def same_series(errors: list) -> list:
    """The labels of `errors` in order, those with equal errors at every N grouped: [[label, ...], ...]."""
    labels = list(dict.fromkeys(e.label for e in errors))
    series = {label: [(e.n, e.rms) for e in errors if e.label == label] for label in labels}
    groups = []
    for label in labels:
        for group in groups:
            if series[group[0]] == series[label]:
                group.append(label)
                break
        else:
            groups.append([label])
    return groups


def recipe_figure(errors: list, ax=None, title: str | None = None, guide: str | None = None, compare=None):
    """Log-log RMS relative error against N for each label of `errors` ([RecipeError]), with a √N guide through
    the first point of `guide` (default: the first label). Lines carry gid "recipe:<label>" (labels with equal
    errors at every N share one line, its gid naming the first, its legend entry all of them joined by " = "), the
    guide "sqrt-n". `compare` (labels, the first the yardstick): a second panel of those errors over the first's
    at each N (gids "ratio:<label>"); then a Figure is returned, else the Axes."""
    import matplotlib.pyplot as plt

    groups = same_series(errors)
    fig = None
    if ax is None:
        if compare:
            fig, (ax, right) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=130, width_ratios=(3, 2),
                                            layout="constrained")
        else:
            _, ax = plt.subplots(figsize=(9.5, 4.8), dpi=130)
    style = _recipe_lines(ax, errors, groups)
    _sqrt_guide(ax, errors, guide or groups[0][0])
    every = sorted({e.n for e in errors})
    for a in [ax] + ([right] if fig is not None else []):
        a.set_xscale("log", base=2)
        a.set_xticks(every, [str(n) for n in every])
        a.minorticks_off()
        a.set_xlabel("ranks N")
        a.spines[["top", "right"]].set_visible(False)
    ax.set_yscale("log")
    ax.set_ylabel("RMS error / RMS of the exact average")
    ax.set_title(title or "Each recipe's averaged gradient against float64, as N grows", fontsize=10)
    if fig is None:
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.figure.tight_layout()
        return ax
    _ratio_lines(right, errors, groups, style, compare)
    right.axhline(1.0, color="0.6", lw=0.8)
    right.set_ylabel(f"error ÷ {compare[0]}'s at the same N")
    right.set_title(f"the {len(compare)} recipes that overlap on the left, apart", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    return fig


def _recipe_lines(ax, errors: list, groups: list) -> dict:
    """One line per group of recipes with equal errors, each its own colour, marker and style: {label: style}."""
    style = {}
    for k, group in enumerate(groups):
        rows = [e for e in errors if e.label == group[0]]
        ns, rms = np.array([e.n for e in rows]), np.array([e.rms for e in rows])
        style[group[0]] = dict(color=CHUNKS[k % len(CHUNKS)], marker=MARKERS[k % len(MARKERS)],
                               linestyle=STYLES[k % len(STYLES)])
        for label in group[1:]:
            style[label] = style[group[0]]
        (line,) = ax.plot(ns, rms, ms=5, lw=1.6, label=" = ".join(group), **style[group[0]])
        line.set_gid(f"recipe:{group[0]}")
    return style


def _sqrt_guide(ax, errors: list, guide: str) -> None:
    """The dotted √N guide through the first point of `guide`'s errors."""
    first = [e for e in errors if e.label == guide]
    if first:
        ns = np.array([e.n for e in first], dtype=float)
        (g,) = ax.plot(ns, first[0].rms * np.sqrt(ns / ns[0]), ":", color="0.3", lw=1.2, label="∝ √N")
        g.set_gid("sqrt-n")


def _ratio_lines(right, errors: list, groups: list, style: dict, compare) -> None:
    """Each of `compare`'s recipes' errors over the first's at the same N, one line per group."""
    base = {e.n: e.rms for e in errors if e.label == compare[0]}
    shown = set()
    for label in compare:
        rep = next(g[0] for g in groups if label in g)
        if rep in shown:
            continue  # one line for recipes with the same errors
        shown.add(rep)
        rows = [e for e in errors if e.label == rep]
        (line,) = right.plot([e.n for e in rows], [e.rms / base[e.n] for e in rows], ms=5, lw=1.6, **style[rep])
        line.set_gid(f"ratio:{rep}")

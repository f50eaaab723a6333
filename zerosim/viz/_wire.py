"""Fewer bits on the wire, measured: loss curves by wire, LoCo's drift over steps, the wires' time at scale.

Every figure takes numbers a run measured (losses from `step`, errors against an exact sum, a timeline's seconds
by purpose) keyed by the wire's name in palette.WIRES, so each wire has one colour in all of them. Artists carry
gids "loss:<wire>", "drift:<wire>", "time:<wire>:<purpose>" for the tests.
"""

from __future__ import annotations

import numpy as np

from zerosim.viz._palette import wire_colour


def wire_loss_figure(curves: dict, ax=None, title: str | None = None):
    """The loss of each step, one line per wire {wire: [loss per step]}. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.2), dpi=130)
    for name, losses in curves.items():
        steps = np.arange(1, len(losses) + 1)
        (line,) = ax.plot(steps, losses, color=wire_colour(name), lw=1.8 if name == "float64" else 1.3,
                          ls="--" if name == "float64" else "-", label=name)
        line.set_gid(f"loss:{name}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean over ranks)")
    ax.set_title(title or "Loss by wire", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax


def drift_figure(drift: dict, ax=None, title: str | None = None):
    """Relative RMS of the error averaged over the first t steps, against t, one line per wire {wire: [per t]},
    with a 1/t guide from the first point of the last wire: an error whose sum stays bounded falls along it."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.2), dpi=130)
    for name, values in drift.items():
        t = np.arange(1, len(values) + 1)
        (line,) = ax.plot(t, values, "o-", ms=3, color=wire_colour(name), lw=1.5, label=name)
        line.set_gid(f"drift:{name}")
    last = list(drift.values())[-1]
    t = np.arange(1, len(last) + 1)
    (guide,) = ax.plot(t, last[0] / t, ":", color="0.4", lw=1, label="1/t: an error whose sum stays bounded")
    guide.set_gid("guide")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("steps t (the same gradients every step)")
    ax.set_ylabel("RMS(mean error over t steps) / RMS(exact)")
    ax.set_title(title or "Drift: the error that does not average out", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax


def wire_time_figure(rows: dict, ax=None, title: str | None = None):
    """Seconds of communication by purpose {wire: {purpose: seconds}} as stacked horizontal bars, the total
    written at each bar's end. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 0.9 + 0.6 * len(rows)), dpi=130)
    purposes = sorted({p for r in rows.values() for p in r})
    hatches = dict(zip(purposes, ["", "//", "..", "xx"]))
    names = list(rows)
    for y, name in enumerate(names):
        left = 0.0
        for p in purposes:
            sec = rows[name].get(p, 0.0)
            bar = ax.barh(y, sec, left=left, color=wire_colour(name), hatch=hatches[p], edgecolor="white", height=0.6)
            bar.patches[0].set_gid(f"time:{name}:{p}")
            left += sec
        ax.text(left, y, f"  {left:.2f} s", va="center", fontsize=8)
    from matplotlib.patches import Patch

    keys = [Patch(facecolor="0.6", edgecolor="white", hatch=hatches[p], label=p) for p in purposes]
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("seconds of communication in one step (the communication stream)")
    ax.set_xlim(0, 1.18 * max(sum(r.values()) for r in rows.values()))
    ax.set_title(title or "Communication by wire", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(handles=keys, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax

"""What the loss scaler and the gradient clipper decided, step by step, from the events a run recorded.

Each step's `LossScaleUpdate` (cluster/_events.py) holds the scale its loss was multiplied by and
whether an inf/NaN made every rank skip it; each `GradClip` the global gradient norm the ranks agreed
on and the coefficient they scaled by. Both figures read only those events.
"""

from __future__ import annotations

import numpy as np

from zerosim.viz._palette import CHUNKS, LOSS


def loss_scale_figure(runs: dict, axes=None, title: str | None = None):
    """The loss scale of each step (log₂ axis), one panel per run {label: [LossScaleUpdate]}, skipped steps marked
    with a red cross at the scale they tried. Lines carry gid "scale:<label>", the crosses "skipped:<label>".
    Returns the axes."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(len(runs), 1, figsize=(9.5, 1.2 + 2.2 * len(runs)), dpi=130, sharex=True, squeeze=False)
        axes = axes[:, 0]
    for k, (ax, (label, events)) in enumerate(zip(axes, runs.items())):
        steps = np.array([e.step for e in events])
        scales = np.array([e.scale_before for e in events])
        skipped = np.array([e.skipped for e in events])
        colour = CHUNKS[k % len(CHUNKS)]
        (line,) = ax.step(steps, scales, where="post", color=colour, lw=1.8, label="the scale this step's loss was "
                                                                                   "multiplied by")
        line.set_gid(f"scale:{label}")
        if skipped.any():
            (marks,) = ax.plot(steps[skipped], scales[skipped], "X", color=LOSS, mec="black", mew=0.5, ms=7,
                               label="skipped: a rank's gradient held inf/NaN")
            marks.set_gid(f"skipped:{label}")
        ax.set_yscale("log", base=2)
        ax.set_ylabel("S (log₂)")
        ax.set_title(f"{label}: skipped steps {', '.join(map(str, steps[skipped])) or 'none'}", fontsize=9, loc="left")
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1].set_xlabel("step (engine.step call)")
    axes[0].figure.suptitle(title or "Dynamic loss scale over the steps", fontsize=10)
    axes[0].figure.tight_layout()
    return axes


def clip_figure(clips: list, ax=None, title: str | None = None):
    """The global gradient norm of each step (from `GradClip` events), max_norm, and the norm after clipping
    (norm x coefficient). Gids "norm", "clipped", "max_norm"."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.0), dpi=130)
    steps = np.array([c.step for c in clips])
    norms = np.array([c.norm for c in clips])
    after = norms * np.array([c.coef for c in clips])
    max_norm = clips[0].max_norm if clips else 1.0
    clipped = np.count_nonzero(norms > max_norm)
    (a,) = ax.plot(steps, norms, "o-", color=CHUNKS[0], ms=3, lw=1.2, label=f"global norm of the gradient ({clipped} "
                                                                            f"of {len(clips)} steps above max_norm)")
    a.set_gid("norm")
    (b,) = ax.plot(steps, after, "-", color=CHUNKS[1], lw=2.0, label="after clipping: norm x clip_coef")
    b.set_gid("clipped")
    ax.axhline(max_norm, color="0.3", ls="--", lw=1, label=f"max_norm = {max_norm:g}").set_gid("max_norm")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("L2 norm (fp32, over all shards)")
    ax.set_title(title or "Gradient clipping by global norm", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax

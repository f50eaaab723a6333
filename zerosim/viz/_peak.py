"""What one rank holds at the moment of its peak, stage by stage: the bars a memory chart must stack.

Each kind has its own peak (`MemoryLedger.peak_by_kind`), but those peaks happen at different
moments: at stage 0 the fp32 gradient peaks in the optimizer step, the activations in forward. Stacking
them overstates the peak (by about a fifth at stages 2 and 3 for notebook 03's MLP). These bars stack what was
live at the one moment the rank's total peaked, read from the ledger's timeline
(`MemoryLedger.peaks_by_phase`), so each bar's top is `ledger.peak()`.
"""

from __future__ import annotations

from zerosim.viz._palette import kind_colour, kind_label, kind_order

UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))


def at_peak(ledger, since: int = 0) -> tuple:
    """(phase, {kind: bytes}) live at the moment the ledger's total peaked (the first such moment)."""
    phases = ledger.peaks_by_phase(since)
    if not phases:
        raise ValueError("the ledger has no timeline to read the peak from (was the cluster made with timeline=False?)")
    return max(phases, key=lambda p: sum(p[1].values()))  # max keeps the first of equal peaks


def peak_by_stage_figure(runs: list, title: str = "", ax=None):
    """Stacked bars, one per run: the bytes of each kind live at that rank's peak moment.

    Args:
        runs: [(label, MemoryLedger), ...], e.g. [("stage 0", engine.cluster.ranks[0].ledger), ...].
        title: the axes' title.
        ax: draw into these axes (default: a new figure).
    Returns the Axes. Each segment carries the gid "kind:<kind>".
    """
    import matplotlib.pyplot as plt

    peaks = [at_peak(ledger) for _, ledger in runs]
    top = max(sum(holds.values()) for _, holds in peaks)
    scale, unit = next((s, u) for s, u in UNITS if top >= s)
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 4.4), dpi=150)
    order = kind_order(k for _, holds in peaks for k in holds)
    x = list(range(len(runs)))
    bottom = [0.0] * len(runs)
    for kind in order:
        heights = [holds.get(kind, 0) / scale for _, holds in peaks]
        for bar in ax.bar(x, heights, 0.6, bottom=bottom, color=kind_colour(kind), label=kind_label(kind),
                          edgecolor="white", linewidth=0.6):
            bar.set_gid(f"kind:{kind}")
        bottom = [b + h for b, h in zip(bottom, heights)]
    for i, (phase, _) in enumerate(peaks):
        ax.annotate(f"{bottom[i]:.3g} {unit}\nin {phase}", (i, bottom[i]), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [label for label, _ in runs])
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylim(0, max(bottom) * 1.25)
    ax.set_ylabel(f"{unit} live at the peak moment")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize=10)
    ax.figure.tight_layout()
    return ax


def mlp_runs(widths=(32, 256, 256, 256, 8), ranks: int = 4, precision: str = "bf16-mixed", batch: int = 16) -> list:
    """[("stage s", rank 0's ledger)] after one Adam step of an MLP at each stage (notebook 03's example)."""
    import numpy as np

    from zerosim.cluster import Cluster
    from zerosim.models import MLP, make_regression
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine

    model = MLP(list(widths))
    batches = make_regression(np.random.default_rng(0), ranks, batch, list(widths))
    runs = []
    for stage in range(4):
        engine = ZeroEngine(model, Cluster(ranks), stage, Adam(lr=1e-3), precision)
        engine.step(batches)
        runs.append((f"stage {stage}", engine.cluster.ranks[0].ledger))
    return runs

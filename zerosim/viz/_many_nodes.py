"""HSDP, MiCS, hpZ or FULL_SHARD for one job of many nodes: memory, bytes per link tier and step time, side by side.

Reads `zerosim.analysis.planner._strategy_sweep.StrategyRow`s (real engine steps on the meta backend, simulated on
NVLink within a node and InfiniBand across), never a formula: what an engineer choosing between FSDP2's HSDP and
ZeRO++'s hpZ for a ~1000-GPU job weighs. Memory kinds take the palette's colours; the two link tiers theirs.
"""

from __future__ import annotations

from zerosim.viz._palette import ORDER, PEAK_TICK, TIERS, kind_colour, kind_label

NAMES = {"full_shard": "FULL\nSHARD", "hsdp": "HSDP", "hsdp_no_sync": "HSDP (no sync)", "mics": "MiCS",
         "mics_hierarchical": "MiCS (hier.)", "hpz": "hpZ", "no_reshard": "no reshard", "reshard_to_group": "reshard→S"}


def row_label(row) -> str:
    """`HSDP\\nS = 64`: the strategy and its group, for an axis tick."""
    group = "" if row.group is None else ("\nS' = " if row.strategy in ("hpz", "reshard_to_group") else "\nS = ") + \
        f"{row.group:,}"
    return NAMES.get(row.strategy, row.strategy) + group


def many_nodes_figure(rows, capacity: float | None = None, gpu: str | None = None, title: str | None = None):
    """Three panels, one bar per row: (1) rank 0's model states at rest by kind, its secondary piece on top, its peak
    ticked, the GPU's capacity as a line; (2) GB one rank sends per step within nodes and across them; (3) the step:
    compute and the communication it waited for. Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    GB = 1e9
    fig, (mem, sent, time) = plt.subplots(1, 3, figsize=(15, 6.2))
    x = range(len(rows))
    labels = [row_label(r) for r in rows]
    kinds = [k for k in ORDER if any(r.states.get(k) for r in rows)]
    bottom = [0.0] * len(rows)
    for kind in kinds + ["secondary"]:
        heights = [(r.secondary if kind == "secondary" else r.states.get(kind, 0)) / GB for r in rows]
        if not any(heights):
            continue
        mem.bar(x, heights, 0.6, bottom=bottom, color=kind_colour(kind), label=kind_label(kind), gid=f"kind:{kind}")
        bottom = [b + h for b, h in zip(bottom, heights)]
    mem.plot(list(x), [r.peak / GB for r in rows], linestyle="none", marker="_", markersize=22, color=PEAK_TICK,
             markeredgewidth=2)
    handles, names = mem.get_legend_handles_labels()
    handles.append(Line2D([], [], linestyle="none", marker="_", markersize=12, color=PEAK_TICK, markeredgewidth=2))
    names.append("rank 0's peak (gathered units too)")
    if capacity is not None:
        mem.axhline(capacity / GB, color="grey", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="grey", linestyle="--", linewidth=1))
        names.append(f"{gpu or 'the GPU'}: {capacity / GB:.1f} GB")
    mem.set_ylabel("GB per rank")
    mem.set_title("memory: states at rest, the secondary piece", fontsize=10)
    mem.legend(handles, names, fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.2), frameon=False)

    w = 0.38
    for i, (tier, link) in enumerate((("intra-node", "NVLink (within a node)"), ("inter-node", "InfiniBand (across)"))):
        values = [(r.intra if tier == "intra-node" else r.inter) / GB for r in rows]
        sent.bar([j + (i - 0.5) * w for j in x], values, w, color=TIERS[tier], label=link, gid=f"tier:{tier}")
    sent.set_ylabel("GB one rank sends per step")
    sent.set_title("bytes by link tier", fontsize=10)
    sent.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.2), frameon=False)

    for i, tier in enumerate(("intra-node", "inter-node")):
        time.bar([j + (i - 0.5) * w for j in x], [r.busy.get(tier, 0.0) for r in rows], w, color=TIERS[tier],
                 gid=f"tier:{tier}", label=f"{'NVLink' if i == 0 else 'InfiniBand'} calls, busy")
    time.plot(list(x), [r.exposed for r in rows], linestyle="none", marker="_", markersize=22, color=PEAK_TICK,
              markeredgewidth=2, label="exposed: compute waited for it")
    compute = sorted({round(r.compute, 1) for r in rows})
    time.set_ylabel("seconds per step")
    span = f"{compute[0]:g}" if len(compute) == 1 else f"{compute[0]:g} to {compute[-1]:g}"
    time.set_title(f"communication per step (compute {span} s);\na call whose ring leaves a node runs at "
                   "InfiniBand's speed", fontsize=9)
    time.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.2), frameon=False)

    for ax in (mem, sent, time):
        ax.set_xticks(list(x), labels, fontsize=7.5)
        ax.grid(True, axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.36, top=0.88, wspace=0.25)
    return fig

"""Seed 001's memory layout across four GPUs, stage by stage: who holds which W, G and OS, from the ledgers.

Each stage is a panel; each GPU a row; W (the compute-format params), G (the gradients) and OS (the
optimizer states: fp32 master, m, v) each a lane spanning the whole model, as wide as the bytes plain
data parallelism (stage 0) holds of it: with fp16-mixed Adam, 2P, 2P and 12P of 16P, so the OS lane is
six times W's, and area is bytes (OS's three kinds are strips a third high). A GPU's block in a lane is
as wide as the bytes its ledger holds of that kind, over what stage 0 holds of it, and starts where the
rank's shard starts (`engine.region`): the diagonal of seed 001's ZeRO-3 picture appears because each
rank's ledger really holds 1/N, at offset r/N.
"""

from __future__ import annotations

from zerosim.viz._palette import kind_colour, kind_label

LANES = (("W", ("params",)), ("G", ("grads",)), ("OS", ("master", "optim:m", "optim:v")))
SPAN, GAP = 3.3, 0.12  # the three lanes' widths add to SPAN (axes units), GAP between lanes
TITLES = {
    0: "no ZeRO (plain data parallel)",
    1: "ZeRO-1: OS sharded",
    2: "ZeRO-2: G and OS sharded",
    3: "ZeRO-3: W, G and OS sharded",
}


def measure_ownership(model, world_size: int = 4, precision: str = "fp16-mixed") -> list:
    """Per stage, per rank: {kind: (fraction of the whole model, offset as a fraction)} after one step.

    The fraction is the rank's resting bytes of the kind over stage 0's (which holds all of it); the
    offset is where the rank's region starts in the padded flat buffer, for a sharded kind.
    """
    from zerosim.cluster import Cluster
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine

    held, engines = [], []
    for stage in range(4):
        engine = ZeroEngine(model, Cluster(world_size), stage, Adam(lr=1e-3), precision)
        engine.step(model.batches(engine.cluster) if hasattr(model, "batches") else _batches(model, world_size))
        held.append([r.ledger.by_kind() for r in engine.cluster.ranks])
        engines.append(engine)
    whole = held[0][0]  # stage 0: every rank holds every kind whole
    out = []
    for stage, (engine, ranks) in enumerate(zip(engines, held)):
        padded = engine.layout.padded
        rows = []
        for r, kinds in enumerate(ranks):
            row = {}
            for kind, full in whole.items():
                frac = kinds.get(kind, 0) / full
                row[kind] = (frac, engine.region(r).start / padded if frac < 1 else 0.0)
            rows.append(row)
        out.append({"stage": stage, "ranks": rows, "bytes": [sum(k.values()) for k in ranks], "whole": whole})
    return out


def _batches(model, n: int) -> list:
    import numpy as np

    from zerosim.models import make_regression

    return make_regression(np.random.default_rng(0), n, 8, model.widths)


def ownership_figure(model=None, world_size: int = 4, precision: str = "fp16-mixed"):
    """Four panels (stages 0-3), a row per GPU, lanes W | G | OS; blocks carry gid "kind:<kind>".
    Default model: an MLP [16, 32, 32, 8] (1,864 parameters, 466 per rank on 4 GPUs). Each lane's frame (gid
    "lane:W", "lane:G", "lane:OS") is as wide as stage 0's bytes of it, the three over `SPAN`. Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if model is None:
        from zerosim.models import MLP

        model = MLP([16, 32, 32, 8])
    stages = measure_ownership(model, world_size, precision)
    fig, axes = plt.subplots(len(stages), 1, figsize=(10, 0.42 * world_size * len(stages) + 1.5), dpi=120)
    whole = stages[0]["whole"]
    lane_bytes = {name: sum(whole[k] for k in kinds) for name, kinds in LANES}
    total = sum(lane_bytes.values())
    lane_w = {name: SPAN * b / total for name, b in lane_bytes.items()}  # widths in proportion to bytes
    lane_x, x = {}, 0.0
    for name, _ in LANES:
        lane_x[name], x = x, x + lane_w[name] + GAP
    for ax, st in zip(axes, stages):
        for r, row in enumerate(st["ranks"]):
            y = world_size - 1 - r
            for name, kinds in LANES:
                x0, h, width = lane_x[name], 0.8 / len(kinds), lane_w[name]
                frame = Rectangle((x0, y - 0.4), width, 0.8, fc="none", ec="0.8", lw=0.8)
                frame.set_gid(f"lane:{name}")
                ax.add_patch(frame)
                for j, kind in enumerate(kinds):
                    frac, offset = row.get(kind, (0.0, 0.0))
                    block = Rectangle(
                        (x0 + offset * width, y + 0.4 - (j + 1) * h),
                        frac * width,
                        h,
                        fc=kind_colour(kind),
                        ec="white",
                        lw=0.5,
                        label=kind_label(kind) if (st["stage"], r) == (0, 0) else None,
                    )
                    block.set_gid(f"kind:{kind}")
                    ax.add_patch(block)
            ax.text(x + 0.05, y, f"GPU {r}: {st['bytes'][r]:,} B", va="center", fontsize=8)
        ax.set_title(TITLES[st["stage"]], fontsize=9, loc="left")
        ax.set_xlim(-0.05, x + 0.75)
        ax.set_ylim(-0.6, world_size - 0.4)
        ax.set_xticks([lane_x[n] + lane_w[n] / 2 for n, _ in LANES], [""] * 3)
        ax.set_yticks([])
        ax.spines[["top", "right", "left"]].set_visible(False)
    per = {name: f"{b / model.num_params:g}P" for name, b in lane_bytes.items()}  # bytes per parameter
    axes[-1].set_xticks([lane_x[n] + lane_w[n] / 2 for n, _ in LANES],
                        [f"W: {per['W']}", f"G: {per['G']}", f"OS: {per['OS']} (fp32 master, m, v)"])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.suptitle(f"Seed 001's layout, measured: what each of {world_size} GPUs holds after one step "
                 f"({model.num_params:,} params, {precision});\neach lane spans the whole model and is as wide as "
                 f"the bytes it takes without ZeRO: {' + '.join(per.values())} = {total / model.num_params:g}P",
                 fontsize=10, y=0.995)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.945), fontsize=8, frameon=False, ncol=5)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    return fig

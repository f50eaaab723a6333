"""Who holds what on a 2 × 4 mesh, strategy by strategy: each GPU's shard of W, G and OS, and hpZ's secondary W.

The many-nodes counterpart of _ownership.py (seed 001's flat picture). One panel per strategy, a row per GPU
(two nodes of four, a line between them), lanes W | G | OS | W′ (hpZ's secondary piece), each lane the whole padded
flat model. Everything is read from a real engine after one step, never typed in:

    width of a block   the elements the rank's ledger holds of that kind (its buffers' array sizes) over Ψ, the
                       layout's padded length: 1/8 when sharded over the world, 1/4 over a shard group of 4
    where it starts    the rank's region in the layout (`engine.region`): position r of 8 (FULL_SHARD, hpZ), or
                       its position in its shard group (HSDP, MiCS: ranks r and r + 4 hold the same shard)
    W′ (hpZ)           freed when the step ends (DeepSpeed's `invalidate_secondary_tensor`), so read from the
                       ledger's peak of kind "secondary" (bytes over the params' itemsize); it starts where the
                       first of the M = N / S primary shards it gathers starts: `layout.own(p·M)` for position p
                       of the rank's secondary group (parallel/data/_gather.py `keep_secondary`)
"""

from __future__ import annotations

from zerosim.viz._palette import kind_colour, kind_label

STRATEGIES = ("full_shard", "hsdp", "mics", "hpz")
LANES = (("W", ("params",)), ("G", ("grads",)), ("OS", ("master", "optim:m", "optim:v")), ("W′", ("secondary",)))
TITLES = {
    "full_shard": "FULL_SHARD (ZeRO-3): every state in 8 shards, one per GPU",
    "hsdp": "HSDP (FSDP2, 2-D mesh): 4 shards within a node, replicated across the 2 nodes",
    "mics": "MiCS (DeepSpeed): 4 shards within a node, replicated across the 2 nodes",
    "hpz": "hpZ (ZeRO++): ZeRO-3's 8 shards, plus W′: a quarter of W per GPU, gathered within the node",
}


def _elements(ledger, kind: str) -> int:
    """Elements `ledger` holds now of `kind`: the sizes of its live buffers' arrays."""
    return sum(int(b.array.size) for b in ledger.live.values() if b.kind == kind)


def measure_mesh_ownership(model=None, nodes: int = 2, gpus_per_node: int = 4, strategies=STRATEGIES,
                           precision: str = "fp16-mixed") -> list:
    """Per strategy, per rank: {kind: (fraction of Ψ, offset as a fraction of Ψ)} after one step of an MLP on a
    `nodes` × `gpus_per_node` mesh (S = gpus_per_node); also each rank's resting bytes and the shard groups.
    Default model: MLP [8, 16, 8] (280 parameters: every parameter cuts evenly into 8, so no padding)."""
    import numpy as np

    from zerosim.cluster import Cluster
    from zerosim.models import MLP
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine

    if model is None:
        model = MLP([8, 16, 8])
    n = nodes * gpus_per_node
    out = []
    for strategy in strategies:
        options = {} if strategy == "full_shard" else {"shard_group": gpus_per_node}
        engine = ZeroEngine(model, Cluster(n, gpus_per_node=gpus_per_node), strategy, Adam(lr=1e-3), precision,
                            **options)
        rng = np.random.default_rng(0)
        engine.step(
            [(rng.standard_normal((2, model.widths[0])), rng.standard_normal((2, model.widths[-1]))) for _ in range(n)]
        )
        padded, secondary = engine.layout.padded, engine.groups.secondary
        rows = []
        for r, rank in enumerate(engine.cluster.ranks):
            ledger, region = rank.ledger, engine.region(r)
            row = {}
            for _, kinds in LANES[:3]:
                for kind in kinds:
                    frac = _elements(ledger, kind) / padded
                    row[kind] = (frac, region.start / padded if frac < 1 else 0.0)
            if secondary is not None:
                itemsize = next(b.array.itemsize for b in ledger.live.values() if b.kind == "params")
                m = n // secondary.size
                start = engine.layout.own(secondary.position(r) * m).start
                row["secondary"] = (ledger.peak("secondary") / itemsize / padded, start / padded)
            rows.append(row)
        out.append({"strategy": strategy, "ranks": rows, "padded": padded,
                    "bytes": [r.ledger.current() for r in engine.cluster.ranks],
                    "shard_groups": engine.groups.shard.members,
                    "replicas": engine.groups.replicas})
    return out


def mesh_ownership_figure(model=None, nodes: int = 2, gpus_per_node: int = 4):
    """Four panels (FULL_SHARD, HSDP, MiCS, hpZ) of a row per GPU, lanes W | G | OS | W′; blocks carry gid
    "kind:<kind>" and name the shard they hold ("3/8"). Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    runs = measure_mesh_ownership(model, nodes, gpus_per_node)
    n = nodes * gpus_per_node
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 0.3 * n * len(runs) + 2.2), dpi=110)
    lane_x = {name: 1.12 * i for i, (name, _) in enumerate(LANES)}
    seen = set()
    for ax, run in zip(axes, runs):
        for r, row in enumerate(run["ranks"]):
            y = n - 1 - r
            for name, kinds in LANES:
                x0, h = lane_x[name], 0.8 / len(kinds)
                ax.add_patch(Rectangle((x0, y - 0.4), 1, 0.8, fc="none", ec="0.82", lw=0.7))
                for j, kind in enumerate(kinds):
                    frac, offset = row.get(kind, (0.0, 0.0))
                    if not frac:
                        continue
                    block = Rectangle((x0 + offset, y + 0.4 - (j + 1) * h), frac, h, fc=kind_colour(kind),
                                      ec="white", lw=0.5, label=None if kind in seen else kind_label(kind))
                    seen.add(kind)
                    block.set_gid(f"kind:{kind}")
                    ax.add_patch(block)
                frac, offset = row.get(kinds[0], (0.0, 0.0))
                if 0 < frac < 1:  # which shard: its index among the 1/frac shards of the lane
                    ax.text(x0 + offset + frac + 0.01, y, f"{round(offset / frac)}/{round(1 / frac)}", va="center",
                            fontsize=6, color="0.3")
            ax.text(
                4.55, y, f"GPU {r} (node {r // gpus_per_node}): {run['bytes'][r]:,} B at rest", va="center", fontsize=7
            )
        for node in range(1, nodes):  # the line between nodes: what lies on each side talks over InfiniBand
            ax.axhline(n - node * gpus_per_node - 0.5, xmin=0.01, xmax=0.99, color="0.5", lw=0.8, ls="--")
        ax.set_title(TITLES.get(run["strategy"], run["strategy"]), fontsize=9, loc="left")
        ax.set_xlim(-0.05, 5.75)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_xticks([lane_x[x] + 0.5 for x, _ in LANES], [""] * len(LANES))
        ax.set_yticks([])
        ax.spines[["top", "right", "left"]].set_visible(False)
    axes[-1].set_xticks([lane_x[x] + 0.5 for x, _ in LANES], ["W: params", "G: gradients", "OS: fp32 master, m, v",
                                                              "W′: hpZ's secondary (forward to step)"], fontsize=8)
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    fig.suptitle(f"Who holds what on {nodes} nodes × {gpus_per_node} GPUs, after one step (read from the ledgers); "
                 "each lane is the whole model; n/k: the shard held", fontsize=10, y=0.995)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.975), fontsize=8, frameon=False, ncol=3)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig

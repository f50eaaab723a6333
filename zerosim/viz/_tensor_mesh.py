"""The mesh with a TP axis: which GPU holds which slice and which shard, and what each link carried, after one step.

Four nodes of two GPUs, tensor parallelism of degree 2 beside ZeRO-3 (torchtitan's mesh order: TP innermost, so a TP
group is a node's two GPUs — torchtitan's TP 8 fills an 8-GPU node the same way — and a data-parallel group takes
the GPU of one TP position on every node). Left: the mesh — a box per GPU coloured by its TP position (the slice of
every layer it holds), the ZeRO shard of that slice it keeps, solid lines for the TP groups (NVLink) and dashed for
the data-parallel groups (their rings cross the nodes). Right: the bytes each GPU sent in the step, split by what
for (TP's activations, ZeRO's parameters and gradients) and by link. Everything is read from a real engine's groups,
layout and trace: a GPT on the numpy backend (zerosim.parallel.tensor, parallel/data).
"""

from __future__ import annotations

from zerosim.viz._palette import TIERS

TP_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")  # one per TP position


def measure_tensor_mesh(nodes: int = 4, gpus_per_node: int = 2, tp: int = 2, sp: bool = True, seq_len: int = 8,
                        batch: int = 2) -> dict:
    """One ZeRO-3 step of a small GPT at TP `tp` on `nodes` × `gpus_per_node` GPUs: each GPU's TP position, data-
    parallel position and shard, its groups, and its bytes sent by purpose and link tier (from the trace's hops)."""
    import numpy as np

    from zerosim.cluster import Cluster
    from zerosim.models import GPT
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine
    from zerosim.parallel.tensor import TensorParallel

    n = nodes * gpus_per_node
    model = GPT(vocab=16, d_model=8 * tp, n_heads=2 * tp, n_layers=2, seq_len=seq_len)
    parallel = TensorParallel(model, tp, sp)
    cluster = Cluster(n, gpus_per_node=gpus_per_node)
    engine = ZeroEngine(parallel.model, cluster, 3, Adam(lr=1e-3), "bf16-mixed", parallelisms=(parallel,))
    rng = np.random.default_rng(0)
    dp = engine.dims.groups("dp")
    per_dp = [(rng.integers(0, 16, (batch, seq_len)), rng.integers(0, 16, (batch, seq_len))) for _ in range(dp.size)]
    engine.step(parallel.batches(engine.dims, per_dp))
    trace = cluster.trace
    purpose = {c.call: "tensor parallel" if c.purpose == "tensor parallel" else "ZeRO" for c in trace.calls}
    sent = [{(p, t): 0 for p in ("tensor parallel", "ZeRO") for t in TIERS} for _ in range(n)]
    for e in trace.events:
        sent[e.src][(purpose[e.call], e.tier)] += e.bytes
    tp_groups = engine.dims.groups("tp")
    return {
        "nodes": nodes, "gpus_per_node": gpus_per_node, "tp": tp, "sp": sp, "dp": dp.size,
        "tp_position": [tp_groups.position(r) for r in range(n)], "dp_position": [dp.position(r) for r in range(n)],
        "tp_groups": tp_groups.members, "dp_groups": dp.members,
        "local_params": parallel.model.num_params, "params": model.num_params,
        "shard": engine.layout.shard_size, "sent": sent,
    }


def tensor_mesh_figure(nodes: int = 4, gpus_per_node: int = 2, tp: int = 2, sp: bool = True):
    """Left: the mesh with its TP axis; right: the bytes each GPU sent, by purpose and link. Boxes carry gid
    "gpu:<r>", lines "tp group" / "dp group", bars "sent:<purpose>:<tier>". Returns the Figure."""
    import matplotlib.pyplot as plt

    m = measure_tensor_mesh(nodes, gpus_per_node, tp, sp)
    n = nodes * gpus_per_node
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 0.95 * nodes + 2.4), dpi=110,
                                   gridspec_kw={"width_ratios": [1, 1.1]})
    _mesh_panel(ax, m, nodes, gpus_per_node, tp)
    _sent_panel(bars, m, n)
    fig.tight_layout()
    return fig


def _mesh_panel(ax, m: dict, nodes: int, gpus_per_node: int, tp: int) -> None:
    """The mesh: each GPU a box coloured by its TP slice in its node's frame, the TP groups (NVLink) and the
    data-parallel groups (InfiniBand) drawn between them."""
    from matplotlib.patches import FancyBboxPatch, Rectangle

    n = nodes * gpus_per_node
    where = {}
    for r in range(n):
        node, slot = divmod(r, gpus_per_node)
        x, y = slot * 1.6, (nodes - 1 - node) * 1.25
        where[r] = (x, y)
        t, d = m["tp_position"][r], m["dp_position"][r]
        box = FancyBboxPatch((x, y), 1.2, 0.8, boxstyle="round,pad=0.03", fc=TP_COLOURS[t % len(TP_COLOURS)],
                             ec="0.25", alpha=0.9)
        box.set_gid(f"gpu:{r}")
        ax.add_patch(box)
        ax.text(x + 0.6, y + 0.56, f"GPU {r}", ha="center", fontsize=8, color="white", weight="bold")
        ax.text(x + 0.6, y + 0.34, f"TP slice {t}", ha="center", fontsize=7, color="white")
        ax.text(x + 0.6, y + 0.12, f"ZeRO shard {d} of {m['dp']}", ha="center", fontsize=7, color="white")
    for node in range(nodes):
        y = (nodes - 1 - node) * 1.25
        ax.add_patch(Rectangle((-0.15, y - 0.12), gpus_per_node * 1.6 - 0.1, 1.04, fc="none", ec="0.6", ls=":"))
        ax.text(-0.25, y + 0.4, f"node {node}", ha="right", va="center", fontsize=8, color="0.35")
    for group in m["tp_groups"]:
        for a, b in zip(group, group[1:]):
            (x0, y0), (x1, _) = where[a], where[b]
            ax.plot([x0 + 1.23, x1 - 0.03], [y0 + 0.4, y0 + 0.4], color=TIERS["intra-node"], lw=3, gid="tp group",
                    solid_capstyle="round")
    for group in m["dp_groups"]:
        xs = [where[r][0] for r in group]
        side = -0.08 if m["tp_position"][group[0]] == 0 else 1.28
        ys = [where[r][1] + 0.4 for r in group]
        ax.plot([xs[0] + side] * 2, [min(ys), max(ys)], color=TIERS["inter-node"], lw=1.3, ls="--", gid="dp group")
    ax.plot([], [], color=TIERS["intra-node"], lw=3, label=f"a TP group: a node's {tp} GPUs (NVLink)")
    ax.plot([], [], color=TIERS["inter-node"], lw=1.3, ls="--",
            label=f"a data-parallel group: the {m['dp']} GPUs of one TP slice, one a node (InfiniBand)")
    ax.set_xlim(-1.1, gpus_per_node * 1.6 + 0.1)
    ax.set_ylim(-0.4, (nodes - 1) * 1.25 + 1.0)
    ax.axis("off")
    ax.set_title(f"tp = {tp} x dp = {m['dp']}: each GPU holds 1/{tp} of every layer ({m['local_params']:,} of "
                 f"{m['params']:,} parameters),\nand ZeRO-3 cuts that slice into {m['dp']} shards over its "
                 "data-parallel group", fontsize=8.5, loc="left")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=7.5, frameon=False, ncol=1)


def _sent_panel(bars, m: dict, n: int) -> None:
    """The bytes each GPU sent in one step, stacked by purpose (TP, ZeRO) and link (NVLink, InfiniBand)."""
    bottom = [0.0] * n
    for purpose, hatch in (("tensor parallel", None), ("ZeRO", "//")):
        for tier, colour in TIERS.items():
            heights = [m["sent"][r][(purpose, tier)] / 1e3 for r in range(n)]
            if not any(heights):
                continue
            link = "NVLink" if tier == "intra-node" else "InfiniBand"
            what = "TP's activations" if purpose == "tensor parallel" else "ZeRO's params and grads"
            drawn = bars.bar(range(n), heights, bottom=bottom, color=colour, hatch=hatch, ec="white",
                             label=f"{what} over {link}")
            for patch in drawn:
                patch.set_gid(f"sent:{purpose}:{tier}")
            bottom = [b + h for b, h in zip(bottom, heights)]
    bars.set_ylim(0, 1.12 * max(bottom))
    bars.set_xticks(range(n), [f"GPU {r}" for r in range(n)], fontsize=7)
    bars.set_ylabel("kB sent in one step", fontsize=8)
    bars.set_title("What each GPU sent in one step, and over which link (the trace's hops):\nTP's every layer on "
                   "NVLink, ZeRO's across the nodes", fontsize=8.5, loc="left")
    bars.legend(fontsize=7.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    bars.spines[["top", "right"]].set_visible(False)

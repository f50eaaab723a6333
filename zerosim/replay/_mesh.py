"""Seed 004's four weights on a 2 × 2 mesh: one HSDP step told as "which GPU adds what, over which link".

Four GPUs on two nodes of two (GPU r on node r // 2). Node 0 trains on the seed's two samples (GPU 0: x = [1, 3],
t = 5; GPU 1: x = [2, 1], t = 7), node 1 on the same two the other way round (GPU 2 gets GPU 1's, GPU 3 GPU 0's), so
the average over the four GPUs is seed 004's average and the step lands on seed 004's weights — but each node adds
in its own order, and the nodes talk over InfiniBand.

HSDP (FSDP2's 2-D mesh, `_fsdp_collectives.py: foreach_reduce`): each unit's gradients are reduce-scattered within
the node's shard group (NVLink), then the reduced shard is all-reduced across the replicate group (InfiniBand).
FSDP2 cuts each parameter along dim 0 (`Shard(0)`): seed 004's weights are (1, 2), (1, 1) and (1,) tensors, one
row each, so position 0 of each shard group (GPUs 0 and 2) owns every weight and position 1 (GPUs 1 and 3) only
padding — the ownership FSDP2 itself would give these shapes. In fp16 FSDP2 splits the division by N = 4 in a
pre-divide by 2 before the reduce-scatter and a post-divide by 2 after the all-reduce (`_get_gradient_divide_
factors`; parallel/data/recipes/_divide_factors.py).

Every number comes from the engine's trace (hops with their values and link tier), its `Compute` and
`OptimizerStep` events: nothing is typed in. `mesh_replay()` returns plain data; `narrate_mesh()` tells it.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import TIERS, Cluster, Compute, OptimizerStep
from zerosim.models.mlp import TinyNet
from zerosim.optim import Adam
from zerosim.parallel.data import ZeroEngine
from zerosim.parallel.data.recipes import fsdp2_divide_factors
from zerosim.prose import wrap
from zerosim.replay._run import SEED_LR

PURPOSES = ("reduce grads", "replicate grads")


def _f(x) -> list:
    return np.asarray(x).astype(np.float64).tolist()


def mesh_batches() -> list:
    """The four GPUs' samples: the seed's two on node 0, the same two swapped on node 1."""
    a, b = TinyNet.seed_batches()
    return [a, b, b, a]


def mesh_replay(strategy: str = "hsdp", precision: str = "fp16-mixed", lr: float = SEED_LR) -> dict:
    """One step of seed 004's TinyNet on 2 nodes × 2 GPUs with `strategy` ("hsdp"; "mics" reduces the same way at
    the boundary); returns every number the narration tells (JSON-ready)."""
    if strategy not in ("hsdp", "mics"):
        raise ValueError(f"the 2 × 2 replay tells HSDP or MiCS (a shard group per node, replicas across), got "
                         f"{strategy!r}")
    model, cluster = TinyNet(), Cluster(4, gpus_per_node=2, keep_values=True, keep_steps=None)  # reads every step
    engine = ZeroEngine(model, cluster, strategy, Adam(lr=lr), precision, shard_group=2)
    layout, names = engine.layout, list(TinyNet.NAMES)
    # padded index -> flat weight index (-1: padding): arrange 1..P, whose padding comes out 0
    order = layout.arrange(np.arange(1, model.num_params + 1, dtype=np.float64), empty=np.zeros).astype(np.int64) - 1
    owns = []
    for r in range(4):
        own = engine.region(r)
        owns.append([names[i] if i >= 0 else "padding" for i in order[own]])
    engine.step(mesh_batches())
    trace = cluster.trace
    local = {r: {} for r in range(4)}
    for ev in trace.of_type(Compute):
        if ev.kind == "backward" and ev.values and ev.values.get("grads"):
            local[ev.rank][ev.name] = _f(np.concatenate([np.ravel(g) for g in ev.values["grads"].values()]))
    calls = {c.call: c for c in trace.calls if c.purpose in PURPOSES}
    hops = []
    for e in trace.events:
        if e.call in calls and e.elements:
            c = calls[e.call]
            phase = "gather" if c.op == "gather" else ("add" if c.collective != "all_gather" else "gather")
            hops.append({"call": e.call, "tag": c.tag, "collective": c.collective, "phase": phase, "group": c.group,
                         "src": e.src, "dst": e.dst, "tier": e.tier, "node_src": e.src // 2, "node_dst": e.dst // 2,
                         "values": _f(e.values), "bytes": e.bytes, "dtype": e.dtype})
    updates = {o.rank: o for o in trace.of_type(OptimizerStep)}
    factors = fsdp2_divide_factors(2, engine.precision.reduce_format.name, all_reduce_size=2)  # HSDP's: FSDP2's
    if strategy != "hsdp":
        # MiCS divides as DeepSpeed's ZeRO-3 does (parallel/data/recipes/_averaging.py): not narrated here
        factors = None
    return {
        "strategy": strategy, "precision": precision, "mesh": "2 nodes × 2 GPUs",
        "shard_groups": [list(g) for g in engine.groups.shard.members],
        "replicate_groups": [list(g) for g in engine.groups.replicate.members],
        "samples": [{"gpu": r, "x": _f(x[0]), "target": float(t[0, 0])} for r, (x, t) in enumerate(mesh_batches())],
        "owns": owns, "local_grads": local, "hops": hops,
        "pre_divide": factors and factors.pre, "post_divide": factors and factors.post,
        # what each GPU's optimizer read and wrote, on the weights it owns (its padding left out)
        "grad32": {r: dict(_named(owns[r], updates[r].values["grad32"])) for r in sorted(updates)},
        "master": [dict(_named(owns[r], m)) for r, m in enumerate(engine.master_shards())],
        "reduction_bytes": {tier: sum(h["bytes"] for h in hops if h["tier"] == tier) for tier in TIERS},
        "step_bytes": trace.bytes_by_tier(),  # the params' gathers (within each node) too
    }


def _named(names: list, values) -> list:
    return [(n, float(v)) for n, v in zip(names, np.asarray(values, np.float64)) if n != "padding"]


def _vec(xs) -> str:
    return "[" + ", ".join(np.format_float_positional(x, trim="-") for x in xs) + "]"


def narrate_mesh(result: dict) -> str:
    """The replay as text: who owns what, each GPU's gradients, every send (who adds what, over which link)."""
    link = {"intra-node": "NVLink, within a node", "inter-node": "InfiniBand, across nodes"}
    out = [f"Seed 004 on {result['mesh']}, {result['strategy'].upper()}, {result['precision']}",
           f"  shard groups (within a node): {result['shard_groups']}   replicate groups (across nodes): "
           f"{result['replicate_groups']}"]
    for s in result["samples"]:
        out.append(f"  GPU {s['gpu']} (node {s['gpu'] // 2}): x = {_vec(s['x'])}, t = {s['target']:g}; owns "
                   f"{', '.join(result['owns'][s['gpu']])}")
    if any(set(owned) == {"padding"} for owned in result["owns"]):  # why a GPU holds no weight at all
        # the shapes kept whole on one line: no-break spaces inside them while the words wrap, spaces again after
        shapes = ", ".join(str(tuple(s.shape)) for s in TinyNet().specs).replace(" ", "\xa0")
        out += [line.replace("\xa0", " ") for line in wrap(
            f"  (why padding: FSDP2 cuts each parameter along its first dimension, Shard(0); seed 004's weights are "
            f"{shapes}, one row each, so the first GPU of each shard group owns them all and the second padding only)",
            "   ")]
    out.append("Backward: each GPU's own gradients")
    for r, layers in result["local_grads"].items():
        out.append(f"  GPU {r}: " + "   ".join(f"{name} {_vec(g)}" for name, g in layers.items()))
    if result["pre_divide"]:
        out += wrap(f"Each GPU divides its gradients by {result['pre_divide']:g} before sending (FSDP2's fp16 "
                    f"pre-divide), and by {result['post_divide']:g} after the all-reduce: 4 GPUs in all", "  ")
    for h in result["hops"]:
        what = {"add": f"GPU {h['dst']} adds it to its own chunk", "gather": f"GPU {h['dst']} keeps it: the sum"}
        step = "reduce-scatter" if h["collective"] == "reduce_scatter" else \
            ("all-reduce (add)" if h["phase"] == "add" else "all-reduce (gather)")
        out.append(f"  [{h['tag']}] {step} over the {h['group']} group: GPU {h['src']} -> GPU {h['dst']} "
                   f"({link[h['tier']]}): {_vec(h['values'])}, {h['bytes']} B; {what[h['phase']]}")
    out.append("What each GPU's optimizer reads (fp32, averaged over the 4 GPUs) and its new fp32 master weights")
    for r, g in result["grad32"].items():
        new = result["master"][r]
        out.append(f"  GPU {r}: " + ("   ".join(f"{n}: grad {g[n]:g} -> {new[n]!r}" for n in g) or "padding only"))
    red, step = result["reduction_bytes"], result["step_bytes"]
    out.append(f"Gradient bytes sent: {red['intra-node']} B over NVLink, {red['inter-node']} B over InfiniBand "
               f"(the whole step, the params' gathers too: {step['intra-node']} B and {step['inter-node']} B)")
    return "\n".join(out)

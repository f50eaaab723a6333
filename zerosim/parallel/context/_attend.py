"""Ring attention alone: each rank's queries, keys and values in, each rank's output and log-sum-exp out, through the
very hops, sends and arithmetic the model's attention core runs (_communication.py, _core.py) — for a learner to
watch a ring carry K/V, for a test to hold against exact attention or torch's.

    o, lse = ring_attention(Cluster(2), q, k, v, fmt="bf16")     # q[i]: rank i's (B, H, L_r, d_h), k[i], v[i] alike

Letters: C ranks on the CP ring (the cluster's world, or each group of `group`), L_r = L / C tokens a rank, cut by
`split` (_split.py: rank p's tokens are `positions(L, split, C, p)`). The trace records every send.
"""

from __future__ import annotations

from zerosim.cluster import Groups, Handle
from zerosim.models.layers import BLOCK
from zerosim.parallel.context._communication import Layout, forward_hop, gather, gather_kv, torch_step
from zerosim.parallel.context._core import Gathered, Hop
from zerosim.parallel.context._model import check_mask, check_style
from zerosim.parallel.context._records import Ring
from zerosim.parallel.context._split import SPLITS, check_split
from zerosim.parallel.context._torch_core import TorchHop
from zerosim.precision import get_format


def ring_attention(cluster, q: list, k: list, v: list, style: str = "ring", split: str = "contiguous",
                   causal: bool = True, fmt="bf16", block: int = BLOCK, group: Groups | None = None,
                   watch=None) -> tuple:
    """([O (B, H, L_r, d_h) in fmt], [LSE (B, H, L_r) in acc]), one per local rank: attention of each rank's queries
    over the whole sequence's keys, with `style` "ring" (hop by hop, Transformer Engine's merge), "allgather" or
    "torch" (torch's own: all-gathered, merged step by step in fp32; `watch` sees its running fp32 `running`).
    `watch(j, states)`: called after hop j (ring) with every rank's `Ring` record, whose `steps` hold each hop's
    (out_i, lse_i, rows) so far — after the last hop too, beside the merged `lse` and the output `o` (what a
    narration reads: replay/_context.py)."""
    check_style(style), check_split(split), check_mask(style, split, bool(causal))
    group = Groups.world(cluster.world_size) if group is None else group
    f, C = get_format(fmt), group.size
    how, where = Layout(C, split, bool(causal)), [group.position(r.index) for r in cluster.ranks]
    pieces, n_rep = SPLITS[split], q[0].shape[1] // k[0].shape[1]
    states = [Ring(None, qi, (ki, vi)) for qi, ki, vi in zip(q, k, v)]
    if style == "allgather":
        unit = Gathered(pieces, n_rep, block, "attention.gathered")
        states, _ = gather(cluster, group, states, where, unit, how, "forward")
        states = [unit.forward({}, s, f)[0] for s in states]
    elif style == "torch":  # every rank's K/V all-gathered once, then torch's steps (_torch_core.py)
        steps = [TorchHop(j, C, pieces, n_rep, block, f"attention.hop{j}") for j in range(C)]
        every, _ = gather_kv(cluster, group, states, steps[0], "forward")
        states = [s.but(gathered=g) for s, g in zip(states, every)]
        for j, unit in enumerate(steps):
            states = [unit.forward({}, s, f)[0] for s in torch_step(states, where, unit, how, "forward")]
            if watch is not None:
                watch(j, states)
    else:
        ahead = Handle()
        for j in range(C):
            hop = Hop(j, C, pieces, n_rep, block, f"attention.hop{j}", keep_steps=watch is not None)
            states, _, ahead = forward_hop(cluster, group, states, where, hop, how, ahead)
            states = [hop.forward({}, s, f)[0] for s in states]
            if watch is not None:
                watch(j, states)
    return [s.o for s in states], [s.lse for s in states]

"""What crosses between neighbouring stages: a micro-batch's activation forward, its gradient backward, one
point-to-point call per tensor (zerosim.collectives.send_pairs: torch's `batch_isend_irecv` of a stage's
`get_fwd_send_ops` / `get_bwd_send_ops`, Megatron-Core's p2p_communication.py `_communicate`).

Every rank of a stage sends to the rank of the next (or previous) stage with its data- and tensor-parallel
coordinates: the pp group's next member (parallel/_dims.py: `groups("pp")`). An activation made of parts (tensor
parallelism's residual stream beside the value, parallel/tensor/_bundle.py) crosses part by part; a part that is
the same array as another (the gradient a norm hands back to both, `Bundle(dx, dx)`) crosses once, as Megatron's
one hidden-state tensor does. On the meta backend hosting one rank a stage, `send_pairs` records the sends of the
ranks it stands for too, from the two stages' blocks the call is made within (the engine's `_send`).
"""

from __future__ import annotations

import dataclasses

from zerosim.cluster import Handle
from zerosim.collectives import send_pairs


def _parts(a) -> list:
    """[(field names, array)]: an array alone, or a bundle's distinct arrays by the fields that hold them."""
    if not dataclasses.is_dataclass(a):
        return [((), a)]
    out = {}
    for f in dataclasses.fields(a):
        v = getattr(a, f.name)
        if v is not None:
            names, _ = out.setdefault(id(v), ([], v))
            names.append(f.name)
    return [(tuple(names), v) for names, v in out.values()]


def hand_on(cluster, sent: dict, peers: dict, tag: str) -> tuple:
    """Rank r sends `sent[r]` (an activation or a gradient) to rank `peers[r]`, every r at once. Returns ({receiving
    rank: what it received, of the sender's kind}, the calls' handle)."""
    ranks = [rank.index for rank in cluster.ranks]
    senders = sorted(sent)
    layouts = {r: _parts(sent[r]) for r in senders}
    count = len(layouts[senders[0]]) if senders else 0
    if any(len(p) != count or [n for n, _ in p] != [n for n, _ in layouts[senders[0]]] for p in layouts.values()):
        raise ValueError(f"{tag}: the ranks of a stage hand on activations of different makes")
    came_from = {peers[r]: r for r in senders}
    got, handle = {dst: {} for dst in came_from}, Handle()
    for k in range(count):
        names = layouts[senders[0]][k][0] if senders else ()
        part = tag if not names or len(layouts[senders[0]]) == 1 else f"{tag} ({'/'.join(names)})"
        out = send_pairs(cluster, [layouts[r][k][1] if r in sent else None for r in ranks],
                        [peers[r] if r in sent else None for r in ranks], [came_from.get(r) for r in ranks], part)
        handle += out.handle
        for r, a in zip(ranks, out):
            if r in came_from:
                got[r][names] = a
    received = {}
    for dst, src in came_from.items():
        original = sent[src]
        if not dataclasses.is_dataclass(original):
            received[dst] = got[dst][()]
            continue
        fields = {name: a for names, a in got[dst].items() for name in names}
        received[dst] = dataclasses.replace(original, **fields)
    return received, handle

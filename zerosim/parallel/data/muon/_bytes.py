"""Hand formulas: the extra bytes each rank sends, and the most it holds at once, for one sharded Muon step.

Letters: n ranks of a shard group (positions p), M a Muon matrix, c_M(p) the elements of M position p holds,
W_M = Σ_p c_M(p) (M on the wire, padding included), S(M) = {p : c_M(p) > 0}, o(M) its owner, g the gather's
bytes per element (4, or 2 for a bf16 gather), 4 the update's (fp32), s the shard.

Sent (tests/test_muon_sharded.py checks them against the trace, call by call summed per rank):

    gather        Σ_M (W_M − c_M(p+1 mod n))·g                     a ring all-gather skips one chunk
    owner         Σ_{M: o(M)≠p} c_M(p)·g  +  Σ_{M: o(M)=p} (W_M − c_M(p))·4      pieces in, slices back
    round_robin   Σ_{M: o(M)≠p} c_M(p)·g  +  Σ_blocks (Σ_q k_q − k_{p+1 mod n})·4   k_q: W of q's matrix in the block
    distributed   Σ_{M: p∈S(M)} c_M(p)·(|S(M)| − 1)·g                 its piece to every other sharer

Held, the ledgers' peak of kind "muon" (U and the update take the gradient's place on the shard, so only what the
plan gathers counts; _step.py frees each buffer as soon as its use is done):

    gather        max_M W_M·(g + 4)                            M whole as received, then its update
    owner         max_bucket max(R_p + 4·Σ_{M: o(M)=p} W_M, 4·Σ_M c_M(p))    R_p = g·Σ_{M: o(M)=p} W_M
    round_robin   max_block max(W_mine·(g + 4), 4·Σ_q k_q)
    distributed   max_bucket (g·Σ_{M: p∈S(M)} W_M + 4·max_{M: p∈S(M)} W_M)

(A narrower wire widens M into a buffer of its own before Newton-Schulz, freed before the update is made, so it
adds nothing to the maximum.)
"""

from __future__ import annotations

from zerosim.parallel.data.muon import _owners as owners
from zerosim.precision import get_format


def _wire_bytes(optimizer) -> int:
    return 4 if optimizer.gather is None else get_format(optimizer.gather).itemsize


def _owner_buckets(optimizer, mats, n: int) -> list:
    """[(bucket, owners)] as _step.py forms them: units with torchtitan's balance, or KellerJordan's muon.py blocks."""
    if optimizer.sharding == "round_robin":
        order, own = owners.round_robin([m.shape for m in mats], n)
        return [([mats[i] for i in order[a : a + n]], [own[i] for i in order[a : a + n]])
                for a in range(0, len(order), n)]
    units = owners.units_of_at_least(mats, n)
    assigned = owners.balanced([[(owners.ns_flops(m.shape, optimizer.ns_steps), m.wire * 4, m.name) for m in b]
                                for b in units], n)
    return list(zip(units, assigned))


def extra_bytes_sent(optimizer, mats, n: int) -> list:
    """Bytes each of the n positions sends in one step of `optimizer.sharding` (the module docstring's formulas)."""
    g, plan = _wire_bytes(optimizer), optimizer.sharding
    out = [0] * n
    for p in range(n):
        if plan == "gather":
            out[p] = sum((m.wire - m.counts[(p + 1) % n]) * g for m in mats)
        elif plan == "distributed":
            out[p] = sum(m.counts[p] * (len(m.holders()) - 1) * g for m in mats if m.counts[p])
        else:
            for bucket, own in _owner_buckets(optimizer, mats, n):
                out[p] += sum(m.counts[p] * g for m, o in zip(bucket, own) if o != p)
                if plan == "owner":
                    out[p] += sum((m.wire - m.counts[p]) * 4 for m, o in zip(bucket, own) if o == p)
                else:
                    k = [0] * n
                    for m, o in zip(bucket, own):
                        k[o] = m.wire
                    out[p] += (sum(k) - k[(p + 1) % n]) * 4
    return out


def extra_bytes_held(optimizer, mats, n: int) -> list:
    """The most bytes of kind "muon" each of the n positions holds at once in one step (see the module docstring)."""
    g, plan = _wire_bytes(optimizer), optimizer.sharding
    out = []
    for p in range(n):
        if plan == "gather":
            extra = max((m.wire * (g + 4) for m in mats), default=0)
        elif plan == "distributed":
            extra = max((g * sum(m.wire for m in b if m.counts[p]) + 4 * max(m.wire for m in b if m.counts[p])
                         for b in owners.by_unit(mats) if any(m.counts[p] for m in b)), default=0)
        elif plan == "owner":
            extra = 0
            for bucket, own in _owner_buckets(optimizer, mats, n):
                mine = sum(m.wire for m, o in zip(bucket, own) if o == p)
                extra = max(extra, (g + 4) * mine, 4 * sum(m.counts[p] for m in bucket))
        else:
            extra = 0
            for bucket, own in _owner_buckets(optimizer, mats, n):
                mine = sum(m.wire for m, o in zip(bucket, own) if o == p)
                extra = max(extra, (g + 4) * mine, 4 * sum(m.wire for m in bucket))
        out.append(extra)
    return out

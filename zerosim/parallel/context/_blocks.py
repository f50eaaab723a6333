"""Which block of attention a CP rank computes at each hop of the ring, and what the all-gather variant computes: the
schedule, as data, apart from the arithmetic (_core.py) and the communication (_communication.py).

Letters: C the CP degree, p a rank's position in its CP group, j the hop (0 .. C−1), s = (p − j) mod C the position
whose keys and values p holds at hop j (they travel p → p + 1: Transformer Engine's `send_dst = cp_global_ranks[(rank
+ 1) % cp_size]`). A rank's tokens come in pieces (_split.py): one (contiguous) or two halves (zigzag: chunks p and
2C − 1 − p). A `Block` names the pieces of Q and of the held K/V that meet, and whether the causal mask applies:

    causal, zigzag (Transformer Engine 2.18, context_parallel.py, AttnFuncWithCPAndKVP2P.forward):
        j = 0           Q (both) × K/V (both), causal      "diagonal"
        0 < j ≤ p       Q (both) × K/V (first half)        "lower-triangle": s < p, its second chunk is future
        j > p           Q (second half) × K/V (both)       "upper-triangle": s > p, only p's late chunk sees it
    causal, contiguous (torch 2.13, _context_parallel/_attention.py `_is_causal_behavior` without load balancing):
        j = 0           Q × K/V, causal                    IS_CAUSAL
        0 < j ≤ p       Q × K/V                            NOT_IS_CAUSAL (s < p)
        j > p           nothing                            SKIP (s > p: all future)
    not causal: every hop Q × K/V, no mask ("all")

Backward visits the hops in reverse (Transformer Engine's backward ring runs the other way, `send_dst` = rank − 1,
and starts from the last K/V the forward received): hop j's dK and dV join the sum for position s that travels with
the K/V, dQ the rank's own. The first hop to write a piece copies its gradient in, the later ones add (TE's
`dq.copy_(dq_)` / `dk.add_(dk_)` rules): `first_dq` and `first_dkv` name those pieces.

The all-gather variant (Transformer Engine's AttnFuncWithCPAndKVAllGather, whose docstring points to §3.3.2 of the
Llama 3 paper: K and V all-gathered first, then attention for the rank's own queries): every piece of Q attends to
the gathered keys up to the end of its own chunk (causal, its mask aligned to the bottom right corner,
`get_kv_seq_info_after_all_gather`), or to all of them.
"""

from __future__ import annotations

import functools

from zerosim._dataclass import dataclass
from zerosim.parallel.context._split import SPLITS, chunk_ids


@dataclass(frozen=True)
class Block:
    """One hop's work: the pieces of Q (`q`) that attend to the pieces of the held K/V (`k`), masked or not; and in
    backward, the pieces this hop writes first (copies in) into dQ and into the travelling dK/dV."""

    q: tuple
    k: tuple
    causal: bool
    first_dq: tuple = ()
    first_dkv: tuple = ()


def _forward_block(split: str, causal: bool, cp: int, p: int, j: int) -> Block | None:
    both = tuple(range(SPLITS[split]))
    if not causal:
        return Block(both, both, False)
    if j == 0:
        return Block(both, both, True)
    below = (p - j) % cp < p
    if SPLITS[split] == 1:
        return Block(both, both, False) if below else None
    return Block(both, (0,), False) if below else Block((1,), both, False)


@functools.lru_cache(maxsize=8192)  # every unit of every step asks again: O(C) work, the same answer
def ring_block(split: str, causal: bool, cp: int, p: int, j: int) -> Block | None:
    """Position p's work at hop j (None: nothing, torch's SKIP), with its backward's first writes."""
    block = _forward_block(split, causal, cp, p, j)
    if block is None:
        return None
    later = range(j + 1, cp)  # the hops backward runs before this one
    wrote_q = {piece for h in later for piece in _pieces(_forward_block(split, causal, cp, p, h), "q")}
    s = (p - j) % cp  # whose K/V: before p, the holders at hops C−1 .. j+1 were s + h
    wrote_kv = {piece for h in later for piece in _pieces(_forward_block(split, causal, cp, (s + h) % cp, h), "k")}
    return Block(block.q, block.k, block.causal, tuple(x for x in block.q if x not in wrote_q),
                 tuple(x for x in block.k if x not in wrote_kv))


def _pieces(block: Block | None, side: str) -> tuple:
    return () if block is None else getattr(block, side)


def ring_schedule(split: str, causal: bool, cp: int, p: int) -> tuple:
    """Position p's blocks, hop by hop."""
    return tuple(ring_block(split, causal, cp, p, j) for j in range(cp))


@dataclass(frozen=True)
class Reach:
    """All-gather: piece `q` of a rank's Q attends to the gathered keys [0, `stop`) in sequence order."""

    q: int
    stop: int
    causal: bool


def gathered_reach(split: str, causal: bool, cp: int, p: int, length: int) -> tuple:
    """Position p's pieces and the keys each attends to, in the order Transformer Engine computes them."""
    chunk = length // (SPLITS[split] * cp)
    return tuple(Reach(i, (c + 1) * chunk if causal else length, causal)
                 for i, c in enumerate(chunk_ids(split, cp, p)))


# -- what each block costs: the time model's view of the schedule (analysis/costs/_context_work.py) ---------------
def block_shapes(style: str, split: str, causal: bool, cp: int, position: int, hop: int | None,
                 tokens: int) -> tuple:
    """((queries, keys, causal), ...) of the attention position p computes in one unit on its `tokens` (L_r): the
    ring's hop `hop` (one block, or none where it skips), or the all-gather's core (`hop` None: one per piece, against
    the gathered keys it reaches)."""
    pieces = SPLITS[split]
    size = tokens // pieces
    if style == "allgather":
        return tuple((size, r.stop, r.causal) for r in gathered_reach(split, causal, cp, position, tokens * cp))
    block = ring_block(split, causal, cp, position, hop)
    if block is None:
        return ()
    return ((len(block.q) * size, len(block.k) * size, block.causal),)


def block_work(shapes: tuple) -> float:
    """Query-key pairs the kernel computes over `shapes` (block_shapes): queries × keys, half of a causal diagonal
    block's (its mask aligned to the bottom right, FlashAttention skips the tiles above it: the convention of
    costs/_kernel_work.py's 4·B·H·L²·d_h / 2)."""
    return sum(q * (k - q / 2 if causal else k) for q, k, causal in shapes)


@functools.lru_cache(maxsize=256)
def busiest_position(split: str, causal: bool, cp: int) -> int:
    """The CP position whose attention costs the most over the ring's hops (the first of equals). At every hop of
    the ring it computes at least what any other position does (contiguous and causal: the last position, which sees
    every earlier chunk; zigzag or not causal: every position alike), so where one rank stands for all (the meta
    backend's representative) it is this one: each send waits for the slowest rank of its ring."""
    def work(p):
        return sum(block_work(block_shapes("ring", split, causal, cp, p, j, 2 * cp)) for j in range(cp))

    return max(range(cp), key=lambda p: (work(p), -p))

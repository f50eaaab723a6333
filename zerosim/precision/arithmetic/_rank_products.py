"""Every rank's product by the same matrix, made as one: the ranks' operands stacked, one exact product, one proof.

In a data-parallel step every rank multiplies its own activation by the same weights: N products of (B, K) @ (K, D)
where one of (N·B, K) @ (K, D) gives the same elements. Under the portable kernels the same *bits* too: each element
is its exact dot product rounded once (_exact_matmul.py), whichever GEMM, blocking or proof produced it. One product
pays the float64 GEMM's fixed cost, the facts, the search for unsure elements and the Python around them once,
where the ranks paid them N times (measured alone, random bf16 operands of the yardstick's shapes: 919k
parameters on 8 ranks, a forward's three products 21.3 → 16.9 ms; 10k on 64, two layers' 1.8 → 1.3 ms; in a step,
docs/speed.md section 1, item 11).

How a product is found, for the tensors `Arithmetic.prepare` was handed before the op (each rank's x or dy):

    the first rank to ask for a @ b   computes its own, and b is noted (where it lies, for an immutable b: a
                                      ZeRO-3 gather's shared window, collectives/_fast.py `frozen`; else its bytes)
    a second rank asks with an equal b   every other prepared tensor is stacked (a copy of their values) and
                                      multiplied by b once; its block is the answer, the others kept for their ranks
    each later rank                   its block, once its tensor is seen to hold the values stacked (compared bit
                                      for bit) and its b to be the noted one; anything else computes afresh

So a rank whose weights differ (tensor parallelism), an operand changed after it was stacked, or a product no other
rank asks for costs at most the one stacked product it did not use, and never a wrong bit. A stacked product that
is not finite everywhere is not used (an inf or NaN operand's product is the long way's, left per rank as before;
tests/test_rank_products.py). The memo lives until the next `prepare` (or `clear_kept_operands`).
"""

from __future__ import annotations

import _thread

import numpy as np
import xxhash

from zerosim.precision.arithmetic._extents import narrow_host
from zerosim.precision.arithmetic._operand_cache import immutable_owner

_SMALL_PARTNER = 1 << 14  # bytes: a mutable b up to this size is noted by its bytes; a larger one only if immutable
_MOST_STACKED = 64 << 20  # bytes of stacked operands at most: past this the ranks multiply one by one


class _Batch:
    """The prepared tensors of one op and the stacked products made for them so far."""

    def __init__(self, tensors: list):
        self.tensors = tensors  # distinct arrays, in the order handed over
        self.index = {id(t): i for i, t in enumerate(tensors)}
        self.asked = {}  # partner key -> (position of the rank that asked first: its own product; partner's bytes)
        self.blocks = {}  # partner key -> (partner's bytes, {position: (its rows of the stacked operand, its block)})
        self.pinned = {}  # id -> immutable partner's owner: no other object takes its id while its key stands
        self.lock = _thread.allocate_lock()  # threading.Lock, without importing threading


_batch: list = [None]


def prepare(tensors) -> None:
    """Note the tensors every rank's next op multiplies (as they come: `Arithmetic.prepare`), for `take`."""
    kept, seen = [], set()
    for t in tensors:
        if id(t) not in seen and narrow_host(t) and t.ndim >= 2 and t.flags.c_contiguous and t.size:
            seen.add(id(t))
            kept.append(t)
    first = kept[0] if kept else None
    same = first is not None and all(t.dtype == first.dtype and t.shape[-1] == first.shape[-1] for t in kept)
    fits = same and sum(t.nbytes for t in kept) <= _MOST_STACKED
    _batch[0] = _Batch(kept) if fits and len(kept) > 1 else None


def clear() -> None:
    _batch[0] = None


def take(a, b, multiply):
    """a @ b from a stacked product (the same bits as multiply(a, b), the exact product), or None where there is
    none to take: `a` not prepared, `b` not one every rank multiplies by, or this rank the first to ask (module
    docstring). `multiply` makes the stacked product."""
    batch = _batch[0]
    if batch is None:
        return None
    position = batch.index.get(id(a))
    if position is None or batch.tensors[position] is not a or b.ndim != 2 or not narrow_host(b):
        return None
    key, data = _partner_key(b, batch)
    if key is None:
        return None
    with batch.lock:
        kept = batch.blocks.get(key)
        if kept is None:
            first, noted = batch.asked.setdefault(key, (position, data))
            if first == position or noted != data:  # the first to ask (its own product), or a hash collision
                return None
            kept = batch.blocks[key] = (data, _stacked(batch, b, first, multiply))
        elif kept[0] != data:  # a hash collision: another partner under the same key
            return None
        found = kept[1].pop(position, None)
    if found is None:
        return None
    rows, block = found
    if not _same_bits(rows, a):  # changed since it was stacked
        return None
    return block


def _partner_key(b, batch) -> tuple:
    """(key, bytes) that name b's values: for a small b, XXH3-64 of its bytes in memory order, and the bytes to
    compare on a hit (~1 µs: Python's own hash of the bytes cost several); for a larger immutable one, where it lies
    (its owner pinned by the batch; ~2 µs), and None; (None, None) for a large mutable b (comparing it would cost
    what stacking saves)."""
    if b.nbytes <= _SMALL_PARTNER:
        flags = b.flags
        if not (flags.c_contiguous or flags.f_contiguous):
            return None, None
        data = (b if flags.c_contiguous else b.T).tobytes()
        return ("bytes", b.shape, flags.c_contiguous, b.dtype, xxhash.xxh3_64_intdigest(data)), data
    owner = immutable_owner(b)
    if owner is None:
        return None, None
    batch.pinned[id(owner)] = owner
    return ("at", id(owner), b.ctypes.data, b.shape, b.strides, b.dtype), None


def _stacked(batch, b, skip: int, multiply) -> dict:
    """{position: (rows, block)} for every prepared tensor but `skip`'s: one exact product of them all, stacked;
    {} where the product is not finite everywhere (then each rank computes its own)."""
    positions = [i for i in range(len(batch.tensors)) if i != skip]
    parts = [t if t.ndim == 2 else t.reshape(-1, t.shape[-1]) for t in (batch.tensors[i] for i in positions)]
    stack = np.concatenate(parts)  # (Σ rows, K) a copy: the values each block was made from
    product = multiply(stack, b)  # (Σ rows, N) float32
    if not np.isfinite(product).all():
        return {}
    made, start = {}, 0
    for i, part in zip(positions, parts):
        stop = start + part.shape[0]
        block = product[start:stop]  # (rows_i, N)
        made[i] = (stack[start:stop], block if part is batch.tensors[i] else block.reshape(
            batch.tensors[i].shape[:-1] + (b.shape[1],)))  # a 2-D operand is its own rows: no reshape
        start = stop
    return made


def _same_bits(rows, a) -> bool:
    """Every bit of `a` (C-ordered) equal to `rows`', its values when stacked."""
    if a.nbytes <= _SMALL_PARTNER:
        return rows.tobytes() == a.tobytes()
    uint = _UINT[a.dtype.itemsize]
    return bool((rows.view(uint) == a.reshape(rows.shape).view(uint)).all())


_UINT = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}

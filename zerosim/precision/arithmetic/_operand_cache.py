"""A large operand widened and measured once per content, not once per product: widen once per gather.

In a ZeRO step every rank multiplies by the same gathered weights, in forward and again in backward (N = 8 ranks:
16 products by each weight matrix). exact_matmul needs each operand widened to float64 and its facts by row or
column (_extents.py); for a 1024 x 512 bf16 weight those cost ~0.3 ms a product, as much as the GEMM's rounding.
This keeps them for the last few large operands it saw, keyed by content:

    key      dtype, shape in memory order, and XXH3-64 of 512 elements spread over the matrix (~1 µs)
    check    on a hit, the kept bits compared with the operand's, element for element (~20 µs for 1 MB): the key
             says where to look, the comparison says it is the same matrix, so two matrices that agree on the
             sample (or whose hashes collide) cost a recomputation, never a wrong bit
    entry    the bits (for the check), the float64 copy (read-only), the facts per axis, computed when first asked

An immutable operand (one that views a `bytes` object, which nothing can write: the window a ZeRO-3 gather hands
every rank of a ring, collectives/_fast.py `frozen`) is found the second time by where it lies instead (the bytes'
identity, its address, dtype and shape, ~2 µs): its bits are compared once per gather, not once per rank and product.
A transposed view (the forward's W.T) shares the entry of the matrix it views, its axes swapped. Only 2-D operands
of at least `_SMALLEST` elements are kept (below that, the hash and the check cost more than they save) and at most
`_LARGEST` (a quarter of the budget: one embedding table must not hold hundreds of MB after its product), at most
`_BUDGET_BYTES` in all, the least recently used dropped first. The cache is a pure memo: every answer is what
computing it afresh gives (tests/test_exact_matmul_bound.py), and it holds no state a user sees. Threads (the
cluster's `workers`) may share it: a lock guards the table; a value computed twice is the same value.

Small operands (at most `_SMALL_BYTES`: a small model's activations, gradients and weights) keep only their extent,
the whole bound's two facts (`kept_extent`), keyed by XXH3-64 of their bytes and checked against the bytes. Before
each op an engine hands over what every rank is about to multiply (`remember_extents`, through
`Arithmetic.prepare`): measured together, in a few NumPy calls, where each rank's product would measure its own
alone (10k parameters on 64 ranks: 384 activations and gradients a step, benchmarks/yardstick.py). Operands
between (2-D, below `_SMALLEST` elements: a larger model's activations and gradients) keep their facts along both
axes, read in one pass (`kept_facts`): each is read by rows in one product and by columns in another.

An operand made for one op (the ranks' micro-batches stacked, models/_stacked.py) is named by `used_once` while the op
runs: nothing of it is kept, as nothing would ever find it again.
"""

from __future__ import annotations

import _thread
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np
import xxhash

from zerosim.precision.arithmetic._extents import extent, extent_of_pieces, extents, extents_along, narrow_host
from zerosim.precision.arithmetic._scratch import scratch

# A step's weights change at its update, so an entry older than a step is dead weight: the budget holds about two
# steps of the yardstick's 919k MLP (14 MB of entries a step). 64 MB held four, and the churn of the stale entries'
# megabytes cost ~2 ms of its ~84 ms step (benchmarks/yardstick.py, in turns)
_BUDGET_BYTES = 32 << 20
_SMALLEST = 1 << 15  # elements: a 256 x 128 matrix and up
_LARGEST = (_BUDGET_BYTES // 2) // 10  # elements (bits and float64 copy: up to 10 bytes each): half the budget
_SAMPLE = 512  # elements hashed to find an entry: the comparison of every bit decides, the hash only points


class _Entry:
    """One matrix in memory (C) order: its bits (M, N) uint (a copy, or an immutable matrix itself), its float64 copy
    (M, N), facts per axis on demand."""

    __slots__ = ("bits", "wide", "facts")

    def __init__(self, bits: np.ndarray, wide: np.ndarray):
        self.bits, self.wide, self.facts = bits, wide, {}

    @property
    def nbytes(self) -> int:
        return self.bits.nbytes + self.wide.nbytes


_entries: OrderedDict = OrderedDict()
_held = [0]  # bytes the entries hold, counted as they come and go (summed per insertion: ~0.8 ms a yardstick step)
_SMALL_BYTES, _SMALL_ENTRIES = 1 << 14, 512  # `kept_extent`: operands of at most 16 kB, at most 8 MB in all
_extents_kept: OrderedDict = OrderedDict()  # xxh3-64 of the bytes -> (bytes, dtype, extent)
_FACTS_BYTES = 8 << 20  # `kept_facts`: operands' bytes held at most (a step of the yardstick's 919k MLP: ~1.5 MB)
_facts_kept: OrderedDict = OrderedDict()  # xxh3-64 of the bytes -> (bytes, dtype, [facts axis 0, facts axis 1])
_facts_held = [0]
# immutable operands found by where they lie: (id of the `bytes` they view, address, dtype, shape) -> (the bytes,
# entry), the bytes they pin at most _AT_BYTES (a step of the yardstick's 919k MLP gathers 3.6 MB of windows)
_at: OrderedDict = OrderedDict()
_at_held = [0]
_AT_BYTES = 8 << 20
_lock = _thread.allocate_lock()  # threading.Lock, without importing threading (0.6 ms)


def _entry(matrix: np.ndarray) -> _Entry:
    """The entry for C-ordered narrow `matrix`, made (and the oldest dropped) when it is not kept yet. An immutable
    matrix (`immutable_owner`) is found by where it lies (~2 µs) after its first look-up by content: a ZeRO-3
    gather hands every rank the same one, so its bits are compared once, not once per rank."""
    owner = immutable_owner(matrix)
    if owner is None:
        return _entry_by_content(matrix)
    at = (id(owner), matrix.ctypes.data, matrix.dtype, matrix.shape)
    with _lock:
        found = _at.get(at)
    if found is not None and found[0] is owner:  # the alias holds the owner: no other object has taken its id
        return found[1]
    entry = _entry_by_content(matrix, copy=False)
    with _lock:
        _at[at] = (owner, entry)
        _at_held[0] += len(owner)
        while _at_held[0] > _AT_BYTES and len(_at) > 1:
            _at_held[0] -= len(_at.popitem(last=False)[1][0])
    return entry


def _entry_by_content(matrix: np.ndarray, copy: bool = True) -> _Entry:
    """`_entry` found by a hash of sampled elements and then every bit compared; its bits kept as a copy, or (an
    immutable matrix, `copy=False`) as the matrix itself."""
    bits = matrix.view(f"uint{matrix.dtype.itemsize * 8}")  # (M, N)
    sample = bits.reshape(-1)[:: max(1, bits.size // _SAMPLE)]  # (~_SAMPLE,) spread over the whole matrix
    key = (matrix.dtype, matrix.shape, xxhash.xxh3_64_intdigest(sample.tobytes()))
    with _lock:
        entry = _entries.get(key)
        if entry is not None:
            _entries.move_to_end(key)
    if entry is not None and _same(entry.bits, bits):
        return entry
    wide = matrix.astype(np.float64)  # (M, N) exact
    wide.flags.writeable = False
    entry = _Entry(bits.copy() if copy else bits, wide)
    with _lock:
        replaced = _entries.pop(key, None)  # the same key, other bits (a collision, or the matrix changed)
        _held[0] += entry.nbytes - (0 if replaced is None else replaced.nbytes)
        _entries[key] = entry
        while _held[0] > _BUDGET_BYTES and len(_entries) > 1:
            _held[0] -= _entries.popitem(last=False)[1].nbytes
    return entry


def immutable_owner(x) -> bytes | None:
    """The `bytes` object whose memory host array x views, or None. Where there is one, x's values never change:
    NumPy will not make an array over `bytes` writeable (a ZeRO-3 gather hands every rank such a window:
    collectives/_fast.py `frozen`), so x's address, shape and dtype name its content, and a kept entry found by them
    needs no comparison of its bits."""
    base = x.base
    while type(base) is np.ndarray:
        base = base.base
    return base if type(base) is bytes else None


def _same(kept: np.ndarray, bits: np.ndarray) -> bool:
    """Every bit of C-ordered `bits` equal to `kept`'s (same shape and dtype), compared 8 bytes at a time."""
    if bits.nbytes % 8 == 0:
        kept, bits = kept.reshape(-1).view(np.uint64), bits.reshape(-1).view(np.uint64)
    return bool((kept == bits).all())


class Operand:
    """A narrow host operand x with its float64 copy and its facts by axis, each computed at most once: kept across
    products (`operand`) for a large 2-D one, for this product only otherwise."""

    __slots__ = ("x", "_entry", "_transposed", "_wide", "_facts", "_once")

    def __init__(self, x, entry: _Entry | None = None, transposed: bool = False, once: bool = False):
        self.x, self._entry, self._transposed, self._wide, self._facts = x, entry, transposed, None, {}
        self._once = once  # made for one product (`operand_once`): its facts not remembered by content

    @property
    def wide(self) -> np.ndarray:
        """x as float64, exactly (read-only where kept)."""
        if self._entry is not None:
            return self._entry.wide.T if self._transposed else self._entry.wide
        if self._wide is None:
            self._wide = self.x.astype(np.float64)
        return self._wide

    def wide_in(self, slot: int) -> np.ndarray:
        """`wide`, where x's float64 copy is for this product alone (not kept): written into this thread's buffer
        `slot` (_scratch.py), laid out as `wide` lays it out (NumPy's `astype`: C order, or the last two axes swapped
        for a transposed view), valid until the slot's next use, so that a step's products do not each take fresh
        pages for it (a page fault per 4 kB; speed.md). A kept copy, or x of another layout, as `wide`."""
        x = self.x
        if self._entry is not None or self._wide is not None:
            return self.wide
        if x.flags.c_contiguous:
            x64 = scratch(x.shape, slot)
        elif x.ndim >= 2 and np.swapaxes(x, -1, -2).flags.c_contiguous:
            x64 = np.swapaxes(scratch(x.shape[:-2] + x.shape[:-3:-1], slot), -1, -2)
        else:
            return self.wide
        np.copyto(x64, x)
        return x64

    def facts(self, axis: int):
        """`extents(x, axis)`: max|x| and q along `axis` (negative: from the end), or None for NaN or inf."""
        if self._entry is None:
            if axis not in self._facts:
                both = None if self._once else kept_facts(self.x)  # both axes, remembered by content, or None
                self._facts[axis] = extents(self.x, axis) if both is None else both[axis % 2]
            return self._facts[axis]
        own = axis % 2
        own = 1 - own if self._transposed else own  # W.T's columns are W's rows
        kept = self._entry.facts
        if own not in kept:  # both axes at once: a kept matrix is read by rows and by columns (W.T, W; dy, dy.T)
            kept.update(enumerate(extents_along(self._entry.bits.view(self.x.dtype), (0, 1))))
        return kept[own]


def operand(x) -> Operand:
    """x (a narrow host array) ready for exact_matmul: its entry shared with every equal operand before it where
    x is large and 2-D (not one `used_once` names: `operand_once`)."""
    if _made_once and _made_once.get(id(x)) is x:
        return Operand(x, once=True)
    if (x.ndim == 2 and _SMALLEST <= x.size <= _LARGEST and (x.flags.c_contiguous or x.flags.f_contiguous)):
        transposed = not x.flags.c_contiguous
        return Operand(x, _entry(x.T if transposed else x), transposed)
    return Operand(x)


def operand_once(x) -> Operand:
    """x ready for exact_matmul where x was made for this one product (the ranks' operands stacked:
    _rank_products.py): its float64 copy and the one axis of facts the product reads, for it alone. Kept, as
    `operand` keeps a large one, a stack would cost a copy of its bits and both axes' facts, never be found again,
    and push out entries a later product would find (the gathered weights)."""
    return Operand(x, once=True)


_made_once: dict = {}  # id -> array, while a `used_once` block names it


@contextmanager
def used_once(*arrays):
    """Within the block, a product whose left operand is one of `arrays` (made for this one op: the ranks' rows
    stacked, models/_stacked.py) keeps nothing of it for later products, as `operand_once`. Kept by content, such a
    stack would never be found again (each op stacks anew; a product by its rank blocks is 3-D, never kept) and
    would fill the budget with entries of its bits and float64 copy: 32 MB after ~16 steps of benchmarks/
    yardstick.py's 10k MLP on 64 ranks. Names only what the block's thread multiplies (the stacked path runs with one
    worker); answers are the same either way, as the memo is pure."""
    added = [a for a in arrays if id(a) not in _made_once]
    for a in added:
        _made_once[id(a)] = a  # held, so that no other array takes its id while the block runs
    try:
        yield
    finally:
        for a in added:
            del _made_once[id(a)]


def kept_facts(x):
    """[facts along axis 0, facts along axis 1] (`extents`) of a 2-D narrow host array below `_SMALLEST` elements,
    both read in one pass and remembered by content: each rank's activations and gradients are read by rows in one
    product and by columns in another (x in forward and in dW, dy in dx and dW). None for other arrays. Keyed and
    checked as `kept_extent` is; at most `_FACTS_BYTES` of operands' bytes kept, the oldest dropped first."""
    if x.ndim != 2 or x.size >= _SMALLEST:
        return None
    flags, transposed = x.flags, False
    if not flags.c_contiguous:
        if not flags.f_contiguous:
            return None
        x, transposed = x.T, True  # the matrix it views: its axes swapped
    data = x.tobytes()
    key = xxhash.xxh3_64_intdigest(data)
    kept = _facts_kept.get(key)
    if kept is None or kept[0] != data or kept[1] != x.dtype:
        kept = (data, x.dtype, extents_along(x, (0, 1)))
        with _lock:
            old = _facts_kept.pop(key, None)
            _facts_held[0] += len(data) - (0 if old is None else len(old[0]))
            _facts_kept[key] = kept
            while _facts_held[0] > _FACTS_BYTES and len(_facts_kept) > 1:
                _facts_held[0] -= len(_facts_kept.popitem(last=False)[1][0])
    both = kept[2]
    return both[::-1] if transposed else both


def kept_extent(x):
    """`extent(x)` (max|x| and q over the whole of a narrow host array), remembered by content for small operands:
    a ZeRO step asks it of each rank's gathered weights twice and of each activation and gradient twice (x in
    forward and in dW, dy in dx and dW), at ~6 µs a time against ~1 µs for a look-up. Keyed by XXH3-64 of the
    bytes in memory order (a transposed view hashes as the matrix it views: the extent ignores the order), and on
    a hit the bytes themselves and the dtype are compared, so a collision costs a recomputation, never a wrong
    answer."""
    ordered = _in_memory_order(x)
    if ordered is None:
        return extent(x)
    data = ordered.tobytes()
    key = xxhash.xxh3_64_intdigest(data)
    kept = _extents_kept.get(key)
    if kept is not None and kept[0] == data and kept[1] == x.dtype:
        return kept[2]
    value = extent(ordered)
    with _lock:
        _extents_kept[key] = (data, x.dtype, value)
        _forget_oldest()
    return value


def remember_extents(tensors) -> None:
    """Measure the small narrow host arrays among `tensors` (the ones every rank's next op reads: `Arithmetic.prepare`)
    together, and keep each one's extent as `kept_extent` would: then each rank's product finds it (a look-up,
    ~1 µs) instead of measuring its operand alone (~6 µs, and ~1 µs to keep it). The answers are the ones
    measuring each alone gives (_extents.py `extent_of_pieces`), read from the very bytes kept beside them. One
    kept from before (the same batch again) is kept on as if new, for the op's later products to find too."""
    fresh, again = {}, []  # {key: (bytes, dtype)} to measure; keys kept already
    for x in tensors:
        ordered = _in_memory_order(x) if narrow_host(x) and x.size else None
        if ordered is None:
            continue
        data = ordered.tobytes()
        key = xxhash.xxh3_64_intdigest(data)
        kept = _extents_kept.get(key)
        if kept is not None and kept[0] == data and kept[1] == x.dtype:
            again.append(key)
        else:
            fresh[key] = (data, x.dtype)  # one entry per key: ranks that hold the same tensor
    made = []
    for dtype in {dtype for _, dtype in fresh.values()}:
        found = [(key, data) for key, (data, kind) in fresh.items() if kind == dtype]
        flat = np.frombuffer(b"".join(data for _, data in found), dtype=dtype)  # (total,) the bytes kept, read back
        values = extent_of_pieces(flat, [len(data) // dtype.itemsize for _, data in found])
        made += [(key, (data, dtype, value)) for (key, data), value in zip(found, values)]
    with _lock:
        for key in again:
            if key in _extents_kept:
                _extents_kept.move_to_end(key)
        _extents_kept.update(made)
        _forget_oldest()


def _in_memory_order(x):
    """x itself, or the matrix a transposed (Fortran-ordered) 2-D x views, where it is small enough to remember by
    content (C-ordered, at most `_SMALL_BYTES`); None otherwise."""
    flags = x.flags
    if not flags.c_contiguous:
        if x.ndim != 2 or not flags.f_contiguous:
            return None
        x = x.T
    return x if x.nbytes <= _SMALL_BYTES else None


def _forget_oldest() -> None:
    """Drop the oldest kept extents past `_SMALL_ENTRIES` (the caller holds the lock)."""
    while len(_extents_kept) > _SMALL_ENTRIES:
        _extents_kept.popitem(last=False)


def clear() -> None:
    """Forget every kept operand (tests; a caller that wants the memory back)."""
    with _lock:
        _entries.clear()
        _held[0] = 0
        _extents_kept.clear()
        _facts_kept.clear()
        _at.clear()
        _at_held[0] = 0
        _facts_held[0] = 0

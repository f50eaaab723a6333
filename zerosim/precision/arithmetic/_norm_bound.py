"""One float64 product rounded to float32, its error bounded by its operands' norms instead of a second product.

Letters: M rows, K the summed dimension, N columns; a (..., M, K), b (..., K, N) float64 holding values whose products
are exact in float64 (fp32 and narrower), c = a @ b from the machine's dgemm.

The long way of _exact_matmul.py bounds each element's rounding error by γ(K-1)·Σ_k |a_ik·b_kj|, and forms that sum of
magnitudes by a second dgemm, |a| @ |b|: an fp32 product cost two GEMMs and a dozen passes over c. Cauchy–Schwarz
bounds the same sum by the norms, Σ_k |a_ik·b_kj| <= ||a_i||·||b_j|| (a row of a, a column of b), which cost one
pass over each operand; and ||b_j|| <= max_j ||b_j||, so one bound per row serves the whole row:

    E_i = (K + 4)·2**-53 · ||a_i|| · max_j ||b_j|| · (1 + 2**-20)

covers, with N = ||a_i||·||b_j|| and u = 2**-53: c's error, γ(K-1)·N <= (K-1)·u·N·(1 + K·u); the rounding of c ± E_i
in float64, at most u·(|c| + E_i), with |c| <= N·(1 + γ(K)), so u·N and u·E_i more; and the rounding of the norms
themselves (a square of a value of at most 24 significant bits is exact in float64; the sum of K squares is within
γ(K) of the true one, the square root and the products within a few units: (2K + 16)·u in all). That is K·u·N and
relative excesses below 2**-21 for any K under 2**31, which the factor 1 + 2**-20 and the four units to spare cover.
(Until 2026-11 E_i was twice this, as `_ERROR_PER_TERM` over-states γ twice; the bound needs no such margin, and
the half leaves half the suspects to settle.) For random data the norms over-state Σ|a·b| by about π/2, and the
row's largest column norm by a little more: still about K·2**-51 of |c|, far below float32's half-ulp of
2**-25·|c|.

Where c - E_i and c + E_i round to the same float32, the exact sum s (within E_i of c) rounds there too, since
rounding is monotone (_round_once.py `certain_f32`, with one error per row, or the largest of a block of rows'). The
rest are the suspects, a few in a million for well-conditioned data: each is tried again with its own column's norm
(||a_i||·||b_j|| in place of the row's widest), zeros whose every product is 0 are told apart by where a and b are
nonzero (a ReLU's dW has thousands), and the caller bounds the rest by their own Σ_k |a_ik·b_kj| and sums exactly
those that stay in doubt (_exact_matmul.py `_settle_by_magnitudes`). Along a row of a or a column of b with at most
one nonzero (a ReLU's units dead for the whole micro-batch, or alive for one row of it) every element sums one exact
product and zeros: adding ±0 rounds nothing, so c is the exact sum there, rounded as it is (a zero made +0), never a
suspect (two nonzeros would not do: their one rounding can land on a float32 midpoint); a row all zero needs no GEMM.
In a 2-D product with a short K (a dW over a micro-batch) the rows are GEMM'd in groups by how many nonzeros they
hold, and in rows of a few the zeros whose row and column share no nonzero are told exact in the block, before they
become suspects (`_short_product`). So one GEMM and four passes over c (c - E rounded into the output, c + E rounded,
their comparison, the suspects found), in place of two GEMMs and a dozen.

A product of at most `_SMALL` elements (a tiny GPT's, a learner's) is made, rounded and tested whole, each element
against its own E_ij = per_term·||a_i||·||b_j|| (`_small_product`): in a dozen NumPy calls, where the blocks, dead
lines, bitmaps and groups of rows, which spare passes over a large c, cost more Python than its whole arithmetic.

A long K is summed in pieces (`_in_pieces`): P GEMMs of at most L = ⌈K/P⌉ terms each (`_PIECE`), their float64 sums
added in turn. Each piece's sum lies within γ(L-1)·Σ_p |a_ik·b_kj| of its exact sum, in any order, and adding the P
piece sums rounds within γ(P-1)·Σ_p |c_p|, |c_p| <= (1 + γ(L-1))·Σ_p|...|; since γ(j) + γ(l) + γ(j)·γ(l) <= γ(j + l)
(Higham, Lemma 3.3), c lies within γ(L + P - 2)·Σ_k |a_ik·b_kj| of s: the bound of one GEMM over K' = L + P - 1
terms (`summed_terms`), in place of K. A 10M MLP's products at K = 1,024-2,560 (the forward's and dx's, the ranks
stacked) are bounded 4-10 times tighter and leave that many times fewer suspects to settle from their K products:
~2,080 a step fp32 on 4 ranks -> ~470, whose settling took 33 -> ~10 ms, for 6 ms more of GEMMs and adds. Every bound
that reads c's error reads K' (`summed_terms`); one that bounds a sum of magnitudes the machine formed reads K.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.precision.arithmetic._nonzero_lines import (flat_lines, lines_of, nonzero_bits, nonzeros,
                                                          without_disjoint_zeros)
from zerosim.precision.arithmetic._scratch import scratch as _scratch

SLACK = 1 + 2.0**-20  # the norms' and E's own roundings, for K < 2**31 (module docstring)
SHORT_K = 64  # K at most this: the product GEMM'd by the same blocks of rows it is tested in (its output is as
# large as its arithmetic: a dW over 32 rows of a micro-batch)
_SPREAD = 2.0**10  # a block of rows tested against its largest E_i where its smallest (of rows not all zero) is within
# this factor, else each row against its own: a column of E_i makes two passes a third to four fifths dearer than a
# scalar, and a bound 2**10 looser leaves at most ~2**10 times the few suspects per million (a 919k MLP's dW on 8 ranks,
# rows 10-500x apart, each of its first five steps: 41,352-109,768 suspects under one E a block against 41,120-109,661
# under twofold, all but 178-280 exact zeros after the first step (57,794 in it); 63,002-137,601 and 62,762-137,491
# before the lines of one nonzero were exact)
_BLOCK = 1 << 17  # elements of c tested at a time (1 << 15 or the whole: 5-15 % slower on a 919k MLP's dW)
_gemm = np.matmul  # the machine's dgemm (a test puts a BLAS that gives -0 in its place)
_EXACT_NONZEROS = 1  # nonzeros a line of a or b may hold for c to be exact along it (`_short_product`; 2 is not)
_FEW = 4  # nonzeros of a row of a up to which its zeros of disjoint lines are told in the block (`_short_product`)
_TEST_SLOTS = ((1, np.float32), (4, np.float32), (5, np.bool_))  # c - E rounded, c + E rounded, their verdict
_FEW_DEAD = 16  # dead columns of b up to one in this many: set apart by their indices, else by masks (`_dead_columns`)
# terms a long K's GEMM sums in one piece (`_in_pieces`, `summed_terms`): OpenBLAS's own dgemm blocks K by 256 or
# so; the six long products of a 10M MLP's step on 4 ranks (K = 1,024-2,560) took 5 % longer in pieces of 256 than
# whole (107 -> 113 ms), and left 4-10 times fewer suspects; shorter pieces add a pass over c each, and the bound
# tightens less and less (P = 16 at K = 2,560: 284 suspects a step against 403 for P = 8)
_PIECE = 256
_SMALL = 1 << 14  # elements of c up to which a product is made and tested whole (`_small_product`): a (16, 96) @
# (96, 64) fp32 product ~100 -> ~50 µs, a (96, 16) @ (16, 64) one 119 -> 61, (4, 64, 64) @ (4, 64, 64) 218 -> 147;
# past it the blocks' fewer passes over c pay (a (64, 512) @ (512, 256) product: 727 µs in blocks, 923 whole)


def _per_term(k: int) -> float:
    """E_i over ||a_i||·max_j ||b_j|| where c errs as one GEMM over k terms (`summed_terms`; the module docstring)."""
    return (k + 4) * 2.0**-53 * SLACK


def summed_terms(a64, b64, in_pieces: bool = True) -> int:
    """The K' whose γ(K'-1)·Σ_k |a_ik·b_kj| bounds the error of c as `rounded_by_norms` forms it for a64 @ b64 over
    K terms (`in_pieces` as it was called): K for one GEMM; L + P - 1 where `_in_pieces` sums P pieces of at most L
    terms (the module docstring). Never more than K, so a bound for K holds too."""
    k, pieces = a64.shape[-1], _pieces(a64, b64) if in_pieces else 1
    return k if pieces == 1 else -(-k // pieces) + pieces - 1


def _pieces(a64, b64) -> int:
    """How many pieces `_in_pieces` sums a64 @ b64's K terms in: one up to 2·`_PIECE` terms (2 pieces added cost
    Newton-Schulz's 512 x 512 products more than their fewer suspects spare) and for a Gram matrix (b64 a view of
    a64's transpose: NumPy's syrk, each piece's triangle mirrored again, 55 ms against 38 for five 512 x 1024 ones),
    else pieces of at most `_PIECE`."""
    k = a64.shape[-1]
    if k <= 2 * _PIECE or (b64.ndim == 2 and b64.shape == a64.shape[::-1] and b64.strides == a64.strides[::-1]
                           and b64.ctypes.data == a64.ctypes.data):
        return 1
    return -(-k // _PIECE)


def _in_pieces(a64, b64, out, pieces: int) -> None:
    """out = a64 @ b64 in float64, K summed in `pieces` pieces of nearly equal length, each by the machine's dgemm in
    its own order, their sums added in turn (the piece sums in this thread's buffer 15, _scratch.py)."""
    k = a64.shape[-1]
    if pieces == 1:
        _gemm(a64, b64, out=out)
        return
    cuts = [k * p // pieces for p in range(pieces + 1)]
    _gemm(a64[..., :cuts[1]], b64[..., :cuts[1], :], out=out)
    part = _scratch(out.shape, 15)
    for low, high in zip(cuts[1:-1], cuts[2:]):
        _gemm(a64[..., low:high], b64[..., low:high, :], out=part)
        np.add(out, part, out=out)


def line_norms(a64, b64) -> tuple:
    """(||a_i|| (..., M), ||b_j|| (..., N)): the norms of a's rows and b's columns, each to within (K + 4)·2**-53 (a
    square of a value of at most 24 significant bits is exact; `SLACK` covers the sum's and the root's roundings)."""
    return np.sqrt(np.einsum("...ik,...ik->...i", a64, a64)), np.sqrt(np.einsum("...kj,...kj->...j", b64, b64))


def rounded_by_norms(a64, b64, out=None, in_pieces: bool = True):
    """(c rounded to float32, suspects), c = a64 @ b64 the exact sums' float64 approximation, each exact zero +0; or
    None where a or b holds NaN or inf (the caller's long way handles those, `out` untouched). The rounded c is made
    in `out` where given (a float32 array of c's shape, any strides: a rank's dW in the ranks' packed gradients),
    else in a fresh array. suspects: None where there are none,
    else (index arrays (..., i, j), their c values (count,)): the elements whose rounding the row's bound leaves in
    doubt. c is tested in blocks of rows, each while it is in cache, against its rows' largest E_i where they lie
    within `_SPREAD` (a scalar: a column of E_i costs more per pass; a looser bound only for the first test, as
    every suspect meets its own norms next); a 2-D product with a short K is GEMM'd by those blocks, its rows
    grouped by how many nonzeros they hold (`_short_product`); every temporary lives in this thread's reused
    buffers (_scratch.py): memory fresh from the system costs a page fault per 4 kB, more than these passes.
    `in_pieces`: a long K summed in pieces (`_pieces`, the module docstring), as fp32 operands are; 16- and 8-bit
    ones pass False: their suspects are mostly sums that land on a float32 midpoint exactly, which no tighter bound
    spares (a 10M MLP's bf16 step: 12,558 suspects a step in one GEMM, 12,392 in pieces, for 2 % more time)."""
    rows, columns = line_norms(a64, b64)
    widest = columns.max(axis=-1, initial=0.0)  # (...,) max_j ||b_j||
    if not (np.isfinite(rows).all() and np.isfinite(widest).all()):
        return None
    k = a64.shape[-1]
    pieces = _pieces(a64, b64) if in_pieces else 1
    per_term = _per_term(summed_terms(a64, b64, in_pieces))
    error = rows * (np.asarray(widest)[..., None] * per_term)  # (..., M) E_i, one per row
    shape = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2]) + (a64.shape[-2], b64.shape[-1])
    out = np.empty(shape, np.float32) if out is None else out
    with np.errstate(over="ignore"):  # past float32's range: inf, as the exact sum rounds there too
        if pieces == 1 and math.prod(shape) <= _SMALL:
            return _small_product(a64, b64, out, rows, columns, per_term)
        if len(shape) == 2 and k <= SHORT_K:
            found, bitmaps = _short_product(a64, b64, out, error, columns)
        else:
            found, bitmaps = _whole_product(a64, b64, out, error, rows, columns, pieces), None
    if not found:
        return out, None
    flat, y = np.concatenate([f for f, _ in found]), np.concatenate([y for _, y in found])  # by flat index
    flat, y = without_disjoint_zeros(flat, y, a64, b64, shape, bitmaps)
    return out, _own_norms(flat, y, rows, columns, shape, per_term) if len(y) else None


def _small_product(a64, b64, out, rows, columns, per_term) -> tuple:
    """`rounded_by_norms` of a product of at most `_SMALL` elements (one GEMM, K summed whole) into `out` (a float32
    array of its shape, any strides, as `rounded_by_norms` makes or is given it): c made, rounded and
    tested whole, each element against its own E_ij = per_term·||a_i||·||b_j|| (the bound `_own_norms` tries every
    suspect against next), in a dozen NumPy calls, where the blocks, dead lines, bitmaps and groups of rows that
    spare passes over a large c cost ~100 µs of Python (a tiny GPT's products: notebook 11). An element whose E_ij is
    0 has a row or a column all zero, every product 0: its c, made +0, is the exact sum."""
    c = _scratch(out.shape, 2)
    _gemm(a64, b64, out=c)  # float64, summed in the machine's order
    c += 0.0  # -0 becomes +0
    error = rows[..., :, None] * (columns[..., None, :] * per_term)  # (..., M, N) E_ij
    high = _scratch(out.shape, 4, np.float32)
    np.subtract(c, error, out=out, dtype=np.float64, casting="unsafe")  # c - E rounded: the answer where c + E
    np.add(c, error, out=high, dtype=np.float64, casting="unsafe")  # rounds alike, as the exact sum then does
    doubt = out.view(np.uint32) != high.view(np.uint32)
    if not doubt.any():
        return out, None
    where = np.nonzero(doubt)
    y = c[where]
    out[where] = y  # c rounded, as the suspects' settling assumes
    return out, (where, y)


def _whole_product(a64, b64, out, error, rows, columns, pieces: int) -> list:
    """The suspects [(flat indices in the product, their c values)] of a batch of products or of one with a long
    K, c made by one GEMM (or `pieces`: `_in_pieces`) and tested by blocks of rows (`_tested`); rows of a
    and columns of b all zero (a ReLU's dead units, norms of 0) are exact zeros, +0 in out, never suspects (a batch:
    none looked for)."""
    shape = out.shape
    m, n = shape[-2:]
    step = max(1, _BLOCK // max(math.prod(shape[:-2]) * n, 1))  # rows tested at a time
    c_all = _scratch(shape, 2)
    part = shape[:-2] + (min(step, m), n)
    buffers = (_scratch(part, 4, np.float32), _scratch(part, 5, np.bool_))
    two_d = rows.ndim == 1 and columns.ndim == 1
    dead_rows = np.flatnonzero(rows == 0) if two_d else np.zeros(0, np.intp)
    dead = _dead_columns(columns == 0) if two_d else None
    row_cuts = np.searchsorted(dead_rows, np.arange(0, m + step, step)).tolist()  # each block's dead rows
    by_row = error.reshape(-1, m) if m else error.reshape(1, 0)  # (batch, M) E_i
    live = np.where(by_row > 0, by_row, np.inf) if len(dead_rows) else by_row  # a dead row's E_i = 0 bounds nothing
    found = []
    _in_pieces(a64, b64, c_all, pieces)  # float64, each piece summed in the machine's order
    for top in range(0, m, step):
        c = c_all[..., top:top + step, :]
        r = c.shape[-2]
        high, doubt = buffers if r == step else (x[..., :r, :] for x in buffers)
        low = out[..., top:top + r, :]
        _tested(c, _block_error(error[..., top:top + r], live[:, top:top + r]), low, high, doubt, dead)
        here = dead_rows[row_cuts[top // step]:row_cuts[top // step + 1]] - top
        if len(here):
            doubt[..., here, :] = False
            low[..., here, :] = 0.0
        suspects = _suspects(c, low, doubt, None)
        if suspects is not None:
            flat, y = suspects  # its index in the whole product: a block of a batched one skips the other m - r
            found.append((flat + (flat // (r * n) * (m - r) + top) * n if len(shape) > 2 else flat + top * n, y))
    return found


def _short_product(a64, b64, out, error, columns) -> tuple:
    """(the suspects [(flat indices, their c values)], the bitmaps of a's rows and b's columns (M,), (N,) words) of a
    2-D product with a short K (a ReLU's dW = dy.T @ x over a micro-batch), made by blocks of rows, each GEMM'd, tested
    and rounded while in cache, the rows gathered by how many nonzeros they hold (a block's rows in one run are taken
    in place): a row all zero is +0, with no GEMM; along a row of at most `_EXACT_NONZEROS` c is the exact sum (the
    module docstring), rounded as it is, with no test; rows of up to `_FEW` nonzeros are tested, and their zeros
    where the row and the column share no nonzero (every product 0) are told exact in the block (`_tested_rows`)
    rather than found as suspects (a 10M MLP's (2560, 2048) dW on 4 ranks: ~300,000 a product, nearly all in rows of
    2-4 nonzeros, whose finding, gathering and settling cost more than their GEMM); rows of more nonzeros are only
    tested, their rare such zeros settled with the suspects (`without_disjoint_zeros`). Columns of b with at most
    `_EXACT_NONZEROS` are exact too: c rounded as it is there (`_suspects`), +0 in a dead one (`_tested`). Which
    group a row goes to, and whether it is gathered, changes no bit."""
    m, n = out.shape
    word = np.uint32 if a64.shape[1] <= 32 else np.uint64  # K <= 64: a word a line, half as wide for K <= 32
    bitmaps = row_bits, column_bits = nonzero_bits(a64, word)[:, 0], nonzero_bits(b64.T, word)[:, 0]
    # each row's group: 0 all zero, 1 exact (up to _EXACT_NONZEROS), 2 a few (up to _FEW), 3 more
    group = np.searchsorted([1, _EXACT_NONZEROS + 1, _FEW + 1], nonzeros(row_bits), side="right")
    order = np.argsort(group, kind="stable")  # rows by group, each group's ascending (a block's run is a run)
    cuts = np.searchsorted(group[order], np.arange(5)).tolist()  # where each group starts in `order`, and ends
    out[order[:cuts[1]]] = 0.0  # rows all zero: +0
    held_columns = nonzeros(column_bits)
    dead = _dead_columns(held_columns == 0)
    one = (held_columns > 0) & (held_columns <= _EXACT_NONZEROS)
    one = one if one.any() else None
    step = max(1, _BLOCK // max(n, 1))  # rows GEMM'd and tested at a time
    a_rows, c_all = _scratch((min(step, m), a64.shape[1]), 3), _scratch((min(step, m), n), 2)
    low_all, high_all, doubt_all = (_scratch((min(step, m), n), slot, t) for slot, t in _TEST_SLOTS)
    found = []
    for kind, first, last in zip(("exact", "few", "more"), cuts[1:], cuts[2:]):
        for start in range(first, last, step):
            lines = order[start:min(start + step, last)]  # rows of a, ascending
            r = len(lines)
            c, low, high, doubt = (x[:r] for x in (c_all, low_all, high_all, doubt_all))
            run = int(lines[0]) if lines[-1] - lines[0] == r - 1 else None  # rows in one run: no gather, no scatter
            a_part = np.take(a64, lines, axis=0, out=a_rows[:r]) if run is None else a64[run:run + r]
            low = low if run is None else out[run:run + r]
            _gemm(a_part, b64, out=c)  # float64, summed in the machine's order
            if kind == "exact":
                np.add(c, 0.0, out=low, dtype=np.float64, casting="unsafe")  # the exact sums: -0 made +0
            else:
                found += _tested_rows(c, low, high, doubt, lines, error, bitmaps if kind == "few" else None, dead, one)
            if run is None:
                out[lines] = low
    return found, bitmaps


def _tested_rows(c, low, high, doubt, lines, error, bitmaps, dead, one) -> list:
    """The suspects [(flat indices in the product, their c values)] of the block c of a 2-D product's rows `lines`,
    rounded into `low` (`_tested`); with `bitmaps` (a's rows', b's columns' words), its zeros where the row and the
    column share no nonzero are exact zeros, +0 in low and never suspects (every product there is 0, so the exact sum
    is +0 whatever order the GEMM added them in)."""
    n = c.shape[1]
    rows_error = error[lines]
    _tested(c, _block_error(rows_error, rows_error), low, high, doubt, dead)
    if bitmaps is not None:
        row_bits, column_bits = bitmaps
        zero = np.equal(c, 0.0, out=_scratch(c.shape, 12, np.bool_))
        shared = np.bitwise_and(row_bits[lines, None], column_bits, out=_scratch(c.shape, 13, row_bits.dtype))
        np.logical_and(zero, np.equal(shared, 0, out=_scratch(c.shape, 14, np.bool_)), out=zero)
        np.greater(doubt, zero, out=doubt)  # in doubt and not an exact zero
        # +0 there: every bit of low cleared, by a mask of all bits or none (branch-free: copyto(where=) mispredicts
        # at every other element of a half-zero block, ten times dearer)
        keep = np.subtract(zero, 1, out=_scratch(c.shape, 13, np.uint32), dtype=np.uint32, casting="unsafe")
        np.bitwise_and(low.view(np.uint32), keep, out=low.view(np.uint32))
    suspects = _suspects(c, low, doubt, one)
    if suspects is None:
        return []
    flat, y = suspects
    row = flat // n
    return [(lines[row] * n + (flat - row * n), y)]


def _block_error(error, live):
    """The E a block of rows is tested against: its rows' largest E_i (a scalar) where their smallest of `live` (E_i
    of rows not all zero) is within `_SPREAD` of it, else each row's own (a column)."""
    high = error.max(initial=0.0)
    return high if high <= _SPREAD * live.min(initial=np.inf) else error[..., None]


def _tested(c, e, low, high, doubt, dead) -> None:
    """c - E rounded into `low` (one pass, no float64 temporary: where c + E rounds alike, so does the exact sum, and
    that is the answer) and `doubt` where c + E rounds elsewhere; in the dead columns of b (`_dead_columns`, or None),
    +0 and no doubt: every product there is 0."""
    np.subtract(c, e, out=low, dtype=np.float64, casting="unsafe")
    np.add(c, e, out=high, dtype=np.float64, casting="unsafe")  # c + E rounded
    np.not_equal(low.view(np.uint32), high.view(np.uint32), out=doubt)
    if dead is None:
        return
    if isinstance(dead, tuple):  # masks
        live, bits = dead
        np.logical_and(doubt, live, out=doubt)
        np.bitwise_and(low.view(np.uint32), bits, out=low.view(np.uint32))  # all 32 bits clear: +0
    else:  # the few dead columns' indices
        doubt[..., dead] = False
        low[..., dead] = 0.0


def _dead_columns(dead):
    """The dead columns of b for `_tested`, from `dead` (N,) bool: None where none is; their indices where they are
    few (`_FEW_DEAD`: each a column of the block set apart); else masks (live (N,) bool, (N,) uint32 of all bits set
    but in a dead column), one fast pass over the block each (a 10M MLP's (1024, 2560) dW on 4 ranks, 736 dead
    columns: by their indices 3.1 ms a product, by masks 0.7)."""
    count = np.count_nonzero(dead)
    if not count:
        return None
    if count * _FEW_DEAD <= len(dead):
        return np.flatnonzero(dead)
    return ~dead, np.where(dead, np.uint32(0), np.uint32(0xFFFFFFFF))


def _suspects(c, low, doubt, exact):
    """(flat indices in the block, their c values) of the elements in doubt, c rounded into `low` there (as their next
    tests assume), -0 made +0; or None. Every -0 of c outside a dead line is in doubt (c ± E round to float32s of both
    signs, E = 0 included), so those of a BLAS that starts a sum from its first product are all here: +0 (-0 + 0 =
    +0, any other y + 0 = y), a pass over the few in doubt rather than c += 0 over all of c. Those in the `exact`
    columns (N,) bool (or None), whose c is the exact sum, are rounded so and are no suspects."""
    if not doubt.any():
        return None
    flat = np.flatnonzero(doubt)  # one index array: faster than nonzero's one per axis
    y = np.add(c.reshape(-1)[flat], 0.0)
    if low.flags.c_contiguous:
        low.reshape(-1)[flat] = y
    else:
        low[np.unravel_index(flat, low.shape)] = y
    if exact is not None:
        keep = ~exact[flat % c.shape[-1]]
        flat, y = flat[keep], y[keep]
    return (flat, y) if len(y) else None


def _own_norms(flat, y, rows, columns, shape, per_term):
    """(index arrays (..., i, j), y) of the suspects (at flat indices `flat`, their c values y) still in doubt with
    their own column's norm, ||a_i||·||b_j||, in place of the row's widest: the row's bound is loose where b's column
    norms differ widely. None where none is left."""
    row, column = lines_of(flat, shape)
    own = flat_lines(rows, shape[:-2], 0)[row] * flat_lines(columns, shape[:-2], 0)[column] * per_term  # (count,)
    with np.errstate(over="ignore"):
        doubt = (y - own).astype(np.float32).view(np.uint32) != (y + own).astype(np.float32).view(np.uint32)
    return (np.unravel_index(flat[doubt], shape), y[doubt]) if doubt.any() else None

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
suspect (`_exact_lines`; two nonzeros would not do: their one rounding can land on a float32 midpoint). So one GEMM
and four passes over c (c - E rounded into the output, c + E rounded, their comparison, the suspects found), in place
of two GEMMs and a dozen.
"""

from __future__ import annotations

import math

import numpy as np

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
_ZEROS_PER_LINE = 4  # zero suspects per line of a and b from which their bitmaps cost less than their values
_EXACT_NONZEROS = 1  # nonzeros a line of a or b may hold for c to be exact along it (`_exact_lines`; 2 is not)


def _per_term(k: int) -> float:
    """E_i over ||a_i||·max_j ||b_j|| for K = k (the module docstring)."""
    return (k + 4) * 2.0**-53 * SLACK


def line_norms(a64, b64) -> tuple:
    """(||a_i|| (..., M), ||b_j|| (..., N)): the norms of a's rows and b's columns, each to within (K + 4)·2**-53 (a
    square of a value of at most 24 significant bits is exact; `SLACK` covers the sum's and the root's roundings)."""
    return np.sqrt(np.einsum("...ik,...ik->...i", a64, a64)), np.sqrt(np.einsum("...kj,...kj->...j", b64, b64))


def rounded_by_norms(a64, b64, out=None):
    """(c rounded to float32, suspects), c = a64 @ b64 the exact sums' float64 approximation, each exact zero +0; or
    None where a or b holds NaN or inf (the caller's long way handles those, `out` untouched). The rounded c is made
    in `out` where given (a float32 array of c's shape, any strides: a rank's dW in the ranks' packed gradients),
    else in a fresh array. suspects: None where there are none,
    else (index arrays (..., i, j), their c values (count,)): the elements whose rounding the row's bound leaves in
    doubt. c is tested in blocks of rows, each while it is in cache, against its rows' largest E_i where they lie
    within `_SPREAD` (a scalar: a column of E_i costs more per pass; a looser bound only for the first test, as
    every suspect meets its own norms next), a 2-D product with a short K also GEMM'd by those blocks; every
    temporary lives in this thread's reused buffers (_scratch.py): memory fresh from the system costs a page fault
    per 4 kB, more than these passes."""
    rows, columns = line_norms(a64, b64)
    widest = columns.max(axis=-1, initial=0.0)  # (...,) max_j ||b_j||
    if not (np.isfinite(rows).all() and np.isfinite(widest).all()):
        return None
    k = a64.shape[-1]
    error = rows * (np.asarray(widest)[..., None] * _per_term(k))  # (..., M) E_i, one per row
    shape = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2]) + (a64.shape[-2], b64.shape[-1])
    m, n = shape[-2:]
    out = np.empty(shape, np.float32) if out is None else out
    step = max(1, _BLOCK // max(math.prod(shape[:-2]) * n, 1))  # rows tested at a time
    gemm_step = step if len(shape) == 2 and k <= SHORT_K else m  # rows GEMM'd at a time
    c_all = _scratch(shape[:-2] + (min(gemm_step, m), n), 2)
    part = shape[:-2] + (min(step, m), n)
    buffers = (_scratch(part, 4, np.float32), _scratch(part, 5, np.bool_))
    by_row = error.reshape(-1, m) if m else error.reshape(1, 0)  # (batch, M) E_i
    starts = np.arange(0, m, step)
    highs = np.maximum.reduceat(by_row.max(axis=0), starts).tolist() if m else []  # each block's largest E_i
    # rows of a and columns of b along which c is the exact sum (a ReLU's dead units in dW = dy.T @ x, and those alive
    # for one row of its micro-batch): rounded as they are, never suspects; of the columns, those all zero (dead) are
    # made +0 once at the end, the rest (few) from c in each block
    exact_rows, exact_columns, bitmaps = _exact_lines(a64, b64, rows, columns)
    dead = exact_columns[columns[exact_columns] == 0] if len(exact_columns) else exact_columns
    one_columns = exact_columns[columns[exact_columns] != 0] if len(exact_columns) else exact_columns
    row_cuts = np.searchsorted(exact_rows, np.arange(0, m + step, step)).tolist()  # each block's exact rows
    dead_row = rows.ndim == 1 and bool((rows == 0).any())
    live = np.where(by_row > 0, by_row, np.inf) if dead_row else by_row  # a dead row's E_i = 0 bounds nothing
    lows = np.minimum.reduceat(live.min(axis=0), starts).tolist() if m else []  # and smallest
    found, values = [], []
    with np.errstate(over="ignore"):  # past float32's range: inf, as the exact sum rounds there too
        for start in range(0, m, gemm_step):
            a_part = a64[..., start:start + gemm_step, :]
            c_part = c_all[..., :a_part.shape[-2], :]
            _gemm(a_part, b64, out=c_part)  # float64, summed in the machine's order
            for first in range(0, c_part.shape[-2], step):
                c = c_part[..., first:first + step, :]
                top = start + first  # c's first row in the product
                r = c.shape[-2]
                high, doubt = buffers if r == step else (x[..., :r, :] for x in buffers)
                # the block's largest E_i (a scalar), or each row's own where they differ more than _SPREAD-fold
                e = highs[top // step]
                e = e if e <= _SPREAD * lows[top // step] else error[..., top:top + r, None]
                # c - E rounded, straight into out (one pass, no float64 temporary): where c + E rounds alike, so
                # does the exact sum, and that is the answer; the suspects get c rounded, as their next tests
                # assume, while the block is in cache (a 10M MLP's dW leave ~85,000 a product, nearly all zeros)
                low = out[..., top:top + r, :]
                np.subtract(c, e, out=low, dtype=np.float64, casting="unsafe")
                np.add(c, e, out=high, dtype=np.float64, casting="unsafe")  # c + E rounded
                np.not_equal(low.view(np.uint32), high.view(np.uint32), out=doubt)
                # the exact lines' c is each element's exact sum: rounded as it is, -0 made +0, never suspects
                if len(exact_columns):
                    doubt[..., exact_columns] = False
                if len(one_columns):
                    low[..., one_columns] = np.add(c[..., one_columns], 0.0)
                here = exact_rows[row_cuts[top // step]:row_cuts[top // step + 1]] - top
                if len(here):
                    doubt[..., here, :] = False
                    low[..., here, :] = np.add(c[..., here, :], 0.0)
                if doubt.any():
                    flat = np.flatnonzero(doubt)  # one index array: faster than nonzero's one per axis
                    # every -0 of c outside an exact line is a suspect (c ± E round to float32s of both signs, E = 0
                    # included), so those of a BLAS that starts a sum from its first product are all here: +0 (-0
                    # + 0 = +0, any other y + 0 = y), a pass over the few suspects rather than c += 0 over all of c
                    # (and in y: -0 ± 0 rounds to both signs, so a -0 with norms of 0 would stay in doubt)
                    y = np.add(c.reshape(-1)[flat], 0.0)
                    if low.flags.c_contiguous:
                        low.reshape(-1)[flat] = y
                    else:
                        low[np.unravel_index(flat, low.shape)] = y
                    values.append(y)
                    # its index in the whole product: a block of a batched one skips the other m - r rows of each
                    found.append(flat + (flat // (r * n) * (m - r) + top) * n if len(shape) > 2 else flat + top * n)
    if len(dead):
        out[..., dead] = 0.0
    if not found:
        return out, None
    flat, y = np.concatenate(found), np.concatenate(values)  # the suspects, by their flat index in the product
    flat, y = _without_disjoint_zeros(flat, y, a64, b64, shape, bitmaps)
    return out, _own_norms(flat, y, rows, columns, shape, _per_term(k)) if len(y) else None


def _exact_lines(a64, b64, rows, columns) -> tuple:
    """(rows of a, columns of b, their bitmaps or None): the rows and columns (sorted index arrays) along which c is
    every element's exact sum, lines with at most one nonzero. Such an element sums one exact product and zeros, or
    zeros only: adding ±0 to a float64 rounds nothing, so c = s (or ±0 where s = +0), in any order, with or without
    FMA. A ReLU's dW = dy.T @ x over a micro-batch has many: the units dead for the whole micro-batch (all zero) and
    those alive for one row of it, whose elements the norms would leave in doubt wherever they are 0 (half of a 919k
    MLP's ~90,000 zero suspects a step). Counted for a 2-D product with a short K, where a and b are small beside c,
    from bitmaps of where they are nonzero (one word a line, which `_without_disjoint_zeros` reads too: (a's rows
    (M,), b's columns (N,)) uint64); for the rest only the all-zero lines, whose norms are 0 (a batch: none)."""
    if rows.ndim != 1 or columns.ndim != 1:
        return np.zeros(0, np.intp), np.zeros(0, np.intp), None
    if a64.shape[-1] > SHORT_K:
        return np.flatnonzero(rows == 0), np.flatnonzero(columns == 0), None
    bitmaps = _nonzero_bits(a64)[:, 0], _nonzero_bits(b64.T)[:, 0]  # K <= 64: one word a line
    exact = []
    for words in bitmaps:
        for _ in range(_EXACT_NONZEROS):
            words = words & (words - np.uint64(1))  # its lowest set bit cleared (0 stays 0)
        exact.append(np.flatnonzero(words == 0))
    return (*exact, bitmaps)


def _lines_of(flat, shape) -> tuple:
    """(row, column) index arrays of the elements at flat indices `flat` of a product of `shape` (..., M, N): each
    row's index among the batch's rows (..., M) flattened, each column's among its columns (..., N) flattened."""
    m, n = shape[-2:]
    row = flat // n
    column = flat - row * n
    return row, column + row // m * n if len(shape) > 2 else column


def _flat_lines(lines, batch: tuple, each: int) -> np.ndarray:
    """Per-line values (..., L) (`each` 0) or (..., L, words) (`each` 1) broadcast to the product's batch, its lines
    flattened: indexed by `_lines_of`'s row or column (a copy only where the batch broadcasts: a line's few values)."""
    if not batch:
        return lines
    shape = batch + lines.shape[lines.ndim - 1 - each:]
    return np.broadcast_to(lines, shape).reshape((-1,) + lines.shape[lines.ndim - each:])


def _without_disjoint_zeros(flat, y, a64, b64, shape, bitmaps=None) -> tuple:
    """(flat, y) less the zeros whose row of a and column of b are nonzero at no common k: every product is 0, so
    the exact sum is +0, which `out` holds (c's -0s became +0). A ReLU's dW = dy.T @ x over a micro-batch's 32 rows
    has thousands (1.8 % of the elements of a 919k MLP's middle dW, benchmarks/portable_step.py): a zero c lies
    within the norms' bound of float32's smallest numbers of both signs. Told apart by bitmaps of where a's rows and
    b's columns are nonzero (K bits a line, one pass over each operand) rather than by gathering 2·K values each
    (`_magnitudes`); only where the zeros are many enough to pay for the bitmaps (or `bitmaps`, a 2-D product's
    from `_exact_lines`, are made already). Which path runs changes no bit."""
    zero = np.flatnonzero(y == 0)
    m, n = shape[-2:]
    if bitmaps is None and _ZEROS_PER_LINE * len(zero) < math.prod(a64.shape[:-1]) + math.prod(b64.shape[:-2]) * n:
        return flat, y
    if not len(zero):
        return flat, y
    row, column = _lines_of(flat[zero], shape)
    if bitmaps is None:
        bitmaps = _nonzero_bits(a64), _nonzero_bits(np.swapaxes(b64, -1, -2))  # (..., M | N, words)
        each = int(bitmaps[0].shape[-1] > 1)  # K <= 64: one word a line, gathered as (zeros,), else (zeros, words)
        bitmaps = tuple(x if each else x[..., 0] for x in bitmaps)
    else:
        each = 0
    rows, columns = bitmaps
    shared = _flat_lines(rows, shape[:-2], each)[row] & _flat_lines(columns, shape[:-2], each)[column]
    keep = np.ones(len(y), bool)
    keep[zero[~(shared.any(axis=-1) if each else shared.astype(bool))]] = False  # no common k: an exact +0
    return flat[keep], y[keep]


def _nonzero_bits(lines) -> np.ndarray:
    """(..., L, words) uint64 for lines (..., L, K): bit k of line l set where lines[..., l, k] != 0."""
    packed = np.packbits(lines != 0, axis=-1)  # (..., L, ceil(K / 8)) uint8
    words = max(1, -(-packed.shape[-1] // 8))
    padded = np.zeros(packed.shape[:-1] + (8 * words,), np.uint8)
    padded[..., :packed.shape[-1]] = packed
    return padded.view(np.uint64)


def _own_norms(flat, y, rows, columns, shape, per_term):
    """(index arrays (..., i, j), y) of the suspects (at flat indices `flat`, their c values y) still in doubt with
    their own column's norm, ||a_i||·||b_j||, in place of the row's widest: the row's bound is loose where b's column
    norms differ widely. None where none is left."""
    row, column = _lines_of(flat, shape)
    own = _flat_lines(rows, shape[:-2], 0)[row] * _flat_lines(columns, shape[:-2], 0)[column] * per_term  # (count,)
    with np.errstate(over="ignore"):
        doubt = (y - own).astype(np.float32).view(np.uint32) != (y + own).astype(np.float32).view(np.uint32)
    return (np.unravel_index(flat[doubt], shape), y[doubt]) if doubt.any() else None

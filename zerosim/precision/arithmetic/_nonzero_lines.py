"""Where a product's lines are nonzero, and the zeros that shows exact.

Letters as in _norm_bound.py: a (..., M, K), b (..., K, N), c = a @ b. A bitmap of a line (a row of a, a column of b)
holds one bit for each k, set where the line is nonzero; two lines' bitmaps ANDed say at which k both are nonzero. An
element of c whose row and column share no nonzero k sums K products that are all 0, so its exact sum is +0 whatever
order a BLAS adds them in; one whose row or column holds at most one nonzero sums one exact product and zeros. The
fp32 proof (_norm_bound.py) reads these facts to keep a ReLU's exact zeros from being settled as suspects: a dW =
dy.T @ x over a micro-batch has rows of a dead unit (all zero) or of a unit alive on a few of the micro-batch's rows.
"""

from __future__ import annotations

import math

import numpy as np

_ZEROS_PER_LINE = 4  # zero suspects per line of a and b from which their bitmaps cost less than their values
_SET_BITS = np.array([bin(byte).count("1") for byte in range(256)], np.uint8)  # the set bits of each byte


def nonzeros(words) -> np.ndarray:
    """(L,) the set bits of each of `words` (L,) (an unsigned integer type): each byte's by a table."""
    each = _SET_BITS[np.ascontiguousarray(words).view(np.uint8)]  # (L·bytes,) each byte's
    return each.reshape(len(words), words.itemsize).sum(axis=1, dtype=np.intp)


def nonzero_bits(lines, word=np.uint64) -> np.ndarray:
    """(..., L, words) of `word` (an unsigned integer type) for lines (..., L, K): one bit for each k, set where
    lines[..., l, k] != 0 (which bit is the same for every line: the words of two lines ANDed or counted alike on any
    machine, whatever its byte order)."""
    packed = np.packbits(lines != 0, axis=-1)  # (..., L, ceil(K / 8)) uint8
    size = np.dtype(word).itemsize
    words = max(1, -(-packed.shape[-1] // size))
    padded = np.zeros(packed.shape[:-1] + (size * words,), np.uint8)
    padded[..., :packed.shape[-1]] = packed
    return padded.view(word)


def lines_of(flat, shape) -> tuple:
    """(row, column) index arrays of the elements at flat indices `flat` of a product of `shape` (..., M, N): each
    row's index among the batch's rows (..., M) flattened, each column's among its columns (..., N) flattened."""
    m, n = shape[-2:]
    row = flat // n
    column = flat - row * n
    return row, column + row // m * n if len(shape) > 2 else column


def flat_lines(lines, batch: tuple, each: int) -> np.ndarray:
    """Per-line values (..., L) (`each` 0) or (..., L, words) (`each` 1) broadcast to the product's batch, its lines
    flattened: indexed by `lines_of`'s row or column (a copy only where the batch broadcasts: a line's few values)."""
    if not batch:
        return lines
    shape = batch + lines.shape[lines.ndim - 1 - each:]
    return np.broadcast_to(lines, shape).reshape((-1,) + lines.shape[lines.ndim - each:])


def without_disjoint_zeros(flat, y, a64, b64, shape, bitmaps=None) -> tuple:
    """(flat, y) less the zeros whose row of a and column of b are nonzero at no common k: every product is 0, so
    the exact sum is +0, which `out` holds (c's -0s became +0). A ReLU's dW = dy.T @ x over a micro-batch's 32 rows
    has thousands (1.8 % of the elements of a 919k MLP's middle dW, benchmarks/portable_step.py): a zero c lies
    within the norms' bound of float32's smallest numbers of both signs. Told apart by bitmaps of where a's rows and
    b's columns are nonzero (K bits a line, one pass over each operand) rather than by gathering 2·K values each
    (_exact_matmul.py `_magnitudes`); only where the zeros are many enough to pay for the bitmaps, or `bitmaps` are
    made already (a 2-D product with a short K: _norm_bound.py `_short_product`, whose rows of a few nonzeros tell
    theirs in the block and leave here those of the rows of more). Which path runs changes no bit."""
    zero = np.flatnonzero(y == 0)
    m, n = shape[-2:]
    if bitmaps is None and _ZEROS_PER_LINE * len(zero) < math.prod(a64.shape[:-1]) + math.prod(b64.shape[:-2]) * n:
        return flat, y
    if not len(zero):
        return flat, y
    row, column = lines_of(flat[zero], shape)
    if bitmaps is None:
        bitmaps = nonzero_bits(a64), nonzero_bits(np.swapaxes(b64, -1, -2))  # (..., M | N, words)
        each = int(bitmaps[0].shape[-1] > 1)  # K <= 64: one word a line, gathered as (zeros,), else (zeros, words)
        bitmaps = tuple(x if each else x[..., 0] for x in bitmaps)
    else:
        each = 0
    rows, columns = bitmaps
    shared = flat_lines(rows, shape[:-2], each)[row] & flat_lines(columns, shape[:-2], each)[column]
    keep = np.ones(len(y), bool)
    keep[zero[~(shared.any(axis=-1) if each else shared.astype(bool))]] = False  # no common k: an exact +0
    return flat[keep], y[keep]

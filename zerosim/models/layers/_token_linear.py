"""Linear layers and their FLOPs over token tensors (..., D_in): every token is one row of layers.linear_*.

Letters: B batch, L sequence length, D_in / D_out widths. A (B, L, D_in) activation is B·L rows of
one (rows, D_in) matrix, so the weight gradient dW = dYᵀ X sums over all B·L tokens in one fp32
product (seed 001 §5b: "store only the input"); the roundings are those of layers.linear_forward.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers._basic import linear_backward, linear_backward_ranks, linear_forward


def tokens_linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, fmt) -> np.ndarray:
    """y (..., D_out) = x (..., D_in) @ w.T + b, products summed in fp32 and rounded once to fmt."""
    y, _ = linear_forward(x.reshape(-1, x.shape[-1]), w, b, fmt)  # (rows, D_out) fmt
    return y.reshape(*x.shape[:-1], w.shape[0])


def tokens_linear_backward(dy: np.ndarray, x: np.ndarray, w: np.ndarray, fmt, n: int | None = None) -> tuple:
    """(dx (..., D_in), dw (D_out, D_in), db (D_out,)) of y = x @ w.T + b, all in fmt. `n`: dy and x hold n ranks'
    micro-batches stacked along axis 0 (models/_stacked.py), and dw, db are each rank's own, over its own tokens
    (`linear_backward_ranks`: n ranks' (D_out, D_in) and an (n, D_out) array)."""
    dy2, x2 = dy.reshape(-1, dy.shape[-1]), (x.reshape(-1, x.shape[-1]),)  # (tokens, D_out), (tokens, D_in)
    dx, dw, db = linear_backward(dy2, x2, w, fmt) if n is None else linear_backward_ranks(dy2, x2, w, fmt, n)
    return dx.reshape(x.shape), dw, db


def token_places(ids: np.ndarray, n: int | None = None):
    """Where each token's gradient row adds in an embedding table's scatter (`np.add.at`, one index after another,
    in (b, t) order): its token id; with `n`, where the ids hold n ranks' micro-batches stacked along axis 0 and the
    tables are each rank's own (n, V, d), (its rank, its token), so rank r's table meets its own tokens alone, in
    their order."""
    tokens = ids.reshape(-1)  # (B·L,) in (b, t) order: rank by rank where stacked
    return tokens if n is None else (np.arange(n).repeat(tokens.size // n), tokens)


def weight_rows(dw, start: int, stop: int):
    """Rows [start, stop) of a fused weight's gradient (one GEMM's dW cut into its weights: Q/K/V, gate/up): of one
    (D_out, D_in) array, of n ranks' (n, D_out, D_in) array alike, or of each rank's in a list of n
    (`tokens_linear_backward` with `n`); views, no copy."""
    if type(dw) is list:
        return [w[start:stop] for w in dw]
    return dw[..., start:stop, :]


def linear_flops(rows: int, d_in: int, d_out: int, kind: str, bias: bool = True) -> int:
    """As layers.Linear.flops: x @ w.T is 2·rows·D_in·D_out forward; dx and dw twice that backward;
    a bias adds one add per output forward and one per output (db's sum) backward."""
    matmul = 2 * rows * d_in * d_out
    return (matmul if kind == "forward" else 2 * matmul) + (rows * d_out if bias else 0)

"""The pre-LN residual wrapper both sub-blocks share: y = x + f(LN(x) Wᵀ + b), W the sub-block's first Linear.

Letters: B batch, L sequence length, d model width, D_out the first Linear's width (3d for QKV, 4d
for W1). The LayerNorm's output is never stored (_layernorm.py): backward rebuilds it, bitwise, for
W's gradient. The residual add is one rounding forward, cast(x + out); backward passes dy on to f
unchanged and sums the two paths into dx, again one rounding.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers._basic import acc_dtype
from zerosim.models.layers._layernorm import layernorm_backward, layernorm_flops, layernorm_forward, layernorm_output
from zerosim.models.layers._token_linear import tokens_linear_backward, tokens_linear_forward
from zerosim.precision import cast, get_format


def prenorm_linear_forward(x: np.ndarray, g, b, w, bias, fmt) -> tuple[np.ndarray, tuple]:
    """z (B, L, D_out) = LN(x) Wᵀ + bias in fmt; the LN cache (x, mean, rstd)."""
    ln, ln_cache = layernorm_forward(x, g, b, fmt)  # (B, L, d) fmt, dropped after this product
    return tokens_linear_forward(ln, w, bias, fmt), ln_cache


def residual_add(x: np.ndarray, out: np.ndarray, fmt) -> np.ndarray:
    """cast(x + out, fmt): both widened exactly, added in acc, rounded once."""
    acc = acc_dtype(get_format(fmt))
    return cast(x.astype(acc) + out.astype(acc), fmt)


def prenorm_residual_backward(dz: np.ndarray, dy: np.ndarray, ln_cache: tuple, g, b, w, fmt,
                              n: int | None = None) -> tuple:
    """From dz = dL/dz and the block's dy: (dx, dg, db, dW, dbias), all in fmt. `n`: n ranks' micro-batches stacked
    along axis 0, the weight gradients each rank's own (`tokens_linear_backward`, `layernorm_backward`)."""
    ln = layernorm_output(ln_cache, g, b, fmt)  # W's input, bitwise the forward's
    dln, dw, dbias = tokens_linear_backward(dz, ln, w, fmt, n)
    dx_ln, dg, db = layernorm_backward(dln, ln_cache, g, fmt, n)
    return residual_add(dy, dx_ln, fmt), dg, db, dw, dbias  # the residual's two gradient paths, summed once


def prenorm_residual_flops(rows: int, d: int, kind: str) -> int:
    """What wraps a pre-LN sub-block besides its Linears and f: the LayerNorm, the residual add (one add
    per element forward; backward sums the two gradient paths) and, backward, the rebuilt LN output."""
    extra = layernorm_flops(rows, d, "rebuild output") if kind == "backward" else 0
    return layernorm_flops(rows, d, kind) + rows * d + extra

"""The final LayerNorm and the LM head: logits = LN_f(x) W_headᵀ, one ZeRO unit.

Letters: B batch, L sequence length, d model width, V vocabulary. The head has its own weight
W_head (V, d), untied from the token embedding (GPT-2 and nanoGPT tie them; tying would make one
parameter live in two units, which ZeRO-3 would have to gather twice). No bias, as GPT-2's lm_head.

Saved for backward: "final LN input" (B, L, d) fmt, "LN mean" and "LN rstd" (B, L) fp32; the LN
output, W_head's input, is rebuilt in backward (_layernorm.py). Rounding: logits = cast(ln W_headᵀ,
fmt), the product summed in fp32 (layers.linear_forward).
"""

from __future__ import annotations

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import (
    Layer,
    acc_dtype,
    layernorm_backward,
    layernorm_flops,
    layernorm_forward,
    layernorm_output,
    linear_flops,
    tokens_linear_backward,
    tokens_linear_forward,
    written_into,
)
from zerosim.precision import get_format


class LMHead(Layer):
    """Final LayerNorm ("lnf.g", "lnf.b") and the untied head "w_head" (V, d)."""

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own

    def __init__(self, d: int, vocab: int, name: str = "head"):
        super().__init__(name)
        self.d, self.vocab = d, vocab
        self.param_shapes = {"lnf.g": (d,), "lnf.b": (d,), "w_head": (vocab, d)}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        ln, (_, mean, rstd) = layernorm_forward(x, p["lnf.g"], p["lnf.b"], f)
        logits = tokens_linear_forward(ln, p["w_head"], None, f)  # (B, L, V) fmt
        return logits, {"final LN input": x, "LN mean": mean, "LN rstd": rstd}

    def backward(self, p, dy, cache, fmt):
        return self._backward(p, dy, cache, fmt)

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dx, grads = self._backward(p, dy, cache, fmt, n)
        return dx, written_into(out, grads)

    def _backward(self, p, dy, cache, fmt, n=None):
        """`backward`; with `n`, n ranks' micro-batches stacked along axis 0 and each gradient n ranks' own."""
        f = get_format(fmt)
        ln_cache = (cache["final LN input"], cache["LN mean"], cache["LN rstd"])
        ln = layernorm_output(ln_cache, p["lnf.g"], p["lnf.b"], f)  # W_head's input, bitwise the forward's
        dln, dw, _ = tokens_linear_backward(dy, ln, p["w_head"], f, n)
        dx, dg, db = layernorm_backward(dln, ln_cache, p["lnf.g"], f, n)
        return dx, {"lnf.g": dg, "lnf.b": db, "w_head": dw}

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for an input of x_shape = (B, L, d)."""
        f = get_format(fmt)
        B, L, d = x_shape
        acc = np.dtype(acc_dtype(f))
        return {"final LN input": ((B, L, d), f.dtype), "LN mean": ((B, L), acc), "LN rstd": ((B, L), acc)}

    def output_shape(self, x_shape):
        return (*x_shape[:-1], self.vocab)  # (B, L, d) -> (B, L, V) logits

    def flops(self, x_shape, kind):
        rows = int(np.prod(x_shape[:-1], dtype=np.int64))  # B·L tokens
        total = layernorm_flops(rows, self.d, kind) + linear_flops(rows, self.d, self.vocab, kind, bias=False)
        return total + (layernorm_flops(rows, self.d, "rebuild output") if kind == "backward" else 0)

    def init(self, rng):
        return {"lnf.g": np.ones(self.d, np.float32), "lnf.b": np.zeros(self.d, np.float32),
                "w_head": (INIT_STD * rng.standard_normal((self.vocab, self.d))).astype(np.float32)}

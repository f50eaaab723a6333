"""The Llama's last unit: the final RMSNorm and the LM head.

Letters: B batch, L sequence length, d model width, V vocabulary. Hugging Face transformers,
models/llama/modeling_llama.py: `LlamaModel.norm` (d,) and `LlamaForCausalLM.lm_head` (V, d), no bias, untied unless
the config says `tie_word_embeddings` (Llama 3.2 1B/3B tie it; Llama 2/3 8B-70B, Mistral 7B and Qwen2.5 7B do not).

    head        logits = cast(RMSNorm(x) W_headᵀ, fmt)           saved: "final norm input" (B, L, d),
                                                                 "final norm rstd" (B, L)

A tied head would make one parameter live in two units, which ZeRO-3 gathers twice and the flat layout does
not express; the real models here are untied, and the data-less twin counts a tied head's weight once
(_meta.py).
"""

from __future__ import annotations

import numpy as np

from zerosim.models._decoder import INIT_STD
from zerosim.models.layers import (
    RMS_EPS,
    Layer,
    acc_dtype,
    linear_flops,
    rmsnorm_backward,
    rmsnorm_flops,
    rmsnorm_forward,
    rmsnorm_output,
    tokens_linear_backward,
    tokens_linear_forward,
    written_into,
)
from zerosim.precision import get_format


class LlamaHead(Layer):
    """The final RMSNorm ("norm.w") and the untied head "lm_head" (V, d)."""

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own

    def __init__(self, d: int, vocab: int, rms_eps: float = RMS_EPS, name: str = "head"):
        super().__init__(name)
        self.d, self.vocab, self.rms_eps = d, vocab, rms_eps
        self.param_shapes = {"norm.w": (d,), "lm_head": (vocab, d)}

    def forward(self, p, x, fmt):
        f = get_format(fmt)
        ln, (_, rstd) = rmsnorm_forward(x, p["norm.w"], f, self.rms_eps)
        logits = tokens_linear_forward(ln, p["lm_head"], None, f)  # (B, L, V) fmt
        return logits, {"final norm input": x, "final norm rstd": rstd}

    def backward(self, p, dy, cache, fmt):
        return self._backward(p, dy, cache, fmt)

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dx, grads = self._backward(p, dy, cache, fmt, n)
        return dx, written_into(out, grads)

    def _backward(self, p, dy, cache, fmt, n=None):
        """`backward`; with `n`, n ranks' micro-batches stacked along axis 0 and each gradient n ranks' own."""
        f = get_format(fmt)
        norm_cache = (cache["final norm input"], cache["final norm rstd"])
        ln = rmsnorm_output(norm_cache, p["norm.w"], f)  # lm_head's input, bitwise the forward's
        dln, dw, _ = tokens_linear_backward(dy, ln, p["lm_head"], f, n)
        dx, dg = rmsnorm_backward(dln, norm_cache, p["norm.w"], f, n)
        return dx, {"norm.w": dg, "lm_head": dw}

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for an input of x_shape = (B, L, d)."""
        f = get_format(fmt)
        B, L, d = x_shape
        return {"final norm input": ((B, L, d), f.dtype), "final norm rstd": ((B, L), np.dtype(acc_dtype(f)))}

    def output_shape(self, x_shape):
        return (*x_shape[:-1], self.vocab)  # (B, L, d) -> (B, L, V) logits

    def flops(self, x_shape, kind):
        rows = int(np.prod(x_shape[:-1], dtype=np.int64))  # B·L tokens
        total = rmsnorm_flops(rows, self.d, kind) + linear_flops(rows, self.d, self.vocab, kind, bias=False)
        return total + (rmsnorm_flops(rows, self.d, "rebuild output") if kind == "backward" else 0)

    def init(self, rng):
        return {
            "norm.w": np.ones(self.d, np.float32),
            "lm_head": (INIT_STD * rng.standard_normal((self.vocab, self.d))).astype(np.float32),
        }

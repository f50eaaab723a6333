"""A whole Llama decoder layer as one ZeRO unit: the attention sub-block, then the SwiGLU sub-block.

Letters: B batch, L sequence length, d model width. y = h + FFN(RMSNorm₂(h)), h = x + Attn(RMSNorm₁(x)) —
Hugging Face's `LlamaDecoderLayer` (input_layernorm, self_attn, post_attention_layernorm, mlp). The cache is
the two sub-blocks' caches side by side (_attention.py and _mlp.py list them with shapes and bytes):

    block input · norm1 rstd · Q · K · V · P (standard) · attention output · LSE (flash)
    pre-FFN input · norm2 rstd · gate · up · h

For 16-bit activations, standard attention, H query heads and G key/value heads of width d_h, that is
2·B·L·(2d + 2·H·d_h + 2·G·d_h + 3F) + 2·B·H·L² bytes plus two fp32 (B, L) statistics, 8·B·L: the GPT block's
"14·B·L·d" becomes (2d + 2H·d_h + 2G·d_h + 3F)·B·L with GQA's smaller K and V and SwiGLU's three F-wide tensors.
"""

from __future__ import annotations

from zerosim.models.layers import BLOCK, RMS_EPS, ROPE_THETA, Layer, written_into
from zerosim.models.llama._attention import LlamaAttention
from zerosim.models.llama._mlp import SwiGLUFFN


class LlamaBlock(Layer):
    """LlamaAttention + SwiGLUFFN: one unit (FSDP's usual wrap: one decoder layer per unit)."""

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own (`stacks_rows`: its sub-blocks' too)

    def __init__(
        self,
        d: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        ffn: int,
        attention: str = "standard",
        n_layers: int = 1,
        rope_theta: float = ROPE_THETA,
        rms_eps: float = RMS_EPS,
        qkv_bias: bool = False,
        o_bias: bool = False,
        block: int = BLOCK,
        name: str = "block",
    ):
        super().__init__(name)
        self.attn = LlamaAttention(
            d,
            heads,
            kv_heads,
            head_dim,
            attention,
            n_layers,
            rope_theta,
            rms_eps,
            qkv_bias,
            o_bias,
            block,
            name=f"{name}.attn",
        )
        self.ffn = SwiGLUFFN(d, ffn, n_layers, rms_eps, name=f"{name}.ffn")
        self.attention = attention
        self.param_shapes = {**self.attn.param_shapes, **self.ffn.param_shapes}

    def forward(self, p, x, fmt):
        h, attn_cache = self.attn.forward(p, x, fmt)
        y, ffn_cache = self.ffn.forward(p, h, fmt)
        return y, {**attn_cache, **ffn_cache}

    def backward(self, p, dy, cache, fmt):
        dh, ffn_grads = self.ffn.backward(p, dy, cache, fmt)
        dx, attn_grads = self.attn.backward(p, dh, cache, fmt)
        return dx, {**attn_grads, **ffn_grads}

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dh, ffn_grads = self.ffn.backward_ranks(p, dy, cache, fmt, n)
        dx, attn_grads = self.attn.backward_ranks(p, dh, cache, fmt, n)
        return dx, written_into(out, {**attn_grads, **ffn_grads})

    def stacks_rows(self):
        """Its own methods as declared, and its two sub-blocks' (a patched one runs rank by rank, as in `backward`)."""
        return Layer.stacks_rows(self) and self.attn.stacks_rows() and self.ffn.stacks_rows()

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for an input of x_shape = (B, L, d)."""
        return {**self.attn.saved_spec(x_shape, fmt), **self.ffn.saved_spec(x_shape, fmt)}

    def flops(self, x_shape, kind):
        return self.attn.flops(x_shape, kind) + self.ffn.flops(x_shape, kind)

    def init(self, rng):
        return {**self.attn.init(rng), **self.ffn.init(rng)}

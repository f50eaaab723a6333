"""A whole pre-LN transformer block as one ZeRO unit: the attention sub-block, then the FFN sub-block.

Letters: B batch, L sequence length, d model width, H heads. y = h + FFN(LN2(h)), h = x + Attn(LN1(x))
(GPT-2's block). The cache is the two sub-blocks' caches side by side — seed 001 §5e's per-layer
table, one row per name (_attention.py and _mlp.py list them with shapes and bytes):

    block input · LN1 mean · LN1 rstd · Q · K · V · P (standard) · attention output · LSE (flash)
    pre-FFN input · LN2 mean · LN2 rstd · x1 (GELU) or ReLU mask (ReLU) · x2

For fp16, GELU, standard attention that is (1 + 3 + 1 + 1 + 4 + 4)·B·L·d·2 = 14·B·L·d·2 bytes, plus
P's B·H·L²·2, plus four fp32 (B, L) LayerNorm statistics, 16·B·L bytes: seed 001's "14·B·L·d + B·H·L²"
with its bookkeeping made exact (the LN outputs are rebuilt, so X and the FFN input are "shared";
the LN statistics are the seed's "LayerNorm μ, σ²" row, here in fp32).
"""

from __future__ import annotations

from zerosim.models.gpt._attention import (
    attention_block_backward,
    attention_block_flops,
    attention_block_forward,
    attention_block_spec,
    attention_param_shapes,
    check_heads,
    check_mode,
    init_attention,
)
from zerosim.models.gpt._mlp import (
    check_activation,
    ffn_block_backward,
    ffn_block_flops,
    ffn_block_forward,
    ffn_block_spec,
    ffn_param_shapes,
    init_ffn,
    stacks_sequences,
)
from zerosim.models.layers import BLOCK, Layer, written_into


class TransformerBlock(Layer):
    """Attention sub-block + FFN sub-block: one unit (FSDP's usual wrap: one transformer block per unit)."""

    saves_input_only = False
    rows_apart = rows_apart_nd = True  # each sequence its own (`stacks_sequences`: GELU's only)

    def __init__(self, d: int, heads: int, activation: str = "gelu", attention: str = "standard", n_layers: int = 1,
                 block: int = BLOCK, name: str = "block"):
        super().__init__(name)
        check_heads(d, heads)
        self.d, self.heads, self.n_layers, self.block = d, heads, n_layers, block
        self.activation, self.attention = check_activation(activation), check_mode(attention)
        self.param_shapes = {**attention_param_shapes(d), **ffn_param_shapes(d)}

    def forward(self, p, x, fmt):
        h, attn_cache = attention_block_forward(p, x, self.heads, fmt, self.attention, self.block)
        y, ffn_cache = ffn_block_forward(p, h, fmt, self.activation)
        return y, {**attn_cache, **ffn_cache}

    def backward(self, p, dy, cache, fmt):
        dh, ffn_grads = ffn_block_backward(p, dy, cache, fmt, self.activation)
        dx, attn_grads = attention_block_backward(p, dh, cache, self.heads, fmt, self.attention, self.block)
        return dx, {**attn_grads, **ffn_grads}

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        dh, ffn_grads = ffn_block_backward(p, dy, cache, fmt, self.activation, n)
        dx, attn_grads = attention_block_backward(p, dh, cache, self.heads, fmt, self.attention, self.block, n)
        return dx, written_into(out, {**attn_grads, **ffn_grads})

    def stacks_rows(self):
        return stacks_sequences(self)

    def saved_spec(self, x_shape, fmt) -> dict:
        """{name: (shape, dtype)} of what forward saves for an input of x_shape = (B, L, d)."""
        x_shape = tuple(x_shape)
        return {
            **attention_block_spec(x_shape, self.heads, fmt, self.attention),
            **ffn_block_spec(x_shape, fmt, self.activation),
        }

    def flops(self, x_shape, kind):
        x_shape = tuple(x_shape)
        return attention_block_flops(x_shape, self.heads, kind, self.attention, self.block) + ffn_block_flops(
            x_shape, kind, self.activation
        )

    def init(self, rng):
        return {**init_attention(self.d, self.n_layers, rng), **init_ffn(self.d, self.n_layers, rng)}

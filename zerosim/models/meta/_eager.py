"""What autograd keeps when a decoder runs op by op in PyTorch eager mode: each saved tensor by name and shape.

Letters: B batch, L sequence length, d model width, H query heads, G key/value heads, d_h head width, F the
feed-forward width. Bytes for 16-bit activations ("act"); fp32 where the op computes in fp32.

zerosim's own layers keep what one fused kernel per step keeps (llama/_attention.py, llama/_mlp.py: Megatron's fused
SwiGLU, a fused RMSNorm's rstd). Plain PyTorch and Hugging Face Transformers run every op as its own kernel, and
autograd then keeps each op's saved inputs and outputs. For a Llama decoder layer as HF's modeling_llama.py writes
it (LlamaRMSNorm, apply_rotary_pos_emb with rotate_half, repeat_kv, scaled_dot_product_attention, LlamaMLP), op by
op (the saved tensors are ATen's derivatives.yaml's: a product saves the *other* factor of each input that needs a
gradient, so q·cos keeps cos, not q; pow and silu keep their input, rsqrt its result, a linear its input; SDPA's
flash backward keeps q, k, v, its output and logsumexp):

    name                     shape             dtype  why
    norm1 input fp32         (B, L, d)         fp32   x.to(float32): pow and the mul by rsqrt keep it
    norm1 rstd               (B, L, 1)         fp32   rsqrt keeps its result, the mul keeps it too
    norm1 normalized         (B, L, d)         act    .to(bf16), kept by the product with the weight
    norm1 output             (B, L, d)         act    q_proj, k_proj, v_proj's input (one tensor)
    q rotated                (B, H, L, d_h)    act    q·cos + rotate_half(q)·sin: SDPA's query (the rotation's
                                                      own products keep only cos and sin)
    k repeated, v repeated   (B, H, L, d_h)    act    repeat_kv's copies (G < H), SDPA's key and value
    sdpa out                 (B, H, L, d_h)    act    SDPA's output, kept by its backward; it is laid out as
                                                      (B, L, H, d_h), so o_proj's input is a view of it
    sdpa lse                 (B, H, L)         fp32   its logsumexp
    norm2 ... (as norm1)
    gate                     (B, L, F)         act    silu keeps its input
    silu(gate), up           (B, L, F) each    act    the product keeps both
    h                        (B, L, F)         act    down_proj's input

16·d + 8·H·d_h + 4·G·d_h + 8·F bytes a token (plus 8 + 4·H): Llama 3 8B's block keeps 213,128 bytes a token,
1.73x zerosim's fused 123,016. With G = H (multi-head) repeat_kv copies nothing: SDPA keeps k rotated and v (v_proj's
output) instead. HF's eager attention (attention "standard": no SDPA) keeps Q·Kᵀ's inputs and its softmax, in fp32
(softmax(…, dtype=float32)) and again in 16 bits (.to(q.dtype), the PV product's input), and its output is copied
for o_proj: 6·B·H·L² + 2·B·L·H·d_h bytes in place of SDPA's output and lse. zerosim's "selective" attention (P
rebuilt from Q, K) is no eager op: eager runs count it as SDPA.

The GPT-2 block (nn.LayerNorm, one fused kernel that keeps its input, mean and rstd; GELU, which keeps its input;
SDPA) keeps: ln1 input, mean, rstd, ln1 output (c_attn's input), qkv (c_attn's output: q, k, v are its views),
sdpa out (c_proj's input is its view), sdpa lse, ln2 ..., fc out (GELU's input), gelu out (fc2's input).

The unit's input comes first in every table (MetaUnit's backward reads dx's shape from it). tests/
test_eager_activations.py checks these tables against torch's FSDPMemTracker on the same eager model (parity lane).
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import acc_dtype
from zerosim.precision import get_format


def _rmsnorm(prefix: str, B: int, L: int, d: int, act, acc) -> dict:
    return {
        f"{prefix} input fp32": ((B, L, d), acc),
        f"{prefix} rstd": ((B, L, 1), acc),
        f"{prefix} normalized": ((B, L, d), act),
        f"{prefix} output": ((B, L, d), act),
    }


def _sdpa(B: int, H: int, L: int, dh: int, mode: str, act, acc) -> dict:
    if mode == "standard":  # HF's eager attention: fp32 softmax and its 16-bit copy
        return {"softmax fp32": ((B, H, L, L), acc), "softmax": ((B, H, L, L), act)}
    return {"sdpa out": ((B, H, L, dh), act), "sdpa lse": ((B, H, L), acc)}


def llama_attention(attn, x_shape, fmt) -> dict:
    """The eager table of the module docstring for HF's attention sub-block (a `LlamaAttention`'s shape)."""
    f = get_format(fmt)
    act, acc = f.dtype, np.dtype(acc_dtype(f))
    B, L, d = x_shape
    H, G, dh = attn.heads, attn.kv_heads, attn.head_dim
    spec = _rmsnorm("norm1", B, L, d, act, acc) | {"q rotated": ((B, H, L, dh), act)}
    if G < H:
        spec |= {"k repeated": ((B, H, L, dh), act), "v repeated": ((B, H, L, dh), act)}
    else:
        spec |= {"k rotated": ((B, H, L, dh), act), "v": ((B, H, L, dh), act)}
    spec |= _sdpa(B, H, L, dh, attn.attention, act, acc)
    if attn.attention == "standard":  # the PV product's output, copied to (B, L, H·d_h) for o_proj
        spec["attention output"] = ((B, L, H * dh), act)
    return spec


def llama_ffn(ffn, x_shape, fmt) -> dict:
    """The eager table for HF's LlamaMLP sub-block (a `SwiGLUFFN`'s shape)."""
    f = get_format(fmt)
    act, acc = f.dtype, np.dtype(acc_dtype(f))
    B, L, d = x_shape
    F = ffn.ffn
    wide = (B, L, F)
    return _rmsnorm("norm2", B, L, d, act, acc) | {
        "gate": (wide, act), "silu(gate)": (wide, act), "up": (wide, act), "h": (wide, act)}


def llama_block(block, x_shape, fmt) -> dict:
    return llama_attention(block.attn, x_shape, fmt) | llama_ffn(block.ffn, x_shape, fmt)


def llama_head(head, x_shape, fmt) -> dict:
    """The final RMSNorm, its output saved by lm_head."""
    f = get_format(fmt)
    B, L, d = x_shape
    return _rmsnorm("final norm", B, L, d, f.dtype, np.dtype(acc_dtype(f)))


def gpt_attention(attn, x_shape, fmt) -> dict:
    f = get_format(fmt)
    act, acc = f.dtype, np.dtype(acc_dtype(f))
    B, L, d = x_shape
    H = attn.heads
    stats = ((B, L, 1), acc)
    spec = {"ln1 input": ((B, L, d), act), "ln1 mean": stats, "ln1 rstd": stats, "ln1 output": ((B, L, d), act),
            "qkv": ((B, L, 3 * d), act), **_sdpa(B, H, L, d // H, attn.attention, act, acc)}
    if attn.attention == "standard":  # the PV product's output, copied for c_proj
        spec["attention output"] = ((B, L, d), act)
    return spec


def gpt_ffn(ffn, x_shape, fmt) -> dict:
    f = get_format(fmt)
    act, acc = f.dtype, np.dtype(acc_dtype(f))
    B, L, d = x_shape
    F = ffn.param_shapes["w1"][0]
    stats = ((B, L, 1), acc)
    return {"ln2 input": ((B, L, d), act), "ln2 mean": stats, "ln2 rstd": stats, "ln2 output": ((B, L, d), act),
            "fc out": ((B, L, F), act), "gelu out": ((B, L, F), act)}


def gpt_block(block, x_shape, fmt) -> dict:
    return gpt_attention(block, x_shape, fmt) | gpt_ffn(block, x_shape, fmt)


def gpt_head(head, x_shape, fmt) -> dict:
    f = get_format(fmt)
    act, acc = f.dtype, np.dtype(acc_dtype(f))
    B, L, d = x_shape
    stats = ((B, L, 1), acc)
    return {"final LN input": ((B, L, d), act), "LN mean": stats, "LN rstd": stats, "final LN output": ((B, L, d), act)}


# a unit's class name -> its eager table (the embeddings keep their ids either way: their own saved_spec)
EAGER = {
    "LlamaBlock": llama_block,
    "LlamaAttention": llama_attention,
    "SwiGLUFFN": llama_ffn,
    "LlamaHead": llama_head,
    "TransformerBlock": gpt_block,
    "AttentionBlock": gpt_attention,
    "FFNBlock": gpt_ffn,
    "LMHead": gpt_head,
}


def eager_spec(unit):
    """A `saved(x_shape, fmt)` callable giving `unit`'s eager table, or None where eager keeps what zerosim's own
    unit keeps (the embeddings: their token ids)."""
    table = EAGER.get(type(unit).__name__)
    return None if table is None else (lambda x_shape, fmt: table(unit, tuple(x_shape), fmt))

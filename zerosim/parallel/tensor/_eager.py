"""What torch's eager autograd keeps on one TP rank when torchtitan runs a Llama block under DTensor tensor and
sequence parallelism: each saved tensor by name and shape (the meta twin's ledger, _meta.py, with kernels="eager" and
the "torchtitan" layout).

Letters: B batch, L sequence length (L/T on a sequence shard), d width, T the TP degree, H_r = H/T and G_r = G/T query
and key/value heads, d_h head width, F_r = F/T feed-forward columns. torchtitan's model (a33d0e3, torchtitan/models/
llama3/model/model.py): nn.RMSNorm, wq/wk/wv, complex rotary (`apply_rotary_emb`), F.scaled_dot_product_attention
with is_causal and enable_gqa (no repeat_kv copies), wo; FeedForward w2(silu(w1(x)) * w3(x)). Its TP plan (infra/
parallelize.py `apply_tp`): SequenceParallel on attention_norm and ffn_norm (each rank its L/T tokens), a
PrepareModuleInput all-gather (Shard(1) -> Replicate) before attention and feed_forward, ColwiseParallel on wq, wk,
wv, w1, w3, RowwiseParallel(output_layouts=Shard(1)) on wo and w2 (a reduce-scatter). What autograd saves, per op
(torch 2.13.0: the ops' derivatives.yaml; rms_norm as its CPU composite, torch/_decomp/decompositions.py
`_fused_rms_norm`: x.to(float32), rsqrt, x·rstd, ·weight):

    unit   name                          shape               dtype  why
    ln1    norm1 input fp32              (B, L/T, d)         fp32   the upcast input: pow and the product keep it
           norm1 rstd                    (B, L/T, 1)         fp32   rsqrt keeps its result, the product keeps it
           norm1 normalized fp32         (B, L/T, d)         fp32   x·rstd, kept by the product with the weight
    attn   attention input           (B, L, d)           act    wq, wk, wv's input: the all-gather's output
           q rotated                     (B, H_r, L, d_h)    act    SDPA's query (the complex products keep only
           k rotated, v                  (B, G_r, L, d_h)    act    freqs_cis, a buffer); enable_gqa: G_r heads
           sdpa out                      (B, H_r, L, d_h)    act    SDPA's output; wo's input is a view of it
           sdpa lse                      (B, H_r, L)         fp32   its logsumexp
    ln2    (as ln1, norm2)
    mlp    FFN input                     (B, L, d)           act    w1 and w3's input, all-gathered
           gate                          (B, L, F_r)         act    w1's output, kept by silu
           silu(gate), up                (B, L, F_r) each    act    the product keeps both
           h                             (B, L, F_r)         act    w2's input
    lnf    (as ln1, final norm)
    head   head input                    (B, L, d)           act    output's input, all-gathered (ColwiseParallel)

Without sequence parallelism the norms run on all L tokens and nothing is gathered: the same names and shapes with L.
`tests/test_tp_activations.py` holds a block's sum to torch 2.13.0's MemTracker on the same block under torchtitan's
plan (FakeTensorMode, a fake process group; the parity lane). The GPT's units (nn.LayerNorm, one kernel either way)
keep their own tensors, with the gathered input.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import acc_dtype
from zerosim.parallel.tensor._layers import GQAttention, SwiGLU
from zerosim.parallel.tensor._replicated import Norm
from zerosim.precision import get_format


def _norm(unit, x_shape, fmt) -> dict:
    f = get_format(fmt)
    acc = np.dtype(acc_dtype(f))
    B, L, d = x_shape
    prefix = unit.stat_names[0].rsplit(" ", 1)[0]  # "norm1", "norm2", "final norm"
    return {f"{prefix} input fp32": ((B, L, d), acc), f"{prefix} rstd": ((B, L, 1), acc),
            f"{prefix} normalized fp32": ((B, L, d), acc)}


def _attention(unit, x_shape, fmt) -> dict:
    f = get_format(fmt)
    act, acc = f.dtype, np.dtype(acc_dtype(f))
    B, L, d = x_shape
    H, G, dh = unit.heads, unit.kv_heads, unit.head_dim
    spec = {unit.input_name: ((B, L, d), act), "q rotated": ((B, H, L, dh), act), "k rotated": ((B, G, L, dh), act),
            "v": ((B, G, L, dh), act)}
    if unit.mode == "standard":  # HF's eager attention (no SDPA): fp32 softmax, its 16-bit copy, the output copied
        return spec | {"softmax fp32": ((B, H, L, L), acc), "softmax": ((B, H, L, L), act),
                       "attention output": ((B, L, H * dh), act)}
    return spec | {"sdpa out": ((B, H, L, dh), act), "sdpa lse": ((B, H, L), acc)}


def _swiglu(unit, x_shape, fmt) -> dict:
    act = get_format(fmt).dtype
    B, L, d = x_shape
    wide = ((B, L, unit.ffn), act)
    return {unit.input_name: ((B, L, d), act), "gate": wide, "silu(gate)": wide, "up": wide, "h": wide}


EAGER = {Norm: _norm, GQAttention: _attention, SwiGLU: _swiglu}  # unit class -> its eager table (the Llama's)


def eager_tp_spec(unit):
    """A `saved(x_shape, fmt)` callable giving `unit`'s eager table (module docstring), or None where the unit keeps
    its own tensors (the embedding's ids, the residual add's nothing, the head's input, the GPT's units). A norm's
    table applies to the Llama's RMSNorm only (nn.LayerNorm is one kernel either way)."""
    table = EAGER.get(type(unit))
    if table is None or (isinstance(unit, Norm) and unit.kind != "rmsnorm"):
        return None
    return lambda x_shape, fmt: table(unit, tuple(x_shape), fmt)

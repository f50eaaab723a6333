"""torchtitan's op-level selective activation checkpointing ("op-sac"): what a block keeps between its forward and
its recompute.

Letters: B batch, L sequence length, H heads, d_h head width.

torchtitan (pytorch/torchtitan at 9dec370, torchtitan/parallelisms/parallelize_llama.py, `_apply_ac_to_transformer_
block` with selective_ac_option = "op", the default of train_configs/llama3_8b.toml) wraps each block in
`checkpoint_wrapper` with a policy from `create_selective_checkpoint_contexts`: MUST_SAVE the outputs of the ops in
`_save_list` (aten.mm, SDPA's flash and efficient kernels, reduce_scatter, abs, max) "except every second mm",
PREFER_RECOMPUTE everything else. Forward therefore keeps, per block, its input (the checkpoint's), the output of
the 1st, 3rd, 5th and 7th matrix products in forward order (a Llama: wq, wv, w1 = gate, w2 = down; k, o and up are
recomputed) and SDPA's outputs (its output and logsumexp). The backward recomputes the block from its input,
replaying the saved outputs instead of recomputing those ops (so no attention and half the GEMMs run again), and
the block's whole cache then lives until its backward: as `block` checkpointing, with more kept in between.
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers import acc_dtype
from zerosim.precision import get_format


def is_block(unit) -> bool:
    """A transformer block or sub-block (what torchtitan checkpoints; the embedding and the head it leaves alone)."""
    return any(k in unit.param_shapes for k in ("norm1.w", "norm2.w", "ln1.g", "ln2.g"))


def saved_weights(unit) -> list:
    """The GEMM weights whose outputs op-SAC saves: every other 2-D weight in forward order, the first included."""
    mats = [k for k, s in unit.param_shapes.items() if len(s) == 2]
    return mats[0::2]


def sac_spec(unit, x_shape, fmt) -> dict:
    """{name: (shape, dtype)} op-SAC keeps besides the block input: the saved products' outputs, SDPA's output and
    logsumexp (see the module docstring)."""
    f = get_format(fmt)
    B, L = x_shape[0], x_shape[1]
    spec = {f"{name} out": ((B, L, unit.param_shapes[name][0]), f.dtype) for name in saved_weights(unit)}
    attn = getattr(unit, "attn", unit)
    if getattr(attn, "attention", None) is not None and hasattr(attn, "heads"):
        dh = getattr(attn, "head_dim", None) or attn.d // attn.heads
        spec["sdpa out"] = ((B, attn.heads, L, dh), f.dtype)
        spec["sdpa lse"] = ((B, attn.heads, L), np.dtype(acc_dtype(f)))
    return spec

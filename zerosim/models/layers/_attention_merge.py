"""Attention split over key blocks, put back together: the log-sum-exp merge and the output correction of ring
attention, with the roundings Transformer Engine's kernels make.

Letters: B batch, H heads, L queries, d_h head width; step i is one block of keys a query block attended to (a hop
of the ring), giving out_i (B, H, L, d_h) in the 16-bit compute format fmt (the flash kernel's output, already
divided by its own row sum) and lse_i (B, H, L) in acc (fp32; float64 under fp64). Over the steps, in order:

    lse  = lse_0,  then  lse = max(lse, lse_i) + log1p(exp(min(lse, lse_i) - max(lse, lse_i)))      in acc
    out  = cast(out_0 · exp(lse_0 - lse), fmt),  then  out = cast(out + out_i · exp(lse_i - lse), fmt)

so the output is Σ_i out_i · e^(lse_i − lse) = Σ_i Σ_j e^(s_j − lse) v_j: the softmax over every key, each step's
weights rescaled by how much of the total its keys hold. Transformer Engine 2.18,
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py: `AttnFuncWithCPAndKVP2P.forward`
merges softmax_lse step by step with `flash_attn_fwd_softmax_lse_correction` (fp32: the flash kernels' softmax_lse)
and, once every step's lse is in, corrects the outputs in step order with `flash_attn_fwd_out_correction_init` (the
first: `out_corrected.to(out_init_step.dtype)`) and `flash_attn_fwd_out_correction` (`out.add_(out_corrected)`
into the 16-bit `out`): out_per_step stays in the 16-bit type, each product out_i · exp(...) is fp32 (a bf16 tensor
times an fp32 one), and every add is stored back in 16 bits. (`_second_half_` variants do the same on the second
half of the rows: `merge_lse` and `correct_out` take a row range.) The NOTE below says what a fused kernel may do
otherwise.

The backward's sums are plain adds in fmt (`accumulate`): dQ, and dK and dV as they travel the ring, start from
the first step's gradient (`dq.copy_(dq_)`, `dk.copy_(dk_)`) and add each later step's (`dq.add_(dq_)`), rounded to
fmt every time, in the 16-bit buffers TE allocates (`dq_buffer = torch.empty_like(q)`, the p2p buffers of kv's
dtype). torch's own (torch 2.13.0, torch/distributed/tensor/experimental/_context_parallel/_attention.py) keeps its
output and its sums in fp32 instead (`_cp_options.convert_to_f32`): `merge_sigmoid` below is its `_SDPAMerger`.

NOTE: `flash_attn_fwd_*_correction` are `jit_fuser` functions, which TE 2.18 compiles with torch.compile
(transformer_engine/pytorch/jit.py, NVTE_TORCH_COMPILE=1 by default); a compiled kernel may fuse a multiply and the
add after it into one fused multiply-add (one rounding fewer). Here each is rounded as eager torch rounds it.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np

from zerosim.models.layers._basic import acc_dtype
from zerosim.precision import cast, get_format
from zerosim.precision.arithmetic import arithmetic_of, rounded


def _log1p_exact(x: Decimal) -> Decimal:
    """ln(1 + x) to 60 digits more than x's leading zeros (x in (0, 1]: a sum of exponentials' ratio)."""
    with localcontext() as ctx:
        ctx.prec, ctx.Emax, ctx.Emin = 60 + max(0, -x.adjusted()), 10**6, -(10**6)
        return (1 + x).ln()


# log1p as each arithmetic (precision/arithmetic) runs it: correctly rounded to fp32 ("portable", the same bits on
# every machine), or NumPy's own ("native"); float64 goes to NumPy's float64 log1p under both
LOG1P = {"portable": lambda x: rounded(np.log1p, _log1p_exact, x), "native": np.log1p}


def merge_lse(lse: np.ndarray, lse_step: np.ndarray, fmt, rows: slice = slice(None)) -> np.ndarray:
    """`flash_attn_fwd_softmax_lse_correction`: lse (B, H, L) with step lse_step merged into its rows `rows` (all:
    every row; a half: TE's `_second_half_` variant), in acc: max + log1p(exp(min − max)). A new array."""
    f = get_format(fmt)
    ops = arithmetic_of(f)
    out = lse.copy()
    old = lse[..., rows]
    high, low = np.maximum(old, lse_step), np.minimum(old, lse_step)
    out[..., rows] = high + LOG1P[ops.name](ops.exp(low - high))
    return out


def correct_out(out, out_step: np.ndarray, lse: np.ndarray, lse_step: np.ndarray, fmt,
                rows: slice = slice(None)) -> np.ndarray:
    """`flash_attn_fwd_out_correction(_init)`: out (B, H, L, d_h) in fmt plus step i's out_step · exp(lse_step −
    lse[rows]) on its rows, the product in acc and the sum stored in fmt; `out` None: the first step's (the
    `_init`: its product alone, rounded to fmt). `lse` is the merged (final) one."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    weight = ops.exp(lse_step - lse[..., rows])[..., None]  # (B, H, L_rows, 1) acc: e^(lse_i − lse) ≤ 1
    corrected = out_step.astype(acc) * weight  # a 16-bit tensor times an fp32 one: fp32
    if out is None:
        return cast(corrected, f)
    new = out.copy()
    new[..., rows, :] = cast(out[..., rows, :].astype(acc) + corrected, f)  # out.add_(...): an fp32 add, stored in fmt
    return new


def accumulate(total, part: np.ndarray, fmt):
    """`total + part` rounded to fmt (the add in acc, as torch adds two 16-bit tensors), or `part` itself when
    `total` is None (the first step: TE copies it in)."""
    f = get_format(fmt)
    if total is None:
        return part.copy()
    acc = acc_dtype(f)
    return cast(total.astype(acc) + part.astype(acc), f)


def merge_sigmoid(out, lse, out_step: np.ndarray, lse_step: np.ndarray, fmt, rows: slice = slice(None)) -> tuple:
    """torch's `_SDPAMerger.step` (convert_to_f32): (out (B, H, L, d_h) acc, lse (B, H, L) acc) with step i's block
    merged into its rows `rows` (all, or the second half: torch's `partial`, `_partial_update`), new arrays; `out` None:
    the first step's, out_step widened to acc. Every op rounded in acc, in torch's order (the ring-flash-attention
    form it cites, zhuzilin/ring-flash-attention#34):

        out = out − sigmoid(lse_i − lse) · (out − out_i),   sigmoid(x) = 1 / (1 + exp(−x))
        lse = lse − logsigmoid(lse − lse_i),               logsigmoid(x) = min(x, 0) − log1p(exp(−|x|))

    (torch's CPU and CUDA `log_sigmoid_forward`), exp and log1p each arithmetic's own (precision/arithmetic)."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    step = out_step.astype(acc)
    if out is None:
        return step, lse_step.copy()
    one = acc(1)
    old_out, old_lse = out[..., rows, :], lse[..., rows]
    weight = one / (one + ops.exp(-(lse_step - old_lse)))  # sigmoid(lse_i − lse)
    new_out, new_lse = out.copy(), lse.copy()
    new_out[..., rows, :] = old_out - weight[..., None] * (old_out - step)
    x = old_lse - lse_step
    new_lse[..., rows] = old_lse - (np.minimum(x, acc(0)) - LOG1P[ops.name](ops.exp(-np.abs(x))))
    return new_out, new_lse

"""How N ranks' K micro-batch gradients become the one fp32 gradient the optimizer reads — in one place.

Letters: N ranks, K micro-steps (gradient accumulation), S the loss scale. Every engine stage and
the oracle call these functions, so the arithmetic below is the single definition of averaging:

    accumulate   acc = g (first micro-step) or acc + g, rounded to the accumulation format
                 ("grad_accum": the compute format by default, or fp32), as `param.grad += g` does
    reduce       the recipe's collective op (`reduce_op`): what each rank does to its gradient before
                 the first hop — nothing, a division by N, or FSDP2's pre-divide — then a sum on the wire
    after        what the recipe does to each reduced piece as it arrives (`after_reduce`): DeepSpeed's
                 copy back into the 16-bit buffer, FSDP2's post-divide and cast to the parameter's dtype
    finish       g32 = cast_fp32(reduced), then / (N·K) ("seeds": one division) or / K (the recipes that
                 divided by N already), then unscale by S — all in fp32

The recipes, by the name of the code they follow (_recipes.py holds them as data, docs/recipes.md has each
step with its source; _divide_factors.py has torch's scalar multiply and divide, bit for bit, on CUDA and CPU):

    seeds             sum in the wire dtype, cast to fp32, divide by N (the seeds' protocol; any stage)
    ddp               DDP (torch/csrc/distributed/c10d/reducer.cpp: Reducer::mark_variable_ready_dense,
                      `at::mul_out(bucket_view, grad, 1. / div_factor_)`): multiply by fl32(1/N) in fp32,
                      rounded to the gradient's dtype, then an all-reduce SUM in that dtype. Stage 0.
    deepspeed-zero12  DeepSpeed ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py: average_tensor
                      `tensor.div_(world_size)` on CUDA, then allreduce_bucket's `dist.all_reduce` of the whole
                      bucket in `communication_data_type` (its default use_multi_rank_bucket_allreduce=True:
                      _bucket_allreduce.py) and the copy back into the 16-bit buffer, which rounds once more when
                      the wire is wider). Stages 1/2. "deepspeed-zero12-reduce": the same arithmetic with the
                      flag off, a `dist.reduce` of each slice to its owner (its owner's ring order). With
                      grad_accum="fp32", DeepSpeed 0.19.8: at stage 1 the bucket is the fp32 accumulator itself
                      (`_gradient_reduction_buffer_dtype`), and the reduced piece stays as it came off the wire, in
                      fp32 (`_add_to_grad_partition_buffer`), at stages 1 and 2 (_bucket_allreduce.py).
    deepspeed-bf16-optimizer  DeepSpeed's BF16_Optimizer, which DeepSpeed runs for bf16 with grad_accum_dtype fp32
                      at stage 1 (engine.py: _do_optimizer_sanity_check): the fp32 accumulator, zero-padded to a
                      multiple of 2N, all-reduced whole in the wire dtype, then `mul_(1/N)` there, kept in fp32
                      (_bf16_optimizer.py). Stage 1.
    fsdp2             FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce,
                      _get_gradient_divide_factors): fp32/bf16 reduce with NCCL's AVG (PreMulSum by
                      fl(1/N)); fp16 divides by a power of two `pre` before and by N/pre after, both
                      `div_` on CUDA; then `.to(orig_dtype)` (the fp32 master's dtype). On FSDP2's own layout:
                      each parameter cut on dim 0 (_partition.py). Stage 3 (FSDP2 keeps parameters sharded at
                      rest; zerosim's stage 2 keeps them whole on every rank, which FSDP2 never does).

    deepspeed-zero3   DeepSpeed ZeRO-3 (deepspeed/runtime/zero/stage3.py: __avg_scatter_grads, partition_grads;
                      deepspeed/runtime/comm/coalesced_collectives.py: reduce_scatter_coalesced): `g.to(
                      communication_data_type)`, the interleaved buffer's `div_(world_sz)` on CUDA in that
                      dtype, a reduce-scatter SUM, `.to(gradient_accumulation_dtype)` (the grad_accum format,
                      else the 16-bit one). On DeepSpeed's own layout: each parameter cut in N chunks of
                      ceil(n/N) (parallel/data/layouts/_partition.py), so an element's owner — and its ring order — is
                      not the flat layout's. Stage 3.

Where in the step each happens differs by stage (stages 0/1 accumulate locally and reduce once at
the boundary; stages 2/3 reduce every micro-step and accumulate the reduced shard, as DeepSpeed
does); what happens is written only here. A recipe names the layout its framework shards by
(`partition`): zerosim's flat shards, DeepSpeed ZeRO-3's per-parameter chunks, or FSDP2's dim-0 chunks.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import ReduceOp, get_op
from zerosim.parallel.data.recipes._recipes import GradientRecipe
from zerosim.precision import Format, cast, get_format, unscale


def accum_format(policy, reduced: bool, recipe=None) -> Format:
    """The format gradients accumulate in across micro-steps.

    `reduced=False`: a rank's own (local) gradients, stages 0/1 — the compute format, or fp32.
    `reduced=True`: the reduced shard, stages 2/3 — the format the recipe leaves it in (the wire
    format for "seeds": an fp32 reduction is not thrown away into bf16), or fp32.
    """
    if policy.grad_accum is not None:
        return get_format(policy.grad_accum)
    return GradientRecipe.of(policy, recipe).rules.reduced_format(policy) if reduced else policy.compute_format


def reduce_op(policy, world_size: int, recipe=None) -> ReduceOp:
    """The collective's op for the recipe: a sum, with the recipe's division before it (if any)."""
    return GradientRecipe.of(policy, recipe).rules.op(policy, world_size)


def after_reduce(piece: np.ndarray, policy, world_size: int, recipe=None) -> np.ndarray:
    """A reduced piece as the recipe keeps it (a copy back into 16 bits, a post-divide); itself when nothing."""
    after = GradientRecipe.of(policy, recipe).rules.after
    return piece if after is None else after(piece, policy, world_size)


def accumulate(acc: np.ndarray, g: np.ndarray, first: bool) -> None:
    """acc = g on the first micro-step, else acc + g, each element rounded once to acc's dtype.

    NOTE: the first micro-step assigns (as a fresh `param.grad` does) rather than adding to zero,
    which would turn a -0.0 gradient into +0.0.
    """
    if first:
        acc[...] = g if g.dtype == acc.dtype else cast(g, get_format(acc.dtype))
    elif g.dtype == acc.dtype:
        acc += g  # one rounding per element, in acc's dtype
    else:
        acc[...] = cast(acc.astype(np.float64) + g.astype(np.float64), get_format(acc.dtype))  # exact sum, one rounding


def finish(reduced: np.ndarray, policy, world_size: int, micro_steps: int = 1, scale: float | None = None,
           recipe=None) -> np.ndarray:
    """The optimizer's gradient: `reduced` (the reduced, accumulated gradient) in the update format,
    averaged over N ranks and K micro-steps and unscaled by S (`scale`; default the policy's static scale),
    as `policy.unscale` says: times fl32(1/S) (both frameworks) or divided by S. Returns a new array."""
    upd = policy.update_format
    divided = GradientRecipe.of(policy, recipe).rules.divides_by_n
    divisor = micro_steps if divided else world_size * micro_steps
    if divisor != 1 or not divided:
        g = get_op("avg").post(reduced, divisor)  # widen to fp32 (exact), then one division
    else:
        g = reduced
    if g.dtype != upd.dtype:
        g = cast(g, upd)
    elif g is reduced:  # a new array in every case: the caller owns it (post's division made one already)
        g = g.copy()
    scale = policy.loss_scale if scale is None else scale
    if isinstance(scale, str):
        raise ValueError(f"finish needs the current loss scale of the {scale!r} scaler (scale=...)")
    if scale != 1:
        g = unscale(g, scale, policy.unscale)  # in fp32: g * fl32(1/S), or g / S
    return g

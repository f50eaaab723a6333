"""DeepSpeed's BF16_Optimizer at ZeRO stage 1: the recipe "deepspeed-bf16-optimizer".

For bf16 parameters with `data_types.grad_accum_dtype: fp32` at ZeRO stage 1 (no CPU offload) DeepSpeed does not
run stage_1_and_2.py: `runtime/engine.py: _do_optimizer_sanity_check` returns BFLOAT16 and the engine wraps the
optimizer in `runtime/bf16_optimizer.py: BF16_Optimizer` (DeepSpeed 0.19.6 and 0.19.8 alike). Its gradient path,
on DeepSpeed's defaults (`gradient_allreduce_op: "mean"`, `prescale_gradients: false`,
`gradient_predivide_factor: 1.0`, `bf16.immediate_grad_update: false`):

    _setup_for_real_optimizer    one fp32 gradient buffer per group, as long as the flat bf16 params:
                                 `_flatten_dense_tensors_aligned(..., nccl_start_alignment_factor * N)`, i.e. P
                                 zero-padded to a multiple of 2N (`aligned_length`)
    backward_epilogue            `hp_grad.add_(lp.grad.to(fp32))` each micro-step: fp32 accumulation (_averaging.py
                                 `accumulate`, grad_accum="fp32")
    engine.allreduce_gradients   at the boundary, stage 1 without `reduce_gradients`: `buffered_allreduce_fallback`
                                 with the optimizer's `get_grads_for_reduction()` (that fp32 buffer), one
                                 tensor, so one call whatever MEMORY_OPT_ALLREDUCE_SIZE (reduce_bucket_size is not
                                 read)
    engine.allreduce_bucket      `tensor.to(communication_data_type)` (bf16 by default: a rounding),
                                 `dist.all_reduce` (SUM) of the whole aligned buffer, then
                                 `mul_(gradient_predivide_factor / N)` = `mul_(1.0 / N)` in the wire dtype (fp32
                                 math, `torch_scalar_mul`), then `tensor.copy_(...)` back into fp32 (exact)
    step                         each rank's fp32 partition steps on its slice of that buffer; `update_lp_params`
                                 rounds it into bf16 and all-gathers

So, unlike `deepspeed-zero12`, it divides *after* the sum, sums the whole buffer in one call (the chunk map runs
over the aligned length, padding included), and never rounds the result back to 16 bits. Not modelled: its
clipping norm (`get_global_norm_of_tensors` on every rank's whole gradient, per tensor: refused), its Muon path
(`_prepare_muon_updates`: refused), MoE groups; its overflow handling (an inf/NaN norm skips the step, no loss
scaler: the policy must keep loss_scale 1.0, and an overflow then raises as zerosim's static scale does).
Partitions: BF16_Optimizer cuts the aligned buffer (2N) into N, zerosim the flat one (N): owners differ where the
two paddings differ, which changes no bit of an elementwise update.

Letters: P parameters, N ranks, L the aligned length (P rounded up to a multiple of 2N), Ψ zerosim's padded length.
"""

from __future__ import annotations

from zerosim.cluster import Handle
from zerosim.collectives import ReduceOp, get_op
from zerosim.parallel.data.recipes._divide_factors import torch_scalar_mul
from zerosim.precision import cast, get_format

NAME = "deepspeed-bf16-optimizer"
NCCL_START_ALIGNMENT_FACTOR = 2  # BF16_Optimizer.__init__: "align nccl all-gather send buffers to 4-byte boundary"


def aligned_length(num_params: int, n: int) -> int:
    """L: P zero-padded to a multiple of 2N (runtime/utils.py: align_dense_tensors with alignment 2N)."""
    alignment = NCCL_START_ALIGNMENT_FACTOR * n
    return -(-num_params // alignment) * alignment


def op(policy, n: int) -> ReduceOp:
    """No division before the wire (postscale_gradients): a plain sum."""
    return get_op("sum")


def after(piece, policy, n: int):
    """allreduce_bucket's `tensor_to_allreduce.mul_(gradient_predivide_factor / dp_world_size)` in the wire dtype,
    then `tensor.copy_(tensor_to_allreduce)` into the fp32 gradient buffer (a widening: exact)."""
    return cast(torch_scalar_mul(piece, 1.0 / n), get_format("fp32"))


def requires(plan, policy) -> str | None:
    """Why `policy` is not what BF16_Optimizer runs with (None: it is)."""
    if (policy.compute, policy.grad_accum, policy.master) != ("bf16", "fp32", "fp32"):
        return (f"reduction {NAME!r} follows DeepSpeed's BF16_Optimizer, which runs for bf16 parameters with fp32 "
                f"masters and grad_accum_dtype fp32 only (runtime/engine.py: _do_optimizer_sanity_check); got "
                f"compute={policy.compute}, master={policy.master}, grad_accum={policy.grad_accum}")
    if policy.loss_scale != 1.0:
        return (f"reduction {NAME!r}: BF16_Optimizer has no loss scaler (runtime/bf16_optimizer.py: 'BF16 doesn't "
                f"use loss scaling'); drop loss_scale={policy.loss_scale!r}")
    return None


def check_engine(recipe, optimizer, clip_grad) -> None:
    """Raise ValueError for what an engine with this recipe does not model (before anything is allocated)."""
    if recipe.reduction != NAME:
        return
    if clip_grad is not None:
        raise ValueError(f"reduction {NAME!r}: BF16_Optimizer clips by a norm each rank sums over its whole gradient, "
                         "tensor by tensor (runtime/utils.py: get_global_norm_of_tensors), which zerosim does not "
                         "model; drop clip_grad")
    if not optimizer.elementwise:
        raise ValueError(f"reduction {NAME!r}: BF16_Optimizer's Muon path (_prepare_muon_updates) is not modelled; "
                         "use an elementwise optimizer (Adam, AdamW, SGD, Lion, Adan)")


def all_reduce_aligned(ctx, layers: tuple = ()) -> Handle:
    """Every rank's (Ψ,) fp32 gradient buffer all-reduced as one (L,) tensor in the recipe's chunk map, the recipe's
    `after` applied, written back in place (BF16_Optimizer's `buf.copy_(synced)`). `layers`: for the trace."""
    from zerosim.parallel.data.recipes._bucket_allreduce import chunk_map_all_reduce  # it imports the recipes

    collective = chunk_map_all_reduce(ctx.recipe.allreduce)
    cluster, policy, rules, ranks = ctx.cluster, ctx.policy, ctx.recipe.rules, ctx.ranks
    n, P = cluster.world_size, ctx.layout.num_params
    L = aligned_length(P, n)
    flat = []  # (L,) fp32 per rank: BF16_Optimizer's fp32_groups_gradients_flat, padding zero
    for rank in ranks:
        buf = rank.ledger.alloc("grad bucket", L, rank.grads.array.dtype, "grads", fill=0)
        buf.array[:P] = rank.grads.array[:P]
        flat.append(buf)
    with cluster.trace.about(purpose="reduce grads", layers=tuple(sorted(layers, reverse=True))):
        out = collective(cluster, [b.array for b in flat], op=rules.op(policy, n), wire=policy.reduce_format,
                         tag="grads")
    for rank, result in zip(ranks, out):
        rank.grads.array[:P] = rules.after(result[:P], policy, n)
    for buf in flat:
        buf.free()
    return out.handle


def oracle_chunks(num_params: int, padded: int, n: int, itemsize: int, allreduce: str) -> tuple:
    """The all-reduce's chunk map over the (L,) buffer as (c, a, b) triples clipped to the oracle's (Ψ,) vector
    (Ψ <= L; what lies beyond is padding, zero on every rank), and its direction."""
    from zerosim.parallel.data.recipes._bucket_allreduce import call_chunks  # as above

    chunks, direction = call_chunks(aligned_length(num_params, n), n, itemsize, allreduce)
    return [(c, a, min(b, padded)) for c, a, b in chunks if a < padded], direction

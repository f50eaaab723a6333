"""The oracle's own twin of every gradient recipe: what each framework does to a rank's gradient before the wire,
to each reduced piece after it, and how the optimizer's gradient is averaged — written again, plainly, so that a bug
in the engine's recipe code (parallel/data/recipes/) is caught by the oracle, not agreed with.

Letters: N ranks in the world, G ranks in the group a sum runs over (N, or a shard group's S, or R replicas), K
micro-steps, S the loss scale. Shared with the engine: the casts, `unscale` (precision/), the naive twin's ring sum
(collectives/_naive.py). Nothing of parallel/.

    recipe                    before the wire (own dtype)   on the wire          after the sum            / by
    seeds                     -                             -                    -                        N·K
    ddp                       x · fl32(1/G), torch's mul    -                    -                        K
    deepspeed-zero12(-reduce) x.div_(G) on CUDA             -                    to the kept format       K
    deepspeed-bf16-optimizer  -                             -                    x.mul_(1/N), to fp32     K
    deepspeed-zero3           -                             x.div_(G) on CUDA    to the kept format       K
    fsdp2                     -                             AVG: x · fl(1/G),    x.div_(post), to the     K
                                                            or x.div_(pre)       master's format

Sources (the framework code on its default path; docs/recipes.md has each step):
    ddp          torch 2.13 torch/csrc/distributed/c10d/reducer.cpp: Reducer::mark_variable_ready_dense,
                 `at::mul_out(bucket_view, grad, 1. / div_factor_)`
    zero12       DeepSpeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py: average_tensor (`tensor.div_(world_size)`),
                 allreduce_bucket, allreduce_and_copy_with_multiple_ranks; `_add_to_grad_partition_buffer` keeps an
                 fp32 grad_accum's piece as it came off the wire
    bf16 opt.    deepspeed/runtime/bf16_optimizer.py: BF16_Optimizer; deepspeed/runtime/engine.py allreduce_bucket
                 (`mul_(1/N)` after the SUM, then `copy_` into the fp32 buffer)
    zero3        deepspeed/runtime/zero/stage3.py: __avg_scatter_grads; runtime/comm/coalesced_collectives.py:
                 reduce_scatter_coalesced (`div_(world_sz)` in the wire dtype), then `.to(gradient_accumulation_dtype)`
    fsdp2        torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce,
                 _get_gradient_divide_factors (fp32/bf16: NCCL's AVG; fp16: a power of two `pre` before, N/pre after)
    MiCS         deepspeed/runtime/zero/mics.py: allreduce_mics_shard_grads (`scale_tensors`: div_(R), then SUM)

torch's scalar arithmetic, by hand: a Python float becomes the "opmath" type (fp32; fp64 for fp64 tensors), the op
rounds there and a 16-bit result rounds once more to its dtype; on CUDA `div_(d)` multiplies by opmath(1)/opmath(d)
(aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu). NCCL's AVG multiplies by 1/G rounded double -> float -> the wire
dtype (src/enqueue.cc), one rounding of the product.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import cast, format_of, get_format, unscale


# -- torch's and NCCL's scalar arithmetic ---------------------------------------------------------------------------
def _opmath(x) -> type:
    return np.float64 if x.dtype == np.float64 else np.float32


def _back(y, x):
    """y (opmath) rounded once more to x's own dtype, where that is narrower."""
    return y if y.dtype == x.dtype else cast(y, format_of(x))


def torch_mul(x, s: float):
    """`x * s`: s rounded to opmath, the product rounded there, then to x's dtype."""
    op = _opmath(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return _back(x.astype(op) * cast(np.float64(s), get_format(op))[()], x)


def cuda_div(x, d: float):
    """`x.div_(d)` on CUDA: x times opmath(1) / opmath(d)."""
    op = _opmath(x)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _back(x.astype(op) * (op(1) / cast(np.float64(d), get_format(op))[()]), x)


def nccl_avg(x, g: int):
    """NCCL's AVG before its sum: x · fl(1/G) in x's dtype, the product rounded once."""
    if x.dtype == np.float64:
        return x * (1.0 / g)
    fmt = format_of(x)
    scale = cast(np.float64(np.float32(1.0 / g)), fmt).astype(np.float64)
    return cast(x.astype(np.float64) * scale, fmt)


def fsdp2_split(n: int, wire) -> tuple:
    """FSDP2's (pre, post) divide factors for an fp16 (or any but fp32/bf16) wire over N ranks, or None for the
    formats NCCL averages. NOTE: the loop tests divisibility by the *old* pre, so N = 6 gives pre 4."""
    if get_format(wire).name in ("fp32", "bf16"):
        return None
    pre = 1
    while n % pre == 0 and n / pre > pre:
        pre *= 2
    return pre, n / pre


# -- the recipes, as the oracle does them ---------------------------------------------------------------------------
def _fsdp2_on_wire(x, g: int, n: int, policy):
    split = fsdp2_split(n, policy.reduce_format)
    if split is None:
        return x if n == 1 else nccl_avg(x, g)  # "NCCL ReduceOp.AVG may produce incorrect results with world size 1"
    return x if split[0] == 1 else cuda_div(x, split[0])


def _fsdp2_after(piece, n: int, policy):
    split = fsdp2_split(n, policy.reduce_format)
    if split is not None and split[1] != 1:
        piece = cuda_div(piece, split[1])
    return _to(piece, policy.master_format or policy.compute_format)


def _to(piece, fmt):
    return piece if piece.dtype == fmt.dtype else cast(piece, fmt)


def _accum_or_compute(policy):
    return get_format(policy.grad_accum) if policy.grad_accum is not None else policy.compute_format


@dataclass(frozen=True)
class Twin:
    """One recipe as the oracle computes it."""

    before: Callable | None  # (x, G) -> x in its own dtype, before the cast to the wire
    on_wire: Callable | None  # (x, G, N, policy) -> x in the wire dtype, before the first add
    after: Callable | None  # (reduced piece, N, policy) -> the gradient as the framework keeps it
    kept: Callable  # policy -> the format `after` leaves it in (what stages 2/3 accumulate in)
    divides_by_n: bool  # True: the recipe divided by N already, so the end divides by K alone
    partition: str = "flat"  # who owns an element: "flat" shards, each parameter's "elements" or dim-0 "rows"
    collective: str = "owners"  # "owners": each element summed to its owner; or a whole-bucket all-reduce


_ZERO12 = Twin(lambda x, g: cuda_div(x, g), None, lambda p, n, pol: _to(p, _accum_or_compute(pol)),
               _accum_or_compute, True)

TWINS = {
    "seeds": Twin(None, None, None, lambda pol: pol.reduce_format, False),
    "ddp": Twin(lambda x, g: torch_mul(x, 1.0 / g), None, None, lambda pol: pol.reduce_format, True),
    "deepspeed-zero12": replace(_ZERO12, collective="bucket all-reduce"),  # use_multi_rank_bucket_allreduce=True
    "deepspeed-zero12-reduce": _ZERO12,  # the flag off: each slice reduced to its owner
    "deepspeed-bf16-optimizer": Twin(None, None, lambda p, n, pol: _to(torch_mul(p, 1.0 / n), get_format("fp32")),
                                     lambda pol: get_format("fp32"), True, collective="aligned all-reduce"),
    "deepspeed-zero3": Twin(None, lambda x, g, n, pol: cuda_div(x, g), lambda p, n, pol: _to(p, _accum_or_compute(pol)),
                            _accum_or_compute, True, "elements"),
    "fsdp2": Twin(None, _fsdp2_on_wire, _fsdp2_after, lambda pol: pol.master_format or pol.compute_format, True,
                  "rows"),
}


def wire_inputs(grads: list, twin: Twin, policy, n: int) -> list:
    """Each of the G ranks' gradients as it goes on the wire: the recipe's division, the cast, its on-wire step."""
    wire, g = policy.reduce_format, len(grads)
    out = []
    for x in grads:
        x = x if twin.before is None else twin.before(x, g)
        x = x if x.dtype == wire.dtype else cast(x, wire)
        out.append(x if twin.on_wire is None else twin.on_wire(x, g, n, policy))
    return out


def after(piece, twin: Twin, n: int, policy):
    return piece if twin.after is None else twin.after(piece, n, policy)


def accum_format(policy, twin: Twin, reduced: bool):
    """Where K micro-steps' gradients add up: grad_accum, else the reduced format (stages 2/3) or the compute one."""
    if policy.grad_accum is not None:
        return get_format(policy.grad_accum)
    return twin.kept(policy) if reduced else policy.compute_format


def accumulate(acc, g, first: bool) -> None:
    """acc = g (the first micro-step assigns, as a fresh `param.grad`: -0.0 stays -0.0), else acc + g, rounded once."""
    if first:
        acc[...] = g if g.dtype == acc.dtype else cast(g, get_format(acc.dtype))
    elif g.dtype == acc.dtype:
        acc += g
    else:
        acc[...] = cast(acc.astype(np.float64) + g.astype(np.float64), get_format(acc.dtype))


def finish(reduced, twin: Twin, policy, n: int, k: int, scale: float):
    """The optimizer's gradient (a new array): widened and divided once by N·K (the seeds) or K, in the update
    format, unscaled by S."""
    divisor = k if twin.divides_by_n else n * k
    g = reduced
    if divisor != 1 or not twin.divides_by_n:
        wide = np.float64 if reduced.dtype == np.float64 else np.float32
        g = reduced.astype(wide) / wide(divisor)
    upd = policy.update_format
    g = cast(g, upd) if g.dtype != upd.dtype else (g.copy() if g is reduced else g)
    return unscale(g, scale, policy.unscale) if scale != 1 else g


def replicate_inputs(parts: list, recipe: str, policy, shards: int, wire) -> list:
    """HSDP's and MiCS's R replicas' shards as they go on the replicate all-reduce's wire (`wire`; None: their own
    dtype): MiCS's `div_(R)` on CUDA before it, FSDP2's AVG over the replicas (a reduce format NCCL averages, more
    than one rank in all), else a plain sum."""
    r = len(parts)
    if recipe == "deepspeed-zero3":
        parts = [cuda_div(x, r) for x in parts]
    parts = [x if wire is None or x.dtype == wire.dtype else cast(x, wire) for x in parts]
    if recipe == "fsdp2" and fsdp2_split(shards, policy.reduce_format) is None and shards * r > 1:
        parts = [nccl_avg(x, r) for x in parts]
    return parts

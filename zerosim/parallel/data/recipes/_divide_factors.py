"""How the frameworks divide gradients by N: FSDP2's factors, and torch's scalar multiply / divide bits.

FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: _get_gradient_divide_factors,
used by foreach_reduce) lets NCCL average fp32 and bf16 gradients (ReduceOp.AVG, or PREMUL_SUM(1/f)
for a custom factor f). For fp16 it fears overflow and underflow, so it splits the division: a
power-of-two `pre` factor before the reduce-scatter and the rest, `post = N / pre`, after:

    pre = 1
    while N % pre == 0 and N / pre > pre:
        pre *= 2                      # NOTE: checks divisibility by the *old* pre: N = 6 gives pre 4
    post = N / pre

Both divisions run as `tensor.div_(factor)` (_div_if_needed) in the reduce dtype. What bits a torch
scalar division gives depends on the device (`torch_scalar_div`): CUDA multiplies by the reciprocal
(aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu: div_true_kernel_cuda, "compute a * reciprocal(b)
... may lose one bit"), the CPU divides (cpu/BinaryOpsKernel.cpp: div_true_kernel); 16-bit inputs
compute in fp32 ("opmath") and round once more to their own dtype. DDP divides by multiplying
(torch/csrc/distributed/c10d/reducer.cpp: `at::mul_out(bucket_view, grad, 1. / div_factor_)`),
which is `torch_scalar_mul`.

NOTE: for 16-bit gradients the fp32 reciprocal product is rounded twice (to fp32, then to fp16), and
near fp16's subnormal grid an exact tie of the true quotient is no longer a tie: x / 14 on CUDA
differs from the correctly rounded quotient for 78 fp16 inputs, and likewise for N = 26, 28, 30,
52, 56, 60, ... (all even; measured over every fp16 input for N < 300, where bf16 never differs).
The CPU's division agrees with the correctly rounded quotient for all of them.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import cast, format_of, get_format

DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class FSDP2DivideFactors:
    """What foreach_reduce does around its reduce-scatter (and HSDP's all-reduce)."""

    pre: float | None  # divide by this before the reduce-scatter (None: no division)
    post: float | None  # divide by this after it (None: none)
    reduce_scatter_op: str  # "sum", "avg" (NCCL's ncclAvg) or "premul_sum" (NCCL PreMulSum by `premul`)
    all_reduce_op: str  # the HSDP all-reduce's op: "sum" or "avg"
    premul: float | None = None  # PREMUL_SUM's scalar, 1/factor (None unless reduce_scatter_op is "premul_sum")


def fsdp2_divide_factors(world_size: int, dtype, all_reduce_size: int = 1, factor: float | None = None,
                         force_sum_reduction_for_comms: bool = False) -> FSDP2DivideFactors:
    """_get_gradient_divide_factors for a reduce-scatter group of `world_size` ranks, reduce dtype
    `dtype` ("fp32", "bf16", "fp16", ...), an HSDP replicate group of `all_reduce_size` ranks, and
    an optional custom `factor` (FSDP's gradient_divide_factor)."""
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if isinstance(all_reduce_size, bool) or not isinstance(all_reduce_size, (int, np.integer)) or all_reduce_size < 1:
        raise ValueError(f"all_reduce_size must be an integer >= 1, got {all_reduce_size!r}")
    if factor is not None and not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor!r}")
    fmt = get_format(dtype)
    overflow_risk = fmt.name not in ("fp32", "bf16")  # "For fp32/bf16, we do not need to worry about overflow"
    data_parallel_size = int(world_size) * int(all_reduce_size)
    if not overflow_risk and not force_sum_reduction_for_comms:
        if factor is None:
            if data_parallel_size == 1:  # "NCCL ReduceOp.AVG may produce incorrect results with world size 1"
                return FSDP2DivideFactors(None, None, "sum", "sum")
            return FSDP2DivideFactors(None, None, "avg", "avg")
        if factor == world_size:
            return FSDP2DivideFactors(None, None, "avg", "sum")
        return FSDP2DivideFactors(None, None, "premul_sum", "sum", premul=1 / factor)
    if factor is None:
        factor = float(data_parallel_size)
    if overflow_risk:
        pre = 1
        while factor % pre == 0 and factor / pre > pre:
            pre *= 2
        return FSDP2DivideFactors(pre, factor / pre, "sum", "sum")
    return FSDP2DivideFactors(None, factor, "sum", "sum")  # "Prefer post-multiplying": less data


def _as_array(x):
    """x as an array; one that already is (a data-less meta array too) as given."""
    return x if hasattr(x, "dtype") and hasattr(x, "astype") else np.asarray(x)


def _opmath(fmt):
    """The type torch computes a 16- or 32-bit elementwise op in (at::opmath_type): fp32, or fp64."""
    return np.float64 if fmt.name == "fp64" else np.float32


def torch_scalar_mul(x: np.ndarray, s: float) -> np.ndarray:
    """`x * s` for a Python float s, as torch rounds it: s becomes the opmath type (one rounding),
    the product is rounded in opmath, and 16-bit results round once more to x's dtype."""
    fmt = format_of(x)
    op = _opmath(fmt)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN gradients pass through, as on a GPU
        y = _as_array(x).astype(op) * cast(np.float64(s), get_format(op))[()]  # product in opmath
    return y if fmt.dtype == y.dtype else cast(y, fmt)


def torch_scalar_div(x: np.ndarray, d: float, device: str = "cuda") -> np.ndarray:
    """`x.div_(d)` for a Python float d: CUDA multiplies by opmath(1)/opmath(d), formed in opmath;
    the CPU divides by opmath(d). 16-bit results round once more to x's dtype."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {DEVICES}")
    fmt = format_of(x)
    op = _opmath(fmt)
    d_op = cast(np.float64(d), get_format(op))[()]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if device == "cuda":
            y = _as_array(x).astype(op) * (op(1) / d_op)  # inv_b = opmath_t(1.0) / b, then MulFunctor
        else:
            y = _as_array(x).astype(op) / d_op
    return y if fmt.dtype == y.dtype else cast(y, fmt)

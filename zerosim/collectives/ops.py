"""Reduction operators, including the three ways real systems average gradients over N ranks.

    sum            ring sum in the wire dtype
    max            elementwise maximum (exact in any order)
    avg            the seeds' protocol: sum in the wire dtype, then cast to fp32 and divide by N there
    avg_predivide  DeepSpeed ZeRO-1/2: divide each rank's tensor by N in its own dtype, then sum
    avg_premul     NCCL's ncclAvg (and FSDP): multiply by 1/N rounded to the wire dtype, then sum

Each rounds where the real system rounds. Products and quotients are formed in float64 and rounded
once, which is what a correctly rounded hardware multiply/divide gives (float64 holds the exact
product of two values of <= 24 bits; a float64 quotient rounded again to <= 24 bits is innocuous
double rounding since 53 >= 2*24 + 2).

fp8 sums saturate. NCCL (>= 2.24, sm90 and newer only) adds two fp8 values as
`__nv_fp8_e4m3(__hadd(__half(x), __half(y)))` (src/device/reduce_kernel.h, SPECIALIZE_REDUCE for
FuncSum, also used by PreMulSum), and CUDA's fp8-from-half constructor converts with
__NV_SATFINITE (cuda_fp8.hpp): a sum beyond the largest finite value, or an inf (e5m2 inf + x, or
an fp16 overflow of the intermediate), becomes +-max (448 / 57344), while NaN stays NaN. The fp16
intermediate rounds first; that double rounding is innocuous (fp16 has 11 >= 2p + 2 bits for p <= 4), so the exact sum
rounded once with saturation gives the same bits (tests/test_fp8_wire.py checks all 2 x 65,536 pairs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from zerosim.precision import Format, cast, get_format


@dataclass(frozen=True)
class ReduceOp:
    """A reduction: how two partial results combine on the ring, and what happens before and after."""

    name: str
    combine: Callable  # applied hop by hop as combine(received_partial, own_chunk, out=...), rounding to the wire dtype
    description: str

    def pre(self, x: np.ndarray, n: int, wire: Format) -> np.ndarray:
        """Turn one rank's input into what it puts on the wire (in the wire dtype)."""
        if self.name == "avg_predivide":
            own = get_format(x.dtype)
            x = cast(x.astype(np.float64) / n, own)  # divided in the gradient's own dtype
        x = x if x.dtype == wire.dtype else cast(x, wire)
        if self.name == "avg_premul":
            scale = cast(1.0 / n, wire).astype(np.float64)  # 1/N rounded to the wire dtype, as NCCL does
            x = cast(x.astype(np.float64) * scale, wire)
        return x

    def combiner(self, wire: Format) -> Callable:
        """`combine` resolved once for a wire format: the bare ufunc where it is one (every sum that does
        not saturate is exactly `np.add`), so a ring of many small chunks pays no per-hop dispatch."""
        if self.combine is add and not saturates(wire):
            return np.add
        return self.combine

    @property
    def changes_input(self) -> bool:
        return self.name in ("avg_predivide", "avg_premul")

    def post(self, y: np.ndarray, n: int) -> np.ndarray:
        """Finish a reduced result: only "avg" does anything, in fp32 (or wider, if the wire is wider)."""
        if self.name != "avg":
            return y
        wide = np.float64 if y.dtype == np.float64 else np.float32
        return y.astype(wide) / wide(n)


def saturates(fmt: Format) -> bool:
    """True for the formats whose sums NCCL saturates to +-max instead of overflowing (fp8)."""
    return fmt.bits == 8


def add(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a + b rounded once to their dtype, as np.add, except that fp8 sums saturate as NCCL's do."""
    fmt = get_format(a.dtype)
    if not saturates(fmt):
        return np.add(a, b, out=out)
    with np.errstate(invalid="ignore"):  # inf - inf = NaN is the defined answer
        total = cast(a.astype(np.float64) + b.astype(np.float64), fmt, saturate=True)  # exact sum, one rounding
    if out is None:
        return total
    out[...] = total
    return out


OPS = {
    op.name: op
    for op in (
        ReduceOp("sum", add, "sum, rounded to the wire dtype at every hop"),
        ReduceOp("max", np.maximum, "elementwise maximum"),
        ReduceOp("avg", add, "sum in the wire dtype, then divide by N in fp32 (the seeds' protocol)"),
        ReduceOp("avg_predivide", add, "divide by N in the input dtype, then sum (DeepSpeed ZeRO-1/2)"),
        ReduceOp("avg_premul", add, "multiply by 1/N rounded to the wire dtype, then sum (NCCL avg, FSDP)"),
    )
}


def get_op(name: str) -> ReduceOp:
    """The `ReduceOp` called `name` ("sum", "max", "avg", "avg_predivide", "avg_premul")."""
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown reduction op {name!r}; choose one of {', '.join(OPS)}") from None

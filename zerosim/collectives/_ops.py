"""Reduction operators, including the three ways real systems average gradients over N ranks.

    sum            ring sum in the wire dtype
    max            elementwise maximum (exact in any order)
    avg            the seeds' protocol: sum in the wire dtype, then cast to fp32 and divide by N there
    avg_predivide  DeepSpeed ZeRO-1/2: divide each rank's tensor by N in its own dtype, then sum
    avg_premul     NCCL's ncclAvg (and FSDP): multiply by 1/N rounded to the wire dtype, then sum

A `ReduceOp` may carry its own preparation of each rank's input, in the input's dtype before the cast
to the wire (`before_wire`) and in the wire dtype after it (`on_wire`): that is how the gradient
recipes of parallel/data/recipes/_recipes.py (DDP's and DeepSpeed's divisions, FSDP2's pre-divide) reach the wire,
while the collectives stay ignorant of ZeRO. Every collective accepts a `ReduceOp` wherever it
accepts an op's name.

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

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import Format, cast, get_format
from zerosim.precision.cast import NUMPY


def divide_exactly(x: np.ndarray, n: int) -> np.ndarray:
    """x / n correctly rounded to x's own dtype (avg_predivide)."""
    return cast(x.astype(np.float64) / n, get_format(x.dtype))


def premul_reciprocal(x: np.ndarray, n: int) -> np.ndarray:
    """NCCL's ncclAvg pre-op: x * fl(1/N) in x's dtype, the scalar rounded double -> float -> dtype as
    src/enqueue.cc does (`__float2half(float(1.0 / comm->nRanks))`; double stays `1.0 / nRanks`), the
    product rounded once (`__hmul`)."""
    fmt = get_format(x.dtype)
    if fmt.bits == 64:
        return x * (1.0 / n)
    scale = cast(np.float64(np.float32(1.0 / n)), fmt).astype(np.float64)
    return cast(x.astype(np.float64) * scale, fmt)  # the exact product (<= 24 x 24 bits) rounded once


@dataclass(frozen=True)
class ReduceOp:
    """A reduction: how two partial results combine on the ring, and what happens before and after."""

    name: str
    combine: Callable  # applied hop by hop as combine(received_partial, own_chunk, out=...), rounding to the wire dtype
    description: str
    before_wire: Callable | None = None  # (x, N) -> x in its own dtype: each rank's input before the cast to the wire
    on_wire: Callable | None = None  # (x, N) -> x in the wire dtype: after the cast, before the first hop

    def pre(self, x: np.ndarray, n: int, wire: Format, ns=NUMPY) -> np.ndarray:
        """Turn one rank's input into what it puts on the wire (in the wire dtype; its storage in namespace `ns`)."""
        if not ns.is_numpy:  # a device: the cast there; a recipe's own pre-op (numpy code) on a host copy
            if not self.changes_input:
                return x if ns.format_of(x) == wire else ns.cast(x, wire)
            return ns.from_host(self.pre(ns.to_host(x), n, wire))
        if self.before_wire is not None:
            x = self.before_wire(x, n)
        x = x if x.dtype == wire.dtype else cast(x, wire)
        if self.on_wire is not None:
            x = self.on_wire(x, n)
        return x

    def combiner(self, wire: Format, ns=NUMPY) -> Callable:
        """`combine` resolved once for a wire format: the bare ufunc where it is one (every sum that does
        not saturate is exactly `np.add`), so a ring of many small chunks pays no per-hop dispatch. On another
        array namespace (`ns`: CuPy, the stand-in) the namespace's add or maximum (bf16 through its bits)."""
        if not ns.is_numpy:
            if self.combine is add and not saturates(wire):
                return ns.add
            if self.combine is np.maximum:
                return ns.maximum
            raise NotImplementedError(f"op {self.name!r} on {wire.name} runs on the numpy backend only")
        if self.combine is add and not saturates(wire):
            return add_bf16 if wire.dtype.name == "bfloat16" else np.add  # ml_dtypes' name: an fp32 wire imports none
        return self.combine

    @property
    def changes_input(self) -> bool:
        return self.before_wire is not None or self.on_wire is not None

    def post(self, y: np.ndarray, n: int, ns=NUMPY) -> np.ndarray:
        """Finish a reduced result: only "avg" does anything, in fp32 (or wider, if the wire is wider)."""
        if self.name != "avg":
            return y
        wide = np.float64 if y.dtype == np.float64 else np.float32
        if not ns.is_numpy:
            return ns.widen(y, bits=64 if wide is np.float64 else 32) / wide(n)
        return y.astype(wide) / wide(n)


_BF16_WIDE_FROM = 2048  # elements: ml_dtypes' add and this one cost the same here (AMD EPYC, 2026-11-24)


def add_bf16(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`np.add` of two bf16 arrays, bit for bit, in about half the time: both widened to float32 (exactly), added by
    NumPy's SIMD loop and rounded once to bf16, where ml_dtypes' own loop does the same an element at a time
    (ml_dtypes/_src/ufuncs.h, `ufuncs::Add`: `a + b`, Eigen's bfloat16 operator+, `bfloat16(float(a) + float(b))`;
    ml_dtypes 0.6.0). Rounding the float32 sum to bf16 gives the exact sum rounded once (24 >= 2·8 + 2 bits: the
    double rounding is innocuous), and a NaN comes out as the cast's canonical NaN (0x7FC0, its sign kept). The
    floats are added as b + a: where both are NaN of opposite signs, x86 keeps the first operand's, and ml_dtypes'
    compiled loop keeps b's (all 2**32 pairs were compared once on an x86-64 machine: those 32,258 pairs were the only
    ones a + b got wrong; tests/test_collectives_ring.py compares every pattern against a spread of others, NaN's
    sign there pinned only to NaN, as it follows the machine's operand order). The ring's adds of a bf16 wire run on
    this: ml_dtypes adds 1.4 ns an element here, this 0.7 (benchmarks/yardstick.py's 919k step: ~4 ms a step); below
    `_BF16_WIDE_FROM` elements ml_dtypes' own add, whose one call costs less."""
    if a.size < _BF16_WIDE_FROM:  # four NumPy calls cost more than ml_dtypes' loop over a short array
        return np.add(a, b, out=out)
    total = np.add(b.astype(np.float32), a.astype(np.float32))  # exact widenings; one float32 rounding
    if out is None:
        return total.astype(a.dtype)  # bf16, as b's
    out[...] = total  # ml_dtypes' float32 -> bf16 cast: round to nearest even
    return out


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
        ReduceOp(
            "avg_predivide",
            add,
            "divide by N in the input dtype, then sum (DeepSpeed ZeRO-1/2)",
            before_wire=divide_exactly,
        ),
        ReduceOp(
            "avg_premul",
            add,
            "multiply by 1/N rounded to the wire dtype, then sum (NCCL avg, FSDP)",
            on_wire=premul_reciprocal,
        ),
    )
}


def get_op(name: "str | ReduceOp") -> ReduceOp:
    """The `ReduceOp` called `name` ("sum", "max", "avg", "avg_predivide", "avg_premul"), or `name` itself if it
    is a `ReduceOp` already (a recipe's own)."""
    if isinstance(name, ReduceOp):
        return name
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown reduction op {name!r}; choose one of {', '.join(OPS)}") from None

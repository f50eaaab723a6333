"""The kernels a model's float32 arithmetic runs on: a choice made once, in the precision policy.

    "portable"  every matrix product the exact dot products rounded once to fp32 (_exact_matmul.py), and exp, log,
                tanh, sin, cos and powers correctly rounded to fp32 (_correctly_rounded.py): the same bits on every
                CPU, BLAS and GPU, so the numbers the docs, the notebooks and the tests pin hold everywhere. The
                default. Its products are those of an ideal fp32-accumulating GEMM: a real kernel's fp32 sums add
                rounding errors of their own (up to about K·2**-24 relative), in an order its vendor does not publish.
    "native"    the machine's sgemm on the fp32-widened inputs and NumPy's float32 functions: faster
                (benchmarks/portable_numbers.py), and the last bits depend on the BLAS kernel's summation order and
                on NumPy's SIMD build (AVX2, AVX-512, NEON). For timing zerosim beside torch, which runs its own.

Everything else a model does is IEEE-754 arithmetic in a fixed order (adds, multiplies, divisions, square roots,
NumPy's pairwise sums), which gives the same bits everywhere. The engine and the oracle read the choice from the
same policy (`MixedPrecision.arithmetic`, carried to the layers on the compute format: `Format.arithmetic`), so
engine = oracle holds bit for bit under either. float64 inputs (the fp64 yardstick) use NumPy's float64 kernels
under both: they are compared within tolerances, never pinned bit for bit.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision.arithmetic import _correctly_rounded as correctly_rounded
from zerosim.precision.arithmetic._exact_matmul import exact_matmul
from zerosim.precision.arithmetic import _operand_cache, _rank_products, _scratch


@dataclass(frozen=True)
class Arithmetic:
    """One set of kernels, each giving fp32 arrays (float64 for float64 inputs: NumPy's float64 kernels)."""

    name: str
    # (a (..., M, K), b (..., K, N)) in the compute format or fp32 -> (..., M, N) fp32; `out=`: an array of that
    # shape and dtype the product is put in and returned (same bits as without)
    matmul: Callable
    exp: Callable
    log: Callable
    tanh: Callable
    sin: Callable
    cos: Callable
    power: Callable  # (base: float, x) -> base ** x
    # (tensors) -> None, or None where the kernels need nothing ahead: a hint, the tensors the ranks' next op reads
    # (each rank's activation or gradient in flight), all at once before any rank runs it (parallel/data/_compute.py);
    # what the kernels learn from them changes no bit, only their time
    prepare: Callable | None = None
    # every element of a product its own function of its row and column (no bit depends on the other rows or on how
    # many there are): the ranks' micro-batches may be multiplied as one batch (models/_stacked.py). True for the
    # exact products; a BLAS sgemm may pick another kernel, blocking or order for another number of rows.
    rows_apart: bool = False


def _native_matmul(a, b, out=None):
    """The machine's GEMM on a and b widened to fp32 (float64 where either is float64), as zerosim always ran it;
    copied into `out` where given, not made there: a BLAS may pick its kernel by where its output lies, and these
    bits are the machine's own, kept as they were."""
    acc = np.float64 if np.float64 in (a.dtype, b.dtype) else np.float32
    product = a.astype(acc, copy=False) @ b.astype(acc, copy=False)
    if out is None:
        return product
    np.copyto(out, product)
    return out


# The hint pays where what it saves each rank, times the ranks, outweighs its fixed cost (hashing each tensor, one
# measurement of them all, the stacking's bookkeeping): many ranks, or operands large enough that one stacked product
# spares real work. Below both it cost more than it saved: on `zerosim train`'s default (MLP 16-64-64-4, 4 ranks,
# batch 16: 8 KB of activations an op) a step took 5-9 % less CPU without it, in turns; the yardstick's cases (64
# ranks; 128 KB an op and more on 8) keep it (docs/speed.md, item 12). No bit depends on it.
_PREPARE_FROM_RANKS = 32
_PREPARE_FROM_BYTES = 128 << 10


def _prepare_portable(tensors) -> None:
    """What every rank's next op multiplies: measured together (_operand_cache.py `remember_extents`), and noted so
    that the ranks' products by the same matrix are made as one (_rank_products.py); for few and small tensors,
    nothing (the products measure their operands themselves, as without the hint)."""
    if len(tensors) < _PREPARE_FROM_RANKS and sum(int(t.nbytes) for t in tensors) < _PREPARE_FROM_BYTES:
        _rank_products.clear()  # no earlier op's tensors stay noted
        return
    _operand_cache.remember_extents(tensors)
    _rank_products.prepare(tensors)


def clear_kept_operands(buffers: bool = True) -> None:
    """Forget every operand the portable kernels keep (_operand_cache.py) and the ranks' products prepared
    (_rank_products.py): tests, benchmarks that must not find another contender's work, a caller wanting memory.
    `buffers`: let go of the products' float64 scratch buffers too (_scratch.py); False keeps them, as a run keeps
    them from step to step: memory only, they hold nothing a later product finds (benchmarks/yardstick.py)."""
    _operand_cache.clear()
    _rank_products.clear()
    if buffers:
        _scratch.clear()


def _native_power(base, x):
    return x.dtype.type(base) ** x


ARITHMETICS = {
    "portable": Arithmetic("portable", exact_matmul, correctly_rounded.exp, correctly_rounded.log,
                           correctly_rounded.tanh, correctly_rounded.sin, correctly_rounded.cos,
                           correctly_rounded.power, _prepare_portable, rows_apart=True),
    "native": Arithmetic("native", _native_matmul, np.exp, np.log, np.tanh, np.sin, np.cos, _native_power),
}


def check_arithmetic(name) -> str:
    """`name` if it is one of ARITHMETICS, else a ValueError naming the choices."""
    if name not in ARITHMETICS:
        raise ValueError(f"unknown arithmetic {name!r}; choose one of {', '.join(map(repr, ARITHMETICS))} "
                         "(zerosim/precision/arithmetic/)")
    return name


def arithmetic_of(fmt) -> Arithmetic:
    """The kernels compute format `fmt` runs on (its `arithmetic`; a name or dtype: "portable")."""
    return ARITHMETICS[getattr(fmt, "arithmetic", "portable")]

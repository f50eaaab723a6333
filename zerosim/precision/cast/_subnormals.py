"""float32 <-> float64 that keep float32's subnormals on an array module whose float32 work flushes them.

CuPy compiles every elementwise kernel with `-ftz=true` (cupy/cuda/compiler.py, `_get_nvrtc_options`; the
flag cannot be turned off from user code: cupy/cupy#9576), so on a GPU a float32 below 2**-126 is read
as zero and a float32 result there is written as zero, conversions included. NumPy keeps them, and so do
NCCL's reductions and PyTorch's kernels. zerosim's casts and bf16 arithmetic on a device (_namespace.py,
_bf16_bits.py) therefore never let a subnormal float32 pass through float32 arithmetic: they go to and from
float64 (no flushing) through the bits.

    f32_to_f64:  |u| < 0x00800000 (subnormal or zero):  value = |u| * 2**-149, exactly, with u's sign
    f64_to_f32:  |x| < 2**-126:  bits = rint(|x| * 2**149) with x's sign  (round to nearest, ties to even;
                 2**23 is the smallest normal's bits, so rounding up into the normals comes out right)

Elsewhere both are the module's own conversion, which is exact (widening) or correctly rounded (narrowing).
On NumPy the two give `astype`'s bits for every input (tests/test_array_namespace.py checks every float32
subnormal pattern and float64 values around each float32 subnormal boundary).
"""

from __future__ import annotations

_SMALLEST_NORMAL_BITS = 0x00800000  # 2**-126 as float32 bits
_SIGN = 0x80000000
_TINY = 2.0**-149  # float32's smallest subnormal, the unit of its subnormals' bits
_SMALLEST_NORMAL = 2.0**-126


def f32_to_f64(x, xp):
    """(shape) float32 -> (shape) float64, exactly, subnormals included, without float32 arithmetic on them."""
    u = x.view(xp.uint32)
    mag = xp.bitwise_and(u, xp.uint32(~_SIGN & 0xFFFFFFFF))
    small = mag < xp.uint32(_SMALLEST_NORMAL_BITS)  # subnormal or zero
    tiny = mag.astype(xp.float64) * _TINY  # exact: an integer below 2**23 times a power of two
    signed = xp.where(u >= xp.uint32(_SIGN), -tiny, tiny)  # -0.0 for the negative zero
    return xp.where(small, signed, x.astype(xp.float64))


def f64_to_f32(x, xp):
    """(shape) float64 -> (shape) float32 rounded to nearest, ties to even, subnormals included."""
    wide = x.astype(xp.float32).view(xp.uint32)  # correct wherever the result is normal, inf or NaN
    mag = xp.abs(x)
    small = mag < _SMALLEST_NORMAL  # False for NaN
    k = xp.rint(xp.where(small, mag, 0.0) * 2.0**149).astype(xp.uint32)  # <= 2**23: exact in float64
    sign = xp.where(xp.signbit(x), xp.uint32(_SIGN), xp.uint32(0))
    return xp.where(small, xp.bitwise_or(k, sign), wide).view(xp.float32)

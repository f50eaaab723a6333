"""One NaN per format in what the portable kernels return, so that "the same bits on every machine" holds for NaN too.

IEEE-754 leaves a NaN result's sign and payload to the implementation, and machines differ: an invalid operation
on x86's SSE/AVX gives the "default NaN" with the sign bit set (0xFFC00000 in float32: NumPy's float32 log(-1) here),
ARM (FPCR.DN) and RISC-V give it clear (0x7FC00000); a NaN operand's payload and sign propagate or not depending on
which operand and which SIMD routine NumPy dispatched to (AVX-512, AVX2, SSE, NEON). So every NaN the portable kernels
return (_correctly_rounded.py, _exact_matmul.py) is replaced by the one canonical quiet NaN of its format: sign
clear, quiet bit set, payload 0 — float32 0x7FC00000, float64 0x7FF8000000000000. Why that one: it is NumPy's
`np.nan` and Python's `float("nan")` in every format (what a user or a test writes), and the default NaN of ARM and
RISC-V. The native kernels keep the machine's NaNs.
"""

from __future__ import annotations

import numpy as np

# the canonical quiet NaN of each format the portable kernels return, by its bits
CANONICAL_NAN = {np.dtype(np.float32): np.uint32(0x7FC00000).view(np.float32),
                 np.dtype(np.float64): np.uint64(0x7FF8000000000000).view(np.float64)}


def canonical_nans(out, ns):
    """`out` (an array of the namespace `ns`, float32 or float64) with every NaN the canonical one; `out` itself
    when it holds none (one pass to look)."""
    nan = CANONICAL_NAN.get(np.dtype(out.dtype))
    if nan is None:
        return out
    xp = ns.xp
    # a maximum is NaN where any element is (NumPy's and CuPy's reductions propagate NaN): one pass, no mask made
    if out.size == 0 or not bool(xp.isnan(out.max())):
        return out
    return xp.where(xp.isnan(out), out.dtype.type(nan), out)

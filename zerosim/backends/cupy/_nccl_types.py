"""How zerosim's formats travel through NCCL: the datatype NCCL is told, and the dtype CuPy stores.

bf16: CuPy has no bfloat16 dtype, so a bf16 buffer lives on the device as uint16 (the same two bytes)
and NCCL is told NCCL_BFLOAT16 (NCCL >= 2.10.3), so that its own reductions add numbers, not bit
patterns. fp8 travels as bytes (NCCL_UINT8): CuPy does not expose NCCL's fp8 types, so NCCL never
reduces fp8 here.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import FORMATS, Format

NCCL_2_10_3 = 21003  # ncclAvg and ncclBfloat16 arrived in NCCL 2.10.3 (version code 2*10000 + 10*100 + 3)
_NCCL_BYTES = {"NCCL_FLOAT64": 8, "NCCL_FLOAT32": 4, "NCCL_FLOAT16": 2, "NCCL_BFLOAT16": 2, "NCCL_UINT8": 1}
_NCCL_TYPE_OF = {"fp64": "NCCL_FLOAT64", "fp32": "NCCL_FLOAT32", "fp16": "NCCL_FLOAT16", "bf16": "NCCL_BFLOAT16"}
NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN", "avg_premul": "NCCL_AVG"}


def _key(dtype) -> str:
    """A dtype as a short picklable name: the format name for zerosim's formats, else numpy's `str`."""
    dtype = np.dtype(dtype)
    for f in FORMATS.values():
        if f.dtype == dtype:
            return f.name
    return dtype.str


@dataclass(frozen=True)
class Wire:
    """How one dtype travels: the host dtype the ring holds, the dtype CuPy stores, the NCCL datatype."""

    host: np.dtype  # e.g. ml_dtypes.bfloat16
    device: np.dtype  # e.g. uint16 for bf16 (CuPy has no bfloat16): same bytes, a 2-byte view
    nccl_name: str  # "NCCL_BFLOAT16", ...; "NCCL_UINT8" when the elements travel as raw bytes
    nccl_type: int  # the constant itself, from cupy.cuda.nccl
    reducible: bool  # NCCL adds these as numbers (never raw bytes, never fp8)

    def nccl_count(self, elements: int) -> int:
        """NCCL's `count` argument for `elements` host elements (bytes when travelling as NCCL_UINT8)."""
        return elements * self.host.itemsize // _NCCL_BYTES[self.nccl_name]


def wire_for(nccl, dtype_or_key, has_bf16: bool) -> Wire:
    """How a dtype (or a format, or a format name such as "bf16") travels through NCCL."""
    if isinstance(dtype_or_key, Format):
        dtype = dtype_or_key.dtype
    elif isinstance(dtype_or_key, str) and dtype_or_key in FORMATS:
        dtype = FORMATS[dtype_or_key].dtype
    else:
        dtype = np.dtype(dtype_or_key)
    name = _key(dtype)
    nccl_name = _NCCL_TYPE_OF.get(name, "NCCL_UINT8")
    if name == "bf16" and not has_bf16:
        nccl_name = "NCCL_UINT8"  # NCCL < 2.10.3: the bits still travel, but NCCL cannot add them
    device = dtype if dtype.kind in "biuf" else np.dtype(f"uint{8 * dtype.itemsize}")  # bf16 -> uint16, fp8 -> uint8
    return Wire(dtype, device, nccl_name, getattr(nccl, nccl_name), nccl_name != "NCCL_UINT8")

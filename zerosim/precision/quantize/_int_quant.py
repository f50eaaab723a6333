"""DeepSpeed's symmetric integer quantizer (ZeRO++ qwZ and qgZ), each rounding as its CUDA kernels write it.

Letters: M elements quantized at once, G groups of M/G elements, b bits (8 for qwZ's weights, 4 for qgZ's
gradients). Read at DeepSpeed commit edaa722 (2026-08):

    input        fp16 only: `CUDAQuantizer.quantize` casts every weight `.to(torch.half)` first
                 (runtime/zero/partition_parameters.py), so a bf16 weight is rounded twice: bf16 -> fp16 -> int
    group absmax max |x| in fp16 (exact), read as fp32 (csrc/includes/quantization_utils.h: GroupStats<Symmetric>)
    scale        s = 2^b / (2 * absmax) in fp32, or 1.0 when absmax == 0           (Params<Symmetric>::Params)
                 NOTE: 2^b, not 2^b - 2: absmax maps to 2^(b-1) and clamps to 2^(b-1) - 1
    integer      q = clamp(rint(fl32(fl32(x) * s)), -2^(b-1), 2^(b-1) - 1), rint ties to even (__float2int_rn)
    scale sent   fl32(1 / s), one fp32 per group                                     (Params<Symmetric>::store)
    received     fl16(fl32(q * sent)) — or fp32 with `dequantize_fp32`              (Params<Symmetric>::dequantize)
    int4         two per byte: element 2i in the high nibble, 2i+1 in the low one (quantization.h: PackedInt4
                 {high: 4, low: 4}, filled as {x[2i+1], x[2i]}; a bit-field's first member takes the low bits
                 under the GCC/NVCC ABI)

NOTE (not confirmable without a GPU): DeepSpeed builds these kernels with `--use_fast_math`
(op_builder/builder.py: CUDAOpBuilder.nvcc_args), so the two divisions above compile to approximate PTX
(div.full.f32, rcp.approx.ftz.f32: within about 2 ulp). zerosim divides correctly rounded; where the two differ a
scale can move by an ulp, and with it an integer that lay within that distance of a .5.

`deepspeed_groups` is CUDAQuantizer's adaptive group count (about 8000 elements a group, at most 16000, M a
multiple of 8·G); a fixed `group_size` is offered beside it (DeepSpeed PR #8511 proposes 64-element groups for
ZeRO-1/2 weights; not in the source read). The naive twin of the kernels' arithmetic is each function written
per group in Python (tests/test_int_quant.py); the functions here work on all groups at once with NumPy.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim._dataclass import dataclass

_TARGET_GROUP_SIZE = 8000  # CUDAQuantizer.target_group_size: "the optimal size is 4k, so we set the target below 8k"


def deepspeed_groups(numel: int) -> int:
    """CUDAQuantizer.quantize's adaptive group count for `numel` elements, or the ValueError its asserts raise."""
    if numel <= 0:  # groups = ceil(0 / 8000) = 0, then `numel % (8 * groups * 2)`: ZeroDivisionError
        raise ValueError(f"DeepSpeed's CUDAQuantizer cannot quantize {numel} elements (its group search divides by "
                         "zero): an empty partition has no groups")
    groups = _first_group_count(numel, math.ceil(numel / _TARGET_GROUP_SIZE))
    while numel % (8 * groups * 2) == 0 and numel / groups > _TARGET_GROUP_SIZE:  # hard limit of 16k group_size
        groups *= 2
    if numel % (8 * groups) != 0:
        raise ValueError(f"DeepSpeed's CUDAQuantizer asserts: quantized weight requires the number of weights be a "
                         f"multiple of 8; {numel} cannot be divided by 8*{groups}")
    if not numel / groups < 16000 or not numel > groups:
        raise ValueError(f"DeepSpeed's CUDAQuantizer finds no group size for {numel} elements")
    return groups


def _first_group_count(numel: int, start: int) -> int:
    """CUDAQuantizer's search `while groups < numel: if numel % (8 * groups) == 0: break; groups += 1` from `start`,
    without counting one by one (it walks up to 170 million steps for a 175B model's piece): 8·g divides numel
    exactly when g divides numel / 8, so the answer is the least divisor of numel / 8 from `start` on, or numel
    when 8 does not divide numel (the loop then runs out). `naive_first_group_count` in the tests is the loop."""
    if start >= numel:
        return start
    if numel % 8:
        return numel
    k = numel // 8
    small = [g for g in range(1, math.isqrt(k) + 1) if k % g == 0]  # the divisors up to sqrt(k), and their partners
    divisors = sorted(set(small + [k // g for g in small]))
    return next(g for g in divisors if g >= start)  # k itself is one, and k >= start (start = ceil(numel / 8000))


@dataclass(frozen=True)
class Quantized:
    """What travels: the integers (int8, or int4 packed two to a byte as uint8) and one fp32 scale per group."""

    payload: np.ndarray  # (M,) int8 or (M/2,) uint8 for int4
    scales: np.ndarray  # (G,) fp32: what the receiver multiplies by (1/s)
    bits: int
    numel: int  # M, before packing

    @property
    def groups(self) -> int:
        return int(self.scales.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the integers and the scales."""
        return int(self.payload.nbytes + self.scales.nbytes)


def _check(x, bits: int, groups: int) -> np.ndarray:
    if bits not in (4, 8):
        raise ValueError(f"DeepSpeed's symmetric quantizer has 8- and 4-bit kernels, not {bits}")
    x = np.asarray(x)
    if x.dtype != np.float16:
        raise TypeError(f"DeepSpeed's quantize kernel reads fp16 (it reinterprets anything else); cast first, got "
                        f"{x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"quantize takes a flat array, got shape {x.shape}")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1 or x.size % groups:
        raise ValueError(f"{x.size} elements do not split into {groups!r} equal groups (the kernels read M/G each)")
    if bits == 4 and (x.size // groups) % 2:
        raise ValueError(f"int4 packs two elements a byte: a group of {x.size // groups} is odd")
    return x


def group_scales(x16: np.ndarray, bits: int, groups: int) -> np.ndarray:
    """(G,) fp32 s = 2^b / (2·absmax) per group of the fp16 `x16` (1.0 for an all-zero group)."""
    amax = np.abs(x16.reshape(groups, -1)).max(axis=1).astype(np.float32) if x16.size else np.zeros(0, np.float32)
    with np.errstate(divide="ignore"):
        s = np.float32(2**bits) / (np.float32(2) * amax)  # fp32 division, correctly rounded (see the NOTE above)
    return np.where(amax == 0, np.float32(1.0), s).astype(np.float32)


def to_integers(x16: np.ndarray, s: np.ndarray, bits: int) -> np.ndarray:
    """(M,) int8: clamp(rint(fl32(x · s))) with each group's s; ties to even, as __float2int_rn."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    prod = x16.reshape(s.shape[0], -1).astype(np.float32) * s[:, None]  # one fp32 rounding
    return np.clip(np.rint(prod), lo, hi).astype(np.int8).reshape(-1)


def quantize(x, bits: int = 8, groups: int | None = None) -> Quantized:
    """`x` (fp16, flat) quantized symmetrically in `groups` equal groups (default: DeepSpeed's adaptive count)."""
    groups = deepspeed_groups(np.asarray(x).size) if groups is None else groups
    x16 = _check(x, bits, groups)
    s = group_scales(x16, bits, groups)
    q = to_integers(x16, s, bits)
    with np.errstate(divide="ignore"):  # an inf group (an overflowing step, then skipped): s = 0, 1/s = inf, silently
        sent = (np.float32(1) / s).astype(np.float32)  # Params::store: 1 / scale
    return Quantized(pack_int4(q) if bits == 4 else q, sent, bits, x16.size)


def dequantize(q: Quantized, out_format: str = "fp16") -> np.ndarray:
    """The receiver's values: fl(q · sent) per group, to fp16 (`dequantize`) or fp32 (`dequantize_fp32`)."""
    ints = unpack_int4(q.payload) if q.bits == 4 else q.payload
    vals = ints.reshape(q.groups, -1).astype(np.float32) * q.scales[:, None]  # int -> fp32 exact, one fp32 rounding
    vals = vals.reshape(-1)
    if out_format == "fp32":
        return vals
    if out_format != "fp16":
        raise ValueError(f"DeepSpeed dequantizes to fp16 or fp32, not {out_format!r}")
    return vals.astype(np.float16)  # __float2half: round to nearest even


def pack_int4(q: np.ndarray) -> np.ndarray:
    """(M,) int8 in [-8, 7] -> (M/2,) uint8: element 2i in the high nibble, 2i+1 in the low one (PackedInt4)."""
    u = q.astype(np.uint8) & np.uint8(0x0F)
    return ((u[0::2] << np.uint8(4)) | u[1::2]).astype(np.uint8)


def unpack_int4(packed: np.ndarray) -> np.ndarray:
    """(M/2,) uint8 -> (M,) int8, sign-extended from each nibble (PackedInt4's signed bit-fields)."""
    hi = (packed.astype(np.int16) >> 4) & 0x0F
    lo = packed.astype(np.int16) & 0x0F
    out = np.empty(packed.size * 2, np.int16)
    out[0::2], out[1::2] = hi, lo
    return np.where(out > 7, out - 16, out).astype(np.int8)


def swizzle_order(partitions: int, nodes: int, gpus_per_node: int) -> list:
    """Where `swizzled_quant_kernel` (csrc/quantization/swizzled_quantize.cu) writes input partition p (one per
    destination rank p = node·d + local): output slot (p % d)·nodes + p // d — every partition bound for local rank
    k, node by node, side by side, so one all-to-all inside the node hands local rank k its slice of every node's
    partitions. With 2 nodes of 4: [0 1 2 3 4 5 6 7] becomes [0 4 1 5 2 6 3 7] (the kernel's comment)."""
    if partitions != nodes * gpus_per_node:
        raise ValueError(f"{partitions} partitions for {nodes} node(s) of {gpus_per_node} GPUs")
    order = [0] * partitions
    for p in range(partitions):
        order[(p % gpus_per_node) * nodes + p // gpus_per_node] = p
    return order  # order[slot] = the input partition written there

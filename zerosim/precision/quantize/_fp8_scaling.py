"""Scaled casts to fp8, each rounding where torchao and Transformer Engine put it.

Letters: x the high-precision tensor (fp32 master or bf16), q its fp8 bits, S the scale (q = fp8(x·S)),
R rows of a weight sharded on dim 0 over N ranks (FSDP2: ceil(R/N) rows a rank, the last ones short or empty).

torchao 0.18.0 (the release; pytorch/ao at 36027d8, 2026-08, reads the same), the fp8 all-gather of FSDP2, whose
scale takes one of two paths (TORCHAO_SCALE_PATHS):
    amax      max |x| in x's dtype. An empty shard has none, and torchao 0.18 raises on both paths: `torch.max` in
              float8_utils.py: tensor_to_amax ("Expected reduction dim to be specified for input.numel() == 0") and
              `torch._foreach_norm(ord=inf)` in precompute_float8_dynamic_scale_for_fsdp ("cannot compute the infinity
              norm on an empty tensor"; ao#3982, PR #3983 unmerged). Where zerosim's layout is FSDP2's (recipe="fsdp2":
              dim-0 chunks) a weight with an empty chunk is refused (zeropp.Wire.check); zerosim's flat layouts cut
              a unit across shard boundaries, so a rank holding none of a unit is ordinary there, not torchao's empty
              shard, and `amax_of` gives it 0.0 (the MAX all-reduce then ignores it, as PR #3983 would)
    S, precompute    fsdp_utils.py: precompute_float8_dynamic_scale_for_fsdp (called after each optimizer step):
              fl32(fl64(max_fp8 / fl64(clamp(amax, EPS = 1e-12)))) — the clamp in amax's dtype (`torch.clamp` of the
              stacked norms: fp16 rounds EPS to 0), the division in float64 ("torch.compile and eager show different
              numerics for 1.0 / float32"), then one more rounding to fp32; an fp16 amax clamps S at 65504 first.
              For an fp32 (or 16-bit) amax the two roundings give the one correctly rounded fp32 quotient
              (53 >= 2·24 + 2 bits: Figueroa 1995), so torchao's S equals Transformer Engine's except at amax 0
    S, amax_to_scale float8_utils.py: amax_to_scale, which fsdp_pre_all_gather reaches (hp_tensor_to_float8_dynamic
              -> tensor_to_scale, reduce_amax=True: one MAX all-reduce per weight per gather) when no precomputed
              scale is set: amax.to(float64) FIRST, clamp at the float64 EPS, divide, .to(float32); no fp16 clamp.
              So it differs from the precompute path for fp16 amaxes (no 65504 cap; EPS not rounded to fp16's 0) and
              for amaxes below EPS (clamped to 1e-12, not fp32's 9.9999998e-13)
    q         float8_training_tensor.py: _ToFloat8ConstrFunc.forward: fp8(clamp(fl32(fl32(x) · S), ±max_fp8))
              (float8_utils.py: to_fp8_saturated), round to nearest even
    received  _FromFloat8ConstrFunc.forward: `_data.to(orig_dtype) / _scale`: fl_orig(fl32(q / S))
    axiswise  one amax and S per row (`tensor_to_amax(..., AXISWISE, dim=-1)`); torchao's fp8 all-gather refuses it
              (config.py: "enable_fsdp_float8_all_gather only supports tensorwise scaling granularity"): zerosim's
              `axiswise_scales` shows what such a gather would send, the shard padded to ceil(R/N) zero rows as FSDP2
              pads it (a padded row's amax is 0, clamped to EPS: S = 448e12); `round_scales_to_power_of_2`
              (the ROWWISE recipe) floors S to a power of two

Transformer Engine (NVIDIA/TransformerEngine at d0067d0), common/recipe/recipe_common.cuh: compute_scale_from_amax:
    S = __fdiv_rn(max_fp8, amax) in fp32 (one correctly rounded division); amax < eps -> eps; amax 0, inf or NaN
    -> S = 1; S = inf -> FLT_MAX. Casts saturate (`__nv_fp8_e4m3` converts with __NV_SATFINITE); the dequantized
    value is fl(q · fl32(1/S)) (utils.cuh: reciprocal<float> = __frcp_rn). MXFP8 is in _fp8_blocks.py.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision._formats import Format, get_format
from zerosim.precision.cast import cast

EPS = 1e-12  # torchao/float8/float8_utils.py: EPS
FP8 = ("fp8_e4m3", "fp8_e5m2")


def fp8_format(fmt) -> Format:
    f = get_format(fmt)
    if f.name not in FP8:
        raise ValueError(f"an fp8 scale needs an fp8 format (fp8_e4m3 or fp8_e5m2), got {f.name}")
    return f


def amax_of(x, axis=None) -> np.ndarray:
    """max |x| in x's own dtype (exact); 0.0 for an empty tensor (ao PR #3983's answer to ao#3982's crash)."""
    x = np.asarray(x)
    if axis is None:
        return np.abs(x).max() if x.size else np.zeros((), x.dtype)
    if x.shape[axis] == 0:
        return np.zeros(np.delete(x.shape, axis), x.dtype)
    return np.abs(x).max(axis=axis)


def torchao_scale(amax, fmt="fp8_e4m3", round_to_power_of_2: bool = False) -> np.ndarray:
    """fl32(fl64(max_fp8 / clamp(amax, EPS))), the clamp in amax's dtype: precompute_float8_dynamic_scale_for_fsdp."""
    f = fp8_format(fmt)
    amax = np.asarray(amax)
    eps = cast(np.asarray(EPS), get_format(amax.dtype)) if amax.dtype != np.float64 else np.float64(EPS)
    clamped = np.maximum(amax, eps)  # torch.clamp(amax, EPS): in amax's dtype
    with np.errstate(divide="ignore", over="ignore"):
        s64 = np.float64(f.max) / clamped.astype(np.float64)  # float64, one rounding
    if amax.dtype == np.float16:
        s64 = np.minimum(s64, np.float64(65504.0))  # "if origin_dtype is torch.float16: clamp(max=fp16 max)"
    with np.errstate(over="ignore"):
        s = s64.astype(np.float32)  # .to(torch.float32): a second rounding
    return floor_power_of_2(s) if round_to_power_of_2 else s


def torchao_amax_to_scale(amax, fmt="fp8_e4m3", round_to_power_of_2: bool = False) -> np.ndarray:
    """float8_utils.py: amax_to_scale: fl32(max_fp8 / max(fl64(amax), 1e-12)), all in float64, one rounding."""
    f = fp8_format(fmt)
    a64 = np.asarray(amax).astype(np.float64)  # `amax.to(torch.float64)`: exact, before the clamp
    with np.errstate(over="ignore"):
        s = (np.float64(f.max) / np.maximum(a64, np.float64(EPS))).astype(np.float32)
    return floor_power_of_2(s) if round_to_power_of_2 else s


# torchao's two ways to the fp8 all-gather's scale (module docstring): by the function each path calls.
TORCHAO_SCALE_PATHS = {
    "precompute_float8_dynamic_scale_for_fsdp": torchao_scale,  # after each optimizer step, one all-reduce
    "amax_to_scale": torchao_amax_to_scale,  # at each gather, when no scale was precomputed
}


def floor_power_of_2(s: np.ndarray) -> np.ndarray:
    """2^floor(log2 S) for fp32 S > 0 (float8_utils.py: _round_scale_down_to_power_of_2), from S's exponent bits.
    NOTE: torch computes exp2(floor(log2(S))) with an fp32 log2, which returns k itself for S up to floor(ln 2 · 2^m)
    ulps below 2^k (2^m the fp32 binade just below k): 1 ulp below 2^3 and 2^4, 22 below 2^33..2^64, 44 below
    2^65..2^127 and 2^-64..2^-125. There torchao's scale is 2^k and this exact floor 2^(k-1). Measured on the CPU:
    torch 2.13's fp32 log2 is correctly rounded at all 50,600 S within 200 ulps below every normal power of two
    (AVX-512), giving exactly those counts (tests/test_pow2_scale.py derives them without torch). CUDA's log2f
    (1 ulp) may move a count by one: not run on a GPU."""
    bits = np.asarray(s, np.float32).view(np.uint32) & np.uint32(0xFF800000)
    return bits.view(np.float32)


def te_scale(amax, fmt="fp8_e4m3", eps: float = 0.0, power_of_2: bool = False) -> np.ndarray:
    """Transformer Engine's compute_scale_from_amax: __fdiv_rn(max_fp8, amax) in fp32 (see the module docstring)."""
    f = fp8_format(fmt)
    a = np.asarray(amax, np.float32)
    a = np.where(a < np.float32(eps), np.float32(eps), a)
    bad = ~np.isfinite(a) | (a == 0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = np.float32(f.max) / np.where(bad, np.float32(1), a)  # one correctly rounded fp32 division
    s = np.where(np.isinf(s), np.float32(np.finfo(np.float32).max), s)
    s = np.where(bad, np.float32(1.0), s).astype(np.float32)
    return floor_power_of_2(s) if power_of_2 else s


def scaled_cast(x, scale, fmt="fp8_e4m3") -> np.ndarray:
    """q = fp8(clamp(fl32(fl32(x) · S), ±max)): both libraries' cast (torchao clamps, TE converts with satfinite).
    `scale` broadcasts against x (one per tensor, or one per row with a trailing axis of 1)."""
    f = fp8_format(fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(x).astype(np.float32) * np.asarray(scale, np.float32)  # one fp32 rounding
    return cast(y, f, saturate=True)


def torchao_received(q, scale, out_format) -> np.ndarray:
    """`_data.to(orig_dtype) / _scale`: the quotient in fp32 (correctly rounded), then one rounding to orig."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        y = np.asarray(q).astype(np.float32) / np.asarray(scale, np.float32)
    return cast(y, get_format(out_format))


def pad_rows(shard, rows_per_rank: int) -> np.ndarray:
    """A dim-0 shard (r, C) padded with zero rows to (ceil(R/N), C), as FSDP2 pads each rank's chunk
    (`_fsdp_param.py: _init_sharded_param`, padded to chunks[0].size())."""
    shard = np.asarray(shard)
    if shard.ndim != 2 or shard.shape[0] > rows_per_rank:
        raise ValueError(f"a dim-0 shard must be 2-D with at most {rows_per_rank} rows, got shape {shard.shape}")
    out = np.zeros((rows_per_rank, shard.shape[1]), shard.dtype)
    out[: shard.shape[0]] = shard
    return out


def axiswise_scales(shard, rows_per_rank: int, fmt="fp8_e4m3", round_to_power_of_2: bool = False) -> np.ndarray:
    """(ceil(R/N), 1) fp32: one torchao scale per row of the padded shard (padding rows: 448e12 for e4m3)."""
    padded = pad_rows(shard, rows_per_rank)
    return torchao_scale(amax_of(padded, axis=1), fmt, round_to_power_of_2)[:, None]

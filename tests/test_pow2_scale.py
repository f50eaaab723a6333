"""torchao's power-of-two scale, `exp2(floor(log2(S)))` with an fp32 log2 (float8_utils.py:
_round_scale_down_to_power_of_2, torchao 0.18), against zerosim's exact floor from S's exponent bits
(fp8_scaling.floor_power_of_2) — issue 33, Build 5: the old note said "within an ulp or so ... not confirmable
without a GPU"; it is measurable, and it is up to 44 ulps.

Derivation. S = 2^k·(1 − j·2^-24), j ulps below 2^k, has log2 S = k − j·2^-24/ln 2 + O(j²2^-48). A correctly rounded
fp32 log2 returns k itself (and floor gives k, so exp2 gives 2^k, not 2^(k-1)) while that gap is under half the fp32
spacing just below k, 2^(m-24) with 2^m the binade of |k − 0|: 2^m < k for k > 0, 2^m <= |k| for k < 0. So
j < ln 2 · 2^m, and the number of such j is floor(ln 2 · 2^m): 0 at k = 1, 2, -1; 1 at k = 3, 4, -2, -3; 22 for
k = 33..64; 44 for k = 65..127 and k = -64..-125.

Measured (torch 2.13.0+cpu, this AVX-512 CPU): `torch.exp2(torch.floor(torch.log2(S)))` equals the correctly rounded
model below at all 50,600 fp32 S within 200 ulps below 2^k, k = -125..127. CUDA's log2f (1 ulp, CUDA's math API)
may move a bound by one: not run. The model here needs no torch: float64's log2 rounded to fp32 is the correctly
rounded fp32 log2 at these points (the gap to the rounding boundary is at least 2^-24·(ln 2·2^m − j)/ln 2 ≫ 2^-52)."""

import math

import numpy as np
import pytest

from zerosim.precision.quantize import floor_power_of_2


def _torch_cpu_model(s: np.ndarray) -> np.ndarray:
    """exp2(floor(RN32(log2 S))): torchao's arithmetic with a correctly rounded fp32 log2."""
    lg = np.log2(s.astype(np.float64)).astype(np.float32)
    return np.exp2(np.floor(lg).astype(np.float64)).astype(np.float32)


def _bound(k: int) -> int:
    """floor(ln 2 · 2^m), 2^m the fp32 binade just below k (module docstring); 0 for k = 0, 1."""
    if k in (0, 1):
        return 0
    m = (k - 1).bit_length() - 1 if k > 0 else (-k).bit_length() - 1
    return math.floor(math.log(2) * 2.0**m)


def _ulps_rounded_up(k: int) -> int:
    """How many of the 200 fp32 values just below 2^k the model rounds up to 2^k (they are the first ones)."""
    bits = np.float32(2.0**k).view(np.uint32) - np.arange(1, 201, dtype=np.uint32)
    s = bits.view(np.float32)
    up = _torch_cpu_model(s) != floor_power_of_2(s)
    assert up.sum() == 0 or up[: up.sum()].all()  # contiguous from the power of two down
    return int(up.sum())


@pytest.mark.parametrize("k, ulps", [
    (1, 0), (2, 0), (-1, 0),  # log2 near 0 or 1: fp32 is fine enough
    (3, 1), (4, 1), (-2, 1),  # binade [2, 4): ln 2 · 2 = 1.39
    (8, 2), (-8, 5),  # [4, 8) below 8 (2.77); [8, 16) at -8 (5.55)
    (16, 5), (32, 11), (48, 22), (64, 22),  # 448/1e-12 = 2^48.7: torchao's largest e4m3 scale lies here
    (65, 44), (127, 44), (-64, 44), (-125, 44),  # binade [64, 128): ln 2 · 64 = 44.36
])
def test_the_ulps_below_a_power_of_two_that_round_up(k, ulps):
    assert _bound(k) == ulps
    assert _ulps_rounded_up(k) == ulps


def test_the_bound_over_every_normal_power_of_two_is_44_ulps():
    got = {k: _ulps_rounded_up(k) for k in range(-125, 128)}
    assert got == {k: _bound(k) for k in got}
    assert max(got.values()) == 44 and min(got.values()) == 0
    # zerosim's floor is exact everywhere: 2^k - 1 ulp goes to 2^(k-1), never up
    below = (np.float32(2.0**40).view(np.uint32) - np.uint32(1)).view(np.float32)
    assert floor_power_of_2(np.array([below]))[0] == np.float32(2.0**39)

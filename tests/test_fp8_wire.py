"""fp8 sums on the wire saturate, as NCCL's fp8 reduction does.

NCCL >= 2.24 on sm90+ adds two fp8 values as `__nv_fp8_e4m3(__hadd(__half(x), __half(y)))`
(src/device/reduce_kernel.h), and that fp8-from-half constructor converts with __NV_SATFINITE
(cuda_fp8.hpp: __nv_cvt_halfraw_to_fp8 -> __nv_cvt_double_to_fp8): NaN stays NaN, anything past
max + half an ulp (inf included) becomes +-max, the rest rounds to nearest even.

`nccl_fp8_add` below emulates exactly that expression with NumPy's float16 and an explicit threshold
test, independent of zerosim's cast; every pair of fp8 bit patterns is checked against the ring's
combine step. The table rows go through Cluster(N).reduce_scatter with an fp8 wire, and the naive
twin must agree.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster, reduce_scatter
from zerosim.collectives import get_op, naive_reduce

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
# (max finite, overflow threshold): cuda_fp8.hpp's FP8_MAXNORM and FP8_OVERFLOW_THRESHOLD, a double
# compared with `absx > threshold`: e4m3 0x407D000000000000 = 464 = max + half an ulp (464 itself ties to
# even, down to 448); e5m2 0x40EE000000000000 - 1, one double below 61440 (61440 would tie to even *up*)
LIMITS = {E4M3: (448.0, 464.0), E5M2: (57344.0, float(np.nextafter(61440.0, 0.0)))}


def nccl_fp8_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """fp8(satfinite)(half(x) + half(y)): the sum rounded to fp16 (NumPy's float16 add is one rounding
    of the exact float32 sum of two fp16 values), then converted to fp8 with saturation."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, and fp16 overflow, are part of the table
        h = (x.astype(np.float16).astype(np.float32) + y.astype(np.float16).astype(np.float32)).astype(np.float16)
    hmax, threshold = LIMITS[x.dtype]
    wide = h.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        out = wide.astype(np.float32).astype(x.dtype)  # exact widening, then one round-to-nearest-even
        sat = np.abs(wide) > threshold  # NaN compares False and stays NaN
    out[sat] = np.copysign(hmax, wide[sat]).astype(x.dtype)
    # values in (max, threshold] round down to max by themselves; a NaN from the cast path must be
    # a NaN input, not an overflow:
    assert not np.any(np.isnan(out.astype(np.float64)) & ~np.isnan(wide))
    return out


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal, except that any NaN equals any NaN (NCCL and ml_dtypes pick different payloads)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    nan = np.isnan(a64)
    return bool(np.array_equal(nan, np.isnan(b64)) and np.array_equal(a.view(np.uint8)[~nan], b.view(np.uint8)[~nan]))


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_every_pair_matches_nccls_expression(dtype):
    codes = np.arange(256, dtype=np.uint8).view(dtype)
    x, y = np.repeat(codes, 256), np.tile(codes, 256)  # all 65,536 ordered pairs, NaN and inf included
    got = get_op("sum").combine(x, y)
    assert got.dtype == dtype and same(got, nccl_fp8_add(x, y))


def fp8(values, dtype) -> np.ndarray:
    return np.array(values, dtype=np.float64).astype(np.float32).astype(dtype)  # each value below is exact in fp8


ROWS = [
    # dtype  per-rank values (one element each)  expected   why
    (E4M3, [288.0, 288.0], 448.0),  # 300 rounds to 288 in e4m3; 576 > 464: saturates (no-saturation would give NaN)
    (E4M3, [448.0, 448.0], 448.0),  # max + max
    (E4M3, [-448.0, -16.0], -448.0),  # saturates with its sign
    (E4M3, [-448.0, 448.0, 448.0], 0.0),  # N = 3, chunk 0 = (x1 + x2) + x0 = 448 (saturated) - 448: order matters
    (E4M3, [448.0, 448.0, -448.0], 448.0),  # the same values, another order: (448 - 448) + 448 = 448 (exact sum 448)
    (E4M3, [1.0, 0.0625], 1.0),  # 1.0625 is the tie between 1 and 1.125: to even
    (E4M3, [1.0, 0.125], 1.125),  # exact
    (E4M3, [256.0, 192.0], 448.0),  # 448 exactly: no saturation needed
    (E4M3, [256.0, 208.0], 448.0),  # 464, the midpoint to the would-be 480: ties to even = 448
    (E4M3, [float("nan"), 1.0], float("nan")),  # NaN stays NaN
    (E5M2, [57344.0, 57344.0], 57344.0),  # overflow would be inf; NCCL saturates (and fp16 itself overflows first)
    (E5M2, [49152.0, 8192.0], 57344.0),  # exactly max
    (E5M2, [49152.0, 12288.0], 57344.0),  # 61440: the tie above max goes to "65536" -> saturates to max
    (E5M2, [float("inf"), 1.0], 57344.0),  # an inf input saturates too: __NV_SATFINITE clamps infinities
    (E5M2, [float("-inf"), 1.0], -57344.0),
    (E5M2, [float("inf"), float("-inf")], float("nan")),  # inf - inf = NaN stays NaN
]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the naive twin's inf - inf
@pytest.mark.parametrize("dtype, values, expected", ROWS)
def test_reduce_scatter_rows(dtype, values, expected):
    n = len(values)
    xs = [fp8([v] + [0.0] * (n - 1), dtype) for v in values]  # the element of interest is chunk 0: rank 0 gets it
    out = reduce_scatter(Cluster(n), xs, op="sum")
    got = float(out[0][0].astype(np.float64))
    assert (np.isnan(got) and np.isnan(expected)) or got == expected
    twin = naive_reduce(xs, op="sum")
    assert same(twin[:1], out[0][:1])


def test_a_wider_input_on_an_fp8_wire_saturates_in_the_sum():
    # fp16 inputs 288 cast to an e4m3 wire (exact), then summed on the wire: 576 -> 448, not NaN
    xs = [np.full(4, 288.0, np.float16) for _ in range(2)]
    out = reduce_scatter(Cluster(2), xs, op="sum", wire="fp8_e4m3")
    assert [float(v) for o in out for v in o.astype(np.float64)] == [448.0] * 4


@given(
    n=st.integers(1, 5),
    length=st.integers(0, 9),
    seed=st.integers(0, 2**16),
    op=st.sampled_from(["sum", "avg", "avg_premul"]),
    dtype=st.sampled_from([E4M3, E5M2]),
)
def test_ring_and_naive_twin_agree(n, length, seed, op, dtype):
    rng = np.random.default_rng(seed)
    hi = LIMITS[dtype][0]
    xs = [
        (rng.uniform(-hi, hi, length) * rng.choice([1e-3, 0.1, 1.0], length)).astype(np.float32).astype(dtype)
        for _ in range(n)
    ]
    ring = np.concatenate(reduce_scatter(Cluster(n), xs, op=op)) if length else np.zeros(0)
    twin = naive_reduce(xs, op=op)[:length]
    if op == "avg":  # both divide in fp32 after the fp8 sum
        assert np.array_equal(ring, twin, equal_nan=True)
    else:
        assert same(ring, twin)

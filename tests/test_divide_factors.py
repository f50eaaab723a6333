"""FSDP2's divide factors (hand-derived from _get_gradient_divide_factors) and torch's scalar-division bits.

The factor rows follow the loop by hand:  pre = 1; while N % pre == 0 and N / pre > pre: pre *= 2.
The division rows compare `torch_scalar_div` with an exact reference: the correctly rounded quotient
(float64 holds the exact quotient of a 16-bit value by a small integer to well past the precision
needed, and one rounding to the 16-bit format follows), over every finite fp16 and bf16 bit pattern.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from zerosim.parallel.data.recipes import FSDP2DivideFactors, fsdp2_divide_factors, torch_scalar_div, torch_scalar_mul
from zerosim.precision import cast

FACTORS = [
    # N, dtype, HSDP replicas, factor -> (pre, post, reduce-scatter op, all-reduce op, premul)
    # fp16, N = 6: pre 1 -> 2 (6 % 1 == 0, 6 > 1) -> 4 (6 % 2 == 0, 3 > 2) -> stop (6 % 4 != 0): pre 4, post 1.5.
    # NOTE: 4 does not divide 6 - the loop tests divisibility by the pre it is about to double.
    (6, "fp16", 1, None, (4, 1.5, "sum", "sum", None)),
    # fp16, N = 8: 1 -> 2 -> 4 (8 % 2 == 0, 4 > 2), then 8 / 4 = 2 > 4 fails: pre 4, post 2.0 (sqrt 8 ~ 2.83)
    (8, "fp16", 1, None, (4, 2.0, "sum", "sum", None)),
    # fp16, N = 1: 1 / 1 > 1 fails at once: pre 1, post 1.0 (both divisions are skipped: _div_if_needed)
    (1, "fp16", 1, None, (1, 1.0, "sum", "sum", None)),
    # fp16, N = 3: 1 -> 2, then 3 % 2 != 0: pre 2, post 1.5
    (3, "fp16", 1, None, (2, 1.5, "sum", "sum", None)),
    # fp16, N = 5: 1 -> 2, then 5 % 2 != 0 stops it although 5 / 2 = 2.5 > 2: pre 2, post 2.5
    (5, "fp16", 1, None, (2, 2.5, "sum", "sum", None)),
    # fp16, N = 64: 1 -> 2 -> 4 -> 8 (64 / 4 = 16 > 4), then 64 / 8 = 8 > 8 fails: pre 8, post 8.0
    (64, "fp16", 1, None, (8, 8.0, "sum", "sum", None)),
    # fp16 HSDP, 4 shards x 3 replicas: the factor is 12: 1 -> 2 -> 4 (12 / 2 = 6 > 2), 12 / 4 = 3 > 4 fails
    (4, "fp16", 3, None, (4, 3.0, "sum", "sum", None)),
    # bf16 and fp32 have range enough: NCCL averages (ncclAvg) ...
    (8, "bf16", 1, None, (None, None, "avg", "avg", None)),
    (8, "fp32", 1, None, (None, None, "avg", "avg", None)),
    # ... except on one rank ("NCCL ReduceOp.AVG may produce incorrect results with world size 1")
    (1, "bf16", 1, None, (None, None, "sum", "sum", None)),
    (1, "fp32", 1, None, (None, None, "sum", "sum", None)),
    # a custom factor equal to the reduce-scatter size is AVG again; any other is PreMulSum(1/factor)
    (4, "fp32", 1, 4.0, (None, None, "avg", "sum", None)),
    (4, "bf16", 1, 16.0, (None, None, "premul_sum", "sum", 0.0625)),
]


@pytest.mark.parametrize("n, dtype, replicas, factor, expected", FACTORS)
def test_fsdp2_divide_factors(n, dtype, replicas, factor, expected):
    got = fsdp2_divide_factors(n, dtype, all_reduce_size=replicas, factor=factor)
    assert got == FSDP2DivideFactors(*expected)


def test_forced_sum_post_divides_fp32():
    # MTIA forces SUM: fp32 has no overflow risk, so no pre-division ("Prefer post-multiplying")
    assert fsdp2_divide_factors(8, "fp32", force_sum_reduction_for_comms=True) == FSDP2DivideFactors(
        None, 8.0, "sum", "sum"
    )


@pytest.mark.parametrize("bad", [
    lambda: fsdp2_divide_factors(0, "fp16"),
    lambda: fsdp2_divide_factors(2.0, "fp16"),
    lambda: fsdp2_divide_factors(2, "fp16", all_reduce_size=0),
    lambda: fsdp2_divide_factors(2, "fp16", factor=0.0),
    lambda: fsdp2_divide_factors(2, "int8"),
    lambda: torch_scalar_div(np.ones(2, np.float32), 2.0, device="tpu"),
])
def test_bad_arguments(bad):
    with pytest.raises(ValueError):
        bad()


def every(dtype) -> np.ndarray:
    x = np.arange(2**16, dtype=np.uint16).view(dtype)
    with np.errstate(invalid="ignore"):  # widening NaN patterns
        return x[np.isfinite(x.astype(np.float64))]


FP16_CUDA_DIFFERS = {14: 78, 26: 22}  # N -> how many finite fp16 inputs give other bits on CUDA (see below)


@pytest.mark.parametrize("dtype, name", [(np.dtype(np.float16), "fp16"), (np.dtype(ml_dtypes.bfloat16), "bf16")])
@pytest.mark.parametrize("n", [2, 3, 6, 7, 8, 12, 14, 26, 1.5])
def test_sixteen_bit_division_by_n(dtype, name, n):
    x = every(dtype)
    exact = cast(x.astype(np.float64) / n, name)  # the correctly rounded quotient
    cpu = torch_scalar_div(x, n, "cpu")  # fp32 quotient (innocuous double rounding: 24 >= 2*11 + 2), then fp16
    assert np.array_equal(cpu.view(np.uint16), exact.view(np.uint16))
    cuda = torch_scalar_div(x, n, "cuda")  # x * fl32(1/N), rounded to fp32, then to fp16
    differs = cuda.view(np.uint16) != exact.view(np.uint16)
    if name == "fp16" and n in FP16_CUDA_DIFFERS:
        # N = 14 = 2 * 7: x = 7 (2m + 1) * 2**-24 gives x / 14 = (2m + 1) * 2**-25, an exact tie on fp16's
        # subnormal grid, which rounds to even; fl32(1/14) is not exact, so x * fl32(1/14) lands just off
        # the tie and rounds the other way. Only subnormal results, only ties.
        assert differs.sum() == FP16_CUDA_DIFFERS[n]
        assert np.all(np.abs(exact[differs].astype(np.float64)) < 2.0**-14)  # fp16's smallest normal
        assert np.all(np.abs(cuda[differs].astype(np.float64) - exact[differs].astype(np.float64)) == 2.0**-24)
    else:
        assert not differs.any()
    mul = torch_scalar_mul(x, 1.0 / n)  # DDP's grad * (1. / N): the same bits as CUDA's division here
    assert np.array_equal(mul.view(np.uint16), cuda.view(np.uint16))


def test_fp32_division_by_three_differs_between_devices():
    # 0.125730217 (fp32) / 3: the CPU divides (one rounding); CUDA multiplies by fl32(1/3) = 0.3333333432674408,
    # whose product, 0.0419100759..., lies past the midpoint the true quotient 0.0419100723... is short of.
    x = np.array([0.12573022], np.float32)
    cpu, cuda = torch_scalar_div(x, 3.0, "cpu"), torch_scalar_div(x, 3.0, "cuda")
    assert cpu[0] == np.float32(x[0] / np.float32(3)) and cuda[0] == np.float32(x[0] * np.float32(1 / 3))
    assert abs(int(cpu.view(np.int32)[0]) - int(cuda.view(np.int32)[0])) == 1  # one ulp apart
    rng = np.random.default_rng(0)
    sample = rng.standard_normal(10_000).astype(np.float32)
    frac = np.mean(torch_scalar_div(sample, 3.0, "cpu") != torch_scalar_div(sample, 3.0, "cuda"))
    assert 0.2 < frac < 0.5  # "about a third" (docs/recipes.md): measured 0.336 on 100,000 normals


def test_powers_of_two_are_exact_on_both_devices():
    x = every(np.dtype(np.float16))
    for d in (2.0, 4.0, 0.5):
        assert np.array_equal(
            torch_scalar_div(x, d, "cuda").view(np.uint16), torch_scalar_div(x, d, "cpu").view(np.uint16)
        )

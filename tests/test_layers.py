"""Layers and losses: backward against float64 finite differences, rounding against exact arithmetic."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim.models import (
    GELU,
    HalfMSE,
    Linear,
    ReLU,
    SoftmaxCrossEntropy,
    gelu_forward,
    linear_backward,
    linear_forward,
)
from zerosim.precision import cast, get_format

# Central differences (f(v+h) - f(v-h)) / 2h in float64 err by h^2 |f'''| / 6 (truncation) plus about
# u |f| / h (rounding, u = 2**-53 ~ 1.1e-16). With h = 1e-6 and the O(1)..O(10) values these tests make,
# that is ~1e-12 + ~1e-9: below 1e-8. FD_TOL = 1e-6 leaves a 100x margin and still catches any real
# mistake in a backward formula, which shows up at O(0.1) or more.
FD_STEP = 1e-6
FD_TOL = 1e-6
FP64 = get_format("fp64")


def central_diff(f, v: np.ndarray) -> np.ndarray:
    """d f / d v by central differences, one element at a time (v is perturbed in place and restored)."""
    g = np.zeros_like(v, dtype=np.float64)
    for idx in np.ndindex(v.shape):
        old = v[idx]
        v[idx] = old + FD_STEP
        up = f()
        v[idx] = old - FD_STEP
        down = f()
        v[idx] = old
        g[idx] = (up - down) / (2 * FD_STEP)
    return g


def assert_fd_close(analytic, numeric):
    np.testing.assert_allclose(np.asarray(analytic, np.float64), numeric, rtol=FD_TOL, atol=FD_TOL)


def away_from_zero(rng, shape):
    """Normal draws pushed at least 0.1 from 0, so a ReLU kink is never within FD_STEP of a sample."""
    z = rng.standard_normal(shape)
    return np.sign(z) * (0.1 + np.abs(z))


LAYERS = [Linear(4, 5, bias=True), Linear(4, 5, bias=False), ReLU(), GELU()]


@pytest.mark.parametrize("layer", LAYERS, ids=repr)
def test_layer_backward_matches_finite_differences(layer):
    rng = np.random.default_rng(1)
    d_in = layer.d_in if isinstance(layer, Linear) else 5
    x = away_from_zero(rng, (3, d_in))  # (B, D_in) float64
    p = {k: rng.standard_normal(s) for k, s in layer.param_shapes.items()}
    y, cache = layer.forward(p, x, FP64)
    r = rng.standard_normal(y.shape)  # f = sum(r * y), so df/dy = r
    f = lambda: float(np.sum(r * layer.forward(p, x, FP64)[0]))
    dx, grads = layer.backward(p, r, cache, FP64)
    assert_fd_close(dx, central_diff(f, x))
    assert set(grads) == set(layer.param_shapes)
    for name in p:
        assert_fd_close(grads[name], central_diff(f, p[name]))


@pytest.mark.parametrize("loss", [HalfMSE(), SoftmaxCrossEntropy()], ids=repr)
def test_loss_backward_matches_finite_differences(loss):
    rng = np.random.default_rng(2)
    y = rng.standard_normal((4, 3))  # (B, D_out) float64
    t = rng.standard_normal((4, 3)) if isinstance(loss, HalfMSE) else np.array([0, 2, 1, 2])
    _, cache = loss.forward(y, t)
    assert_fd_close(loss.backward(cache, FP64), central_diff(lambda: loss.forward(y, t)[0], y))


@pytest.mark.parametrize("loss", [HalfMSE(), SoftmaxCrossEntropy()], ids=repr)
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_power_of_two_loss_scale_multiplies_dy_exactly(loss, fmt):
    rng = np.random.default_rng(3)
    y = cast(rng.standard_normal((4, 3)), fmt)
    t = cast(rng.standard_normal((4, 3)), "fp32") if isinstance(loss, HalfMSE) else np.array([0, 2, 1, 2])
    _, cache = loss.forward(y, t)
    plain = loss.backward(cache, fmt).astype(np.float64)
    scaled = loss.backward(cache, fmt, scale=8.0).astype(np.float64)
    assert scaled.dtype == np.float64 and np.array_equal(scaled, 8 * plain)  # x8 moves no value out of range here


@pytest.mark.parametrize("y, t, expected", [
    (0.5, 5.0, 10.125),  # seed 004, GPU 0: 0.5 * (0.5 - 5)^2
    (1.5, 7.0, 15.125),  # seed 004, GPU 1: 0.5 * (1.5 - 7)^2
])
def test_half_mse_of_one_sample_is_the_seed_formula(y, t, expected):
    loss, cache = HalfMSE().forward(np.array([[y]], np.float16), np.array([[t]], np.float32))
    assert loss == expected
    assert HalfMSE().backward(cache, "fp16")[0, 0] == y - t


def test_cross_entropy_is_minus_log_softmax_of_the_label():
    y = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    labels = np.array([2, 1])
    by_hand = [-(row[k] - math.log(sum(math.exp(v) for v in row))) for row, k in zip(y, labels)]
    loss, _ = SoftmaxCrossEntropy().forward(y, labels)
    assert loss == pytest.approx(np.mean(by_hand), rel=1e-15)


@pytest.mark.parametrize("fmt, x, expected_fmt, expected_fp32", [
    # 1 + 2^-11 is exact in fp32 and a tie in fp16, which rounds to even: 1.0. Differs from the fp32 path.
    ("fp16", [1, 2**-11], 1.0, 1 + 2**-11),
    # fp32 accumulation: 1 + 2^-11 + 2^-11 = 1 + 2^-10, representable. Summing in fp16 would lose both halves.
    ("fp16", [1, 2**-11, 2**-11], 1 + 2**-10, 1 + 2**-10),
    ("bf16", [1, 2**-8], 1.0, 1 + 2**-8),  # bf16 ties at 2^-8
    ("bf16", [1, 2**-8, 2**-8], 1 + 2**-7, 1 + 2**-7),
])
def test_linear_accumulates_in_fp32_and_rounds_once(fmt, x, expected_fmt, expected_fp32):
    xs = np.array([x], np.float32)  # (1, D_in), every value exact in fmt
    w = np.ones((1, len(x)), np.float32)
    y, _ = linear_forward(cast(xs, fmt), cast(w, fmt), None, fmt)
    y32, _ = linear_forward(xs, w, None, "fp32")
    assert y.dtype == get_format(fmt).dtype and float(y[0, 0]) == expected_fmt
    assert float(y32[0, 0]) == expected_fp32


def test_linear_backward_sums_the_batch_in_fp32():
    # 1024 bf16 ones summed element by element in bf16 stall at 256 (256 + 1 is a tie, back to 256);
    # the fp32 accumulation real kernels use gives 1024, which bf16 holds exactly.
    ones = cast(np.ones((1024, 1)), "bf16")  # (B, 1)
    dx, dw, db = linear_backward(ones, (ones,), cast(np.ones((1, 1)), "bf16"), "bf16")
    assert float(db[0]) == 1024.0 and float(dw[0, 0]) == 1024.0
    assert float(ones.sum(axis=0)[0]) == 256.0  # the trap, in numpy's own ml_dtypes reduction


dyadic = st.integers(-64, 64).map(lambda k: k / 16)  # exact in fp16 and bf16


@given(st.sampled_from(["fp16", "bf16"]), st.integers(1, 3), st.integers(1, 8), st.integers(1, 3), st.data())
def test_low_precision_linear_is_one_rounding_of_the_exact_result(fmt, B, d_in, d_out, data):
    # Dyadic inputs k/16, |k| <= 64, D_in <= 8: every product and sum is a multiple of 2^-8 below 2^8,
    # so float32 accumulates them exactly and the only rounding left is the final cast to fmt.
    arr = lambda shape: np.array(
        data.draw(st.lists(dyadic, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    ).reshape(shape)
    x, w, b, dy = arr((B, d_in)), arr((d_out, d_in)), arr((d_out,)), arr((B, d_out))
    y, cache = linear_forward(cast(x, fmt), cast(w, fmt), cast(b, fmt), fmt)
    assert y.tobytes() == cast(x @ w.T + b, fmt).tobytes()
    assert np.array_equal(cast(y.astype(np.float64), fmt), y)  # representable in fmt
    dx, dw, db = linear_backward(cast(dy, fmt), cache, cast(w, fmt), fmt)
    assert dx.tobytes() == cast(dy @ w, fmt).tobytes()
    assert dw.tobytes() == cast(dy.T @ x, fmt).tobytes()
    assert db.tobytes() == cast(dy.sum(0), fmt).tobytes()


def test_gelu_is_the_tanh_form_of_gelu():
    x = np.linspace(-6, 6, 2001)
    exact_erf = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    # The tanh form differs from the erf form by at most ~4.7e-4 (max near |x| ~ 2); 5e-4 bounds it.
    assert np.max(np.abs(gelu_forward(x, FP64)[0] - exact_erf)) < 5e-4


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_low_precision_gelu_is_within_one_rounding(fmt):
    f = get_format(fmt)
    x = cast(np.linspace(-4, 4, 801), fmt)
    y = gelu_forward(x, fmt)[0]
    ref = gelu_forward(x.astype(np.float64), FP64)[0]
    # One rounding to fmt (u |ref|) after an fp32 evaluation whose own error for |x| <= 4 is below 1e-6.
    assert y.dtype == f.dtype
    assert np.all(np.abs(y.astype(np.float64) - ref) <= f.unit_roundoff * np.abs(ref) + 1e-6)
    assert not np.array_equal(y.astype(np.float64), gelu_forward(x, "fp32")[0].astype(np.float64))  # fp32 keeps more


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_relu_is_exact_and_keeps_the_format(fmt):
    x = cast(np.random.default_rng(4).standard_normal((3, 7)), fmt)
    y, cache = ReLU().forward({}, x, fmt)
    assert y.dtype == x.dtype and np.array_equal(y.astype(np.float64), np.maximum(x.astype(np.float64), 0))
    dy = cast(np.ones((3, 7)), fmt)
    dx, grads = ReLU().backward({}, dy, cache, fmt)
    assert (
        grads == {} and dx.dtype == x.dtype and np.array_equal(dx.astype(np.float64), (x.astype(np.float64) > 0) * 1.0)
    )


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"])
def test_relu_every_bit_pattern_both_ways(fmt):
    """Every 16-bit (8-bit) pattern through ReLU forward and backward against a float64 reading of the rule, bit for
    bit: x where x > 0 or NaN (NaN passes: overflow stays visible), else +0 (-0, every negative, -inf: +0); backward
    the same mask over dy. The input's own bits are the expected ones where kept (a NaN's payload and sign too).
    (layers/_basic.py decides x <= 0 from x's integer bits in these formats: this reads their values instead.)"""
    f = get_format(fmt)
    uint = np.dtype(f"uint{f.dtype.itemsize * 8}")
    bits = np.arange(1 << (8 * uint.itemsize), dtype=uint)
    side = 1 << (4 * uint.itemsize)
    x = bits.view(f.dtype).reshape(side, side)  # every pattern once: zeros, subnormals, infs, NaNs of both signs
    with np.errstate(invalid="ignore"):  # a signalling NaN's widening warns; its value is NaN all the same
        wide = x.astype(np.float64)
    kept = (wide > 0) | np.isnan(wide)  # float64 compares exactly: an independent reading of "not x <= 0"
    expected = np.where(kept, bits.reshape(side, side), 0)  # +0 is the all-zero pattern
    y, cache = ReLU().forward({}, x, fmt)
    assert y.dtype == f.dtype and np.array_equal(y.view(uint), expected)
    dy_bits = bits[::-1].copy().reshape(side, side)  # every pattern as dy too, against another x each
    dx, _ = ReLU().backward({}, dy_bits.view(f.dtype), cache, fmt)
    assert dx.dtype == f.dtype and np.array_equal(dx.view(uint), np.where(kept, dy_bits, 0))
    dx_t, _ = ReLU().backward({}, dy_bits.T.view(f.dtype), {"input": x.T}, fmt)  # strided views: the same rule
    assert np.array_equal(dx_t.view(uint), np.where(kept, dy_bits, 0).T)
    assert not np.shares_memory(dx, dy_bits) and np.array_equal(x.view(uint).reshape(-1), bits)  # inputs kept


def test_linear_declares_params_in_flat_order_and_inits_float32():
    layer = Linear(3, 2, name="fc")
    assert list(layer.param_shapes.items()) == [("w", (2, 3)), ("b", (2,))]
    init = layer.init(np.random.default_rng(0))
    assert init["w"].dtype == np.float32 and init["w"].shape == (2, 3) and not init["b"].any()
    assert Linear(3, 2, bias=False).param_shapes == {"w": (2, 3)} and ReLU().param_shapes == {}

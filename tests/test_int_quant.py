"""DeepSpeed's symmetric quantizer and the fp8 scales, by hand-derived tables (a comment per row), and each
double rounding named element by element (issue 26, Must show 1)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim.precision import cast
from zerosim.precision.quantize import (
    DelayedScaling,
    Float8CurrentScaling,
    amax_of,
    axiswise_scales,
    deepspeed_groups,
    dequantize,
    get_fp8_recipe,
    group_scales,
    mxfp8_dequantize,
    mxfp8_quantize,
    pack_int4,
    quantize,
    scaled_cast,
    swizzle_order,
    te_scale,
    to_integers,
    torchao_received,
    torchao_scale,
    unpack_int4,
)

# One group of 8 fp16 weights, int8 (qwZ). absmax 3 -> s = fl32(256 / 6) = fl32(42.666...) = 42.66666793823242
X8 = np.array([1.0, -0.5, 0.25, 3.0, -3.0, 0.1, 0.0, 2.0], np.float16)
INT8_ROWS = [
    # x (fp16)        x*s in fp32       integer sent   received fl16(q * 0.0234375)
    (1.0, 43, 1.0078125),  # 42.67 -> 43; 43 * 3/128 = 1.0078125 (fp16 holds it)
    (-0.5, -21, -0.4921875),  # -21.33 -> -21
    (0.25, 11, 0.2578125),  # 10.67 -> 11
    (3.0, 127, 2.9765625),  # 128.0 clamps to 127: the absmax comes back smaller
    (-3.0, -128, -3.0),  # -128.0 fits: -absmax comes back exact (the range is asymmetric)
    (0.0999755859375, 4, 0.09375),  # fp16's 0.1 is 0.0999755859375; x s = 4.2656 -> 4
    (0.0, 0, 0.0),  # zero stays zero
    (2.0, 85, 1.9921875),  # 85.33 -> 85
]


def test_int8_group_by_hand():
    q = quantize(X8, 8, 1)
    assert group_scales(X8, 8, 1)[0] == np.float32(128 / 3)  # 2^8 / (2 * 3), one fp32 rounding
    assert q.scales.tolist() == [np.float32(1) / np.float32(128 / 3)]  # what is sent: fl32(1 / s)
    assert q.scales[0] == np.float32(0.0234375)  # here 1/fl32(128/3) rounds to 3/128 exactly
    assert [float(x) for x in X8] == [r[0] for r in INT8_ROWS]
    assert q.payload.tolist() == [r[1] for r in INT8_ROWS]
    assert dequantize(q).astype(np.float64).tolist() == [r[2] for r in INT8_ROWS]
    assert q.nbytes == 8 + 4  # 8 integers and one fp32 scale


def test_int4_two_groups_and_their_packing_by_hand():
    q = quantize(X8, 4, 2)  # groups [1, -.5, .25, 3] and [-3, .1, 0, 2]: absmax 3 each, s = 16 / 6 = 2.6666667
    ints = unpack_int4(q.payload)
    # group 0: 2.67 -> 3; -1.33 -> -1; 0.67 -> 1; 8 -> clamps to 7. group 1: -8; 0.27 -> 0; 0; 5.33 -> 5
    assert ints.tolist() == [3, -1, 1, 7, -8, 0, 0, 5]
    # two a byte, element 2i in the high nibble: (3, -1) -> 0x3F = 63; (1, 7) -> 0x17 = 23; (-8, 0) -> 0x80; (0, 5)
    assert q.payload.tolist() == [0x3F, 0x17, 0x80, 0x05]
    assert q.scales.tolist() == [0.375, 0.375]  # fl32(1 / fl32(8/3)) = 0.375 exactly
    assert dequantize(q).astype(np.float64).tolist() == [1.125, -0.375, 0.375, 2.625, -3.0, 0.0, 0.0, 1.875]
    assert unpack_int4(pack_int4(np.arange(-8, 8, dtype=np.int8))).tolist() == list(range(-8, 8))


# Two groups of 4; group 0's absmax is 2 (s = 64), group 1's 2^-18 (s = 2^25): every x*s is exact, so each
# difference below is the casts' doing. fp32 -> int8 is zerosim's single rounding, for comparison.
DOUBLE_ROWS = [
    # fp32 master          bf16 -> fp16 -> int8   fp32 -> int8
    (2.0, 127, 127),  # 128 clamps
    (0.38330078125, 24, 25),  # CHANGED: bf16 rounds to 0.3828125 = 24.5/64, a tie, to even 24; fp32: 24.53 -> 25
    (0.39794921875, 26, 25),  # CHANGED: bf16 rounds up to 0.3984375 = 25.5/64, a tie, to even 26; fp32: 25.47 -> 25
    (-1.0, -64, -64),  # exact
    (2.0**-18, 127, 127),  # group 1's absmax: 128 clamps
    (1.25 * 2.0**-25, 2, 1),  # CHANGED: bf16 keeps it, fp16's subnormal grid (2^-24) rounds it up to 2^-24: 2, not 1.25
    (-(2.0**-19), -64, -64),  # exact in every format
    (0.0, 0, 0),
]


def test_bf16_to_fp16_to_int8_against_fp32_to_int8_names_what_double_rounding_changes():
    x = np.array([r[0] for r in DOUBLE_ROWS], np.float32)
    via = cast(cast(x, "bf16"), "fp16")  # the bf16 weight, and CUDAQuantizer's `.to(torch.half)`
    ds = to_integers(via, group_scales(via, 8, 2), 8)
    direct = to_integers(x, group_scales(x, 8, 2), 8)
    assert ds.tolist() == [r[1] for r in DOUBLE_ROWS]
    assert direct.tolist() == [r[2] for r in DOUBLE_ROWS]
    assert np.nonzero(ds != direct)[0].tolist() == [1, 2, 5]


# torchao, S = 448 / 3.5 = 128 (amax 3.5 in fp32 and in bf16): x*S exact, only the casts round.
FP8_ROWS = [
    # fp32 master               fp32 -> bf16 -> e4m3   fp32 -> e4m3 (fp8 all-gather)
    (3.5, 448.0, 448.0),  # the amax lands on e4m3's max
    (0.1329345703125, 16.0, 18.0),  # CHANGED: bf16 rounds to 0.1328125 = 17/128, the midpoint of 16 and 18: to even 16
    (0.1484375 - 2.0**-13, 20.0, 18.0),  # CHANGED: bf16 rounds to 19/128, the midpoint of 18 and 20: to even 20
    (-1.0, -128.0, -128.0),
    (0.01, 1.25, 1.25),  # 1.28 and bf16's 1.28125 both round to 1.25
]


def test_fp32_to_bf16_to_e4m3_against_fp32_to_e4m3_names_what_double_rounding_changes():
    x = np.array([r[0] for r in FP8_ROWS], np.float32)
    b = cast(x, "bf16")  # FSDP2 without fp8 all-gather: the bf16 param, cast by Float8Linear
    s_b, s_x = torchao_scale(amax_of(b)), torchao_scale(amax_of(x))
    assert s_b == s_x == 128.0
    via = scaled_cast(b, s_b).astype(np.float64)
    direct = scaled_cast(x, s_x).astype(np.float64)
    assert via.tolist() == [r[1] for r in FP8_ROWS]
    assert direct.tolist() == [r[2] for r in FP8_ROWS]
    assert np.nonzero(via != direct)[0].tolist() == [1, 2]
    assert torchao_received(scaled_cast(x, s_x), s_x, "bf16").astype(np.float64).tolist() == [
        r[2] / 128 for r in FP8_ROWS]  # q / 128: exact


SCALE_ROWS = [
    # amax (dtype)              torchao S                 Transformer Engine S
    (np.float32(3.5), 128.0, 128.0),  # 448 / 3.5 exactly, both ways
    (np.float32(0.0), np.float32(448e12), 1.0),  # torchao clamps to EPS = 1e-12 (fp32(1e-12)); TE: amax 0 -> 1
    (np.float16(0.0), 65504.0, 1.0),  # an fp16 amax: torchao clamps S at fp16's max
    (np.float32(3.0), np.float32(448 / 3), np.float32(448) / np.float32(3)),  # float64 then fp32 / one fp32 division
]


@pytest.mark.parametrize("amax, torchao, te", SCALE_ROWS)
def test_scales_by_hand(amax, torchao, te):
    assert torchao_scale(amax) == np.float32(torchao)
    assert te_scale(amax) == np.float32(te)


def test_float64_then_fp32_equals_one_fp32_division_for_an_fp32_amax():
    """torchao's fl32(fl64(448/a)) and TE's __fdiv_rn(448, a) agree for every fp32 amax: a quotient of two p-bit
    numbers rounded to 53 >= 2p + 2 bits and then to p bits is rounded once (Figueroa, 1995). Checked on 200,000
    amaxes; the two differ only at amax 0 (the EPS clamp against TE's S = 1: test_scales_by_hand)."""
    a = np.random.default_rng(0).uniform(2.0**-20, 2.0**20, 200_000).astype(np.float32)
    assert np.array_equal(torchao_scale(a).view(np.uint32), te_scale(a).view(np.uint32))


def test_empty_shard_amax_is_zero_and_axiswise_pads_rows():
    assert float(amax_of(np.zeros(0, np.float32))) == 0.0  # torch.max crashes here (ao#3982); PR #3983's answer
    shard = np.array([[1.0, -3.5], [0.5, 0.25]], np.float32)  # 2 of ceil(5/2) = 3 rows: one padding row
    s = axiswise_scales(shard, 3)
    assert s[:, 0].tolist() == [128.0, 896.0, np.float32(448e12)]  # 448/3.5, 448/0.5, 448/EPS for the padding row
    assert axiswise_scales(np.zeros((0, 2), np.float32), 3)[:, 0].tolist() == [np.float32(448e12)] * 3


def test_delayed_scaling_state_machine_by_hand():
    r = DelayedScaling(amax_history_len=4)
    rows = [
        # amax recorded   amax used            scale after (448 / amax)   history after
        (2.0, 2.0, 224.0, [0, 0, 0, 2]),  # first step: the history was empty
        (8.0, 8.0, 56.0, [0, 0, 2, 8]),
        (1.0, 8.0, 56.0, [0, 2, 8, 1]),  # max over the window keeps 8
        (0.5, 8.0, 56.0, [0, 8, 1, 0.5]),
        (0.25, 8.0, 56.0, [0, 1, 0.5, 0.25]),  # 8 is read from slot 1 one last time, then dropped
        (0.1, 1.0, 448.0, [0, 0.5, 0.25, np.float32(0.1)]),
    ]
    for amax, used, scale, hist in rows:
        assert r.scale("forward") == np.float32(1.0 if amax == 2.0 else r.scale("forward"))
        r.record("forward", amax)
        d = r.update("forward", amax)
        assert (d.amax, d.scale_after, r.history[0].tolist()) == (used, scale, [np.float32(h) for h in hist])
    assert r.fmt("forward") == "fp8_e4m3" and r.fmt("backward") == "fp8_e5m2"  # HYBRID
    b = DelayedScaling(margin=1)
    b.record("backward", 7.0)
    assert b.update("backward", 7.0).scale_after == 57344 / 2 / 7  # e5m2's max, halved by the margin
    assert DelayedScaling().update("forward", 0.0).scale_after == 1.0  # nothing seen: the scale stays
    cur = Float8CurrentScaling()
    assert cur.update("forward", 0.0).scale_after == 1.0 and cur.update("forward", 3.5).scale_after == 128.0
    assert get_fp8_recipe("torchao").update("forward", 0.0).scale_after == np.float32(448e12)


def test_mxfp8_block_by_hand():
    x = np.zeros(32, np.float32)
    x[:4] = [3.0, -1.0, 0.3, 0.001]
    q, e = mxfp8_quantize(x)
    # amax 3 * fl32(1/448) = 0.0066964 = 1.71 * 2^-8: exponent field 119, mantissa set -> 120; x * 2^(127-120) = x*128
    assert e.tolist() == [120]
    assert q[:4].astype(np.float64).tolist() == [384.0, -128.0, 40.0, 0.125]  # 38.4 -> 40 (e4m3: 1.010 * 2^5)
    assert mxfp8_dequantize(q, e)[:4].tolist() == [3.0, -1.0, 0.3125, 0.0009765625]
    assert mxfp8_quantize(np.zeros(32, np.float32))[1].tolist() == [0]  # an all-zero block: e = 0


@pytest.mark.parametrize("numel, groups", [
    (8000, 1),  # ceil(8000/8000) = 1 and 8000 % 8 == 0
    (16000, 2),  # 2 groups of 8000
    (64000, 8),  # 8 of 8000
    (8008, 7),  # ceil = 2; 8008 % 16, % 24, ..., % 48 != 0; 8008 = 56 * 143 -> 7 groups of 1144
    (24, 1),  # small: one group
])
def test_deepspeed_group_count(numel, groups):
    assert deepspeed_groups(numel) == groups


@pytest.mark.bad_input("formats and casts", unchanged=True)
@pytest.mark.parametrize("numel", [0, 12, 100])
def test_deepspeed_group_count_refuses_what_cudaquantizer_asserts(numel):
    with pytest.raises(ValueError, match="CUDAQuantizer"):
        deepspeed_groups(numel)


def test_swizzle_order_is_the_kernels_example():
    assert swizzle_order(8, 2, 4) == [0, 4, 1, 5, 2, 6, 3, 7]  # swizzled_quantize.cu's 2-node, 4-device comment
    assert swizzle_order(4, 1, 4) == [0, 1, 2, 3]


@pytest.mark.bad_input("formats and casts", unchanged=True)
def test_quantize_refuses_bf16_it_would_reinterpret():
    with pytest.raises(TypeError, match="fp16"):
        quantize(np.ones(8, ml_dtypes.bfloat16), 8, 1)


def naive_first_group_count(numel: int, start: int) -> int:
    """CUDAQuantizer.quantize's loop as written (runtime/zero/partition_parameters.py)."""
    groups = start
    while groups < numel:
        if numel % (8 * groups) == 0:
            break
        groups += 1
    return groups


@given(numel=st.one_of(st.integers(1, 200_000), st.sampled_from([8 * 99991, 8 * 8009 * 3, 16 * 8000 + 8])))
def test_the_group_search_equals_cudaquantizers_loop(numel):
    import math

    from zerosim.precision.quantize._int_quant import _first_group_count

    start = math.ceil(numel / 8000)
    assert _first_group_count(numel, start) == naive_first_group_count(numel, start)

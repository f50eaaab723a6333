"""Loss scaling against hand-derived sequences.

Each table row is one call to `update(found_inf)`; the expected scale and skip were worked out by hand
from the frameworks' code (torch: _amp_update_scale_cpu_kernel; DeepSpeed: DynamicLossScaler.update_scale),
with the reasoning in the row's comment. TorchGradScaler was also compared, once, with
torch._amp_update_scale_ from torch 2.13.0 (CPU) over 300 random steps for four (growth, backoff,
interval, init) settings, including a non-power-of-two growth and the fp32 overflow guard: every scale
and tracker agreed. These tests do not import torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from zerosim.precision import (
    DeepSpeedLossScaler,
    LossScaleAtMinimum,
    StaticLossScale,
    TorchGradScaler,
    get_loss_scaler,
    has_inf_or_nan,
    loss_scaler_from_state_dict,
    unscale,
)

X, o = True, False  # an overflowing step, a clean one


def run(scaler, flags):
    """[(skip, scale_after)] for each flag."""
    return [(d.skip, d.scale_after) for d in (scaler.update(f) for f in flags)]


# ---------------------------------------------------------------------------------------------------
# torch: growth_interval 3, init 8, growth x2, backoff x0.5
TORCH_TABLE = [
    # flag  skip  scale after   why
    (o, False, 8.0),  # tracker 0 -> 1
    (o, False, 8.0),  # tracker 1 -> 2
    (o, False, 16.0),  # tracker 2 + 1 == growth_interval: grow x2, tracker 0
    (X, True, 8.0),  # inf: backoff x0.5, tracker 0, step skipped
    (o, False, 8.0),  # tracker 1
    (o, False, 8.0),  # tracker 2
    (X, True, 4.0),  # inf again before the third clean step: no growth, backoff
    (X, True, 2.0),  # two infs in a row: backoff twice (torch has no hysteresis)
    (o, False, 2.0),  # tracker 1
    (o, False, 2.0),  # tracker 2
    (o, False, 4.0),  # the 3rd clean step in a row grows the scale
]


def test_torch_scaler_table():
    s = TorchGradScaler(init_scale=8.0, growth_interval=3)
    assert run(s, [row[0] for row in TORCH_TABLE]) == [(row[1], row[2]) for row in TORCH_TABLE]


def test_torch_scaler_defaults_grow_at_the_2000th_clean_step():
    s = TorchGradScaler()
    assert s.scale == 2.0**16  # GradScaler(init_scale=2.**16)
    assert run(s, [o] * 1999)[-1] == (False, 2.0**16)  # 1999 clean steps: tracker 1999, no growth
    assert run(s, [o]) == [(False, 2.0**17)]  # the 2000th: growth_factor 2


def test_torch_scale_is_an_fp32_tensor():
    s = TorchGradScaler(init_scale=1.0, growth_factor=1.1, growth_interval=1)
    # 1 * 1.1 in double, stored in the float scale tensor: the fp32 nearest 1.1 is 0x3F8CCCCD
    assert run(s, [o]) == [(False, 1.10000002384185791015625)]
    # 1.10000002384185791015625 * 1.1 = 1.21000002622604... in double; its fp32 neighbours are
    # 1.2099999189376831 and 1.21000003814697265625, and the second is nearer (0x3F9AE148)
    assert run(s, [o]) == [(False, 1.21000003814697265625)]
    down = TorchGradScaler(init_scale=1.0, backoff_factor=0.3)
    # 1 * 0.3 = 0.29999999999999998890 in double; stored in fp32 it is 0.300000011920928955078125 (0x3E99999A)
    assert run(down, [X]) == [(True, 0.300000011920928955078125)]
    big = TorchGradScaler(init_scale=2.0**127, growth_interval=1)
    # 2**128 overflows fp32: "Do not grow the scale past fp32 bounds to inf" - the scale stays
    assert run(big, [o, o]) == [(False, 2.0**127), (False, 2.0**127)]
    assert big.state_dict()["_growth_tracker"] == 0  # ... and the tracker still resets


# ---------------------------------------------------------------------------------------------------
# DeepSpeed: scale_window 3, hysteresis 2, init 8, min 1. cur_iter counts update calls from 0;
# growth when stable = cur_iter - last_overflow_iter - 1 is a positive multiple of 3.
DS_TABLE = [
    # flag skip  scale  hyst  why
    (o, False, 8.0, 2),  # iter 0: stable = 0 - (-1) - 1 = 0, not positive
    (o, False, 8.0, 2),  # iter 1: stable 1
    (o, False, 8.0, 2),  # iter 2: stable 2
    (o, False, 16.0, 2),  # iter 3: stable 3, a multiple of the window: grow (4th clean step; torch: 3rd)
    (X, True, 16.0, 1),  # iter 4: overflow, hysteresis 2 != 1: spend one, keep the scale, skip
    (X, True, 8.0, 1),  # iter 5: overflow with hysteresis 1: halve, skip; last_overflow_iter = 5
    (o, False, 8.0, 1),  # iter 6: stable 0 (the hysteresis is NOT refilled by a clean step)
    (X, True, 4.0, 1),  # iter 7: so this single overflow halves at once
    (o, False, 4.0, 1),  # iter 8: stable 0
    (o, False, 4.0, 1),  # iter 9: stable 1
    (o, False, 4.0, 1),  # iter 10: stable 2
    (o, False, 8.0, 2),  # iter 11: stable 3: grow, and only now refill the hysteresis
    (X, True, 8.0, 1),  # iter 12: the refilled hysteresis absorbs one overflow again
]


def test_deepspeed_scaler_table():
    s = DeepSpeedLossScaler(init_scale=8.0, scale_window=3, hysteresis=2, min_scale=1)
    got = []
    for flag, *_ in DS_TABLE:
        d = s.update(flag)
        got.append((d.skip, d.scale_after, s.cur_hysteresis))
    assert got == [tuple(row[1:]) for row in DS_TABLE]


def test_deepspeed_consecutive_hysteresis_refills_on_every_clean_step():
    s = DeepSpeedLossScaler(init_scale=8.0, scale_window=100, hysteresis=2, consecutive_hysteresis=True)
    rows = [
        (X, True, 8.0),  # hysteresis 2 -> 1, scale kept
        (o, False, 8.0),  # a clean step refills it to 2 (consecutive_hysteresis)
        (X, True, 8.0),  # so this overflow is absorbed too (without the option it would halve: DS_TABLE iter 7)
        (X, True, 4.0),  # the second overflow in a row halves
    ]
    assert run(s, [r[0] for r in rows]) == [r[1:] for r in rows]


def test_deepspeed_defaults_grow_at_the_1001st_clean_step():
    s = DeepSpeedLossScaler()
    assert (s.scale, s.scale_window, s.hysteresis, s.min_scale) == (2.0**16, 1000, 2, 1.0)  # the fp16 config defaults
    assert run(s, [o] * 1000)[-1] == (False, 2.0**16)  # iters 0..999: stable 0..999, never a positive multiple of 1000
    assert run(s, [o]) == [(False, 2.0**17)]  # iter 1000: stable 1000
    assert run(s, [o] * 999)[-1] == (False, 2.0**17)  # iters 1001..1999
    assert run(s, [o]) == [(False, 2.0**18)]  # iter 2000: then every 1000 steps


def test_deepspeed_min_scale_floor_and_the_error_at_the_minimum():
    s = DeepSpeedLossScaler(init_scale=8.0, hysteresis=1, min_scale=3.0)
    assert run(s, [X, X]) == [(True, 4.0), (True, 3.0)]  # 8/2 = 4; max(4/2, 3) = 3: the floor
    before = s.state_dict()
    with pytest.raises(LossScaleAtMinimum, match="already at minimum"):
        s.update(True)  # at min_scale with no hysteresis left DeepSpeed gives up ...
    assert s.state_dict() == before  # ... before changing anything
    lenient = DeepSpeedLossScaler(init_scale=2.0, hysteresis=1, raise_error_at_min_scale=False)
    assert run(lenient, [X, X]) == [(True, 1.0), (True, 1.0)]  # max(1/2, 1) = 1, and it keeps skipping


def test_deepspeed_messages_are_its_log_lines():
    s = DeepSpeedLossScaler(init_scale=2.0**16)
    first, second, clean = s.update(True), s.update(True), s.update(False)
    assert first.message == ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, "
                             "but hysteresis is 2. Reducing hysteresis to 1")
    assert (
        second.message == "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
    )
    assert clean.message == "" and not clean.skip
    assert first.scale_before == first.scale_after == 65536.0 and second.scale_after == 32768.0


# ---------------------------------------------------------------------------------------------------
def test_static_scale_raises_or_skips():
    assert run(StaticLossScale(1024.0), [o, o]) == [(False, 1024.0), (False, 1024.0)]
    with pytest.raises(FloatingPointError, match="1024"):
        StaticLossScale(1024.0).update(True)  # zerosim's behaviour so far
    # DeepSpeed's LossScaler
    assert run(StaticLossScale(1024.0, on_overflow="skip"), [X, o]) == [(True, 1024.0), (False, 1024.0)]


@pytest.mark.parametrize("make", [
    lambda: TorchGradScaler(init_scale=8.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=2),
    lambda: DeepSpeedLossScaler(init_scale=8.0, scale_window=2, hysteresis=3, consecutive_hysteresis=True),
    lambda: StaticLossScale(4.0, on_overflow="skip"),
])
def test_state_dict_round_trip_continues_identically(make):
    flags = [o, X, o, o, X, X, o, o, o, X, o, o]
    a = make()
    run(a, flags[:3])  # mid-way: torch's tracker is 1, DeepSpeed's hysteresis refilled after an overflow
    b = loss_scaler_from_state_dict(a.state_dict())
    assert type(b) is type(a) and b.state_dict() == a.state_dict()
    assert run(a, flags[3:]) == run(b, flags[3:])


def test_torch_state_dict_uses_gradscaler_keys():
    assert set(TorchGradScaler().state_dict()) == {
        "kind",
        "scale",
        "growth_factor",
        "backoff_factor",
        "growth_interval",
        "_growth_tracker",
    }


@pytest.mark.parametrize("name, cls, scale", [
    ("torch", TorchGradScaler, 2.0**16),
    ("dynamic", TorchGradScaler, 2.0**16),  # "dynamic" means torch's
    ("DeepSpeed", DeepSpeedLossScaler, 2.0**16),
    (1024, StaticLossScale, 1024.0),
    ("1024", StaticLossScale, 1024.0),  # as a command line passes it
    (0.5, StaticLossScale, 0.5),
])
def test_registry(name, cls, scale):
    s = get_loss_scaler(name)
    assert type(s) is cls and s.scale == scale


@pytest.mark.parametrize("bad, err", [
    (lambda: get_loss_scaler("apex"), ValueError),
    (lambda: get_loss_scaler(0), ValueError),
    (lambda: get_loss_scaler(True), ValueError),
    (lambda: TorchGradScaler(growth_factor=1.0), ValueError),
    (lambda: TorchGradScaler(backoff_factor=1.0), ValueError),
    (lambda: TorchGradScaler(growth_interval=0), ValueError),
    (lambda: TorchGradScaler(init_scale=1e39), ValueError),  # beyond fp32
    (lambda: DeepSpeedLossScaler(scale_window=0), ValueError),  # DeepSpeed's config validator refuses it too
    (lambda: DeepSpeedLossScaler(min_scale=0), ValueError),
    (lambda: StaticLossScale(-1.0), ValueError),
    (lambda: StaticLossScale(1.0, on_overflow="ignore"), ValueError),
    (lambda: TorchGradScaler().update(1), TypeError),  # a flag, not a count
    (lambda: loss_scaler_from_state_dict({"scale": 1.0}), ValueError),
])
def test_bad_arguments(bad, err):
    with pytest.raises(err):
        bad()


# ---------------------------------------------------------------------------------------------------
def test_unscale_reciprocal_and_divide_differ_for_a_non_power_of_two_scale():
    g = np.array([5.0], np.float32)
    # fl32(1/3) = 11184811 * 2**-25 = 0.3333333432674408; 5 * that = 13981013.75 * 2**-23, which
    # rounds up to 13981014 * 2**-23 = 1.66666674613952637 (0x3FD55556). 5/3 = 13981013.33 * 2**-23
    # rounds down to 13981013 * 2**-23 = 1.66666662693023682 (0x3FD55555): one ulp apart.
    assert unscale(g, 3.0).view(np.uint32)[0] == 0x3FD55556
    assert unscale(g, 3.0, how="divide").view(np.uint32)[0] == 0x3FD55555


def test_unscale_power_of_two_scales_agree_and_are_exact():
    g = np.array([1.5, -3.0e-3, 65504.0, 2.0**-100, 0.0], np.float32)  # quotients stay normal: exact
    for s in (1.0, 2.0**-3, 2.0**16, 2.0**24):
        r, d = unscale(g, s), unscale(g, s, how="divide")
        assert r.dtype == np.float32 and np.array_equal(r.view(np.uint32), d.view(np.uint32))
        assert np.array_equal(r.astype(np.float64), g.astype(np.float64) / s)  # exact: a power of two


def test_unscale_keeps_inf_and_nan_and_refuses_fp16():
    r = unscale(np.array([np.inf, -np.inf, np.nan], np.float32), 2.0**16)
    assert np.isinf(r[0]) and r[0] > 0 and np.isinf(r[1]) and r[1] < 0 and np.isnan(r[2])
    with pytest.raises(ValueError, match="FP16"):
        unscale(np.ones(2, np.float16), 2.0)
    with pytest.raises(ValueError, match="unscale method"):
        unscale(np.ones(2, np.float32), 2.0, how="multiply")


@pytest.mark.parametrize("arrays, expected", [
    ([np.array([1.0, 2.0], np.float32)], False),
    ([np.array([1.0, np.inf], np.float32)], True),
    ([np.array([0.0], np.float16), np.array([np.nan], np.float32)], True),  # any array, any dtype
    ([np.array([65504.0], np.float16)], False),  # fp16's max is finite
    ([], False),
])
def test_has_inf_or_nan(arrays, expected):
    assert has_inf_or_nan(*arrays) is expected


def test_decision_records_the_scale_used_by_the_step():
    s = TorchGradScaler(init_scale=4.0)
    d = s.update(True)
    assert (d.skip, d.scale_before, d.scale_after, d.message) == (True, 4.0, 2.0, "")
    assert math.isfinite(d.scale_after)

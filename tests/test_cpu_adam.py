"""DeepSpeed's CPU Adam (zerosim/optim/_cpu_adam.py) against DeepSpeedCPUAdam itself: its recorded outputs on 65 seeded
cases (tools/record_ds_cpu_adam.py, DeepSpeed 0.19.8 built here by its JIT builder with GCC 12, AVX-512), the live op
where DeepSpeed is installed, a hand table of four elements, and an exact-arithmetic transcription of the C++ loop."""

from __future__ import annotations

import json
import os
from fractions import Fraction

import numpy as np
import pytest
from cpu_adam_cases import CASES, case_inputs
from helpers import bits

from zerosim.optim import get_optimizer
from zerosim.optim._cpu_adam import beta_power, cpu_adam_coefficients, cpu_adam_step
from zerosim.precision import cast

RECORDED = os.path.join(os.path.dirname(__file__), "data", "ds_cpu_adam.json")


def _ours(case: dict) -> tuple:
    """The case through cpu_adam_step: fp32 state; bf16 params widened, stepped, rounded back to nearest even."""
    w0, grads = case_inputs(case)
    w, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t, g in enumerate(grads, 1):
        cpu_adam_step(w, g, m, v, t, case["lr"], tuple(case["betas"]), case["eps"], case["weight_decay"],
                      case["bias_correction"], case["adamw_mode"])
        if case["params"] == "bf16":  # simd.h store_16_f32_as_bf16_nearest / c10::BFloat16's round to nearest even
            w = cast(w, "bf16").astype(np.float32)
    out = cast(w, "bf16") if case["params"] == "bf16" else w
    return out, m, v


def _hex(a) -> str:
    return bits(a).tobytes().hex()


def test_every_recorded_deepspeed_case_matches_bit_for_bit():
    """65 cases: lengths 5 (all tail), 16 (one vector), 37 and 150 (vectors then a tail); fp32 and bf16 params; AdamW
    and Adam mode; weight decay 0 and 0.1; 1 and 7 steps; one without bias correction."""
    recorded = json.load(open(RECORDED))
    assert recorded["deepspeed"] == "0.19.8" and len(recorded["cases"]) == len(CASES)
    for case, got in zip(CASES, recorded["cases"]):
        w, m, v = _ours(case)
        assert (_hex(w), _hex(m), _hex(v)) == (got["out_params"], got["exp_avg"], got["exp_avg_sq"]), case


@pytest.mark.slow
def test_live_deepspeed_cpu_adam_matches_on_fresh_random_inputs():
    """Where DeepSpeed is installed and its CPU Adam op builds (JIT, minutes the first time): new seeds, not the
    recorded ones."""
    pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    from record_ds_cpu_adam import run_case

    try:
        from deepspeed.ops.op_builder import CPUAdamBuilder

        CPUAdamBuilder().load()
    except Exception as e:  # noqa: BLE001 (no compiler, no AVX: say so and skip)
        pytest.skip(f"DeepSpeed's CPU Adam op does not build here: {e}")
    for case in CASES[::7]:
        case = dict(case, seed=case["seed"] + 1000)
        got = run_case(case)
        w, m, v = _ours(case)
        assert (_hex(w), _hex(m), _hex(v)) == (got["out_params"], got["exp_avg"], got["exp_avg_sq"]), case


# -- an independent transcription: every C++ operation exact in Fractions, rounded once to fp32 -----------------------

def _round32(x: Fraction) -> np.float32:
    """x rounded to the nearest fp32, ties to even (no double rounding: the candidates are compared exactly)."""
    near = np.float32(float(x))
    cands = {near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))}
    dist = sorted(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(np.float32(c).view(np.uint32)) & 1))
    return np.float32(dist[0])


def _F(x) -> Fraction:
    return Fraction(float(x))


def _fma(a, b, c) -> np.float32:
    return _round32(_F(a) * _F(b) + _F(c))


def _mul(a, b) -> np.float32:
    return _round32(_F(a) * _F(b))


def _exact_step(w, g, m, v, t, lr, betas, eps, wd, adamw, tail: bool):
    """One element through Step_AVX (tail=False) or Step_1's compiled loop (tail=True), from cpu_adam.h."""
    c = cpu_adam_coefficients(t, lr, betas, eps, wd)
    if wd > 0 and not adamw:
        g = _fma(w, c["wd"], g)
    if tail:
        m = _fma(m, c["b1"], _mul(g, c["b1m"]))
        v = _fma(v, c["b2"], _mul(_mul(g, g), c["b2m"]))
    else:
        m = _fma(g, c["b1m"], _mul(m, c["b1"]))
        v = _fma(_mul(g, g), c["b2m"], _mul(v, c["b2"]))
    root = np.sqrt(np.float32(v))  # IEEE sqrt is correctly rounded in fp32
    denom = _fma(root, c["bc2"], c["eps"])
    update = _round32(_F(m) / _F(denom))
    if wd > 0 and adamw:
        w = _fma(w, c["w_decay"], w)
    return _fma(update, c["step_size"], w), m, v


@pytest.mark.parametrize("adamw,wd", [(True, 0.0), (True, 0.1), (False, 0.1)])
def test_exact_transcription_agrees_on_body_and_tail(adamw, wd):
    """20 elements = one AVX-512 vector (16, fused as Step_AVX) + a tail of 4 (Step_1), three steps."""
    rng = np.random.default_rng(7)
    n = 20
    w = rng.standard_normal(n).astype(np.float32)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    ref = [(w[i], np.float32(0), np.float32(0)) for i in range(n)]
    for t in (1, 2, 3):
        g = (rng.standard_normal(n) * 10.0 ** rng.integers(-5, 2, n)).astype(np.float32)
        cpu_adam_step(w, g, m, v, t, 1e-2, (0.9, 0.999), 1e-8, wd, True, adamw)
        ref = [_exact_step(*ref[i][:1], g[i], *ref[i][1:], t, 1e-2, (0.9, 0.999), 1e-8, wd, adamw, tail=i >= 16)
               for i in range(n)]
    assert bits(w).tolist() == bits(np.array([r[0] for r in ref], np.float32)).tolist()
    assert bits(v).tolist() == bits(np.array([r[2] for r in ref], np.float32)).tolist()


# -- a hand table of four elements: step 1, lr 0.1, betas (0.9, 0.999), eps 1e-8, AdamW mode, no decay ---------------
# fp32(0.9) = 0.89999997615814208984375, so b1m = 1 - b1 = 0.10000002384185791015625 (exact, Sterbenz); bc1 = b1m.
# fp32(0.999) = 0.99900001287460327148, b2m = 0.00099998712539672852 (exact); bc2 = fp32(1/sqrt(b2m)) = 31.62298...
# At t = 1 with m = v = 0: m = fp32(g*b1m), v = fp32(fp32(g*g)*b2m), sqrt(v)*bc2 ~= |g| (v_hat = g*g), so the update
# is m/(|g| + eps) ~= b1m*sign(g) and step_size = fp32(-0.1/b1m): w moves by ~ -0.1*sign(g), Adam's first step.
HAND = [
    # (w, g, expected w after, expected m, expected v) -- n = 4 < 16: all four go through the scalar tail
    # g = 1: m = b1m exactly; v = b2m; sqrt(b2m)*bc2 rounds to 1 - 2^-24 or so, + 1e-8: w = 1 - 0.1 = 0.9 to an ulp
    (1.0, 1.0, np.float32(0.9), np.float32(0.10000002384185791015625), np.float32(0.00099998712539672852)),
    # g = -2: m = -2*b1m (exact, a power of two), v = 4*b2m (exact); w = 0.5 + 0.1
    (0.5, -2.0, np.float32(0.6), np.float32(-0.2000000476837158203125), np.float32(0.00399994850158691406)),
    # g = 0.5: a power of two again: m = b1m/2, v = b2m/4; w = -1 - 0.1
    (-1.0, 0.5, np.float32(-1.1), np.float32(0.050000011920928955078), np.float32(0.00024999678134918213)),
    # g = 0: m = v = 0, the update 0/(0 + eps) = 0: w stays exactly as it was
    (3.0, 0.0, np.float32(3.0), np.float32(0.0), np.float32(0.0)),
]


def test_hand_table_of_four_elements():
    w = np.array([r[0] for r in HAND], np.float32)
    g = np.array([r[1] for r in HAND], np.float32)
    m, v = np.zeros(4, np.float32), np.zeros(4, np.float32)
    cpu_adam_step(w, g, m, v, 1, lr=0.1)
    assert bits(m).tolist() == bits(np.array([r[3] for r in HAND], np.float32)).tolist()
    assert bits(v).tolist() == bits(np.array([r[4] for r in HAND], np.float32)).tolist()
    # w to within one ulp of the hand value: 0.9, 0.6, -1.1 are not fp32 numbers, and the fused adds decide the last bit
    ulps = np.abs(bits(w).astype(np.int64) - bits(np.array([r[2] for r in HAND], np.float32)).astype(np.int64))
    assert ulps.max() <= 1, ulps
    assert w[3] == 3.0  # a zero gradient moves nothing


def test_beta_powers_are_repeated_fp32_products_not_pow():
    """IncrementStep: _betta1_t *= _betta1 each step. fp32(0.999)**3 so formed differs in the last bit from the
    power rounded once (std::pow's, where the step jumps), and fp32(0.9)**9 too: the bias correction is formed so."""
    b = np.float32(0.9)
    by_hand = np.float32(1)
    for _ in range(10):
        by_hand = np.float32(by_hand * b)
    assert beta_power(0.9, 10) == by_hand
    assert beta_power(0.9, 0) == 1 and beta_power(0.999, 1) == np.float32(0.999)
    once = lambda beta, t: np.float32(float(np.float32(beta)) ** t)  # noqa: E731 (pow in double, rounded once)
    assert beta_power(0.999, 3) == np.float32(0.9970031) != once(0.999, 3)
    assert beta_power(0.9, 9) != once(0.9, 9)


def test_adam_formula_deepspeed_cpu_is_the_transcription():
    """get_optimizer("adamw", formula="deepspeed-cpu") steps as DeepSpeedCPUAdam's default (adamw_mode=True)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal(37).astype(np.float32)
    g = rng.standard_normal(37).astype(np.float32)
    w2, s = w.copy(), {"m": np.zeros(37, np.float32), "v": np.zeros(37, np.float32)}
    m, v = np.zeros(37, np.float32), np.zeros(37, np.float32)
    get_optimizer("adamw", lr=1e-2, weight_decay=0.1, formula="deepspeed-cpu").step(w2, g, s, 1)
    cpu_adam_step(w, g, m, v, 1, 1e-2, weight_decay=0.1, adamw_mode=True)
    assert bits(w2).tolist() == bits(w).tolist() and bits(s["v"]).tolist() == bits(v).tolist()

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

from zerosim import Cluster, Reference, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.models import MLP, make_regression
from zerosim.optim import OptimizerRun, get_optimizer
from zerosim.parallel.offload import Offload
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
    """IncrementStep: _betta1_t *= _betta1 each step of a run from the start. fp32(0.999)**3 so formed differs in the
    last bit from the power rounded once (std::pow's, where a run begins past step 1: the resumes below), and
    fp32(0.9)**9 too: the bias correction is formed so."""
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


# DeepSpeed 0.19.8, csrc/includes/cpu_adam.h, Adam_Optimizer::IncrementStep(step, beta1, beta2), as each adam_update
# (csrc/adam/cpu_adam_impl.cpp, ds_adam_step) calls it before update_state. A DeepSpeedCPUAdam made in this process
# starts with _step 0 and _betta1_t 1.0f (the constructor), so:
#   step == _step + 1  -> _betta1_t *= _betta1          (a run from step 1: fp32 products)
#   step == _step      -> return                        (another parameter group at the same step)
#   otherwise          -> _betta1_t = std::pow(_betta1, step); _step = step
# A run resumed from a checkpoint of step T calls adam_update(T + 1) first (cpu_adam.py: state['step'] += 1 on the
# loaded step): the pow branch. std::pow(float, size_t) is pow(double, double) (C++11's overloads for arithmetic
# types), its double result rounded to the float _betta1_t. Rows: (beta, first step of the run, step t, _betta1_t's
# bits at t). Each pow below is its exact double (beta's float to the power), rounded to float by hand.
INCREMENT_STEP = [
    (0.9, 1, 10, 0x3EB285F8),  # from the start: ten products 1.0f * 0.9f * ... = 0.34867835
    (0.999, 1, 1, 0x3F7FBE77),  # from the start, step 1: 1.0f * 0.999f = 0.999f exactly
    (0.999, 1, 3, 0x3F7F3B98),  # from the start: three products = 0.9970031 (the last bit above the pow's)
    (0.999, 3, 3, 0x3F7F3B97),  # resumed from step 2: pow(0.999f, 3) = 0.99700303754660... -> 0.997003 (0x3F7F3B97)
    (0.999, 3, 5, 0x3F7EB8FA),  # ... then two products: 0.99501, one ulp below the uninterrupted run's 0x3F7EB8FB
    (0.9, 9, 9, 0x3EC65BF7),  # resumed from step 8: pow(0.9f, 9) = 0.38742039663176... -> 0x3EC65BF7 (products: ...F8)
    (0.9, 9, 10, 0x3EB285F8),  # ... one product on: the uninterrupted run's bits again at step 10
    (0.999, 1001, 1001, 0x3EBC1300),  # resumed from step 1000: pow = 0.36733246804337... (products: 0x3EBC1303)
    (0.999, 1001, 1003, 0x3EBBB2C2),  # ... two products on (the uninterrupted run: 0x3EBBB2C5)
    (0.95, 6, 6, 0x3F3C2EFB),  # resumed from step 5: pow(0.95f, 6) = 0.73509183527987... (products: 0x3F3C2EFA)
    (0.98, 2, 2, 0x3F75DCC7),  # resumed from step 1: pow(0.98f, 2) = 0.96040003738403...: the same as the product
    (0.9999, 100001, 100001, 0x383DFDC7),  # resumed from step 100000: pow = 4.5297459251481e-05 (products drift 92
    #                                        ulps above it: 0x383DFE23)
]


@pytest.mark.pinned
@pytest.mark.parametrize("beta, first, t, want", INCREMENT_STEP)
def test_beta_power_is_increment_steps_after_a_resume_too(beta, first, t, want):
    assert bits(np.float32([beta_power(beta, t, first)]))[0] == want


def test_the_optimizer_run_follows_increment_steps_branches():
    run = OptimizerRun()  # a fresh process: _step 0
    assert [run.at(t) for t in (1, 2, 2, 3)] == [1, 1, 1, 1]  # the next step, the same step again: one run
    assert run.at(7) == 7 and run.at(8) == 7  # a jump (a checkpoint of step 6 loaded into it): std::pow at 7
    assert OptimizerRun().at(5) == 5  # a fresh process resumed from step 4


@pytest.mark.bad_input("optimizers")
@pytest.mark.parametrize("first_step", [0, 3, 1.0, True])
def test_first_step_must_be_a_step_of_the_run(first_step):
    w, g = np.ones(4, np.float32), np.ones(4, np.float32)
    state = {"m": np.zeros(4, np.float32), "v": np.zeros(4, np.float32)}
    with pytest.raises(ValueError, match="first_step must be an integer step in 1..t = 1..2"):
        get_optimizer("adamw", formula="deepspeed-cpu").step(w, g, state, 2, first_step=first_step)
    assert w.tolist() == [1.0] * 4 and state["m"].tolist() == [0.0] * 4


@pytest.mark.slow  # three engines and an oracle of a few steps each, a checkpoint between
def test_a_resumed_run_takes_std_pow_at_its_first_step(tmp_path):
    """ZeRO-Offload's CPU Adam: DeepSpeed's own resumed run differs from its uninterrupted one. The resumed engine's
    first step forms beta2**3 by std::pow (0.999f: 0x3F7F3B97, not the products' 0x3F7F3B98), so its bits part from
    the uninterrupted run's, and equal those of a run whose optimizer restarts at step 3 and those of the oracle
    resumed from the same state."""
    model, n = MLP([9, 13, 3]), 3  # 172 params: shards of 58, vector bodies and scalar tails both
    params = model.init_params(np.random.default_rng(1))
    data = make_regression(np.random.default_rng(0), 3 * 4, 3, [9, 13, 3])
    steps = [data[3 * s:3 * s + 3] for s in range(4)]
    opt = dict(lr=1e-2, weight_decay=0.1, formula="deepspeed-cpu")  # betas (0.9, 0.999)

    def engine():
        return ZeroEngine(model, Cluster(n), 2, get_optimizer("adamw", **opt), "fp32", params=params,
                          parallelisms=(Offload("cpu"),))

    whole, restarted, first = engine(), engine(), engine()
    for b in steps[:2]:
        whole.step(b), restarted.step(b), first.step(b)
    ckpt.save(first, str(tmp_path))
    resumed = ckpt.load(str(tmp_path), Cluster(n), model)
    restarted.optimizer_run = OptimizerRun()  # as a fresh process would hold it
    oracle = Reference(model, get_optimizer("adamw", **opt), "fp32", world_size=n, params=params,
                       reduce_every_micro_step=True, optimizer_calls="shards")
    oracle.set_state(first.full_params(), first.full_master(), first.full_optimizer_state(), first.t)
    for b in steps[2:]:
        whole.step(b), restarted.step(b), resumed.step(b), oracle.step(b)
    assert resumed.optimizer_run.first == 3 and whole.optimizer_run.first == 1
    assert bits(resumed.full_master()).tolist() == bits(restarted.full_master()).tolist()
    assert bits(resumed.full_master()).tolist() == bits(oracle.master()).tolist()
    assert bits(resumed.full_master()).tolist() != bits(whole.full_master()).tolist()

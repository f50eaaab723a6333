"""Adam(formula="torch" | "deepspeed") against the frameworks' formulas, worked out here.

The reference is a helper written for this file that shares no code with zerosim: it does every
operation exactly, in rational arithmetic (fractions.Fraction), and rounds once to fp32 where the
kernel rounds (`r32`, round to nearest, ties to even, subnormals included; `sqrt32`, the correctly
rounded square root via integer isqrt; a fused multiply-add is one `r32` of a*b + c). Python-side
scalars (1 - beta**t, lr / bc1, bc2**0.5) are Python doubles, as in the frameworks' Python code.

The hex table for formula="torch" was checked once against torch 2.13.0+cpu (AVX-512) by running
torch.optim.Adam / AdamW(foreach=False) on the same weights and gradients: every bit agreed. These
tests do not import torch. NOTE: torch 2.13's CPU fp32 sqrt is not always correctly rounded (within
0.051 ulp of a rounding midpoint it returned the lower neighbour for ~0.7% of random inputs); with
its sqrt substituted, this implementation matched torch bit for bit over 320 random runs of 11 steps
(Adam and AdamW, betas with both lerp branches). The table's inputs are ones where torch's sqrt is
correctly rounded. The "deepspeed" table has no GPU run behind it (see adam.py's NOTE).
"""

from __future__ import annotations

from fractions import Fraction as Q
from math import isqrt

import numpy as np
import pytest

from zerosim.optim import Adam, AdamW
from zerosim.optim._fma import fma32

HALF = Q(1, 2)


def r32(x: Q) -> Q:
    """x rounded to the nearest fp32, ties to even (an exact rational; no overflow in these tests)."""
    if x == 0:
        return Q(0)
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Q(2) ** e:
        e -= 1  # now 2**e <= a < 2**(e+1)
    q = max(e - 23, -149)  # 24 significant bits, or the subnormal quantum 2**-149
    n = round(a / Q(2) ** q)  # Fraction.__round__ rounds half to even
    return (1 if x > 0 else -1) * n * Q(2) ** q


def sqrt32(v: Q) -> Q:
    """The fp32 nearest sqrt(v) for v >= 0 (never a tie: a square root is never a midpoint)."""
    if v == 0:
        return Q(0)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if v < Q(2) ** e:
        e -= 1
    q = max(e // 2 - 23, -149)
    s = 4 * v / Q(4) ** q  # round(sqrt(v) / 2**q) = (isqrt(floor(4 v / 4**q)) + 1) // 2
    return ((isqrt(s.numerator // s.denominator) + 1) // 2) * Q(2) ** q


def f32(x: float) -> Q:
    """A Python double as the kernel's fp32 scalar."""
    return r32(Q(x))


def torch_reference(w0, grads, lr, betas, eps, wd=0.0):
    """torch.optim.adam._single_tensor_adam, per element; returns [(w, m, v)] after each step."""
    b1, b2 = betas
    w, m, v = [Q(float(x)) for x in w0], [Q(0)] * len(w0), [Q(0)] * len(w0)
    out = []
    for t, g in enumerate(grads, 1):
        g = [Q(float(x)) for x in g]
        if wd:
            w = [r32(x * f32(1 - lr * wd)) for x in w]  # param.mul_(1 - lr * weight_decay)
        weight = f32(1 - b1)
        bias_correction1, bias_correction2 = 1 - b1**t, 1 - b2**t
        step_size, bc2_sqrt = lr / bias_correction1, bias_correction2**0.5
        for i in range(len(w)):
            diff = r32(g[i] - m[i])
            # lerp: fma(weight, g - m, m) for |weight| < 0.5, else fma(weight - 1, g - m, g)
            m[i] = r32(weight * diff + m[i]) if abs(weight) < HALF else r32(r32(weight - 1) * diff + g[i])
            v[i] = r32(v[i] * f32(b2))  # mul_(beta2)
            v[i] = r32(r32(f32(1 - b2) * g[i]) * g[i] + v[i])  # addcmul_: fma(value * g, g, v)
            denom = r32(r32(sqrt32(v[i]) / f32(bc2_sqrt)) + f32(eps))
            w[i] = r32(w[i] + r32(r32(f32(-step_size) * m[i]) / denom))  # addcdiv_(m, denom, value=-step_size)
        out.append((list(w), list(m), list(v)))
    return out


def deepspeed_reference(w0, grads, lr, betas, eps, wd=0.0):
    """multi_tensor_adam.cu AdamFunctor with fp32 scalars, each operation rounded once."""
    b1, b2, lr_, eps_, decay = f32(betas[0]), f32(betas[1]), f32(lr), f32(eps), f32(wd)
    w, m, v = [Q(float(x)) for x in w0], [Q(0)] * len(w0), [Q(0)] * len(w0)
    out = []
    for t, g in enumerate(grads, 1):
        g = [Q(float(x)) for x in g]
        bc1 = f32(1 - float(b1) ** t)  # 1 - std::pow(float beta1, step), in double, stored in a float
        bc2 = f32(1 - float(b2) ** t)
        for i in range(len(w)):
            m[i] = r32(r32(b1 * m[i]) + r32(r32(1 - b1) * g[i]))
            v[i] = r32(r32(b2 * v[i]) + r32(r32(r32(1 - b2) * g[i]) * g[i]))
            denom = r32(sqrt32(r32(v[i] / bc2)) + eps_)
            update = r32(r32(m[i] / bc1) / denom)
            if wd:
                update = r32(update + r32(decay * w[i]))  # ADAM_MODE_1
            w[i] = r32(w[i] - r32(lr_ * update))
        out.append((list(w), list(m), list(v)))
    return out


REFERENCES = {"torch": torch_reference, "deepspeed": deepspeed_reference}


def as_f32(values) -> np.ndarray:
    return np.array([float(x) for x in values], np.float32)  # exact: each is an fp32 value


def bits(a) -> list:
    return [int(b) for b in np.asarray(a, np.float32).view(np.uint32)]


def run(opt, w0, grads):
    w, state = np.array(w0, np.float32), {"m": np.zeros(len(w0), np.float32), "v": np.zeros(len(w0), np.float32)}
    out = []
    for t, g in enumerate(grads, 1):
        opt.step(w, np.array(g, np.float32), state, t)
        out.append((w.copy(), state["m"].copy(), state["v"].copy()))
    return out


# ---------------------------------------------------------------------------------------------------
# The hex table: w after each of three steps, lr = 1e-2, betas (0.9, 0.999), eps 1e-8.
W0 = [0.5, -1.25, 3.0, 1e-3]
GRADS = [[0.1, -2.0, 1e-4, 5.0], [-0.3, 0.7, 2e-4, 4.0], [0.2, -1.5, -1e-4, 0.0]]
HEX_TABLE = {
    # (class, formula): w after steps 1, 2, 3 (fp32 bit patterns)
    ("adam", "torch"): [  # == torch 2.13.0 Adam(foreach=False)
        [0x3EFAE148, 0xBF9EB852, 0x403F5C2D, 0xBC1374BB],
        [0x3EFD6907, 0xBF9E39AF, 0x403EBE0D, 0xBC9AACDD],
        [0x3EFD5067, 0xBF9D70CA, 0x403E793A, 0xBCD93F6A],
    ],
    ("adamw", "torch"): [  # weight_decay 0.1; == torch 2.13.0 AdamW(foreach=False)
        [0x3EFA9FBF, 0xBF9E8F5C, 0x403F2B06, 0xBC1378ED],
        [0x3EFCE755, 0xBF9DE822, 0x403E5BF6, 0xBC9A9C16],
        [0x3EFC8DF7, 0xBF9CF6D1, 0x403DE668, 0xBCD9070F],
    ],
    ("adam", "deepspeed"): [  # last element one ulp from torch's every step
        [0x3EFAE148, 0xBF9EB852, 0x403F5C2D, 0xBC1374BC],
        [0x3EFD6907, 0xBF9E39AF, 0x403EBE0D, 0xBC9AACDE],
        [0x3EFD5067, 0xBF9D70CA, 0x403E793A, 0xBCD93F6B],
    ],
    ("adamw", "deepspeed"): [  # decay inside the update: differs from torch's order in 3 of 4 elements
        [0x3EFA9FBE, 0xBF9E8F5C, 0x403F2B06, 0xBC1378EE],
        [0x3EFCE754, 0xBF9DE821, 0x403E5BF6, 0xBC9A9C16],
        [0x3EFC8DF6, 0xBF9CF6D0, 0x403DE668, 0xBCD9070F],
    ],
}


def make(cls_name, formula, **kw):
    if cls_name == "adam":
        return Adam(lr=1e-2, formula=formula, **kw)
    return AdamW(lr=1e-2, weight_decay=0.1, formula=formula, **kw)


@pytest.mark.parametrize("key", sorted(HEX_TABLE))
def test_hex_table(key):
    cls_name, formula = key
    got = [bits(w) for (w, _, _) in run(make(cls_name, formula), W0, GRADS)]
    assert got == HEX_TABLE[key]
    ref = REFERENCES[formula](
        as_f32(W0), [as_f32(g) for g in GRADS], 1e-2, (0.9, 0.999), 1e-8, 0.1 if cls_name == "adamw" else 0.0
    )
    assert [bits(as_f32(w)) for (w, _, _) in ref] == HEX_TABLE[key]  # the table is the formula's


def test_torch_first_step_by_hand():
    # w = 0, g = 1, lr = 1e-3, betas (0.9, 0.999), eps 1e-8, t = 1:
    #   weight = fl32(1 - 0.9 = 0.09999999999999998) = 0.100000001490116119 (0x3DCCCCCD)
    #   m = fma(weight, 1 - 0, 0) = 0x3DCCCCCD
    #   v = fma(fl32(1 - 0.999) * 1, 1, 0 * b2) = fl32(0.0010000000000000009) = 0.00100000004749745131 (0x3A83126F)
    #   sqrt(v) = 0.0316227786242961884 (0x3D0186E3); bc2_sqrt = 0.031622776601683805 -> fp32 0x3D0186E2
    #   denom = fl32(0x3D0186E3 / 0x3D0186E2) + 1e-8 = 1 + 2**-23 (0x3F800001; eps is below half an ulp)
    #   step_size = 1e-3 / 0.09999999999999998 = 0.010000000000000002 -> fp32 -0.00999999977648258209 (0xBC23D70A)
    #   -step_size * m = -0.00100000004749745131 (0xBA83126F); / denom = -0.000999999931082129478 (0xBA83126E)
    w, m, v = run(Adam(lr=1e-3, formula="torch"), [0.0], [[1.0]])[0]
    assert (bits(w), bits(m), bits(v)) == ([0xBA83126E], [0x3DCCCCCD], [0x3A83126F])


def test_deepspeed_first_step_by_hand():
    # beta1 = fp32 0.899999976158142090 (0x3F666666); 1 - beta1 in fp32 = 0.100000023841857910 (0x3DCCCCD0);
    # bias_correction1 = fl32(1 - pow(0.8999999761581421, 1)) = the same 0x3DCCCCD0, so m_hat = m / bc1 = 1 exactly;
    # likewise v = 1 - fp32(0.999) = 0x3A831200 = bias_correction2, v_hat = 1; denom = fl32(1 + 1e-8) = 1;
    # update = 1; w = 0 - fl32(1e-3) * 1 = -0.00100000004749745131 (0xBA83126F): one ulp from torch's first step.
    w, m, v = run(Adam(lr=1e-3, formula="deepspeed"), [0.0], [[1.0]])[0]
    assert (bits(w), bits(m), bits(v)) == ([0xBA83126F], [0x3DCCCCD0], [0x3A831200])


CONFIGS = [
    # (betas, lr, weight decay): (0.3, ...) and (0.5, ...) take lerp's second branch (weight >= 0.5)
    ((0.9, 0.999), 1e-3, 0.0),
    ((0.9, 0.999), 0.1, 0.01),
    ((0.5, 0.99), 3e-4, 0.0),
    ((0.3, 0.95), 1.0, 0.1),
    ((0.0, 0.9), 1e-2, 0.0),
]


@pytest.mark.parametrize("formula", ["torch", "deepspeed"])
@pytest.mark.parametrize("case", range(len(CONFIGS)))
def test_formula_equals_the_reference_bit_for_bit(formula, case):
    betas, lr, wd = CONFIGS[case]
    rng = np.random.default_rng(case)
    n = 7
    w0 = rng.standard_normal(n).astype(np.float32)
    # gradients over six orders of magnitude, signs mixed, one exact zero
    grads = [(rng.standard_normal(n) * 10.0 ** rng.integers(-4, 3, n)).astype(np.float32) for _ in range(4)]
    grads[1][3] = 0.0
    opt = (
        AdamW(lr=lr, betas=betas, weight_decay=wd, formula=formula) if wd else Adam(lr=lr, betas=betas, formula=formula)
    )
    got = run(opt, w0, grads)
    ref = REFERENCES[formula](w0, grads, lr, betas, 1e-8, wd)
    for (w, m, v), (rw, rm, rv) in zip(got, ref):
        assert bits(w) == bits(as_f32(rw)) and bits(m) == bits(as_f32(rm)) and bits(v) == bits(as_f32(rv))


def test_the_three_formulas_give_different_bits():
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(64).astype(np.float32)
    grads = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    finals = {f: bits(run(Adam(lr=1e-2, formula=f), w0, grads)[-1][0]) for f in ("seed", "torch", "deepspeed")}
    assert (
        finals["seed"] != finals["torch"]
        and finals["torch"] != finals["deepspeed"]
        and finals["seed"] != finals["deepspeed"]
    )


@pytest.mark.parametrize("formula", ["torch", "deepspeed"])
def test_sharding_invariance(formula):
    """Elementwise: a flat buffer stepped whole equals its slices stepped apart, bit for bit."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(23).astype(np.float32)
    grads = [rng.standard_normal(23).astype(np.float32) for _ in range(3)]
    whole = run(AdamW(lr=1e-2, formula=formula), w0, grads)[-1][0]
    parts = [
        run(AdamW(lr=1e-2, formula=formula), w0[a:b], [g[a:b] for g in grads])[-1][0]
        for a, b in ((0, 5), (5, 6), (6, 23))
    ]
    assert bits(whole) == bits(np.concatenate(parts))


def test_record_keys():
    w, g = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    for opt, keys in [
        (Adam(formula="torch"), {"m", "v", "denom", "update"}),
        (AdamW(formula="torch"), {"m", "v", "denom", "update", "decayed"}),
        (Adam(formula="deepspeed"), {"m", "v", "m_hat", "v_hat", "denom", "update"}),
        (Adam(), {"m", "v", "m_hat", "v_hat", "update"}),
    ]:
        rec, w1 = {}, w.copy()
        opt.step(w1, g, {"m": np.zeros(3, np.float32), "v": np.zeros(3, np.float32)}, 1, record=rec)
        assert set(rec) == keys
        base = rec.get("decayed", w)  # AdamW "seed"/"torch" decay first; "deepspeed" decays inside the update
        assert bits(w1) == bits(base - rec["update"])  # w_new = w - update, rounded once


def test_fma32_rounds_once():
    # 1 + 2**-24 needs 25 bits: rounding the product 1 + 2**-23 + 2**-48 ... first would lose the tie-break.
    # a*b = (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24; + c = -(1 + 2**-11) leaves exactly 2**-24: an fma keeps it,
    # a rounded product (1 + 2**-11, since 2**-24 is half an ulp and ties to even) would give 0.
    a = np.float32(1 + 2**-12)
    assert fma32(a, a, np.float32(-(1 + 2**-11))) == np.float32(2**-24)
    assert np.float32(a * a) + np.float32(-(1 + 2**-11)) == 0  # what two roundings give
    # A sum float64 cannot hold: (-(2**-12 + 2**-35)) * (2**-12 - 2**-35) + (1 + 2**-23) = 1 + 2**-24 + 2**-70,
    # just above the fp32 midpoint 1 + 2**-24, so it rounds up to 1 + 2**-23. Rounding to float64 first
    # drops the 2**-70 and leaves an exact tie, which would round to even: 1.0.
    x, y, c = np.float32(-(2**-12 + 2**-35)), np.float32(2**-12 - 2**-35), np.float32(1 + 2**-23)
    assert fma32(x, y, c) == np.float32(1 + 2**-23)
    assert np.float32(np.float64(x) * np.float64(y) + np.float64(c)) == 1.0  # the double rounding fma32 avoids
    # ... and just below the midpoint: (2**-12 + 2**-35) * (2**-12 - 2**-35) + 1 = 1 + 2**-24 - 2**-70 rounds
    # down to 1.0; float64 rounds it *up* to the tie, and only stepping back toward zero keeps it below.
    assert fma32(-x, y, np.float32(1.0)) == 1.0


def test_bad_formula_and_dtype_are_refused_before_any_change():
    with pytest.raises(ValueError, match="formula"):
        Adam(formula="apex")
    w = np.ones(4, np.float64)
    state = {"m": np.zeros(4), "v": np.zeros(4)}
    with pytest.raises(ValueError, match="fp32"):
        AdamW(formula="torch").step(w, np.ones(4), state, 1)
    assert np.array_equal(w, np.ones(4)) and not state["m"].any()  # nothing changed (not even the decay)


def test_defaults_and_positional_order_unchanged():
    assert Adam().formula == "seed" and AdamW().formula == "seed"
    opt = AdamW(0.1, (0.8, 0.9), 1e-6, 0.05)  # formula is keyword-only: weight_decay keeps its place
    assert (opt.lr, opt.betas, opt.eps, opt.weight_decay) == (0.1, (0.8, 0.9), 1e-6, 0.05)


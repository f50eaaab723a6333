"""zerosim.optim against things you can see.

- Seed 004's worked Adam step, number for number, within a tolerance derived from counting roundings.
- Every optimizer against a plain per-element re-implementation written here with Python floats:
  bitwise equal for float64 runs (same operation order, and Python floats are IEEE doubles, each
  operation rounded once like NumPy's float64), and within a *running error bound* for fp32 runs.
- Sharding: stepping a flat buffer equals stepping any contiguous slices of it, bit for bit.
- The ledger holds exactly state_bytes_per_param * size bytes of kind optim:*.
- Muon: Newton-Schulz acts on singular values as the scalar polynomial, lands in the quintic's
  known band, and Muon refuses flat (sharded) steps and ZeRO stages 2/3.
- Bad arguments are refused before anything is modified.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim.cluster import MemoryLedger
from zerosim.optim import CUBIC, OPTIMIZERS, QUINTIC, Adam, Muon, get_optimizer, newton_schulz
from zerosim.precision import cast

U32 = 2.0**-24  # fp32 unit roundoff: rounding a normal number x moves it by at most U32*|x|
ETA32 = 2.0**-150  # half fp32's smallest subnormal: the most rounding can move a tiny result
U64 = 2.0**-53  # float64 unit roundoff (the reference's own rounding)


def gamma(k: int, u: float = U32) -> float:
    """Higham's gamma_k = k u / (1 - k u): relative error bound after k roundings (first principles)."""
    return k * u / (1 - k * u)


# ---------------------------------------------------------------------------------------------------
# Seed 004: GPU 0 and GPU 1 average their gradients and run one Adam step on fp32 masters.
SEED_W = [2.0, -3.0, 1.0, 0.5]
SEED_G = [-5.5, -2.75, -2.75, -5.0]  # all exact in fp32
SEED_004 = [
    # key      the seed's exact decimals                  k = fp32 roundings on the way (relative bound gamma_k)
    ("m", [-0.55, -0.275, -0.275, -0.5], 2),  # fl(1 - 0.9), the product; b1*0 and the sum are exact
    ("v", [0.03025, 0.0075625, 0.0075625, 0.025], 3),  # g*g (exact here, counted anyway), fl(1 - 0.999), product
    ("m_hat", SEED_G, 4),  # m's 2, fl(1 - 0.9**1), the division: the seed's "m_hat = g"
    ("v_hat", [30.25, 7.5625, 7.5625, 25.0], 5),  # v's 3, fl(1 - 0.999**1), the division: "v_hat = g*g"
    # lr (1) + m_hat (4) + product (1) + sqrt of v_hat (5/2 + 1) + adding eps (1) + division (1), and the
    # seed's decimals drop eps (1e-8/5.5 relative, under one more U32): 12.5, so 13
    ("update", [-0.1, -0.1, -0.1, -0.1], 13),
]
SEED_W_NEW = [2.1, -2.9, 1.1, 0.6]  # w - update: the update's error plus one rounding of w
SEED_W_FP16 = [2.099609375, -2.900390625, 1.099609375, 0.60009765625]  # explanation/design.md: the fp16 copies


def seed_004_step():
    opt = Adam(lr=0.1, betas=(0.9, 0.999), eps=1e-8)
    w, g = np.array(SEED_W, np.float32), np.array(SEED_G, np.float32)
    state, record = {"m": np.zeros(4, np.float32), "v": np.zeros(4, np.float32)}, {}
    opt.step(w, g, state, 1, record)
    return w, state, record


@pytest.mark.parametrize("key, exact, k", SEED_004, ids=[r[0] for r in SEED_004])
def test_seed_004_adam_intermediates(key, exact, k):
    _, _, record = seed_004_step()
    got, exact = record[key].astype(np.float64), np.array(exact)
    assert record[key].dtype == np.float32
    assert np.all(np.abs(got - exact) <= gamma(k) * np.abs(exact)), (key, got - exact)


def test_seed_004_adam_weights_and_their_fp16_copies():
    w, state, record = seed_004_step()
    bound = gamma(13) * 0.1 + U32 * np.abs(SEED_W_NEW)  # the update's error (|update| = 0.1) + w's rounding
    assert np.all(np.abs(w.astype(np.float64) - SEED_W_NEW) <= bound)
    assert np.all(bound < 2 * np.abs(np.spacing(np.float32(SEED_W_NEW))))  # "a few ulps": under 2 here
    assert np.array_equal(cast(w, "fp16").astype(np.float64), SEED_W_FP16)
    assert np.array_equal(state["m"], record["m"]) and state["m"] is not record["m"]  # copies, not views


# ---------------------------------------------------------------------------------------------------
# Plain re-implementations, one element at a time, generic over the arithmetic `ar`.
class Exact64:
    """Python floats: IEEE double, each operation rounded once, exactly as NumPy float64 does."""

    const = staticmethod(float)  # a float64 coefficient is used as formed
    lift = staticmethod(float)
    sqrt = staticmethod(math.sqrt)

    @staticmethod
    def sign(x):
        return 0.0 if x == 0 else math.copysign(1.0, x)


class Bound:
    """x: the value computed in float64; e: a bound on |fp32 run - x|.

    Running error analysis (Higham, Accuracy and Stability of Numerical Algorithms, 2002, §3.3): each
    operation propagates its operands' bounds exactly, then adds the fp32 rounding of its result,
    U32 (|z| + e) + ETA32, and float64's own rounding of x, U64 |z|.
    """

    __slots__ = ("x", "e")

    def __init__(self, x, e=0.0):
        self.x, self.e = float(x), float(e)

    @staticmethod
    def _rounded(z, e):
        return Bound(z, e + U32 * (abs(z) + e) + ETA32 + U64 * abs(z))

    def __add__(self, o):
        o = _lift(o)
        return Bound._rounded(self.x + o.x, self.e + o.e)

    def __sub__(self, o):
        o = _lift(o)
        return Bound._rounded(self.x - o.x, self.e + o.e)

    def __mul__(self, o):
        o = _lift(o)
        return Bound._rounded(self.x * o.x, abs(self.x) * o.e + abs(o.x) * self.e + self.e * o.e)

    def __truediv__(self, o):
        o = _lift(o)
        assert abs(o.x) > o.e, "divisor's sign unknown: no bound"
        z = self.x / o.x
        return Bound._rounded(z, (self.e + abs(z) * o.e) / (abs(o.x) - o.e))

    __radd__, __rmul__ = __add__, __mul__

    def __rsub__(self, o):
        return _lift(o) - self

    def __rtruediv__(self, o):
        return _lift(o) / self


def _lift(x):
    return x if isinstance(x, Bound) else Bound(x)


class Bound32:
    """fp32 arithmetic as bounds: coefficients rounded once to fp32, inputs exact (they are fp32 values)."""

    lift = staticmethod(Bound)

    @staticmethod
    def const(c):
        return Bound(c, U32 * abs(c) + ETA32)

    @staticmethod
    def sqrt(b):
        r = math.sqrt(b.x)
        spread = max(r - math.sqrt(max(b.x - b.e, 0.0)), math.sqrt(b.x + b.e) - r)
        return Bound._rounded(r, spread)

    @staticmethod
    def sign(b):
        s = Exact64.sign(b.x)
        return Bound(s, 0.0 if abs(b.x) > b.e else 2.0)  # if fp32 may see the other sign, allow a flip


def ref_adam(ar, h, w, g, s, t):  # seed 001's Adam; AdamW shrinks w first (torch.optim.AdamW)
    K, (b1, b2) = ar.const, h["betas"]
    if "weight_decay" in h:
        w = w * K(1 - h["lr"] * h["weight_decay"])
    m = K(b1) * s["m"] + K(1 - b1) * g
    v = K(b2) * s["v"] + K(1 - b2) * (g * g)
    m_hat, v_hat = m / K(1 - b1**t), v / K(1 - b2**t)
    return w - K(h["lr"]) * m_hat / (ar.sqrt(v_hat) + K(h["eps"])), {"m": m, "v": v}


def ref_sgd(ar, h, w, g, s, t):  # PyTorch's heavy ball: b = mu b + g
    if not h["momentum"]:
        return w - ar.const(h["lr"]) * g, {}
    b = ar.const(h["momentum"]) * s["b"] + g
    return w - ar.const(h["lr"]) * b, {"b": b}


def ref_lion(ar, h, w, g, s, t):  # Chen et al. 2023, Algorithm 2
    K, (b1, b2) = ar.const, h["betas"]
    c = K(b1) * s["m"] + K(1 - b1) * g
    w = w - K(h["lr"]) * (ar.sign(c) + K(h["weight_decay"]) * w)
    return w, {"m": K(b2) * s["m"] + K(1 - b2) * g}


def ref_adan(ar, h, w, g, s, t):  # sail-sg/Adan's update, g_prev := g at t = 1
    K, (b1, b2, b3), lr = ar.const, h["betas"], h["lr"]
    d = g - (g if t == 1 else s["g_prev"])
    m = K(b1) * s["m"] + K(1 - b1) * g
    v = K(b2) * s["v"] + K(1 - b2) * d
    z = g + K(b2) * d
    n = K(b3) * s["n"] + K(1 - b3) * (z * z)
    denom = ar.sqrt(n) / K(math.sqrt(1 - b3**t)) + K(h["eps"])
    w = w - K(lr / (1 - b1**t)) * (m / denom)
    w = w - K(lr * b2 / (1 - b2**t)) * (v / denom)
    return w / K(1 + lr * h["weight_decay"]), {"m": m, "v": v, "n": n, "g_prev": g}


CASES = [
    # registry name, hyperparameters (off the defaults, so every term matters), re-implementation
    ("adam", dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8), ref_adam),
    ("adamw", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), ref_adam),
    ("sgd", dict(lr=0.1, momentum=0.0), ref_sgd),  # no state at all
    ("sgd", dict(lr=0.1, momentum=0.9), ref_sgd),
    ("lion", dict(lr=0.01, betas=(0.9, 0.99), weight_decay=0.1), ref_lion),
    ("adan", dict(lr=0.01, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.05), ref_adan),
]
CASE_IDS = [f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)]
STEPS, SIZE = 6, 48


def fp32_data(seed=7):
    """Initial weights and STEPS gradients, all fp32 values, as Python float lists."""
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(SIZE).astype(np.float32)
    grads = [(rng.standard_normal(SIZE) * rng.choice([1e-3, 1.0, 30.0])).astype(np.float32) for _ in range(STEPS)]
    return w0.tolist(), [g.tolist() for g in grads]


def run_reference(ar, ref, h, names, w0, grads):
    ws, states = [ar.lift(x) for x in w0], [{k: ar.lift(0.0) for k in names} for _ in w0]
    for t, g in enumerate(grads, 1):
        for i in range(len(ws)):
            ws[i], new = ref(ar, h, ws[i], ar.lift(g[i]), states[i], t)
            states[i].update(new)
    return ws, states


def run_zerosim(opt, dtype, w0, grads):
    w = np.array(w0, dtype)
    state = {k: np.zeros_like(w) for k in opt.state_names}
    for t, g in enumerate(grads, 1):
        opt.step(w, np.array(g, dtype), state, t)
    return w, state


@pytest.mark.parametrize("name, hyper, ref", CASES, ids=CASE_IDS)
def test_float64_run_equals_plain_reimplementation_bitwise(name, hyper, ref):
    opt = get_optimizer(name, **hyper)
    w0, grads = fp32_data()
    w, state = run_zerosim(opt, np.float64, w0, grads)
    ws, states = run_reference(Exact64, ref, hyper, opt.state_names, w0, grads)
    assert w.tolist() == ws  # same operations in the same order, each rounded once: exactly equal
    for k in opt.state_names:
        assert state[k].tolist() == [s[k] for s in states], k


@pytest.mark.parametrize("name, hyper, ref", CASES, ids=CASE_IDS)
def test_fp32_run_within_running_error_bound(name, hyper, ref):
    opt = get_optimizer(name, **hyper)
    w0, grads = fp32_data()
    w, state = run_zerosim(opt, np.float32, w0, grads)
    ws, states = run_reference(Bound32, ref, hyper, opt.state_names, w0, grads)
    for got, b in [(w, ws)] + [(state[k], [s[k] for s in states]) for k in opt.state_names]:
        center, bound = np.array([x.x for x in b]), np.array([x.e for x in b])
        assert np.all(np.abs(got.astype(np.float64) - center) <= bound)
    assert np.any(w.astype(np.float64) != np.array([x.x for x in ws]))  # fp32 really differs: not vacuous


def test_lion_moves_every_weight_by_exactly_lr():
    opt, w0, grads = get_optimizer("lion", lr=0.25), *fp32_data()
    w, record = np.array(w0, np.float32), {}
    opt.step(w, np.array(grads[0], np.float32), {"m": np.zeros(SIZE, np.float32)}, 1, record)
    assert set(np.abs(record["update"]).tolist()) <= {0.25, 0.0}  # sign(c) * lr: the whole point of Lion


# ---------------------------------------------------------------------------------------------------
ELEMENTWISE = [(n, h) for n, h, _ in CASES]
DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


@given(
    case=st.sampled_from(ELEMENTWISE),
    dtype=st.sampled_from(DTYPES),
    size=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    steps=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_sharding_never_changes_an_element(case, dtype, size, cuts, steps, seed):
    opt = get_optimizer(case[0], **case[1])
    rng = np.random.default_rng(seed)
    edges = sorted({0, size, *(c % (size + 1) for c in cuts)})
    w = cast(rng.standard_normal(size), dtype)
    state = {k: np.zeros(size, dtype) for k in opt.state_names}
    shards = [
        (w[lo:hi].copy(), {k: np.zeros(hi - lo, dtype) for k in opt.state_names}) for lo, hi in zip(edges, edges[1:])
    ]
    with np.errstate(all="ignore"):  # fp16's overflows and eps = 0 are lessons, not failures here
        for t in range(1, steps + 1):
            g = cast(rng.standard_normal(size) * 10.0 ** rng.integers(-3, 2), dtype)
            opt.step(w, g, state, t)
            for (ws, ss), lo, hi in zip(shards, edges, edges[1:]):  # each "rank" owns a contiguous copy
                opt.step(ws, g[lo:hi].copy(), ss, t)
    assert np.array_equal(bits(np.concatenate([s[0] for s in shards])), bits(w))
    for k in opt.state_names:
        assert np.array_equal(bits(np.concatenate([s[1][k] for s in shards])), bits(state[k])), k


# ---------------------------------------------------------------------------------------------------
STATE_BYTES_FP32 = [
    ("adam", {}, 8),  # seed 001: m and v in fp32, "8 bytes/param"
    ("adamw", {}, 8),  # the same state: decoupled decay needs none
    ("sgd", {}, 0),  # seed 001: plain SGD's "memory overhead is zero"
    ("sgd", {"momentum": 0.9}, 4),  # one momentum buffer
    ("lion", {}, 4),  # seed 001: "4 bytes/param for optimizer states"
    ("adan", {}, 16),  # seed 001: 12 for m, v, n, + g_prev (the seed's 2 in fp16; 4 here, like the fp32 grad)
    ("muon", {}, 4),  # one momentum matrix
]


@pytest.mark.parametrize("name, hyper, nbytes", STATE_BYTES_FP32)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_init_state_allocates_exactly_the_state_bytes(name, hyper, nbytes, dtype):
    opt, ledger, size = get_optimizer(name, **hyper), MemoryLedger(rank=0), 37
    assert opt.state_bytes_per_param(dtype) == nbytes * np.dtype(dtype).itemsize // 4
    state = opt.init_state(ledger, size, dtype, prefix="layer0.")
    assert sorted(state) == sorted(opt.state_names)
    optim_bytes = sum(ledger.current(k) for k in ledger.by_kind() if k.startswith("optim:"))
    assert optim_bytes == ledger.current() == opt.state_bytes_per_param(dtype) * size
    for n, buf in state.items():
        assert (buf.name, buf.kind, buf.shape, buf.dtype) == (f"layer0.{n}", f"optim:{n}", (size,), np.dtype(dtype))
        assert not buf.array.any()  # zero-filled: m_0 = v_0 = 0 is what bias correction assumes


def test_step_accepts_ledger_buffers():
    opt, ledger = Adam(lr=0.1), MemoryLedger(rank=0)
    state = opt.init_state(ledger, 4)
    w = np.array(SEED_W, np.float32)
    opt.step(w, np.array(SEED_G, np.float32), state, 1)
    assert np.array_equal(w, seed_004_step()[0]) and state["m"].array.any()


# ---------------------------------------------------------------------------------------------------
# Muon: Newton-Schulz maps G = U S V^T to U f^k(S/||G||_F) V^T, f(s) = a s + b s^3 + c s^5.
def poly_iterate(s, coefficients, steps=5):
    a, b, c = coefficients
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return s


NS_FLOAT64_TOL = 1e-10  # float64 products; the quintic's slope <= a = 3.4445 amplifies 5 times (488x): ~1e-12 seen
SHAPES = [(16, 32), (32, 16), (8, 64), (24, 24)]  # wide, tall (iterated transposed), very wide, square


@pytest.mark.parametrize("coefficients", [QUINTIC, CUBIC], ids=["quintic", "cubic"])
@pytest.mark.parametrize("shape", SHAPES)
def test_newton_schulz_acts_on_singular_values_as_the_polynomial(shape, coefficients):
    g = np.random.default_rng(3).standard_normal(shape)
    s_in = np.linalg.svd(g, compute_uv=False) / (np.linalg.norm(g) + 1e-7)
    s_out = np.linalg.svd(newton_schulz(g, 5, coefficients), compute_uv=False)
    assert np.allclose(np.sort(s_out), np.sort(poly_iterate(s_in, coefficients)), rtol=0, atol=NS_FLOAT64_TOL)


# The quintic does not converge to 1: it was tuned for the steepest slope at 0, and after 5 steps a
# normalised singular value in [s_min, 1] lands in the image of that interval under f^5. For s_min >=
# 0.01 that image is about [0.682, 1.134] (Keller Jordan describes it as "S' ~ Uniform(0.5, 1.5)").
QUINTIC_BAND = (0.68, 1.14)


@pytest.mark.parametrize("shape", [(16, 32), (32, 16), (8, 64)])  # rectangular Gaussians: s_min/||G|| > 0.01
def test_newton_schulz_output_is_orthogonal_within_the_quintic_band(shape):
    g = np.random.default_rng(5).standard_normal(shape)
    s_in = np.linalg.svd(g, compute_uv=False) / np.linalg.norm(g)
    assert s_in.min() > 0.01
    grid = poly_iterate(np.linspace(s_in.min(), 1.0, 100_001), QUINTIC)
    assert QUINTIC_BAND[0] <= grid.min() and grid.max() <= QUINTIC_BAND[1]  # the band, computed not assumed
    s_out = np.linalg.svd(newton_schulz(g), compute_uv=False)
    assert np.all((s_out >= grid.min() - NS_FLOAT64_TOL) & (s_out <= grid.max() + NS_FLOAT64_TOL))


@pytest.mark.parametrize("shape", SHAPES)
def test_newton_schulz_fp32_close_to_float64(shape):
    g = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    o32, o64 = newton_schulz(g), newton_schulz(g.astype(np.float64))
    assert o32.dtype == np.float32
    # A first-order estimate, not a proof: each of the 3 products per step has entries within gamma_k
    # (k = inner length <= 64) of exact, and a perturbation grows at most by the slope a = 3.4445 per step.
    k = max(shape)
    tol = 3 * gamma(k) * QUINTIC[0] ** 5 * np.abs(o64).max()
    assert np.abs(o32 - o64).max() <= tol


def ref_muon_matrix(w, b, g, h):
    """Keller Jordan's original muon.py in float64, Newton-Schulz written as X (aI + b XtX + c XtX^2)."""
    b = h["momentum"] * b + g
    u = g + h["momentum"] * b
    tall = u.shape[0] > u.shape[1]
    x = (u.T if tall else u) / (np.linalg.norm(u) + 1e-7)
    a_, b_, c_ = QUINTIC
    for _ in range(5):
        gram = x @ x.T
        x = a_ * x + b_ * (gram @ x) + c_ * (gram @ (gram @ x))
    o = x.T if tall else x
    w = w * (1 - h["lr"] * h["weight_decay"]) - h["lr"] * max(1, w.shape[0] / w.shape[1]) ** 0.5 * o
    return w, b


MUON_TOL = 1e-12  # float64, the products associated differently from zerosim's; ~1e-15 seen


@pytest.mark.parametrize("shape", [(12, 20), (20, 12)])  # the shape scale max(1, rows/cols)**0.5 is 1, then sqrt(5/3)
def test_muon_step_matrix_matches_reference_with_flat_ledger_state(shape):
    h = dict(lr=0.05, momentum=0.9, weight_decay=0.1)
    opt, ledger, rng = Muon(**h), MemoryLedger(rank=0), np.random.default_rng(2)
    state = opt.init_state(ledger, shape[0] * shape[1], np.float64)  # flat, as an engine allocates it
    w = rng.standard_normal(shape)
    w_ref, b_ref = w.copy(), np.zeros(shape)
    for t in range(1, 4):
        g = rng.standard_normal(shape)
        opt.step_matrix(w, g, state, t)
        w_ref, b_ref = ref_muon_matrix(w_ref, b_ref, g, h)
        assert np.abs(w - w_ref).max() <= MUON_TOL
        assert np.abs(state["b"].array.reshape(shape) - b_ref).max() <= MUON_TOL  # momentum reached the buffer


@pytest.mark.bad_input("optimizers")
def test_muon_refuses_flat_steps_and_sharded_stages():
    opt, w = Muon(), np.ones(6, np.float32)
    with pytest.raises(TypeError, match="step_matrix"):
        opt.step(w, w.copy(), {"b": np.zeros(6, np.float32)}, 1)
    assert np.array_equal(w, np.ones(6, np.float32))
    with pytest.raises(ValueError, match="2-D"):
        opt.step_matrix(w, w.copy(), {"b": np.zeros(6, np.float32)}, 1)
    # every stage: stages 1-3 shard its state and bring whole matrices together (parallel/data/muon)
    assert (opt.elementwise, opt.allowed_stages) == (False, (0, 1, 2, 3))
    assert "X X^T" in opt.why_not_sharded and "stages 1-3" in opt.why_not_sharded
    for stage in (0, 1, 2, 3):
        opt.check_stage(stage)
    with pytest.raises(ValueError, match="unknown Muon sharding 'ring'"):
        Muon(sharding="ring")
    with pytest.raises(ValueError, match="fp12"):
        Muon(gather="fp12")
    for name, cls in OPTIMIZERS.items():
        if name not in ("muon", "muon_adamw"):
            assert (cls.elementwise, cls.allowed_stages, cls.why_not_sharded) == (True, (0, 1, 2, 3), "")
            cls().check_stage(3)


# ---------------------------------------------------------------------------------------------------
# Refusals: clear errors, raised before anything is modified.
def _bad_calls(opt):
    """(description, kwargs for step, exception) for one optimizer; the first name of its state, if any."""
    w, g = np.linspace(-1, 1, 5, dtype=np.float32), np.linspace(2, 3, 5, dtype=np.float32)
    good = {k: np.full(5, 0.5, np.float32) for k in opt.state_names}
    first = opt.state_names[0] if opt.state_names else None
    calls = [
        ("t = 0", dict(t=0), ValueError),  # t counts from 1: 1 - b**0 = 0 would divide by zero
        ("t = -3", dict(t=-3), ValueError),
        ("t = 1.5", dict(t=1.5), TypeError),
        ("t = True", dict(t=True), TypeError),
        ("g shorter", dict(g=g[:4].copy()), ValueError),
        ("g in float64", dict(g=g.astype(np.float64)), ValueError),
        ("w a list", dict(w=[1.0] * 5), TypeError),
        ("w integer", dict(w=np.arange(5), g=np.arange(5)), ValueError),
        ("state with an extra name", dict(state={**good, "extra": np.zeros(5, np.float32)}), ValueError),
    ]
    if first:
        calls += [
            ("state missing a name", dict(state={k: a for k, a in good.items() if k != first}), ValueError),
            ("state in float64", dict(state={**good, first: good[first].astype(np.float64)}), ValueError),
            ("state too long", dict(state={**good, first: np.zeros(6, np.float32)}), ValueError),
        ]
    ro = w.copy()
    ro.flags.writeable = False
    calls.append(("w read-only", dict(w=ro), ValueError))
    return [(d, {"w": w, "g": g, "state": good, "t": 2, **kw}, exc) for d, kw, exc in calls]


@pytest.mark.bad_input("optimizers", unchanged=True)
@pytest.mark.parametrize("name, hyper", ELEMENTWISE, ids=CASE_IDS)
def test_bad_step_arguments_raise_before_mutation(name, hyper):
    opt = get_optimizer(name, **hyper)
    for what, kw, exc in _bad_calls(opt):
        arrays = [kw["w"], kw["g"], *kw["state"].values()]
        before = [np.array(a, copy=True) for a in arrays]
        with pytest.raises(exc):
            opt.step(**kw)
        for a, b in zip(arrays, before):
            assert np.array_equal(np.asarray(a), b), what


BAD_HYPER = [
    ("adam", {"lr": -0.1}),  # a negative lr climbs the loss
    ("adam", {"lr": float("nan")}),
    ("adam", {"betas": (0.9, 1.0)}),  # b2 = 1: v never moves from 0 and 1 - b2**t = 0
    ("adam", {"betas": (-0.1, 0.999)}),
    ("adam", {"betas": (0.9,)}),  # Adam has two betas
    ("adam", {"eps": -1e-8}),
    ("adamw", {"weight_decay": -0.01}),
    ("sgd", {"momentum": 1.0}),  # mu = 1: the buffer never forgets
    ("sgd", {"lr": True}),  # a bool is not a learning rate
    ("lion", {"betas": (0.9, 1.5)}),
    ("adan", {"betas": (0.98, 0.92)}),  # Adan has three
    ("muon", {"momentum": 1.0}),
    ("muon", {"ns_steps": -1}),
    ("muon", {"ns_coefficients": (1.5, -0.5)}),
    ("adagrad", {}),  # not in the registry
    ("adam", {"momentum": 0.9}),  # not one of Adam's hyperparameters
]


@pytest.mark.bad_input("optimizers")
@pytest.mark.parametrize("name, hyper", BAD_HYPER)
def test_bad_configuration_is_refused(name, hyper):
    with pytest.raises(ValueError):
        get_optimizer(name, **hyper)


def test_registry_and_list_betas():
    assert list(OPTIMIZERS) == ["adam", "adamw", "sgd", "lion", "adan", "muon", "muon_adamw"]
    assert all(cls.name == n for n, cls in OPTIMIZERS.items())
    assert get_optimizer("Adam", betas=[0.8, 0.9]).betas == (0.8, 0.9)  # lists become tuples: hashable, frozen
    with pytest.raises(ValueError, match="known: adam"):
        get_optimizer("adagrad")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_optimizer_scalars_are_rounded_once_and_the_cache_keeps_signed_zeros_apart(dtype):
    # optim/_base.py caches each rounded coefficient; the answer must be the one cast() gives from float64
    # whatever was asked before it: -0.0 and 0.0 compare equal (and hash alike) yet differ in the sign bit,
    # and 1 + 2**-8 + 2**-40 must round once (bf16: 1.0078125, not ml_dtypes' double-rounded 1.0).
    from zerosim.optim import scalar

    for x in (0.0, -0.0, 0.0, 1 + 2**-8 + 2**-40, 0.1, 1 - 0.9, 1, -(2**70)):
        got = scalar(x, cast(np.float64(0), dtype).dtype)
        want = cast(np.float64(x), dtype)[()]
        assert type(got) is type(want) and bits(np.asarray(got)) == bits(np.asarray(want)), x

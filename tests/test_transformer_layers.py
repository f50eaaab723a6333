"""Transformer pieces: every backward against float64 finite differences, the softmax backward against its
Jacobian, flash and standard attention within a derived bound of float64, saved_spec against the real
caches, and FLOP counts against hand-derived tables."""

import math

import numpy as np
import pytest

# Central differences and their tolerance (h = 1e-6, FD_TOL = 1e-6, derived there) from test_layers.py.
from test_layers import assert_fd_close, central_diff  # noqa: E402  (tests/ is on sys.path under pytest)

from zerosim.models import (
    AttentionBlock,
    Embedding,
    FFNBlock,
    LMCrossEntropy,
    LMHead,
    TransformerBlock,
    attention_backward,
    attention_forward,
    embedding_backward,
    embedding_forward,
    flash_attention_backward,
    flash_attention_forward,
    layernorm_backward,
    layernorm_forward,
    relu_backward,
    relu_forward,
    softmax_backward,
    softmax_forward,
)
from zerosim.models.gpt import pack_mask, unpack_mask
from zerosim.models.layers import attention_flops, flash_attention_flops, layernorm_output
from zerosim.precision import cast, get_format

FP64 = get_format("fp64")
U32 = 2.0**-24  # fp32 unit roundoff: every product and sum here accumulates in fp32


def check_unit_by_fd(unit, x, p):
    """A unit's backward (dx and every parameter gradient) against f = Σ r ⊙ forward(p, x), in float64."""
    rng = np.random.default_rng(11)
    y, cache = unit.forward(p, x, FP64)
    r = rng.standard_normal(y.shape)  # df/dy = r
    f = lambda: float(np.sum(r * unit.forward(p, x, FP64)[0]))
    dx, grads = unit.backward(p, r, cache, FP64)
    assert set(grads) == set(unit.param_shapes)
    if x.dtype.kind == "f":
        assert_fd_close(dx, central_diff(f, x))
    for name in p:
        assert_fd_close(grads[name], central_diff(f, p[name]))


def random_params(unit, rng, scale=0.5):
    """float64 params with O(1) entries (LN gains near 1), so every term of the backward matters."""
    return {
        k: (1.0 if k.endswith(".g") else 0.0) + scale * rng.standard_normal(s) for k, s in unit.param_shapes.items()
    }


# -- function pairs, float64 finite differences --------------------------------------------------

def test_embedding_backward_is_a_scatter_add():
    rng = np.random.default_rng(1)
    ids = np.array([[0, 3, 3, 1], [3, 0, 2, 2]])  # repeated tokens: their gradients must add up
    wte, wpe = rng.standard_normal((5, 3)), rng.standard_normal((6, 3))  # V = 5, L_max = 6 > L = 4
    y, cache = embedding_forward(ids, wte, wpe, FP64)
    r = rng.standard_normal(y.shape)
    f = lambda: float(np.sum(r * embedding_forward(ids, wte, wpe, FP64)[0]))
    dwte, dwpe = embedding_backward(r, cache, 5, 6, FP64)
    assert_fd_close(dwte, central_diff(f, wte))
    assert_fd_close(dwpe, central_diff(f, wpe))
    assert not dwte[4].any() and not dwpe[4:].any()  # token 4 unused, positions 4, 5 beyond L


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_embedding_backward_accumulates_in_fp32_and_rounds_once(fmt):
    # 1024 copies of token 0, each with gradient 1: a bf16 running sum would stall at 256 (256 + 1 is a
    # tie that rounds back to 256); the fp32 scatter-add reaches 1024, which both formats hold exactly.
    ids = np.zeros((4, 256), np.int64)
    dy = cast(np.ones((4, 256, 2)), fmt)
    dwte, dwpe = embedding_backward(dy, (ids,), 3, 256, fmt)
    assert dwte.dtype == get_format(fmt).dtype and float(dwte[0, 0]) == 1024.0 and float(dwpe[0, 0]) == 4.0


def test_layernorm_backward_matches_finite_differences():
    rng = np.random.default_rng(2)
    x = 2 + 3 * rng.standard_normal((2, 3, 5))  # (B, L, d), off-centre so the mean matters
    g, b = 1 + 0.5 * rng.standard_normal(5), rng.standard_normal(5)
    y, cache = layernorm_forward(x, g, b, FP64)
    r = rng.standard_normal(y.shape)
    f = lambda: float(np.sum(r * layernorm_forward(x, g, b, FP64)[0]))
    dx, dg, db = layernorm_backward(r, cache, g, FP64)
    for analytic, v in ((dx, x), (dg, g), (db, b)):
        assert_fd_close(analytic, central_diff(f, v))


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_layernorm_keeps_fp32_statistics_and_its_output_can_be_rebuilt_bitwise(fmt):
    x = cast(np.random.default_rng(3).standard_normal((2, 4, 8)), fmt)
    g, b = cast(np.linspace(0.5, 1.5, 8), fmt), cast(np.linspace(-1, 1, 8), fmt)
    y, cache = layernorm_forward(x, g, b, fmt)
    assert cache[0] is x and cache[1].dtype == cache[2].dtype == np.float32 and cache[1].shape == (2, 4)
    assert y.dtype == get_format(fmt).dtype and layernorm_output(cache, g, b, fmt).tobytes() == y.tobytes()


def test_softmax_backward_is_the_jacobian_product():
    # Seed 001 §5c B2: dS_i = J_iᵀ dP_i with J_i = diag(p_i) − p_i p_iᵀ, the row's full Jacobian.
    # Both sides are float64 sums of at most L = 6 terms of size <= max|dP|: they agree to
    # (2L + 4) u64 · Σ_k P_k |dP_k| <= 1e-14 here; 1e-13 tolerates.
    rng = np.random.default_rng(4)
    S = rng.standard_normal((2, 3, 6, 6))  # (B, H, L, L)
    dP = rng.standard_normal(S.shape)
    P = softmax_forward(S, FP64)
    assert np.all(np.triu(P, 1) == 0) and np.allclose(P.sum(-1), 1)  # causal rows that sum to 1
    dS = softmax_backward(dP, P, FP64)
    for idx in np.ndindex(S.shape[:-1]):
        p = P[idx]
        J = np.diag(p) - np.outer(p, p)  # ∂p_j/∂s_i = p_j (δ_ij − p_i)
        np.testing.assert_allclose(dS[idx], J.T @ dP[idx], rtol=0, atol=1e-13)


@pytest.mark.parametrize("kind", ["standard", "selective", "flash"])
def test_attention_backward_matches_finite_differences(kind):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 2, 7, 3)) for _ in range(3))  # (B, H, L, d_h); 7 keys in tiles of 3
    if kind == "flash":
        fwd = lambda: flash_attention_forward(q, k, v, FP64, block=3)
        bwd = lambda do, cache: flash_attention_backward(do, cache, FP64, block=3)
    else:
        fwd = lambda: attention_forward(q, k, v, FP64, keep_p=kind == "standard")
        bwd = lambda do, cache: attention_backward(do, cache, FP64)
    o, cache = fwd()
    assert (cache[3] is None) == (kind == "selective")
    r = rng.standard_normal(o.shape)
    f = lambda: float(np.sum(r * fwd()[0]))
    for analytic, x in zip(bwd(r, cache), (q, k, v)):
        assert_fd_close(analytic, central_diff(f, x))


def test_relu_mask_is_one_bit_per_element_and_gives_relus_backward():
    x1 = cast(np.random.default_rng(6).standard_normal((3, 5, 7)), "fp16")  # 105 elements
    x1[0, 0, :3] = [0.0, -0.0, 2.0**-24]  # the kink: zeros are off, the smallest subnormal is on
    bits = pack_mask(x1, "fp16")
    assert bits.dtype == np.uint8 and bits.shape == (14,)  # ceil(105 / 8) bytes
    assert np.array_equal(unpack_mask(bits, x1.shape), x1.astype(np.float32) > 0)
    dy = cast(np.random.default_rng(7).standard_normal(x1.shape), "fp16")
    by_mask = cast(dy, "fp16")
    by_mask[~unpack_mask(bits, x1.shape)] = 0
    assert by_mask.tobytes() == relu_backward(dy, relu_forward(x1, "fp16")[1], "fp16").tobytes()


# -- units, float64 finite differences -----------------------------------------------------------

UNITS = [
    *(AttentionBlock(8, 2, attention=a, block=3) for a in ("standard", "selective", "flash")),
    *(FFNBlock(8, activation=a) for a in ("gelu", "relu")),
    TransformerBlock(8, 2, activation="relu", attention="flash", block=2),
    TransformerBlock(8, 4, activation="gelu", attention="standard"),
    LMHead(8, 5),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit", UNITS, ids=lambda u: f"{type(u).__name__}-{getattr(u, 'attention', '')}-{getattr(u, 'activation', '')}"
)
def test_unit_backward_matches_finite_differences(unit):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 5, 8))  # (B, L, d)
    p = random_params(unit, rng)
    if getattr(unit, "activation", None) == "relu":
        # Premise: no ReLU input within 1e-3 of its kink, so no FD step (which moves x1 by < 1e-4) crosses it.
        _, cache = unit.forward(p, x, FP64)
        ln = layernorm_output(
            (cache["pre-FFN input"], cache["LN2 mean"], cache["LN2 rstd"]), p["ln2.g"], p["ln2.b"], FP64
        )
        assert np.abs(ln @ p["w1"].T + p["b1"]).min() > 1e-3
    check_unit_by_fd(unit, x, p)


def test_embedding_unit_backward_matches_finite_differences():
    unit = Embedding(vocab=5, max_len=6, d=4)
    check_unit_by_fd(unit, np.array([[0, 3, 3], [4, 1, 3]]), random_params(unit, np.random.default_rng(9)))


def test_lm_loss_is_the_mean_over_tokens_and_its_backward_matches_finite_differences():
    rng = np.random.default_rng(10)
    y = rng.standard_normal((2, 3, 4))  # (B, L, V)
    t = np.array([[0, 3, 1], [2, 2, 0]])
    loss, cache = LMCrossEntropy().forward(y, t)
    by_hand = np.mean([math.log(np.exp(y[b, i]).sum()) - y[b, i, t[b, i]] for b in range(2) for i in range(3)])
    assert loss == pytest.approx(by_hand, rel=1e-14)
    assert_fd_close(LMCrossEntropy().backward(cache, FP64), central_diff(lambda: LMCrossEntropy().forward(y, t)[0], y))


# -- selective = standard, bitwise ---------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_selective_attention_gives_standards_gradients_bitwise(fmt):
    rng = np.random.default_rng(12)
    standard, selective = (AttentionBlock(16, 4, attention=a) for a in ("standard", "selective"))
    p = {k: cast(v, fmt) for k, v in random_params(standard, rng, 0.3).items()}
    x, dy = cast(rng.standard_normal((2, 8, 16)), fmt), cast(rng.standard_normal((2, 8, 16)), fmt)
    (y1, c1), (y2, c2) = standard.forward(p, x, fmt), selective.forward(p, x, fmt)
    assert "P" in c1 and "P" not in c2 and y1.tobytes() == y2.tobytes()
    (dx1, g1), (dx2, g2) = standard.backward(p, dy, c1, fmt), selective.backward(p, dy, c2, fmt)
    assert dx1.tobytes() == dx2.tobytes() and all(g1[k].tobytes() == g2[k].tobytes() for k in g1)


# -- flash and standard attention against float64 -------------------------------------------------

def gamma(n, u=U32):
    """Higham's γ_n = n u / (1 − n u): the relative error bound of n roundings."""
    return n * u / (1 - n * u)


def attention_error_bound(q, k, v, do, fmt, n_tiles):
    """First-order bounds on |O − O64|, |dQ − dQ64|, |dK − dK64|, |dV − dV64| that hold for both algorithms.

    u is fmt's unit roundoff, γ_n = γ(n) in fp32 (every product accumulates in fp32). Each step takes the
    worse of the two algorithms' roundings (attention.py rounds S, P, O, dP, dS to fmt; flash keeps S, P,
    dP in fp32 but rounds P̃ and dS to fmt for its products and rescales by e^(m − m_new) once per tile):

      S:   e_S = (γ_{d_h+1} + u) A,  A = |Q||K|ᵀ/√d_h            (the products, the scale, S's rounding)
      P:   ε_P = e^{2δ} − 1 + γ_{L+4} + u + 4 T u32,  δ = max_j e_S per row
           (a shift of every score by <= δ moves P by a factor within e^{±2δ}; exp, max, sum, divide
           in fp32; P's rounding; T tiles' rescales e^(m − m_new) of 4 fp32 roundings each)
      O:   e_O = (ε_P + γ_{L+1} + u) P|V|
      dV:  e_dV = (ε_P + γ_{L+1} + 2u) Pᵀ|dO|                     (P rounded once more for flash's product)
      dP:  e_dP = (γ_{d_h} + u) |dO||V|ᵀ
      D:   e_D = Σ_j (ε_P P|dP| + P e_dP) + γ_{L+1} Σ_j P|dP|  +  Σ_c |dO| e_O + γ_{d_h} Σ_c |dO||O|
           (standard's rowsum(P ⊙ dP) plus flash's rowsum(dO ⊙ O): the sum bounds either)
      dS:  e_dS = ε_P P|dP − D| + P (e_dP + e_D) + 2 u32 P (|dP| + |D|) + u |dS|
      dQ:  e_dQ = (e_dS |K| + γ_{L+T+1} |dS||K|)/√d_h + u |dQ|,   dK likewise with Q

    Magnitudes are the float64 values. Products of two error terms are dropped; every ε here is below
    0.1 (bf16's u = 2⁻⁸ with |S| <= 3), so the factor 1.1 covers them.
    """
    u = get_format(fmt).unit_roundoff
    B, H, L, dh = q.shape
    c = 1 / math.sqrt(dh)
    q, k, v, do = (a.astype(np.float64) for a in (q, k, v, do))
    P = softmax_forward(q @ np.swapaxes(k, -1, -2) * c, FP64)  # (B, H, L, L) exact
    O, dP = P @ v, do @ np.swapaxes(v, -1, -2)
    D = (P * dP).sum(-1, keepdims=True)
    dS = P * (dP - D)
    visible = P > 0
    A = np.abs(q) @ np.abs(np.swapaxes(k, -1, -2)) * c
    delta = np.where(visible, (gamma(dh + 1) + u) * A, 0).max(-1, keepdims=True)
    eps_p = np.expm1(2 * delta) + gamma(L + 4) + u + 4 * n_tiles * U32
    e_O = (eps_p + gamma(L + 1) + u) * (P @ np.abs(v))
    e_dV = np.swapaxes(eps_p * P, -1, -2) @ np.abs(do) + (gamma(L + 1) + 2 * u) * (np.swapaxes(P, -1, -2) @ np.abs(do))
    e_dP = (gamma(dh) + u) * (np.abs(do) @ np.abs(np.swapaxes(v, -1, -2)))
    e_D = ((eps_p + gamma(L + 1)) * P * np.abs(dP) + P * e_dP).sum(-1, keepdims=True)
    e_D += (np.abs(do) * e_O + gamma(dh) * np.abs(do) * np.abs(O)).sum(-1, keepdims=True)
    e_dS = eps_p * P * np.abs(dP - D) + P * (e_dP + e_D) + 2 * U32 * P * (np.abs(dP) + np.abs(D)) + u * np.abs(dS)
    dQ, dK = dS @ k * c, np.swapaxes(dS, -1, -2) @ q * c
    e_dQ = (e_dS @ np.abs(k) + gamma(L + n_tiles + 1) * np.abs(dS) @ np.abs(k)) * c + u * np.abs(dQ)
    e_dK = (
        np.swapaxes(e_dS, -1, -2) @ np.abs(q) + gamma(L + 1) * np.swapaxes(np.abs(dS), -1, -2) @ np.abs(q)
    ) * c + u * np.abs(dK)
    exact = dict(O=O, dQ=dQ, dK=dK, dV=np.swapaxes(P, -1, -2) @ do)
    return exact, {name: 1.1 * e for name, e in dict(O=e_O, dQ=e_dQ, dK=e_dK, dV=e_dV).items()}


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_flash_and_standard_attention_are_within_the_derived_bound_of_float64(fmt):
    rng = np.random.default_rng(13)
    block = 4
    q, k, v, do = (cast(rng.standard_normal((2, 2, 11, 8)), fmt) for _ in range(4))  # 11 keys: tiles 4, 4, 3
    exact, bound = attention_error_bound(q, k, v, do, fmt, n_tiles=3)
    o_std, c_std = attention_forward(q, k, v, fmt)
    o_fl, c_fl = flash_attention_forward(q, k, v, fmt, block)
    got = {"standard": (o_std, *attention_backward(do, c_std, fmt)),
           "flash": (o_fl, *flash_attention_backward(do, c_fl, fmt, block))}
    for algo, values in got.items():
        for name, value in zip(("O", "dQ", "dK", "dV"), values):
            err = np.abs(value.astype(np.float64) - exact[name])
            assert np.all(err <= bound[name]), f"{algo} {name}: worst error / bound = {np.max(err / bound[name]):.3g}"
    # The bound has teeth: the two classic mistakes land outside it — the softmax backward without its
    # −D term (dS = P ⊙ dP), and attention that sees the future (no causal mask).
    q64, k64, v64, do64 = (a.astype(np.float64) for a in (q, k, v, do))
    S = q64 @ np.swapaxes(k64, -1, -2) / math.sqrt(8)
    P = softmax_forward(S, FP64)
    no_minus_d = (P * (do64 @ np.swapaxes(v64, -1, -2))) @ k64 / math.sqrt(8)
    assert np.any(np.abs(no_minus_d - exact["dQ"]) > bound["dQ"])
    e = np.exp(S - S.max(-1, keepdims=True))
    assert np.any(np.abs((e / e.sum(-1, keepdims=True)) @ v64 - exact["O"]) > bound["O"])
    # ... and the two algorithms really differ (another order of sums, P never rounded as a whole).
    assert any(a.tobytes() != b.tobytes() for a, b in zip(got["standard"], got["flash"]))


def test_flash_attention_saves_no_l_squared_buffer():
    q, k, v = (cast(np.ones((1, 2, 16, 4)), "fp16") for _ in range(3))
    _, cache = flash_attention_forward(q, k, v, "fp16", block=4)
    assert [a.shape for a in cache] == [(1, 2, 16, 4)] * 4 + [(1, 2, 16)] and cache[4].dtype == np.float32


# -- saved_spec is exactly the cache --------------------------------------------------------------

SPEC_UNITS = [
    *(AttentionBlock(12, 3, attention=a, block=4) for a in ("standard", "selective", "flash")),
    *(FFNBlock(12, activation=a) for a in ("gelu", "relu")),
    *(
        TransformerBlock(12, 2, activation=act, attention=a, block=4)
        for a in ("standard", "flash")
        for act in ("gelu", "relu")
    ),
    LMHead(12, 7),
]


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32", "fp64"])
@pytest.mark.parametrize("shape", [(1, 1, 12), (2, 5, 12), (3, 9, 12)])  # 3·9·48 = 1296 mask bits: 162 bytes
def test_saved_spec_is_exactly_what_forward_saves(shape, fmt):
    rng = np.random.default_rng(14)
    x = cast(rng.standard_normal(shape), fmt)
    for unit in SPEC_UNITS:
        p = {k: cast(v, fmt) for k, v in random_params(unit, rng, 0.2).items()}
        _, cache = unit.forward(p, x, fmt)
        got = [(name, a.shape, a.dtype) for name, a in cache.items()]
        assert got == [(name, s, d) for name, (s, d) in unit.saved_spec(shape, fmt).items()], unit
        assert next(iter(cache.values())) is x  # the input first: the driver reads x's shape from it
    emb = Embedding(7, 9, 12)
    ids = rng.integers(0, 7, shape[:2])
    _, cache = emb.forward({"wte": cast(np.ones((7, 12)), fmt), "wpe": cast(np.ones((9, 12)), fmt)}, ids, fmt)
    assert [(n, a.shape, a.dtype) for n, a in cache.items()] == [
        (n, s, d) for n, (s, d) in emb.saved_spec(shape[:2], fmt).items()
    ]


# -- FLOPs against hand-derived counts --------------------------------------------------------------

# B = 2, L = 8, d = 16, H = 4, d_h = 4: B·L = 16 tokens, B·H·L² = 512 scores, one (L x d_h x L)
# product for every (batch, head) is 2·B·H·L²·d_h = 4096 FLOPs; B·H·L·d_h = B·L·d = 256 elements.
FLOP_TABLE = [
    # attention core, standard, forward: S and PV (2 x 4096) + scale, max, subtract, exp, sum, divide (6 x 512)
    (lambda: attention_flops(2, 4, 8, 4, "forward"), 2 * 4096 + 6 * 512),
    # backward: dV, dP, dQ, dK (4 x 4096) + softmax backward (4 x 512) + dQ's and dK's 1/√d_h (2 x 256)
    (lambda: attention_flops(2, 4, 8, 4, "backward"), 4 * 4096 + 4 * 512 + 2 * 256),
    # selective backward: the above + S rebuilt (4096) and its softmax (6 x 512)
    (lambda: attention_flops(2, 4, 8, 4, "backward", "selective"), 4 * 4096 + 4 * 512 + 2 * 256 + 4096 + 6 * 512),
    # flash forward, tiles of 3 keys -> 3 tiles: 2 products + 5 per score + per tile (5 per row of the
    # B·H·L = 64 rows, 2 per element of O_acc) + O_acc/ℓ (256) + LSE (2 x 64)
    (
        lambda: flash_attention_flops(2, 4, 8, 4, "forward", 3),
        2 * 4096 + 5 * 512 + 3 * (5 * 64 + 2 * 256) + 256 + 2 * 64,
    ),
    # flash backward: D (2 x 256) + 5 per score + S, dV, dP, dK, dQ (5 x 4096) + dK's scale (256) + per tile dQ's scale
    # and add (2 x 256)
    (lambda: flash_attention_flops(2, 4, 8, 4, "backward", 3), 2 * 256 + 5 * 512 + 5 * 4096 + 256 + 3 * 2 * 256),
    # attention sub-block forward: LN1 (7 x 256) + QKV (2·16·16·48 + 48·16 bias) + core + W_o (2·16·16·16 + 256) +
    # residual (256)
    (
        lambda: AttentionBlock(16, 4).flops((2, 8, 16), "forward"),
        7 * 256 + (24576 + 768) + (8192 + 3072) + (8192 + 256) + 256,
    ),
    # backward: residual (256) + W_o (2 x 8192 + 256) + core + QKV (2 x 24576 + 768) + LN1 output rebuilt (2 x 256) +
    # LN1 (13 x 256)
    (
        lambda: AttentionBlock(16, 4).flops((2, 8, 16), "backward"),
        256 + (16384 + 256) + (16384 + 2048 + 512) + (49152 + 768) + 2 * 256 + 13 * 256,
    ),
    # FFN forward, GELU: LN2 (7 x 256) + W1 (2·16·16·64 + 16·64) + GELU (8 per element of 16 x 64) + W2 (32768 + 256) +
    # residual
    (
        lambda: FFNBlock(16, "gelu").flops((2, 8, 16), "forward"),
        7 * 256 + (32768 + 1024) + 8 * 1024 + (32768 + 256) + 256,
    ),
    # FFN backward, ReLU: residual + W2 (65536 + 256) + ReLU select (1024) + W1 (65536 + 1024) + LN2 rebuilt (512) + LN2
    # (13 x 256)
    (
        lambda: FFNBlock(16, "relu").flops((2, 8, 16), "backward"),
        256 + (65536 + 256) + 1024 + (65536 + 1024) + 512 + 13 * 256,
    ),
    # LM head forward, V = 10: LN_f (7 x 256) + logits (2·16·16·10, no bias)
    (lambda: LMHead(16, 10).flops((2, 8, 16), "forward"), 7 * 256 + 5120),
    # embedding: one add per output element forward; scatter-add into wte and add into wpe backward
    (lambda: Embedding(10, 8, 16).flops((2, 8), "forward"), 256),
    (lambda: Embedding(10, 8, 16).flops((2, 8), "backward"), 512),
]


@pytest.mark.parametrize("count, expected", FLOP_TABLE)
def test_flops_equal_the_hand_derived_counts(count, expected):
    assert count() == expected


def test_a_whole_block_counts_its_two_sub_blocks():
    for kind in ("forward", "backward"):
        whole = TransformerBlock(16, 4, "relu", "flash", block=3).flops((2, 8, 16), kind)
        assert whole == AttentionBlock(16, 4, "flash", block=3).flops((2, 8, 16), kind) + FFNBlock(16, "relu").flops(
            (2, 8, 16), kind
        )

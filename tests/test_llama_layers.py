"""Llama pieces: RMSNorm, rotary embeddings, repeat_kv, SwiGLU, grouped-query attention, the ends and the whole
decoder layer — every backward against float64 finite differences; the roundings where the forward rounds;
saved_spec against the real caches; FLOP counts against hand-derived tables."""

import math

import numpy as np
import pytest

# Central differences and their tolerance (h = 1e-6, FD_TOL = 1e-6, derived there) from test_layers.py.
from test_layers import assert_fd_close, central_diff  # noqa: E402  (tests/ is on sys.path under pytest)
from test_transformer_layers import check_unit_by_fd  # noqa: E402  (dx and every parameter gradient by FD)

from zerosim.models.layers import (
    rmsnorm_backward,
    rmsnorm_forward,
    rmsnorm_output,
    rope_backward,
    rope_forward,
    rope_tables,
)
from zerosim.models.llama import (
    LlamaAttention,
    LlamaBlock,
    LlamaHead,
    SwiGLUFFN,
    TokenEmbedding,
    repeat_kv,
    repeat_kv_backward,
    swiglu_backward,
    swiglu_forward,
    token_embedding_backward,
    token_embedding_forward,
)
from zerosim.precision import cast, get_format

FP64 = get_format("fp64")


def random_params(unit, rng, scale=0.5):
    """float64 params with O(1) entries (norm weights near 1), so every term of the backward matters."""
    return {
        k: (1.0 if k.endswith(".w") else 0.0) + scale * rng.standard_normal(s) for k, s in unit.param_shapes.items()
    }


# -- function pairs, float64 finite differences ---------------------------------------------------------


def test_rmsnorm_backward_matches_finite_differences():
    rng = np.random.default_rng(1)
    x = 2 + 3 * rng.standard_normal((2, 3, 5))  # (B, L, d), off-centre: RMSNorm does not subtract the mean
    w = 1 + 0.5 * rng.standard_normal(5)
    y, cache = rmsnorm_forward(x, w, FP64)
    r = rng.standard_normal(y.shape)
    f = lambda: float(np.sum(r * rmsnorm_forward(x, w, FP64)[0]))
    dx, dw = rmsnorm_backward(r, cache, w, FP64)
    assert_fd_close(dx, central_diff(f, x))
    assert_fd_close(dw, central_diff(f, w))


def test_rmsnorm_is_x_over_its_root_mean_square():
    # Against the definition in float64: y = w · x / sqrt(mean(x²) + eps), row by row.
    x = np.array([[3.0, 4.0], [1.0, -1.0]])
    y, (_, rstd) = rmsnorm_forward(x, np.array([1.0, 2.0]), FP64, eps=0.0)
    assert rstd.tolist() == [1 / math.sqrt(12.5), 1.0]
    np.testing.assert_allclose(y, [[3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], [1.0, -2.0]], rtol=1e-15)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_rmsnorm_statistics_are_fp32_and_the_output_rounds_as_llama_rmsnorm(fmt):
    # LlamaRMSNorm: x̂ in fp32, .to(input_dtype), then weight * x̂ in the 16-bit type: two roundings.
    rng = np.random.default_rng(2)
    x = cast(rng.standard_normal((2, 4, 8)), fmt)
    w = cast(1 + 0.3 * rng.standard_normal(8), fmt)
    y, (saved, rstd) = rmsnorm_forward(x, w, fmt)
    assert saved is x and rstd.dtype == np.float32 and rstd.shape == (2, 4)
    x32 = x.astype(np.float32)
    want_rstd = (1 / np.sqrt(np.square(x32).mean(-1, dtype=np.float32) + np.float32(1e-6))).astype(np.float32)
    assert rstd.tobytes() == want_rstd.tobytes()
    xhat = cast(x32 * want_rstd[..., None], fmt)  # the first rounding
    assert y.tobytes() == cast(w.astype(np.float32) * xhat.astype(np.float32), fmt).tobytes()  # the second
    assert rmsnorm_output((x, rstd), w, fmt).tobytes() == y.tobytes()  # rebuilt in backward, bitwise


def test_rope_backward_matches_finite_differences_and_is_the_inverse_rotation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 4))  # (B, H, L, d_h)
    cos, sin = rope_tables(5, 4, 10.0, FP64)  # a small θ: the angles move a lot between positions
    r = rng.standard_normal(x.shape)
    f = lambda: float(np.sum(r * rope_forward(x, cos, sin, FP64)))
    assert_fd_close(rope_backward(r, cos, sin, FP64), central_diff(f, x))
    # a rotation: its transpose undoes it, and it keeps every (i, i + d_h/2) pair's length
    np.testing.assert_allclose(rope_backward(rope_forward(x, cos, sin, FP64), cos, sin, FP64), x, rtol=0, atol=1e-14)
    y = rope_forward(x, cos, sin, FP64)
    np.testing.assert_allclose(y[..., :2] ** 2 + y[..., 2:] ** 2, x[..., :2] ** 2 + x[..., 2:] ** 2, rtol=1e-13)


def test_rope_tables_are_hf_s():
    # inv_freq[i] = 1/θ^(2i/d_h), freqs[t, i] = t·inv_freq[i], emb = cat(freqs, freqs): position 0 is the identity,
    # and pair i turns by t·θ^(-2i/d_h) at position t.
    cos, sin = rope_tables(3, 4, 100.0, FP64)
    assert cos[0].tolist() == [1.0] * 4 and sin[0].tolist() == [0.0] * 4
    np.testing.assert_allclose(sin[2], np.sin([2.0, 2 / 10, 2.0, 2 / 10]), rtol=1e-15)  # θ^(-2/4) = 1/10
    with pytest.raises(ValueError, match="head_dim must be even"):
        rope_tables(3, 5, 100.0, FP64)


def test_repeat_kv_hands_each_group_its_head_and_its_backward_sums_the_group():
    x = np.arange(2 * 2 * 1 * 3, dtype=np.float64).reshape(2, 2, 1, 3)  # (B, G = 2, L, d_h)
    rep = repeat_kv(x, 3)  # (B, 6, L, d_h): heads 0, 1, 2 read K/V head 0; heads 3, 4, 5 read head 1
    assert rep.shape == (2, 6, 1, 3) and all(np.array_equal(rep[:, h], x[:, h // 3]) for h in range(6))
    r = np.random.default_rng(4).standard_normal(rep.shape)
    f = lambda: float(np.sum(r * repeat_kv(x, 3)))
    assert_fd_close(repeat_kv_backward(r, 3, FP64), central_diff(f, x))


def test_repeat_kv_backward_sums_in_fp32_and_rounds_once():
    # Four heads' gradients 1, 2**-8, 2**-8, 2**-8 in bf16 (ulp(1) = 2**-7). Added one by one in bf16, each 2**-8
    # is a tie that rounds back to 1 (NumPy reduces ml_dtypes' bf16 in bf16, element by element); summed in fp32
    # they make 1 + 3·2**-8, a tie between 1 + 2**-7 and 1 + 2**-6 that rounds to the even 1 + 2**-6.
    dx = np.zeros((1, 4, 1, 1))
    dx[0, :, 0, 0] = [1.0, 2.0**-8, 2.0**-8, 2.0**-8]
    dx16 = cast(dx, "bf16")
    assert float(dx16.reshape(1, 1, 4, 1, 1).sum(axis=2)[0, 0, 0, 0]) == 1.0  # the 16-bit sum, for contrast
    assert float(repeat_kv_backward(dx16, 4, "bf16")[0, 0, 0, 0]) == 1 + 2.0**-6



def test_repeat_kv_on_data_less_arrays_gives_the_shapes_of_real_ones():
    # the meta backend's twins (context parallelism's gathered K/V and torch's dK/dV) call the same two functions:
    # (B, G, L, d_h) = (2, 2, 5, 3), n_rep 4 -> (2, 8, 5, 3), its dtype kept; backward -> (2, 2, 5, 3) in bf16 (the
    # format asked, as the real function's cast gives); n_rep 1 hands the array back unchanged, as the real one does
    from zerosim.precision.cast import MetaArray

    k = MetaArray((2, 2, 5, 3), np.float32)
    assert (repeat_kv(k, 4).shape, repeat_kv(k, 4).dtype, repeat_kv(k, 4).is_meta) == ((2, 8, 5, 3), np.float32, True)
    real = repeat_kv_backward(np.zeros((2, 8, 5, 3), np.float32), 4, "bf16")
    back = repeat_kv_backward(MetaArray((2, 8, 5, 3), np.float32), 4, "bf16")
    assert (back.shape, back.dtype, back.is_meta) == (real.shape, real.dtype, True) == ((2, 2, 5, 3), real.dtype, True)
    assert str(back.dtype) == "bfloat16" and repeat_kv(k, 1) is k and repeat_kv_backward(k, 1, "bf16") is k

def test_swiglu_backward_matches_finite_differences():
    rng = np.random.default_rng(5)
    gate, up = 2 * rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    r = rng.standard_normal(gate.shape)
    f = lambda: float(np.sum(r * swiglu_forward(gate, up, FP64)))
    dgate, dup = swiglu_backward(r, gate, up, FP64)
    assert_fd_close(dgate, central_diff(f, gate))
    assert_fd_close(dup, central_diff(f, up))


def test_token_embedding_backward_is_a_scatter_add():
    rng = np.random.default_rng(6)
    ids = np.array([[0, 3, 3, 1], [3, 0, 2, 2]])  # repeated tokens: their gradients add up
    wte = rng.standard_normal((5, 3))
    r = rng.standard_normal((2, 4, 3))
    f = lambda: float(np.sum(r * token_embedding_forward(ids, wte, FP64)))
    dwte = token_embedding_backward(r, ids, 5, FP64)
    assert_fd_close(dwte, central_diff(f, wte))
    assert not dwte[4].any()  # token 4 unused


def test_a_tied_head_s_gradient_is_the_sum_of_both_uses():
    # Tied embeddings (tie_word_embeddings): one W (V, d) both looks tokens up and makes the logits; its gradient
    # is the embedding's scatter-add plus the head's dyᵀ·x. zerosim's real models are untied (llama_ends.py);
    # this checks the arithmetic a tied head needs, with the very pairs the units use, against finite differences.
    rng = np.random.default_rng(7)
    ids, W = np.array([[1, 2, 2]]), rng.standard_normal((4, 3))
    head = LlamaHead(3, 4)
    p = {"norm.w": 1 + 0.3 * rng.standard_normal(3), "lm_head": W}
    r = rng.standard_normal((1, 3, 4))
    f = lambda: float(np.sum(r * head.forward(p, token_embedding_forward(ids, W, FP64), FP64)[0]))
    x = token_embedding_forward(ids, W, FP64)
    _, cache = head.forward(p, x, FP64)
    dx, grads = head.backward(p, r, cache, FP64)
    assert_fd_close(grads["lm_head"] + token_embedding_backward(dx, ids, 4, FP64), central_diff(f, W))


# -- units, float64 finite differences ---------------------------------------------------------------

UNITS = [
    *(LlamaAttention(8, 4, 2, attention=a, rope_theta=10.0, block=3) for a in ("standard", "selective", "flash")),
    LlamaAttention(8, 4, 1, head_dim=4, qkv_bias=True, rope_theta=10.0),  # multi-query, H·d_h = 16 ≠ d, Qwen2 biases
    LlamaAttention(8, 2, 2, o_bias=True, rope_theta=10.0),  # multi-head, Llama's attention_bias (o_proj too)
    SwiGLUFFN(8, 12),
    LlamaBlock(8, 4, 2, 2, 12, attention="flash", rope_theta=10.0, block=2),
    LlamaHead(8, 5),
]


@pytest.mark.parametrize(
    "unit", UNITS, ids=lambda u: f"{type(u).__name__}-{getattr(u, 'attention', '')}-{getattr(u, 'kv_heads', '')}"
)
def test_unit_backward_matches_finite_differences(unit):
    rng = np.random.default_rng(8)
    check_unit_by_fd(unit, rng.standard_normal((2, 5, 8)), random_params(unit, rng))


def test_token_embedding_unit_backward_matches_finite_differences():
    unit = TokenEmbedding(vocab=5, d=4)
    check_unit_by_fd(unit, np.array([[0, 3, 3], [4, 1, 3]]), random_params(unit, np.random.default_rng(9)))


@pytest.mark.parametrize(
    "unit", [u for u in UNITS if hasattr(u, "saved_spec")] + [TokenEmbedding(5, 8)], ids=lambda u: type(u).__name__
)
@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
def test_saved_spec_is_exactly_what_forward_saves(unit, fmt):
    rng = np.random.default_rng(10)
    x = rng.integers(0, 5, (2, 5)) if isinstance(unit, TokenEmbedding) else cast(rng.standard_normal((2, 5, 8)), fmt)
    p = {k: cast(v, fmt) for k, v in random_params(unit, rng, 0.2).items()}
    y, cache = unit.forward(p, x, fmt)
    assert {k: (a.shape, a.dtype) for k, a in cache.items()} == unit.saved_spec(x.shape, fmt)
    assert y.shape == unit.output_shape(x.shape)


def test_selective_attention_gives_standards_gradients_bitwise():
    rng = np.random.default_rng(11)
    standard, selective = (LlamaAttention(16, 4, 2, attention=a) for a in ("standard", "selective"))
    p = {k: cast(v, "bf16") for k, v in random_params(standard, rng, 0.3).items()}
    x, dy = cast(rng.standard_normal((2, 8, 16)), "bf16"), cast(rng.standard_normal((2, 8, 16)), "bf16")
    (y1, c1), (y2, c2) = standard.forward(p, x, "bf16"), selective.forward(p, x, "bf16")
    assert "P" in c1 and "P" not in c2 and y1.tobytes() == y2.tobytes()
    (dx1, g1), (dx2, g2) = standard.backward(p, dy, c1, "bf16"), selective.backward(p, dy, c2, "bf16")
    assert dx1.tobytes() == dx2.tobytes() and all(g1[k].tobytes() == g2[k].tobytes() for k in g1)


def test_gqa_with_one_group_per_head_is_multi_head_attention():
    # G = H: repeat_kv is the identity and its backward sums one term, so nothing rounds twice.
    rng = np.random.default_rng(12)
    unit = LlamaAttention(8, 2, 2)
    p = {k: cast(v, "fp16") for k, v in random_params(unit, rng, 0.3).items()}
    x = cast(rng.standard_normal((1, 4, 8)), "fp16")
    _, cache = unit.forward(p, x, "fp16")
    assert cache["K"].shape == cache["Q"].shape == (1, 2, 4, 4)


# -- FLOPs ----------------------------------------------------------------------------------------------


def test_flop_counts_follow_the_hand_derived_table():
    B, L, d, H, G, dh, F = 2, 5, 8, 4, 2, 2, 12
    rows = B * L
    attn = LlamaAttention(d, H, G, dh)
    gemm = 2 * B * H * L * L * dh  # one (L × d_h × L) product per (batch, head)
    qkv, o = 2 * rows * d * (H + 2 * G) * dh, 2 * rows * H * dh * d
    # forward: RMSNorm 4/elem, the QKV GEMM, rotary 3 per rotated element of Q and K, S and PV with the softmax
    # (6 per score), o_proj, the residual add
    fwd = 4 * rows * d + qkv + 3 * rows * (H + G) * dh + 2 * gemm + 6 * B * H * L * L + o + rows * d
    assert attn.flops((B, L, d), "forward") == fwd
    # backward: RMSNorm 9 + 2 (rebuilt output), both GEMMs twice, rotary 3, four core products, the softmax 4 per
    # score and the 1/√d_h of dQ and dK, the residual, and repeat_kv's sums: (n_rep − 1) adds per K and V element
    bwd = (
        11 * rows * d
        + 2 * qkv
        + 3 * rows * (H + G) * dh
        + 4 * gemm
        + 4 * B * H * L * L
        + 2 * B * H * L * dh
        + 2 * o
        + rows * d
        + 2 * (H // G - 1) * rows * G * dh
    )
    assert attn.flops((B, L, d), "backward") == bwd
    ffn = SwiGLUFFN(d, F)
    assert (
        ffn.flops((B, L, d), "forward")
        == 4 * rows * d + 2 * rows * d * 2 * F + 5 * rows * F + 2 * rows * F * d + rows * d
    )
    assert (
        ffn.flops((B, L, d), "backward")
        == 11 * rows * d + 4 * rows * d * 2 * F + 11 * rows * F + 4 * rows * F * d + rows * d
    )

"""The oracle's style "torch" (reference/_context.py: torch 2.13.0's context_parallel, as torchtitan runs it) checked
alone, without the engine: per CP position its attention output and gradients (`_torch_attention`) against

  1. exact attention: plain softmax attention over the whole sequence in float64, from the same Q, K, V and dO;
  2. a float64 re-computation of torch's own steps: the blocks by torch's rule (`_is_causal_behavior` and the three
     branches of `_templated_ring_attention`), each block's flash kernel run as the oracle runs it, then their
     outputs merged and their gradients summed in float64, where the merge's and the sums' order does not matter.
     What is left between the two is the fp32 rounding of the merge and of the sums and the casts to fmt, so the
     bound is tight (a wrong sign, a wrong row range, a step merged twice or not at all is far outside it).

And the record interface the engine's output end relies on: forward keeps `held` = the rank's own K/V repeated to H
heads, backward gives dK/dV at the G heads."""

from types import SimpleNamespace

import numpy as np
import pytest

from zerosim.models.layers import flash_attention_backward, flash_attention_forward
from zerosim.parallel.context import Ring, RingGrad
from zerosim.precision import cast, get_format
from zerosim.reference import ContextReference
from zerosim.reference._context import _positions, _torch_attention, _torch_steps

BLOCK = 3  # the flash kernel's key tile: smaller than a position's rows, so blocks span several tiles
CASES = [(C, split, causal) for C in (2, 4) for split, causal in
         (("zigzag", True), ("contiguous", True), ("contiguous", False))]
U = {"bf16": 2.0**-8, "fp32": 2.0**-24}  # a format's unit roundoff bound: |cast(x) − x| ≤ U·|x|


def drawn(C, split, fmt, seed, B=1, H=4, G=2, dh=4):
    """Per position Q (B, H, L_r, d_h), K, V (B, G, L_r, d_h) and dO, in fmt; `where` their tokens' positions."""
    L = 4 * C  # zigzag: 2C chunks of 2 tokens; contiguous: C chunks of 4
    rng = np.random.default_rng(seed)
    where = [_positions(L, split, C, c) for c in range(C)]
    f = get_format(fmt)

    def one(heads):
        return [cast(rng.standard_normal((B, heads, L // C, dh)), f) for _ in range(C)]

    return where, one(H), one(G), one(G), one(H)


def whole(parts, where):
    """Per-position arrays (.., L_r, d_h) put back in sequence order, float64."""
    out = np.zeros(parts[0].shape[:-2] + (sum(len(w) for w in where), parts[0].shape[-1]))
    for a, w in zip(parts, where):
        out[..., w, :] = a.astype(np.float64)
    return out


def exact(q, k, v, do, causal):
    """Softmax attention over the whole sequence and its gradients, float64, K/V of G heads shared by n_rep."""
    n_rep = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, n_rep, axis=1), np.repeat(v, n_rep, axis=1)
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(kr, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ vr
    dp = do @ np.swapaxes(vr, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = ds @ kr * scale
    dk, dv = np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ do

    def group(x):
        return x.reshape(x.shape[0], -1, n_rep, *x.shape[2:]).sum(axis=2)

    return o, dq, group(dk), group(dv)


def torch_rule(C, c, split, causal, L):
    """torch's blocks for position c, step by step: (source, query rows, key rows, causal) or None (SKIP)."""
    whole_, first, second = slice(0, L), slice(0, L // 2), slice(L // 2, L)
    for i in range(C):
        s = (c - i) % C
        if not causal:
            yield s, whole_, whole_, False
        elif i == 0:
            yield s, whole_, whole_, True
        elif split == "zigzag":
            yield (s, whole_, first, False) if i <= c else (s, second, whole_, False)
        elif s < c:
            yield s, whole_, whole_, False
        else:
            yield None


def recomputed(where, qs, ks, vs, dos, made, split, causal, fmt):
    """Float64 merge and sums of torch's blocks, each block run by the flash kernel; beside each value, the sum of
    the magnitudes it is made from (the fp32 sums' error bound scales with it). Backward runs against the oracle's
    own O and lse, as torch's does (its merged out and logsumexp)."""
    f, C = get_format(fmt), len(where)
    n_rep = qs[0].shape[1] // ks[0].shape[1]
    reps = [(np.repeat(k, n_rep, axis=1), np.repeat(v, n_rep, axis=1)) for k, v in zip(ks, vs)]
    L = len(where[0])
    res = []
    dkv = [[np.zeros(r[0].shape), np.zeros(r[0].shape), np.zeros(r[0].shape), np.zeros(r[0].shape)] for r in reps]
    for c in range(C):
        o_c, lse_c = made[c][0], made[c][1]
        outs = []
        dq, dq_mag = np.zeros(qs[c].shape), np.zeros(qs[c].shape)
        for step in torch_rule(C, c, split, causal, L):
            if step is None:
                continue
            s, rows, cols, mask = step
            k, v = reps[s][0][..., cols, :], reps[s][1][..., cols, :]
            out_i, (*_, lse_i) = flash_attention_forward(qs[c][..., rows, :], k, v, f, BLOCK, mask)
            outs.append((rows, out_i.astype(np.float64), lse_i.astype(np.float64)))
            dq_, dk_, dv_ = flash_attention_backward(dos[c][..., rows, :], (qs[c][..., rows, :], k, v,
                                                                            o_c[..., rows, :], lse_c[..., rows]),
                                                     f, BLOCK, mask)
            dq[..., rows, :] += dq_.astype(np.float64)
            dq_mag[..., rows, :] += np.abs(dq_.astype(np.float64))
            for j, g in ((0, dk_), (2, dv_)):
                dkv[s][j][..., cols, :] += g.astype(np.float64)
                dkv[s][j + 1][..., cols, :] += np.abs(g.astype(np.float64))
        lse = np.full(qs[c].shape[:-1], -np.inf)
        for rows, _, lse_i in outs:
            lse[..., rows] = np.logaddexp(lse[..., rows], lse_i)
        o = np.zeros(qs[c].shape)
        for rows, out_i, lse_i in outs:
            o[..., rows, :] += out_i * np.exp(lse_i - lse[..., rows])[..., None]
        res.append([o, lse, dq, dq_mag])

    def group(x):
        return x.reshape(x.shape[0], -1, n_rep, *x.shape[2:]).sum(axis=2)

    return [r + [group(d) for d in dkv[c]] for c, r in enumerate(res)]


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("C, split, causal", CASES)
def test_torch_style_equals_exact_attention(C, split, causal, fmt):
    """Tolerance, max error over the max magnitude of each result: a chain of a few roundings to fmt, each at most
    U(fmt) relative (P cast to fmt before P·V, O cast; dS cast before dQ, dK; each block's dQ/dK/dV cast before the
    fp32 sums; the final casts; repeat_kv's group sum cast again), with dS = P ⊙ (dP − D) a difference that can lose
    a few bits against the largest gradient: 16 U — 0.0625 for bf16, 1e-6 for fp32 (measured on these draws: at most
    2 U for bf16, 5.3 U for fp32; a sign flipped in the merge gives errors of order 1)."""
    where, qs, ks, vs, dos = drawn(C, split, fmt, seed=C)
    made = _torch_attention(qs, ks, vs, dos, where, causal, split, fmt, BLOCK)
    want = exact(*(whole(x, where) for x in (qs, ks, vs, dos)), causal)
    for i, name in enumerate(("O", "dQ", "dK", "dV")):
        got = whole([m[(0, 2, 3, 4)[i]] for m in made], where)
        err = np.abs(got - want[i]).max() / np.abs(want[i]).max()
        assert err <= 16 * U[fmt], (name, err)


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("C, split, causal", CASES)
def test_torch_style_equals_its_merge_and_sums_in_float64(C, split, causal, fmt):
    """Element by element against the float64 re-computation (order irrelevant there): what the oracle's fp32
    arithmetic may add is its merge's rounding (a few fp32 ops a step: 4C U(fp32) of the largest step output, lse's
    magnitude for lse) and its sums' ((n + 1) U(fp32) Σ|terms| over n ≤ C terms), then the casts to fmt (one for O:
    U(fmt)·|x|; one for dQ, doubled for slack; two for dK/dV beside GQA: cast, group sum, cast: 2 U(fmt)·Σ|x|, plus
    one U of slack). Measured on these draws: O up to 0.9 of its bound under bf16 (the cast itself), the rest ≤ 0.5."""
    where, qs, ks, vs, dos = drawn(C, split, fmt, seed=10 + C)
    made = _torch_attention(qs, ks, vs, dos, where, causal, split, fmt, BLOCK)
    ref = recomputed(where, qs, ks, vs, dos, made, split, causal, fmt)
    u, u32 = U[fmt], U["fp32"]
    for c in range(C):
        o, lse, dq, dk, dv = (m.astype(np.float64) for m in made[c])
        r_o, r_lse, r_dq, r_dq_mag, r_dk, r_dk_mag, r_dv, r_dv_mag = ref[c]
        step_max = np.abs(r_o).max() + 1  # every step's out is a convex mix of V's rows: |out_i| ≤ max|V| ≤ ~4
        assert np.all(np.abs(lse - r_lse) <= 4 * C * u32 * (np.abs(r_lse) + 1)), "lse"
        assert np.all(np.abs(o - r_o) <= u * np.abs(r_o) + 4 * C * u32 * 4 * step_max), "O"
        assert np.all(np.abs(dq - r_dq) <= 2 * u * np.abs(r_dq) + (C + 1) * u32 * r_dq_mag), "dQ"
        for name, got, want, mag in (("dK", dk, r_dk, r_dk_mag), ("dV", dv, r_dv, r_dv_mag)):
            assert np.all(np.abs(got - want) <= 3 * u * mag + (C + 1) * u32 * mag), name


@pytest.mark.parametrize("C", range(2, 9))
def test_zigzag_partial_is_torchs_i_greater_than_p(C):
    """With load balancing, a block whose rows are the second half (torch's `partial`) is exactly a step i > p, and
    its key rows the first half exactly where 0 < i ≤ p (the blocks `_block` finds from the tokens' positions)."""
    L = 4 * C
    where = [_positions(L, "zigzag", C, c) for c in range(C)]
    half = L // C // 2
    for c in range(C):
        for i, (s, rows, cols, mask) in enumerate(_torch_steps(where, c, True, "zigzag")):
            assert s == (c - i) % C
            assert (rows == slice(half, 2 * half)) == (i > c)
            assert (cols == slice(0, half)) == (0 < i <= c)
            assert mask == (i == 0)


@pytest.mark.parametrize("split, causal", [("zigzag", True), ("contiguous", True), ("contiguous", False)])
def test_the_records_hold_repeated_kv_and_give_g_head_gradients(split, causal):
    """Through ContextReference's own _forward/_backward: `held` is each rank's own K/V repeated to H heads (what the
    engine's output end keeps), dK/dV come back at G heads, and all equal `_torch_attention`'s bit for bit."""
    C, fmt = 2, "bf16"
    where, qs, ks, vs, dos = drawn(C, split, fmt, seed=3)
    oracle = object.__new__(ContextReference)
    oracle.cp = SimpleNamespace(style="torch", causal=causal, split=split)
    oracle.C, oracle.precision = C, SimpleNamespace(compute_format=get_format(fmt))
    unit = SimpleNamespace(n_rep=qs[0].shape[1] // ks[0].shape[1], block=BLOCK)
    passes = [SimpleNamespace(a=Ring(residual=None, q=q, kv=(k, v))) for q, k, v in zip(qs, ks, vs)]
    oracle._forward(passes, where, unit)
    for p, k, v in zip(passes, ks, vs):
        assert all(np.array_equal(h, np.repeat(x, unit.n_rep, axis=1)) for h, x in zip(p.a.held, (k, v)))
    for p, do in zip(passes, dos):
        a = p.a
        p.dy = RingGrad(residual=None, do=do, o=a.o, lse=a.lse, q=a.q, held=a.held)
    oracle._backward(passes, where, unit)
    made = _torch_attention(qs, ks, vs, dos, where, causal, split, fmt, BLOCK)
    for p, k, (o, lse, dq, dk, dv) in zip(passes, ks, made):
        assert p.dy.dk.shape == k.shape and p.dy.dv.shape == k.shape
        for got, want in ((p.dy.o, o), (p.dy.lse, lse), (p.dy.dq, dq), (p.dy.dk, dk), (p.dy.dv, dv)):
            assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))

"""The online-softmax merge of a 2-rank ring in bf16, by hand, against float64 and against single-pass attention
(issue 60, must-show 2): one query, one key per rank (L = 2, cp = 2, contiguous, both ways), d_h = 1 and q = 1, so the
scores are the keys; rank 0 attends to its own key at hop 0 and to rank 1's at hop 1, and merges as Transformer
Engine does (models/layers/_attention_merge.py): lse = max + log1p(exp(min − max)) in fp32, then
out = bf16(v0·e^(s0 − lse)), out = bf16(out + v1·e^(s1 − lse)). Single pass is one flash tile over both keys: p =
e^(s − max) in fp32, rounded to bf16 for the product, o = bf16((bf16(p0)·v0 + bf16(p1)·v1) / (p0 + p1)).

bf16 spacing: 2⁻⁹ = 0.001953125 in [0.25, 0.5), 2⁻⁸ = 0.00390625 in [0.5, 1), 2⁻⁷ = 0.0078125 in [1, 2).
fp32 values below are the portable kernels' correctly rounded exp and log1p (precision/arithmetic).
"""

import math

import numpy as np
import pytest

from zerosim import Cluster
from zerosim.models.layers import flash_attention_forward
from zerosim.models.layers import accumulate, correct_out, merge_lse
from zerosim.parallel.context import ring_attention
from zerosim.precision import cast

LN2_F32 = 0.6931471824645996  # fp32(ln 2); ln 2 = 0.6931471805599453
LSE_01_F32 = 1.3132617473602295  # 1 + log1p(e⁻¹) in fp32: e⁻¹ = 0.36787945, log1p -> 0.31326168776 (correctly
#                                  rounded), 1 + that = 1.31326168776 rounded up to 1.3132617474 (fp32 spacing 2⁻²³);
#                                  float64: ln(1 + e) = 1.3132616875 — the fp32 merge lands 6e-8 above it, on the
#                                  farther of its two fp32 neighbours (1.3132616282 is 0.8e-9 nearer)
LSE_0M_F32 = 0.3132616877555847  # 0 + log1p(e⁻¹) in fp32 (the add is exact); float64 ln(1 + e⁻¹) = 0.3132616875

# (s0, s1, v0, v1) -> (ring's output, single pass's output, bf16 nearest the float64 value, the ring's lse (fp32))
ROWS = {
    # equal scores: lse = 0 + log1p(e⁰) = fp32(ln 2); weights e^(−0.69314718) = 0.5 exactly in fp32 (0.49999999905
    # rounds to 0.5); ring 0.5 + 0.5 = 1; single pass (1·1 + 1·1)/2 = 1; exact 1: no difference anywhere
    (0.0, 0.0, 1.0, 1.0): (1.0, 1.0, 1.0, LN2_F32),
    # w0 = e^(0 − 1.3132617) = 0.2689414 (fp32; exact 1/(1+e) = 0.26894142), w1 = 0.7310585.
    # ring: bf16(1·0.2689414) = 0.26953125 (137.70 spacings of 2⁻⁹ -> 138: rounded UP by 6e-4), + 1.015625·0.7310585
    # = 1.0120126 -> 1.5376 spacings of 2⁻⁷ above 1 -> 1.015625. Exact 1.0114228 (1.4622 spacings) -> 1.0078125.
    # single pass: bf16(e⁻¹) = 0.3671875, (0.3671875 + 1.015625) / 1.3678794 = 1.0109171 (1.397) -> 1.0078125.
    # The ring's first rounding pushed it over the midpoint 1.01171875: ring wrong, single pass right
    (0.0, 1.0, 1.0, 1.015625): (1.015625, 1.0078125, 1.0078125, LSE_01_F32),
    # ring: bf16(1.015625·0.2689414 = 0.27314361) = 0.2734375 (139.85 -> 140), + 0.7310585 = 1.0044960 (0.5755
    # spacings) -> 1.0078125; exact 1.0042022 (0.5379) -> 1.0078125. Single pass: bf16(e⁻¹) = 0.3671875 rounded DOWN
    # 0.19 %, (0.3671875·1.015625 + 1) / 1.3678794 = 1.0036885 (0.4721) -> 1.0. Ring right, single pass wrong
    (0.0, 1.0, 1.015625, 1.0): (1.0078125, 1.0, 1.0078125, LSE_01_F32),
    # ring: bf16(2·0.2689414 = 0.5378828) = 0.5390625 (137.70 spacings of 2⁻⁸ -> 138), + 0.7310585 = 1.2701210
    # (34.5755 spacings) -> 1.2734375; exact 1.2689414 (34.4245) -> 1.265625; single pass (0.3671875·2 + 1) /
    # 1.3678794 = 1.2679198 (34.29) -> 1.265625. Ring wrong by a spacing, single pass right
    (0.0, 1.0, 2.0, 1.0): (1.2734375, 1.265625, 1.265625, LSE_01_F32),
    # the max is rank 0's own: lse = 0 + log1p(e⁻¹); w0 = e^(−0.3132617) = 0.7310586, ring bf16(0.7310586) = 0.73046875
    # (187.15 spacings of 2⁻⁸ -> 187: DOWN), + 1.015625·0.2689414 = 1.0036124 (0.4624) -> 1.0; single pass
    # (1 + 0.3671875·1.015625) / 1.3678794 = 1.0036885 -> 1.0; exact 1.0042022 -> 1.0078125. Both wrong, the same way
    (0.0, -1.0, 1.0, 1.015625): (1.0, 1.0, 1.0078125, LSE_0M_F32),
}


def two_ranks(s0, s1, v0, v1):
    """Rank 0's (ring output, ring lse) and the single pass's output, for q = 1, keys (s0, s1), values (v0, v1)."""
    q = cast(np.ones((1, 1, 2, 1)), "bf16")
    k, v = (cast(np.array(x, np.float64).reshape(1, 1, 2, 1), "bf16") for x in ((s0, s1), (v0, v1)))
    o, lse = ring_attention(Cluster(2), [q[:, :, :1], q[:, :, 1:]], [k[:, :, :1], k[:, :, 1:]],
                            [v[:, :, :1], v[:, :, 1:]], style="ring", split="contiguous", causal=False, fmt="bf16")
    single, _ = flash_attention_forward(q[:, :, :1], k, v, "bf16", causal=False)
    return float(o[0].ravel()[0]), float(lse[0].ravel()[0]), float(single.ravel()[0])


@pytest.mark.pinned
@pytest.mark.parametrize("row", list(ROWS), ids=lambda r: "s={},{} v={},{}".format(*r))
def test_the_two_rank_merge_is_the_hand_table(row):
    s0, s1, v0, v1 = row
    ring, single, nearest, lse = ROWS[row]
    got_ring, got_lse, got_single = two_ranks(*row)
    exact = (math.exp(s0) * v0 + math.exp(s1) * v1) / (math.exp(s0) + math.exp(s1))  # float64
    assert (got_ring, got_single, got_lse) == (ring, single, lse)
    assert float(cast(np.float64(exact), "bf16")) == nearest  # the hand's bf16 nearest the float64 value
    assert abs(got_lse - (max(s0, s1) + math.log1p(math.exp(-abs(s0 - s1))))) <= 2**-23  # within an fp32 spacing


def test_the_ring_differs_from_single_pass_exactly_where_the_table_says():
    differs = {row: ring != single for row, (ring, single, _, _) in ROWS.items()}
    assert {row: two_ranks(*row)[0] != two_ranks(*row)[2] for row in ROWS} == differs
    assert sorted(differs.values()) == [False, False, True, True, True]  # the table has both kinds


# -- the merge kernels themselves ---------------------------------------------------------------------------------
def test_merging_two_halves_of_a_softmax_in_float64_is_the_whole():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    whole, (*_, lse) = flash_attention_forward(q, k, v, "fp64", causal=False)
    (a, (*_, la)), (b, (*_, lb)) = (flash_attention_forward(q, k[..., s, :], v[..., s, :], "fp64", causal=False)
                                    for s in (slice(0, 2), slice(2, 5)))
    merged_lse = merge_lse(la, lb, "fp64")
    merged = correct_out(correct_out(None, a, merged_lse, la, "fp64"), b, merged_lse, lb, "fp64")
    assert np.allclose(merged_lse, lse, rtol=0, atol=1e-14) and np.allclose(merged, whole, rtol=0, atol=1e-14)


def test_merge_on_a_row_range_leaves_the_other_rows_alone():
    lse = np.array([[[1.0, 2.0, 3.0, 4.0]]], np.float32)
    out = merge_lse(lse, np.array([[[0.0, 0.0]]], np.float32), "bf16", slice(2, 4))
    assert out[..., :2].tolist() == lse[..., :2].tolist() and np.all(out[..., 2:] > lse[..., 2:])


def test_the_first_write_copies_and_keeps_minus_zero():
    """TE copies the first step's gradient in (dq.copy_(dq_)) and adds the rest in 16 bits: a −0 survives a copy,
    not an add to +0."""
    part = cast(np.array([-0.0, 1.0]), "bf16")
    first = accumulate(None, part, "bf16")
    assert np.signbit(first[0].astype(np.float32)) and first is not part
    assert not np.signbit(accumulate(cast(np.zeros(2), "bf16"), part, "bf16")[0].astype(np.float32))
    assert accumulate(cast(np.array([1.0, 1.0]), "bf16"), cast(np.array([2**-9, 2**-8]), "bf16"),
                      "bf16").astype(np.float32).tolist() == [1.0, 1.0]  # 1 + 2⁻⁹ and 1 + 2⁻⁸ (a tie) round to 1

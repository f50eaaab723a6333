"""Ring attention against torch's scaled_dot_product_attention in float64 (issue 60, must-show 3; the parity lane):
every rank's output of zerosim.parallel.context.ring_attention (the model's hops, sends and merge), put back in
sequence order, against torch.nn.functional.scaled_dot_product_attention over the whole sequence (is_causal,
enable_gqa), both in float64, for cp in {1, 2, 4}, the three styles, both splits, with and without the causal mask
(torch's style balances causal attention only). Each is
within a derived bound of exact attention (tests/test_context_bound.py's `ring_error_bound` at u = 2⁻⁵³; torch's
kernel bounded as a flash kernel of one tile a key, whatever blocking its CPU path takes), so they are within the sum
of the two bounds of each other. Needs the optional `parity` extra (torch); skipped, with the reason, without it."""

import math

import numpy as np
import pytest
from test_context_bound import CASES, hops_of, ring_error_bound, run

U64 = 2.0**-53


@pytest.mark.parametrize("C, style, split, causal", CASES, ids=lambda x: str(x))
def test_ring_attention_matches_torch_sdpa_in_float64(C, style, split, causal):
    torch = pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
    rng = np.random.default_rng(11)
    L, block = 16, 3
    q = rng.standard_normal((2, 4, L, 8))
    k, v = rng.standard_normal((2, 2, L, 8)), rng.standard_normal((2, 2, L, 8))  # GQA: 2 query heads a K/V head
    ours = run(q, k, v, C, style, split, causal, "fp64", block)
    theirs = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), is_causal=causal, enable_gqa=True).numpy()
    _, ring_bound = ring_error_bound(q, k, v, "fp64", hops_of(style, C), math.ceil(L / block), causal, acc=U64,
                                     style=style)
    _, torch_bound = ring_error_bound(q, k, v, "fp64", 1, L, causal, acc=U64)
    gap = np.abs(ours - theirs)
    assert np.all(gap <= ring_bound + torch_bound), float(np.max(gap / (ring_bound + torch_bound)))
    assert np.max(gap) < 1e-13  # what that means in numbers: a few float64 ulps of O(1) outputs


def test_the_torch_style_merge_is_torchs_own_sdpa_merger():
    """zerosim's `merge_sigmoid` against torch 2.13.0's own `_SDPAMerger` (convert_to_f32), four steps, the last two
    partial (the load-balanced second half of the rows), on CPU in fp32: within 4 fp32 ulps of each output and lse
    (the formula and its order are the same; the exp and log1p inside sigmoid and logsigmoid are each library's own:
    zerosim's correctly rounded, CPU torch's vectorised ones)."""
    torch = pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
    from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

    from zerosim.models.layers import merge_sigmoid

    rng = np.random.default_rng(5)
    B, H, L, dh = 2, 3, 8, 4
    merger, out, lse = _SDPAMerger(True, seq_dim=2), None, None
    for i, partial in enumerate((False, False, True, True)):
        rows = slice(L // 2, L) if partial else slice(0, L)
        n = rows.stop - rows.start
        out_i = rng.standard_normal((B, H, n, dh)).astype(np.float32)
        lse_i = (rng.standard_normal((B, H, n)) * 3).astype(np.float32)
        merger.step(torch.from_numpy(out_i), torch.from_numpy(lse_i), partial)
        out, lse = merge_sigmoid(out, lse, out_i, lse_i, "fp32", rows)
    theirs_out, theirs_lse = (t.numpy() for t in merger.results())
    for ours, theirs in ((out, theirs_out), (lse, theirs_lse)):
        ulps = np.abs(ours - theirs) / np.spacing(np.maximum(np.abs(ours), np.abs(theirs)))
        assert ulps.max() <= 4, float(ulps.max())

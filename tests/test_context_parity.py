"""Ring attention against torch's scaled_dot_product_attention in float64 (issue 60, must-show 3; the parity lane):
every rank's output of zerosim.parallel.context.ring_attention (the model's hops, sends and merge), put back in
sequence order, against torch.nn.functional.scaled_dot_product_attention over the whole sequence (is_causal,
enable_gqa), both in float64, for cp in {1, 2, 4}, both styles, both splits, with and without the causal mask. Each is
within a derived bound of exact attention (tests/test_context_bound.py's `ring_error_bound` at u = 2⁻⁵³; torch's
kernel bounded as a flash kernel of one tile a key, whatever blocking its CPU path takes), so they are within the sum
of the two bounds of each other. Needs the optional `parity` extra (torch); skipped, with the reason, without it."""

import math

import numpy as np
import pytest
from test_context_bound import CASES, ring_error_bound, run

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
    _, ring_bound = ring_error_bound(q, k, v, "fp64", C if style == "ring" else 1, math.ceil(L / block), causal,
                                     acc=U64)
    _, torch_bound = ring_error_bound(q, k, v, "fp64", 1, L, causal, acc=U64)
    gap = np.abs(ours - theirs)
    assert np.all(gap <= ring_bound + torch_bound), float(np.max(gap / (ring_bound + torch_bound)))
    assert np.max(gap) < 1e-13  # what that means in numbers: a few float64 ulps of O(1) outputs

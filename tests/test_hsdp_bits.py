"""HSDP against FULL_SHARD on the same data: which bits differ (a table worked by hand), and how far each lands from
float64 as the replicate degree grows (measured, under a derived bound: zerosim/analysis/numerics/_mesh_error.py).

The table: 4 ranks on a 2 × 2 mesh, FSDP2's recipe, one element whose gradients on ranks 0..3 are given; the
optimizer reads their average. FULL_SHARD reduce-scatters over the world's ring: rank 0 owns the element, whose sum
starts at rank 1, ((g1 + g2) + g3) + g0. HSDP reduce-scatters within each node, (g1 + g0) and (g3 + g2), then
all-reduces across: A + B. FSDP2's divisions are powers of two here, so exact: for fp16 (N = 4) a pre-divide by
2 before the reduce-scatter and a post-divide by 2 after (`_get_gradient_divide_factors`); for bf16 NCCL's AVG,
×fl(1/4) = ×0.25 (FULL_SHARD), ×0.5 then ×0.5 (HSDP). Only the additions round, and in another order.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits

from zerosim import Cluster, Groups, all_reduce, get_precision, reduce_scatter
from zerosim.analysis.numerics import bound, depth, gamma, mesh_errors
from zerosim.parallel.data.multinode import replicate_op
from zerosim.parallel.data.recipes import GradientRecipe
from zerosim.parallel.data.recipes import _averaging as averaging
from zerosim.precision import cast

FSDP2 = GradientRecipe("fsdp2")
TABLE = [  # (reduce dtype, g0..g3, FULL_SHARD's average, HSDP's, the exact average)
    # fp16 (ulp 1 at 1024): halves [0.5, 1024, 0.5, 0.5]; FULL: 1024 + 0.5 = 1024.5 ties to 1024 (even), twice
    # more -> 1024, /2 = 512. HSDP: 0.5 + 1024 -> 1024; 0.5 + 0.5 = 1; 1024 + 1 = 1025, /2 = 512.5. Exact 2051/4.
    ("fp16", (1, 2048, 1, 1), 512.0, 512.5, 512.75),
    # fp16: halves [1024, 0.5, 0.5, 0.5]; FULL: 0.5 + 0.5 = 1, + 0.5 = 1.5, + 1024 = 1025.5 ties to 1026 (even),
    # /2 = 513. HSDP: 0.5 + 1024 -> 1024; 1; 1025, /2 = 512.5. Both 0.25 off, on opposite sides: other bits.
    ("fp16", (2048, 1, 1, 1), 513.0, 512.5, 512.75),
    # bf16 (ulp 0.5 at 64, 1 at 128): FULL ×0.25: [0.25, 64, 0.25, 0.25]: 64.25 ties to 64, three times -> 64.
    # HSDP ×0.5: [0.5, 128, 0.5, 0.5]: 128.5 ties to 128; 0.5 + 0.5 = 1; ×0.5: 64 + 0.5 = 64.5. Exact 259/4.
    ("bf16", (1, 256, 1, 1), 64.0, 64.5, 64.75),
    # bf16: FULL [64, 0.25, 0.25, 0.25]: 0.5, 0.75, 64.75 ties to 65 (even). HSDP [128, 0.5, 0.5, 0.5]:
    # 128.5 ties to 128; 1; 64 + 0.5 = 64.5. Both 0.25 off, on opposite sides.
    ("bf16", (256, 1, 1, 1), 65.0, 64.5, 64.75),
    # fp16, the order cannot matter: every partial sum exact (small integers): the same bits both ways
    ("fp16", (3, 5, 7, 9), 6.0, 6.0, 6.0),
]


def averaged(reduce: str, grads: list, hsdp: bool) -> float:
    """Element 0's fp32 average on rank 0, through the collectives on a 2 × 2 mesh as reduce_units calls them."""
    policy = get_precision(f"{reduce}-mixed")
    cluster, wire = Cluster(4, gpus_per_node=2), policy.reduce_format
    xs = [cast(np.array([g, 0.0, 0.0, 0.0]), policy.compute_format) for g in grads]  # (4,) per rank, element 0
    op = averaging.reduce_op(policy, 4, FSDP2)
    if hsdp:
        shard = Groups.blocks(4, 2)
        piece = reduce_scatter(cluster, xs, op=op, wire=wire, group=shard)  # rank 0: elements [0, 2)
        piece = all_reduce(cluster, list(piece), op=replicate_op(policy, FSDP2, 2, 2), wire=wire,
                           group=Groups.strided(4, 2))
    else:
        piece = reduce_scatter(cluster, xs, op=op, wire=wire)  # rank 0: element 0
    g = averaging.finish(averaging.after_reduce(piece[0], policy, 4, FSDP2), policy, 4, 1, 1.0, recipe=FSDP2)
    return float(g[0])


@pytest.mark.parametrize("reduce, grads, full, hsdp, exact", TABLE)
def test_a_2_by_2_hsdp_reduction_by_hand(reduce, grads, full, hsdp, exact):
    assert averaged(reduce, grads, hsdp=False) == full
    assert averaged(reduce, grads, hsdp=True) == hsdp
    assert sum(grads) / 4 == exact
    if full != hsdp:  # other bits, and each within its bound: γ_3 (FULL) and γ_2 (HSDP) of the magnitudes' average
        u = {"fp16": 2.0**-11, "bf16": 2.0**-8}[reduce]
        magnitude = sum(abs(g) for g in grads) / 4
        assert abs(full - exact) <= gamma(3, u) * magnitude and abs(hsdp - exact) <= gamma(2, u) * magnitude
        assert not np.array_equal(bits(np.float32(full)), bits(np.float32(hsdp)))


# -- measured against float64, as the replicate degree grows ----------------------------------------------------
REPLICAS = [1, 2, 4, 8, 16]
MEASURED = {  # (reduce, strategy): worst |ĝ − g| / A at R = 1, 2, 4, 8, 16 (S = 4, 2048 elements, seed 0),
    # rounded to two digits: what docs/explanation/many-nodes.md's table quotes
    ("fp16", "full_shard"): [1.1e-3, 9.7e-4, 1.0e-3, 1.3e-3, 9.7e-4],
    ("fp16", "hsdp"): [1.1e-3, 7.5e-4, 5.9e-4, 7.5e-4, 7.0e-4],
    ("bf16", "full_shard"): [7.6e-3, 7.6e-3, 8.7e-3, 9.4e-3, 9.3e-3],
    ("bf16", "hsdp"): [7.6e-3, 6.3e-3, 5.7e-3, 4.5e-3, 4.2e-3],
}


@pytest.mark.pinned
@pytest.mark.parametrize("reduce", ["fp16", "bf16"])
def test_the_error_against_float64_stays_under_its_bound_as_replicas_grow(reduce):
    """S = 4 ranks per node, R = 1..16 nodes: every element's error under γ_d·A (d = N − 1 for FULL_SHARD, S + R − 2
    for HSDP: each replica adds one rounding, not S). At R = 1 the two are one computation; beyond, HSDP's tree is
    shallower and lands closer (measured, seed 0) while FULL_SHARD's bound grows S times faster."""
    rows = {(e.strategy, e.replicas): e for e in mesh_errors(["full_shard", "hsdp"], reduce, 4, REPLICAS)}
    for (strategy, r), e in rows.items():
        assert e.worst <= e.bound == bound(strategy, reduce, 4, r, 1)
        assert f"{e.worst:.1e}" == f"{MEASURED[(reduce, strategy)][REPLICAS.index(r)]:.1e}"
    one, flat = rows[("hsdp", 1)], rows[("full_shard", 1)]
    assert (one.worst, one.rms, one.bound) == (flat.worst, flat.rms, flat.bound)  # R = 1: one computation
    assert all(rows[("hsdp", r)].rms < rows[("full_shard", r)].rms for r in REPLICAS[1:])
    assert [depth("full_shard", 4, r, 1) for r in REPLICAS] == [3, 7, 15, 31, 63]
    assert [depth("hsdp", 4, r, 1) for r in REPLICAS] == [3, 4, 6, 10, 18]


def test_partial_sums_kept_in_bf16_compound_over_micro_steps():
    """FSDP2 with set_requires_all_reduce(False) keeps the micro-steps' reduce-scatter outputs in reduce_dtype: in bf16
    each micro-step adds one rounding (depth S + R + K − 3), where HSDP's own accumulation runs in fp32. 2 × 2 mesh,
    K = 1, 4, 16: at K = 1 the two are one computation; at K = 16 the partial sums land 2.3× farther (rms); an fp32
    reduce_dtype leaves both within 2·10⁻⁸."""
    for K, ratio in ((1, 1.0), (4, 1.4), (16, 2.3)):
        hsdp, nosync = mesh_errors(["hsdp", "hsdp_no_sync"], "bf16", 2, [2], micro_steps=K)
        assert hsdp.worst <= hsdp.bound and nosync.worst <= nosync.bound
        assert round(nosync.rms / hsdp.rms, 1) == ratio
    for K in (1, 4, 16):
        for e in mesh_errors(["hsdp", "hsdp_no_sync"], "fp32", 2, [2], micro_steps=K):
            assert e.worst <= min(e.bound, 2e-8)

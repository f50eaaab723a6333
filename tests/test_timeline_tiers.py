"""Two link tiers on the timeline: each call costed on the link its groups use, one stream per tier.

Hand formulas, with NVLink 4 (β = 450e9 B/s, α = 3.4 µs) and InfiniBand NDR (β = 50e9 B/s, α = 14 µs), 8.4 µs a
call (NCCL's Ring + Simple figures, zerosim/analysis/costs/_links.py): one ring phase over n ranks on m nodes costs
base + (n − m)·α_nv + (m − 1)·α_ib + (busiest rank's bytes)/β of the slowest tier; base once per call.
"""

from __future__ import annotations

import numpy as np
import pytest

from zerosim import Cluster, all_reduce, reduce_scatter
from zerosim.analysis.costs import LINKS
from zerosim.analysis.timeline import Hardware, simulate

NV, IB = LINKS["nvlink4"], LINKS["ib_ndr"]
TWO_TIERS = Hardware("h100", "nvlink4", "fp16", inter_link="ib_ndr")


def test_each_call_runs_on_its_groups_link_and_the_two_tiers_overlap():
    """2 nodes × 4 GPUs, 8 ranks, L = 4096 fp16 elements (8192 bytes) per rank:
        reduce-scatter over the gpu groups (4 ranks in a node): 3 chunks of 1024 elements = 6144 B sent
            -> base + 3·α_nv + 6144 / β_nv
        all-reduce over the node groups (2 ranks across nodes): each phase 1 chunk of 2048 = 4096 B sent
            -> base + 1·α_ib + 4096 / β_ib, then 1·α_ib + 4096 / β_ib, one after the other on the inter-node stream
    Issued back to back with no compute between: the reduce-scatter and the all-reduce's first phase start
    together at 0, each on its own tier's stream."""
    cluster = Cluster(8, gpus_per_node=4, trace="call")
    xs = [np.ones(4096, np.float16)] * 8
    reduce_scatter(cluster, xs, group=cluster.mesh.groups("gpu"))
    all_reduce(cluster, xs, group=cluster.mesh.groups("node"))
    result = simulate(cluster.trace, TWO_TIERS)
    calls = result.track(0, "comm")
    rs, ar1, ar2 = ((iv.start, iv.end) for iv in calls)
    assert rs == (0.0, pytest.approx(NV.base + 3 * NV.alpha + 6144 / NV.bandwidth, rel=1e-12))
    phase = IB.alpha + 4096 / IB.bandwidth
    assert ar1 == (0.0, pytest.approx(IB.base + phase, rel=1e-12))
    assert ar2 == (pytest.approx(IB.base + phase, rel=1e-12), pytest.approx(IB.base + 2 * phase, rel=1e-12))
    # communication busy = the union of the two streams' calls, here the all-reduce's base + 2·phase
    assert result.comm_busy[0] == pytest.approx(IB.base + 2 * phase, rel=1e-12)
    assert result.exposed_comm[0] == pytest.approx(IB.base + 2 * phase, rel=1e-12)  # nothing computed


def test_a_world_ring_over_two_nodes_runs_at_infiniband_speed():
    """The world's ring over 2 × 4 ranks, as NCCL charges it: 6 steps inside nodes at α_nv, 1 between them at α_ib
    (nodes − 1), the bytes over the node's 4 NICs, 4·β_ib (below β_nv): base + 6·α_nv + α_ib + 7·(L/8)·2 B / 4β_ib."""
    cluster = Cluster(8, gpus_per_node=4, trace="call")
    reduce_scatter(cluster, [np.ones(4096, np.float16)] * 8)
    (iv,) = simulate(cluster.trace, TWO_TIERS).track(0, "comm")
    assert iv.end == pytest.approx(IB.base + 6 * NV.alpha + IB.alpha + 7 * 512 * 2 / (4 * IB.bandwidth), rel=1e-12)


def test_without_an_inter_link_a_mesh_trace_times_as_the_flat_one():
    """One link (no inter_link): every call on it, one stream: a mesh's trace gives the flat cluster's numbers."""
    times = []
    for gpus_per_node in (None, 4):
        cluster = Cluster(8, gpus_per_node=gpus_per_node, trace="call")
        xs = [np.ones(999, np.float32)] * 8
        reduce_scatter(cluster, xs)
        all_reduce(cluster, xs)
        result = simulate(cluster.trace, Hardware())
        times.append([(iv.start, iv.end) for iv in result.track(3, "comm")])
    assert times[0] == times[1]


def test_each_call_takes_call_time_of_its_own_fields_though_alike_calls_are_timed_once():
    """simulate times a call once per (collective, op, tier, world size, bytes, nodes): the fields `call_time` reads
    (a step's units make the same few calls again and again). Each call must still end exactly `call_time` after it
    starts, asked of that call: an all-reduce's two phases differ in `op` alone (the gather phase pays no base
    latency), the same calls repeat, and the world's ring crosses nodes beside the node groups' rings."""
    from zerosim.analysis.timeline._simulate import call_time, nodes_spanned

    cluster = Cluster(8, gpus_per_node=4, trace="call")
    xs = [np.ones(4096, np.float16)] * 8
    for _ in range(2):
        all_reduce(cluster, xs, group=cluster.mesh.groups("node"))
        reduce_scatter(cluster, xs, group=cluster.mesh.groups("gpu"))
        all_reduce(cluster, xs)
    result = simulate(cluster.trace, TWO_TIERS)
    checked = 0
    for iv in result.track(0, "comm"):
        ev = iv.event
        assert iv.end == iv.start + call_time(ev, result.call_bytes[ev.call], TWO_TIERS,
                                              nodes_spanned(cluster.trace, ev) if ev.tier == "inter-node" else 1)
        checked += 1
    assert checked == 2 * (2 + 1 + 2)  # every phase of every call


def test_overlapping_calls_merge_into_the_stretches_a_walk_over_them_finds():
    """Timeline's busy stretches (_result.py `_union`, NumPy's running maximum of the ends) are, bit for bit, what a
    walk over the calls in start order finds: a call that starts before the stretch so far has ended extends it, any
    other opens one. Random intervals on a coarse grid, so that ties, nesting and touching ends all occur."""
    from zerosim.analysis.timeline._result import _union

    def walk(starts, ends):
        out_s, out_e = [], []
        for a, b in sorted(zip(starts.tolist(), ends.tolist()), key=lambda ab: ab[0]):
            if out_e and a < out_e[-1]:
                out_e[-1] = max(out_e[-1], b)
            else:
                out_s.append(a)
                out_e.append(b)
        return out_s, out_e

    rng = np.random.default_rng(0)
    for _ in range(2000):
        k = int(rng.integers(0, 10))
        starts = rng.integers(0, 8, k) * 0.1
        ends = starts + rng.integers(0, 4, k) * 0.37
        got = _union(starts, ends)
        assert (got[0].tolist(), got[1].tolist()) == walk(starts, ends)

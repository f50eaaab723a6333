"""Meshes, process groups and collectives over them, against things you can see: the groups listed by hand,
each group's naive twin (summed in its own ring order, code that shares nothing with the ring), the flat
cluster's own run (a group of the whole world, and a 1 × N mesh, change nothing), and the link tier of every
hop counted by hand.

Letters: N ranks, G GPUs per node, n ranks per group, L elements per rank.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster, Groups, Mesh, all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.collectives import ShardLayout, naive_reduce

DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}


# -- the groups, by hand ---------------------------------------------------------------------------------
def test_a_2_by_4_mesh_lists_its_groups_as_torch_lays_them_out():
    mesh = Mesh((2, 4), ("node", "gpu"))
    assert mesh.groups("gpu").members == ((0, 1, 2, 3), (4, 5, 6, 7))  # within a node: ranks 4·node + gpu
    assert mesh.groups("node").members == ((0, 4), (1, 5), (2, 6), (3, 7))  # across nodes: one per GPU slot
    assert mesh.coordinates(6) == (1, 2)
    assert Groups.blocks(8, 4).members == mesh.groups("gpu").members  # FSDP2's shard dim, MiCS's shard groups
    assert Groups.strided(8, 4).members == mesh.groups("node").members  # ... and their replicate groups
    cube = Mesh((2, 2, 2), ("a", "b", "c"))  # a 3-D mesh: each dim's groups vary one coordinate
    assert cube.groups("b").members == ((0, 2), (1, 3), (4, 6), (5, 7))
    g = mesh.groups("node")
    assert (g.size, g.count, g.index(5), g.position(5), g.next(5), g.prev(1)) == (2, 4, 1, 1, 1, 5)
    assert Groups.world(4).is_world and not mesh.groups("gpu").is_world


def test_shifted_is_the_rank_k_places_on_along_each_ring():
    # groups listed by hand, each ring in its own order: (0, 4, 1, 5) then (2, 6, 3, 7); k places on is k steps of
    # next (back: of prev), every group's ring closing on itself
    g = Groups("hand", ((0, 4, 1, 5), (2, 6, 3, 7)))
    assert g.shifted(1) == (4, 5, 6, 7, 1, 0, 3, 2)  # rank r's next: 0 -> 4, 1 -> 5, 2 -> 6, 3 -> 7, 4 -> 1, ...
    assert g.shifted(-1) == (5, 4, 7, 6, 0, 1, 2, 3)  # its prev: 0 <- 5, 1 <- 4, ...
    assert g.shifted(2) == (1, 0, 3, 2, 5, 4, 7, 6) == g.shifted(-2)  # half a ring of 4, either way
    assert g.shifted(0) == g.shifted(4) == g.shifted(-8) == tuple(range(8))  # whole turns
    assert g.shifted(5) == g.shifted(1) and g.shifted(1) is g.shifted(1)  # made once a shift


def test_a_groups_tier_is_its_slowest_hop():
    # G = 4: the node groups' rings hop between nodes; the gpu groups' stay inside one; the world crosses twice
    mesh, G = Mesh((2, 4), ("node", "gpu")), 4
    assert mesh.groups("gpu").tier(G) == "intra-node" and mesh.groups("node").tier(G) == "inter-node"
    assert list(Groups.world(8).send_tiers(G)) == [False, False, False, True, False, False, False, True]
    assert Groups.blocks(8, 4).tier(None) == "intra-node"  # no topology: one node
    assert Groups.blocks(8, 4).nodes_spanned(2) == 2


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("make, message", [
    (lambda: Groups("x", ((0, 1), (2,))), "same number of ranks"),
    (lambda: Groups("x", ((0, 1), (1, 2))), "exactly once"),
    (lambda: Groups("x", ()), "at least one group"),
    (lambda: Mesh((2, 0), ("a", "b")), "positive integer"),
    (lambda: Mesh((2, 2), ("a", "a")), "distinct name"),
    (lambda: Mesh((2, 2), ("a", "b")).groups("c"), "no dim 'c'"),
    (lambda: Groups.blocks(6, 4), "does not divide"),
    (lambda: Cluster(6, gpus_per_node=4), "do not fill nodes"),
    (lambda: Cluster(4, gpus_per_node=0), "positive integer"),
])
def test_bad_groups_are_clear_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.bad_input("collectives", unchanged=True)
@pytest.mark.parametrize("group, exc, message", [
    (Groups.blocks(6, 3), ValueError, "covers 6 ranks but the cluster has 4"),
    ([(0, 1), (2, 3)], TypeError, "group must be a zerosim.cluster.Groups"),
])
def test_a_group_of_another_cluster_is_refused_before_anything_moves(group, exc, message):
    cluster = Cluster(4)
    for fn in (reduce_scatter, all_reduce, all_gather):
        with pytest.raises(exc, match=message):
            fn(cluster, [np.ones(4, np.float32)] * 4, group=group)
    with pytest.raises(exc, match=message):
        broadcast(cluster, [np.ones(4, np.float32)] * 4, 0, group=group)
    assert not cluster.trace.calls and not cluster.trace.events


# -- every group's ring = its naive twin ----------------------------------------------------------------
def groups_of(nodes: int, gpus: int, kind: str) -> Groups:
    n = nodes * gpus
    return {"gpu": Groups.blocks(n, gpus, "gpu"), "node": Groups.strided(n, gpus, "node"),
            "world": Groups.world(n), "reversed": Groups("reversed", tuple(g[::-1] for g in
                                                                           Groups.blocks(n, gpus).members))}[kind]


def inputs(seed: int, n: int, length: int, dtype) -> list:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, length)) * 10.0 ** rng.integers(-2, 2, (n, length))
    return [x[i].astype(dtype) for i in range(n)]


@given(nodes=st.integers(1, 3), gpus=st.integers(1, 4), kind=st.sampled_from(["gpu", "node", "world", "reversed"]),
       length=st.integers(0, 23), fmt=st.sampled_from(sorted(DTYPES)), seed=st.integers(0, 2**16),
       granularity=st.sampled_from(["hop", "call"]), op=st.sampled_from(["sum", "max", "avg_premul"]))
def test_each_groups_ring_equals_its_naive_twin_bit_for_bit(nodes, gpus, kind, length, fmt, seed, granularity, op):
    """reduce_scatter / all_reduce / all_gather over a Groups: each group's result is `naive_reduce` of its own
    members' inputs in its own ring order (position c+1 first), cut at the group's positions; "hop" runs the ring
    hop by hop, "call" the in-process twin (fast.py)."""
    group, n = groups_of(nodes, gpus, kind), nodes * gpus
    cluster = Cluster(n, gpus_per_node=gpus, trace=granularity)
    xs = inputs(seed, n, length, DTYPES[fmt])
    scattered = reduce_scatter(cluster, xs, op=op, group=group)
    reduced = all_reduce(cluster, xs, op=op, group=group)
    layout = ShardLayout(length, group.size)
    for members in group.members:
        want = naive_reduce([xs[r] for r in members], op=op)  # the group's own order: its members as listed
        for p, r in enumerate(members):
            assert np.array_equal(bits(scattered[r]), bits(want[slice(*layout.real_bounds(p))]))
            assert np.array_equal(bits(reduced[r]), bits(want))
    shards = [x[: length // 2] for x in xs]  # equal shards: the group's concatenation in ring order
    gathered = all_gather(cluster, shards, group=group)
    for members in group.members:
        want = np.concatenate([shards[r] for r in members])
        for r in members:
            assert np.array_equal(bits(gathered[r]), bits(want))


def test_broadcast_over_groups_copies_each_groups_root():
    cluster, group = Cluster(6), Groups.strided(6, 3)  # groups (0 3) (1 4) (2 5)
    xs = [np.full(3, r, np.float32) for r in range(6)]
    out = broadcast(cluster, xs, 1, group=group)  # position 1: ranks 3, 4, 5 are the roots
    assert [float(o[0]) for o in out] == [3, 4, 5, 3, 4, 5]


def test_counts_are_per_position_and_shared_by_every_group():
    cluster, group = Cluster(4), Groups.strided(4, 2)  # (0 2) (1 3)
    xs = [np.arange(5, dtype=np.float32) * (r + 1) for r in range(4)]
    out = reduce_scatter(cluster, xs, counts=(1, 4), group=group)  # position 0 owns 1 element, position 1 four
    assert [o.tolist() for o in out] == [[0.0], [0.0], [4.0, 8.0, 12.0, 16.0], [6.0, 12.0, 18.0, 24.0]]


# -- the flat cluster is the one-group case -------------------------------------------------------------
@pytest.mark.parametrize("granularity", ["hop", "call"])
def test_the_world_as_a_group_and_a_1_by_n_mesh_change_nothing(granularity):
    n, xs = 5, inputs(3, 5, 17, np.float16)
    flat, grouped, mesh = (Cluster(n, trace=granularity), Cluster(n, trace=granularity),
                           Cluster(n, trace=granularity, gpus_per_node=n))
    for cluster, group in ((flat, None), (grouped, Groups.world(n)), (mesh, mesh.mesh.groups("gpu"))):
        reduce_scatter(cluster, xs, group=group)
        all_reduce(cluster, xs, op="max", group=group)
        all_gather(cluster, [x[:3] for x in xs], group=group)
        broadcast(cluster, xs, 2, group=group)
    assert grouped.trace.events == flat.trace.events and grouped.trace.calls == flat.trace.calls
    # the 1 × N mesh's one node group is the world in rank order: the same hops and calls, all on one node
    assert mesh.trace.events == flat.trace.events and mesh.trace.calls == flat.trace.calls
    assert {c.group for c in mesh.trace.calls} == {"world"} and {c.tier for c in mesh.trace.calls} == {"intra-node"}


# -- the link tier of every hop -------------------------------------------------------------------------
def test_bytes_per_tier_equal_the_hand_count_on_a_2_by_4_mesh():
    """N = 8 ranks, G = 4, a reduce-scatter of L = 8·c fp32 elements, c = 3:
        world ring  every rank sends N−1 = 7 chunks of c elements (4 bytes); the hops 3→4 and 7→0 cross
                    nodes: inter = 2 · 7 · 3 · 4 = 168 bytes, intra = 6 · 7 · 3 · 4 = 504
        gpu groups  (0 1 2 3) (4 5 6 7): every hop stays in a node: intra = 8 · 3 · (L/4 = 6) · 4 = 576
        node groups (0 4) ...: every hop crosses: inter = 8 · 1 · (L/2 = 12) · 4 = 384"""
    cluster = Cluster(8, gpus_per_node=4)
    xs = [np.ones(24, np.float32)] * 8
    expected = {None: (504, 168), "gpu": (576, 0), "node": (0, 384)}
    for dim, (intra, inter) in expected.items():
        call = reduce_scatter(cluster, xs, group=None if dim is None else cluster.mesh.groups(dim)).handle[0]
        assert cluster.trace.bytes_by_tier(call) == {"intra-node": intra, "inter-node": inter}
    tiers = {(e.src, e.dst): e.tier for e in cluster.trace.select(call=0)}
    assert tiers[(3, 4)] == tiers[(7, 0)] == "inter-node" and tiers[(0, 1)] == "intra-node"
    assert [c.tier for c in cluster.trace.calls] == ["inter-node", "intra-node", "inter-node"]


@pytest.mark.parametrize("dim", [None, "gpu", "node"])
def test_the_meta_backends_closed_form_counts_each_tier_as_the_hosted_ranks_do(dim):
    """One representative rank records each ring in closed form; hosting every rank records every send: the
    bytes per tier, per rank and per collective agree."""
    clusters = [Cluster(16, backend="meta", gpus_per_node=4, trace="call", hosted=h) for h in ("representative",
                                                                                                  "all")]
    for cluster in clusters:
        group = None if dim is None else cluster.mesh.groups(dim)
        xs = [cluster.backend.empty(40, np.float16)] * cluster.local_size
        reduce_scatter(cluster, xs, group=group)
        all_gather(cluster, [x[:5] for x in xs], group=group)
    rep, everyone = (c.trace for c in clusters)
    assert rep.bytes_by_tier() == everyone.bytes_by_tier()
    assert rep.sent_totals(16) == everyone.sent_totals(16)
    assert rep.volume_by_collective() == everyone.volume_by_collective()

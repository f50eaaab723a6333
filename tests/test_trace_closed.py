"""Run-length encoded counts (cluster/_runs.py) and the closed-form bytes read from them (cluster/_closed.py), against
the plain tuples and the per-rank formula written out here.

The naive twins: a flat range's counts as a tuple, one min/max per rank (what FlatLayout.range_counts built before);
every rank's bytes as the closed form's own formula applied rank by rank, base less the chunk it skips.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster, Groups, all_gather, reduce_scatter
from zerosim.precision.cast import MetaArray
from zerosim.cluster import RunCounts
from zerosim.cluster import _closed as closed
from zerosim.collectives._shards import _bounds_of_counts, chunk_bounds


def naive_counts(a: int, b: int, shard: int, n: int) -> tuple:
    """|[a, b) ∩ [r·shard, (r+1)·shard)| for each rank r, one at a time."""
    return tuple(max(0, min(b, (r + 1) * shard) - max(a, r * shard)) for r in range(n))


@st.composite
def ranges(draw):
    n = draw(st.integers(1, 40))
    shard = draw(st.integers(1, 9))
    a = draw(st.integers(0, n * shard))
    b = draw(st.integers(a, n * shard))
    return a, b, shard, n


@given(ranges())
def test_run_counts_are_the_tuple_they_stand_for(case):
    a, b, shard, n = case
    want, got = naive_counts(*case), RunCounts.of_range(*case)
    assert got == want and want == got and tuple(got) == want and list(got) == list(want)
    assert hash(got) == hash(want) and len(got) == n and got.total == sum(want)
    assert [got[i] for i in range(-n, n)] == [want[i] for i in range(-n, n)] and got[1:3] == want[1:3]
    assert len(got.runs) <= 5  # zeros, head, whole shards, tail, zeros: whatever n is
    assert [(i, v) for i, v in enumerate(want) if v] == [(first + k, v) for first, v, r in got.nonzero()
                                                          for k in range(r)]
    bounds = chunk_bounds(None, got)
    assert bounds == _bounds_of_counts(want) and list(bounds) == list(_bounds_of_counts(want))
    assert [bounds[i] for i in range(n)] == list(_bounds_of_counts(want))


def test_a_window_of_a_huge_world_stays_small():
    counts = RunCounts.of_range(10**9, 3 * 10**9, 2**20, 2**16)  # 65,536 ranks: five runs, never 65,536 entries
    assert len(counts) == 2**16 and len(counts.runs) == 5 and counts.total == 2 * 10**9


def per_rank(sizes, itemsize, lag, group, world_size) -> list:
    """Each rank's bytes, rank by rank: every chunk of its ring but (p - lag + 1) mod n."""
    n, sizes = len(sizes), tuple(sizes)
    out = []
    for r in range(world_size):
        p = r if group is None else group.position(r)
        out.append((sum(sizes) - sizes[(p - lag + 1) % n]) * itemsize)
    return out


@given(case=ranges(), lag=st.sampled_from([0, 1]), grouped=st.booleans(), itemsize=st.sampled_from([1, 2, 4]))
def test_closed_form_bytes_equal_the_formula_rank_by_rank(case, lag, grouped, itemsize):
    a, b, shard, n = case
    group = Groups.blocks(3 * n, n) if grouped else None  # three rings of n side by side
    world = 3 * n if grouped else n
    for sizes in (RunCounts.of_range(*case), naive_counts(*case)):
        want = per_rank(sizes, itemsize, lag, group, world)
        assert closed.sent_by_every_rank(sizes, itemsize, lag, group, world).tolist() == want
        assert [closed.sent_by_one_rank(sizes, itemsize, lag, group, r) for r in range(world)] == want
        assert closed.busiest_bytes(sizes, itemsize) == (max(want) if n > 1 else want[0])


@given(n=st.sampled_from([4, 8]), seed=st.integers(0, 100), hosted=st.sampled_from(["representative", "all"]))
def test_a_meta_trace_answers_every_byte_question_as_the_hosted_one(n, seed, hosted):
    # the representative rank's trace keeps closed forms (run-length encoded sizes); hosting every rank records each
    # rank's summary event: both must give every rank's bytes, by tier and by collective, the same
    rng = np.random.default_rng(seed)
    a = int(rng.integers(0, 5 * n))
    b = int(rng.integers(a, 6 * n))
    counts = RunCounts.of_range(a, b, 6, n)
    traces = []
    for how in ("representative", hosted):
        c = Cluster(n, backend="meta", hosted=how, trace="call", gpus_per_node=2)
        xs = [MetaArray((counts.total,), np.float16) for _ in c.ranks]
        reduce_scatter(c, xs, counts=counts)
        all_gather(c, [MetaArray((counts[r.index],), np.float16) for r in c.ranks], counts=counts)
        traces.append(c.trace)
    rep, other = traces
    assert rep.sent_totals(n) == other.sent_totals(n)
    assert rep.bytes_by_tier() == other.bytes_by_tier() and rep.volume_by_collective() == other.volume_by_collective()
    assert [rep.bytes_sent(r) for r in range(n)] == [other.bytes_sent(r) for r in range(n)]


@given(case=ranges(), lag=st.sampled_from([0, 1]), rings=st.lists(st.booleans(), min_size=3, max_size=3),
       gpus_per_node=st.sampled_from([None, 1, 2, 3]))
def test_a_call_inside_a_scope_counts_its_own_ranks_alone(case, lag, rings, gpus_per_node):
    # three rings of n side by side (rank r in ring r // n, as a pipeline's stages lie); the call ran on the rings
    # marked True (`Trace.within`'s ranges): the others' ranks sent nothing in it
    a, b, shard, n = case
    group, world = Groups.blocks(3 * n, n), 3 * n
    scope = tuple((g * n, (g + 1) * n) for g in range(3) if rings[g])
    for sizes in (RunCounts.of_range(*case), naive_counts(*case)):
        want = [bytes_ if rings[r // n] else 0 for r, bytes_ in enumerate(per_rank(sizes, 2, lag, group, world))]
        assert closed.sent_by_every_rank(sizes, 2, lag, group, world, scope).tolist() == want
        assert [closed.sent_by_one_rank(sizes, 2, lag, group, r, scope) for r in range(world)] == want
        assert closed.volume(sizes, 2, lag, group, world, scope) == sum(want)
        node = (lambda r: r // gpus_per_node) if gpus_per_node else (lambda r: 0)
        inter = sum(w for r, w in enumerate(want) if node(r) != node(group.next(r)))
        assert closed.bytes_by_tier(sizes, 2, lag, group, world, gpus_per_node, scope) == (sum(want) - inter, inter)

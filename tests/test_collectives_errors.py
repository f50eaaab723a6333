"""Bad input to a collective is a clear ValueError/TypeError that names the problem, raised before
anything happens: no trace call or event, no ledger event, inputs untouched."""

from __future__ import annotations

import numpy as np
import pytest

from zerosim import Cluster, all_gather, all_reduce, broadcast, reduce_scatter

f32, f16 = np.float32, np.float16


def snapshot(cluster, arrays):
    return (
        len(cluster.trace.calls),
        len(cluster.trace.events),
        [(r.ledger.current(), r.ledger.peak(), len(r.ledger.timeline)) for r in cluster.ranks],
        [np.array(a, copy=True) for a in arrays] if isinstance(arrays, (list, tuple)) else np.array(arrays, copy=True),
    )


def assert_unchanged(before, after):
    assert before[:3] == after[:3]
    a, b = before[3], after[3]
    if isinstance(a, list):
        assert len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))
    else:
        assert np.array_equal(a, b)


def ones(n, length, dtype=f32):
    return [np.ones(length, dtype) for _ in range(n)]


rs, ag, ar = reduce_scatter, all_gather, all_reduce


def bc(root):
    return lambda c, x: broadcast(c, x, root=root)


def sizes(*ks):
    return [np.ones(k, f32) for k in ks]


# (case, world size, the call, its arrays, exception type, regex the message must match)
CASES = [
    # wrong number of arrays for the world size, or not a list at all
    ("rs too few arrays", 3, rs, ones(2, 6), ValueError, r"got 2 arrays.*world of 3"),
    ("ag too many arrays", 2, ag, ones(3, 2), ValueError, r"got 3 arrays.*world of 2"),
    ("ar too few arrays", 4, ar, ones(1, 4), ValueError, r"got 1 arrays.*world of 4"),
    ("bc too few arrays", 2, bc(0), ones(1, 4), ValueError, r"got 1 arrays"),
    ("rs not a list", 2, rs, np.ones((2, 4), f32), TypeError, r"list with one array per local rank"),
    # mismatched lengths / shapes
    ("rs lengths", 3, rs, sizes(4, 5, 4), ValueError, r"rank 1 has length 5 but rank 0 has 4"),
    ("ar lengths", 2, ar, sizes(4, 3), ValueError, r"rank 1 has (length 3|shape \(3,\)) but rank 0 has"),
    ("bc shapes", 2, bc(1), [np.ones((2, 2), f32), np.ones(4, f32)], ValueError, r"shape"),
    # mismatched dtypes
    ("rs dtypes", 2, rs, [np.ones(4, f32), np.ones(4, f16)], ValueError, r"rank 1 has dtype fp16 but rank 0 has fp32"),
    ("ag dtypes", 2, ag, [np.ones(2, f16), np.ones(2, f32)], ValueError, r"dtype"),
    ("bc dtypes", 2, bc(0), [np.ones(2, f16), np.ones(2, f32)], ValueError, r"dtype"),
    # not a float format zerosim knows
    ("rs integers", 2, rs, [np.ones(4, np.int64)] * 2, ValueError, r"rank 0.*int64"),
    ("rs python lists", 2, rs, [[1, 2], [3, 4]], ValueError, r"int64"),
    # non-1-D input where a flat buffer is needed
    ("rs 2-D", 2, rs, [np.ones((2, 3), f32)] * 2, ValueError, r"shape \(2, 3\).*flatten"),
    ("ag 2-D", 2, ag, [np.ones((1, 3), f32)] * 2, ValueError, r"flatten"),
    ("rs 0-D", 2, rs, [np.float32(1)] * 2, ValueError, r"flatten"),
    # unknown op / unknown format
    ("rs unknown op", 2, lambda c, x: rs(c, x, op="mean"), ones(2, 4), ValueError, r"unknown reduction op 'mean'"),
    ("ar unknown op", 2, lambda c, x: ar(c, x, op="prod"), ones(2, 4), ValueError, r"unknown reduction op 'prod'"),
    ("rs unknown wire", 2, lambda c, x: rs(c, x, wire="fp12"), ones(2, 4), ValueError, r"unknown floating-point format "
                                                                                       r"'fp12'"),
    ("ag unknown wire", 2, lambda c, x: ag(c, x, wire="tf32"), ones(2, 4), ValueError, r"unknown floating-point format "
                                                                                       r"'tf32'"),
    ("ar unknown wire", 2, lambda c, x: ar(c, x, wire="fp4"), ones(2, 4), ValueError, r"unknown floating-point format "
                                                                                      r"'fp4'"),
    # invalid all-gather shard sizes: neither all equal nor ceil(L/N) each with the short ones last
    ("ag short shard first", 3, ag, sizes(2, 1, 2), ValueError, r"mismatched shard sizes \[2, 1, 2\].*\[2, 2, 1\]"),
    ("ag growing shards", 3, ag, sizes(1, 2, 2), ValueError, r"mismatched shard sizes"),
    ("ag too-short tail", 4, ag, sizes(3, 3, 0, 0), ValueError, r"mismatched shard sizes"),
    # bad counts
    ("rs counts wrong number", 3, lambda c, x: rs(c, x, counts=[3, 3]), ones(3, 6), ValueError, r"counts must be 3 "
                                                                                                r"non-negative"),
    ("rs counts negative", 3, lambda c, x: rs(c, x, counts=[-1, 4, 3]), ones(3, 6), ValueError, r"non-negative"),
    ("rs counts wrong sum", 2, lambda c, x: rs(c, x, counts=[1, 1]), ones(2, 4), ValueError, r"add up to 2.*hold 4"),
    ("ag counts vs sizes", 2, lambda c, x: ag(c, x, counts=[2, 1]), sizes(1, 2), ValueError, r"sizes \[1, 2\]; counts "
                                                                                             r"say \[2, 1\]"),
    ("ag counts wrong number", 2, lambda c, x: ag(c, x, counts=[1, 1, 1]), ones(2, 1), ValueError, r"counts must be 2"),
    # bad broadcast root
    ("bc root negative", 3, bc(-1), ones(3, 2), ValueError, r"root must be a rank in 0..2, got -1"),
    ("bc root too big", 3, bc(3), ones(3, 2), ValueError, r"root.*got 3"),
    ("bc root float", 3, bc(1.0), ones(3, 2), ValueError, r"root.*got 1.0"),
    ("bc root string", 3, bc("0"), ones(3, 2), ValueError, r"root.*got '0'"),
    ("bc root bool", 3, bc(True), ones(3, 2), ValueError, r"root.*got True"),  # a bool is no rank (as for world_size)
]


@pytest.mark.bad_input("collectives", unchanged=True)
@pytest.mark.parametrize("what, n, call, arrays, exc, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error_and_changes_nothing(what, n, call, arrays, exc, message):
    c = Cluster(n)
    before = snapshot(c, arrays)
    with pytest.raises(exc, match=message):
        call(c, arrays)
    assert_unchanged(before, snapshot(c, arrays))


def test_numpy_integer_root_is_a_rank():
    out = broadcast(Cluster(3), [np.arange(2, dtype=f32) * r for r in range(3)], root=np.int64(2))
    assert all(np.array_equal(o, [0.0, 2.0]) for o in out)


@pytest.mark.bad_input("collectives")
@pytest.mark.parametrize("collective", [reduce_scatter, all_gather, all_reduce])
def test_a_wrong_array_count_is_refused_before_anything_is_recorded(collective):
    c = Cluster(2)
    with pytest.raises(ValueError, match="got 1 arrays"):
        collective(c, ones(1, 4))
    assert c.trace.calls == []


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", True, None])
def test_world_size_must_be_a_positive_int(bad):
    with pytest.raises((ValueError, TypeError), match="world_size must be a positive integer"):
        Cluster(bad)


@pytest.mark.bad_input("cluster and backends")
def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        Cluster(2, backend="tpu")


@pytest.mark.bad_input("collectives")
def test_non_integer_counts_are_rejected():
    """Regression (found while writing these tests): counts used to go through int(), which truncates,
    so counts=[1.5, 2.5] became [1, 2], added up to the buffer's 3 elements, and were accepted."""
    c = Cluster(2)
    x = ones(2, 3)
    before = snapshot(c, x)
    with pytest.raises((ValueError, TypeError), match="counts"):
        reduce_scatter(c, x, counts=[1.5, 2.5])
    assert_unchanged(before, snapshot(c, x))


def test_all_reduce_does_not_hand_a_rank_another_ranks_shape():
    """Found while writing these tests (zerosim/collectives/_ring.py, all_reduce): shapes (2, 3) and
    (3, 2) have the same length, so they passed the length check, and every result was reshaped to
    rank 0's shape: rank 1 got back a (2, 3) array for its (3, 2) input. "Returned as given" asks for
    an error here (the arrays are not the same tensor), as broadcast already gives for shapes."""
    c = Cluster(2)
    x = [np.ones((2, 3), f32), np.ones((3, 2), f32)]
    before = snapshot(c, x)
    with pytest.raises(ValueError, match="shape"):
        all_reduce(c, x)
    assert_unchanged(before, snapshot(c, x))

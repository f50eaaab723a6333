"""The facts exact_matmul's cheap proofs read from an operand's bits (precision/arithmetic/_extents.py), the bound over
whole operands, the operands kept across products (_operand_cache.py) and the sorted search for unsure elements
(`_unsure_sorted`, beside its naive twin `_unsure`).

References are independent of the code under test: the largest magnitude and the last bit of the smallest nonzero
value found in float64 from the widened values, every bit pattern of each 16- and 8-bit format; exactness checked
against test_exact_matmul's rational sums.
"""

import contextlib
import dataclasses
import math
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st
from test_exact_matmul import reference

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
from zerosim.models import make_regression
from zerosim.precision import get_precision
from zerosim.precision.arithmetic import _exact_matmul, _extents, _kernels, _operand_cache, _rank_products, exact_matmul

pytestmark = pytest.mark.pinned  # bits that must be the same on every machine
NARROW = {"bf16": (ml_dtypes.bfloat16, 8), "fp16": (np.float16, 11), "fp8_e4m3": (ml_dtypes.float8_e4m3fn, 4),
          "fp8_e5m2": (ml_dtypes.float8_e5m2, 3)}  # dtype, precision p (significant bits)


def finite_patterns(dtype) -> np.ndarray:
    """Every finite value of a 16- or 8-bit format, once each, in a random order (both zeros included)."""
    width = np.dtype(dtype).itemsize * 8
    every = np.arange(2**width, dtype=f"uint{width}").view(dtype)
    with np.errstate(invalid="ignore"):
        finite = every[np.isfinite(every.astype(np.float64))]
    return np.random.default_rng(width).permutation(finite)


def want(line64: np.ndarray, p: int) -> tuple[float, float]:
    """(max|x|, 2**(e - p) for the smallest nonzero |x| = m·2**e, m in [0.5, 1), or +inf if none), by hand."""
    magnitudes = [abs(float(v)) for v in line64]
    nonzero = [v for v in magnitudes if v != 0]
    return max(magnitudes), math.ldexp(1.0, math.frexp(min(nonzero))[1] - p) if nonzero else math.inf


@pytest.mark.parametrize("name", NARROW)
def test_facts_by_row_and_column_match_the_widened_values_for_every_bit_pattern(name):
    dtype, p = NARROW[name]
    values = finite_patterns(dtype)
    x = values[: (len(values) // 64) * 64].reshape(-1, 64)  # every finite pattern but a few, 64 to a row
    x[1, :] = 0  # a row of zeros: q is +inf
    x64 = x.astype(np.float64)
    for axis in (-1, -2):
        largest, q = _extents.extents(x, axis)
        for line, got_max, got_q in zip(np.moveaxis(x64, axis, -1), largest, q):
            assert (got_max, got_q) == want(line, p)
    # stacked and transposed views: each axis read as the outermost of a copy, or in place where it is outermost
    stacked = x[: (len(x) // 8) * 8].reshape(-1, 8, 64)  # (n, 8, 64): a stack of blocks, as the ranks' dW read them
    for view in (stacked, np.swapaxes(stacked, -1, -2), x.T):
        for axis in (-1, -2):
            largest, q = _extents.extents(view, axis)
            lines = np.moveaxis(view.astype(np.float64), axis, -1).reshape(-1, view.shape[axis])
            assert largest.shape == q.shape == view.shape[:axis % view.ndim] + view.shape[axis % view.ndim + 1:]
            for line, got_max, got_q in zip(lines, largest.ravel(), q.ravel()):
                assert (got_max, got_q) == want(line, p)
    whole = _extents.extent(x)
    assert whole == want(x64.ravel(), p)
    for line, line64 in zip(x, x64):  # the whole extent of each row, every pattern's two ends among them
        assert _extents.extent(line) == (want(line64, p) if line64.any() else (0.0, 1.0))
    columns = x[:, ::7]  # strided: the bits read through a view
    assert _extents.extent(columns) == want(x64[:, ::7].ravel(), p)
    assert _extents.extent(np.zeros((3, 2), dtype)) == (0.0, 1.0)
    assert _extents.extent(-np.zeros((3, 2), dtype)) == (0.0, 1.0)  # -0: sign bits only


@pytest.mark.parametrize("name", NARROW)
def test_nan_or_inf_anywhere_gives_no_facts(name):
    dtype, _ = NARROW[name]
    x = np.ones((4, 5), dtype)
    x[2, 3] = np.nan
    assert _extents.extent(x) is None and _extents.extents(x, -1) is None and _extents.extents(x, -2) is None
    if name != "fp8_e4m3":  # E4M3FN has no inf
        x[2, 3] = -np.inf
        assert _extents.extent(x) is None and _extents.extents(x, -2) is None


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8_e5m2"])
@given(m=st.integers(1, 5), k=st.integers(1, 40), n=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       spread=st.integers(0, 40), zeros=st.floats(0, 0.6))
def test_the_whole_bound_holds_only_where_the_float64_product_is_exact(name, m, k, n, seed, spread, zeros):
    # where it holds, one float64 GEMM rounded once gives the exact sums rounded once (the rational reference); and
    # it is never stronger than the bound by rows and columns: where it holds, that one certifies every element
    dtype, _ = NARROW[name]
    rng = np.random.default_rng(seed)
    spread = min(spread, 6 if name != "bf16" else spread)
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-spread, spread + 1, (m, k))).astype(dtype)
    b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-spread, spread + 1, (k, n))).astype(dtype)
    a[rng.random((m, k)) < zeros] = 0
    if not _extents.whole_bound_holds(a, b):
        return
    c = a.astype(np.float64) @ b.astype(np.float64) + 0.0
    assert np.array_equal(bits(c.astype(np.float32)), bits(reference(a, b)))
    facts_a, facts_b = _extents.extents(a, -1), _extents.extents(b, -2)
    rows = np.abs(a.astype(np.float64)).sum(-1) / facts_a[1]
    assert _exact_matmul._unsure(rows, facts_b[0] / facts_b[1]) is None


def test_the_long_ways_floor_certifies_partial_sums_below_2_53_whole_quanta_and_no_more():
    # a's smallest nonzero |value| is 0.375 = 0.75·2**-1 and b's 96 = 0.75·2**7: bf16 keeps 8 significant bits, so
    # the whole quanta are 2**(-1 - 8) and 2**(7 - 8), found here from the values by hand; a suspect's partial sums
    # (at most `bound`) are float64s below 2**53 of their product
    a = np.array([[0.375, -3.0], [0.0, 1024.0]], ml_dtypes.bfloat16)
    b = np.array([[96.0, 0.0], [-160.0, 2.0**20]], ml_dtypes.bfloat16)
    line = 2.0**-9 * 2.0**-1 * 2.0**53
    below, at = np.array([0.0, line * (1 - 2.0**-52)]), np.array([0.0, line])
    assert _exact_matmul._exact_by_whole_quanta(a, b, below)
    assert not _exact_matmul._exact_by_whole_quanta(a, b, at)
    a[0, 0] = np.inf  # no facts: never certified here (the per-row quanta decide)
    assert not _exact_matmul._exact_by_whole_quanta(a, b, below)


def test_the_whole_bound_refuses_a_row_whose_float64_sum_is_wrong():
    # 2**60 + 2**36 + 1: a float64 sum loses the 1 in any order (test_exact_matmul_bound's row)
    row, ones = np.array([[2.0**60, 2.0**36, 1.0]]).astype(ml_dtypes.bfloat16), np.ones((3, 1), ml_dtypes.bfloat16)
    assert not _extents.whole_bound_holds(row, ones)
    assert exact_matmul(row, ones)[0, 0] == np.float32(2.0**60 + 2.0**37)


@given(m=st.integers(1, 30), n=st.integers(1, 30), seed=st.integers(0, 2**32 - 1), top=st.integers(20, 60),
       limit=st.one_of(st.none(), st.integers(0, 120)), block=st.sampled_from([0, 1 << 15]), infs=st.booleans())
def test_the_sorted_search_finds_the_same_unsure_elements_as_the_mask(m, n, seed, top, limit, block, infs):
    # rows and columns as _shortcut makes them (Σ|a|/q and max|b|/q: >= 0, zeros for all-zero lines, inf where a
    # sum overflows), around the 2**52 line; past a limit both say MANY, at or under it both list the elements.
    # block: the candidates masked whole (the default, for these sizes) or sorted and searched (0); infs: rows that
    # overflowed, which send `_unsure_sorted` to the whole mask, or none, so that its own two ways run
    rng = np.random.default_rng(seed)
    rows, columns = 2.0 ** rng.uniform(0, top, m), 2.0 ** rng.uniform(0, top, n)
    rows[rng.random(m) < 0.1], columns[rng.random(n) < 0.1] = 0.0, 0.0
    if infs:
        rows[rng.random(m) < 0.05] = np.inf
    with np.errstate(invalid="ignore"), mock.patch.object(_exact_matmul, "_BLOCK", block):  # inf·0: NaN, unsure
        naive, clever = _exact_matmul._unsure(rows, columns, limit), _exact_matmul._unsure_sorted(rows, columns, limit)
        every = _exact_matmul._unsure(rows, columns)  # no limit: every unsure element, never MANY
    as_set = (lambda where: set() if where is None else set(zip(where[0].tolist(), where[1].tolist())))
    assert every is not _exact_matmul.MANY
    if limit is not None and len(as_set(every)) > limit:
        assert naive is clever is _exact_matmul.MANY
        return
    assert as_set(naive) == as_set(clever) == as_set(every)
    if clever is not None:
        assert len(clever[0]) == len(as_set(clever))  # no element twice


@given(batch=st.sampled_from([(3,), (2, 2)]), m=st.integers(1, 20), n=st.integers(1, 20),
       seed=st.integers(0, 2**32 - 1), top=st.integers(20, 60), limit=st.one_of(st.none(), st.integers(0, 200)),
       broadcast=st.booleans())
def test_the_search_product_by_product_finds_the_same_unsure_elements_as_the_mask(batch, m, n, seed, top, limit,
                                                                                  broadcast):
    # a batch of products' rows (..., M) and columns (..., N) (`_unsure_by_batch`: each product whose largest pair
    # fails searched alone) against `_unsure`'s one mask over the whole batch: the same elements, MANY past the same
    # limit over the whole batch; `broadcast`: the columns one set for every product, as NumPy's matmul broadcasts
    rng = np.random.default_rng(seed)
    rows = 2.0 ** rng.uniform(0, top, batch + (m,))
    columns = 2.0 ** rng.uniform(0, top, (n,) if broadcast else batch + (n,))
    rows[rng.random(rows.shape) < 0.1], columns[rng.random(columns.shape) < 0.1] = 0.0, 0.0
    naive, clever = _exact_matmul._unsure(rows, columns, limit), _exact_matmul._unsure_by_batch(rows, columns, limit)
    every = _exact_matmul._unsure(rows, columns)
    as_set = (lambda where: set() if where is None else set(zip(*(x.tolist() for x in where))))
    if limit is not None and len(as_set(every)) > limit:
        assert naive is clever is _exact_matmul.MANY
        return
    assert as_set(clever) == as_set(naive) == as_set(every)
    if clever is not None:
        assert len(clever) == len(batch) + 2 and len(clever[0]) == len(as_set(clever))  # (..., i, j), none twice


@given(m=st.integers(1, 20), n=st.integers(1, 20), k=st.integers(1, 1100), seed=st.integers(0, 2**32 - 1),
       top=st.integers(10, 40))
def test_the_bound_from_the_largest_magnitudes_passes_only_where_the_sums_find_nothing_unsure(m, n, k, seed, top):
    # `_rows_hold`: K·max_k|a_ik| in place of Σ_k|a_ik|. Where it passes, `_unsure` over the sums (every a_ik of the
    # row at its largest: the sums' worst case, K·max itself) finds no element; rows of a random spread of
    # magnitudes, some near the line, so that it both passes and fails
    rng = np.random.default_rng(seed)
    largest, q = 2.0 ** rng.integers(0, top, m), 2.0 ** -rng.integers(0, 8, m)  # (M,) max|a_i| and q_i
    columns = 2.0 ** rng.uniform(0, 52 - top, n)  # (N,) max|b_j| / q_j
    if _exact_matmul._rows_hold(k, (largest, q), columns):
        assert _exact_matmul._unsure(k * largest / q, columns) is None
    assert not _exact_matmul._rows_hold(k, (None, q), columns)  # a's largest magnitudes unknown (fp32): no claim


def _searched(rows, columns, limit=None):
    """`_unsure_sorted` with its candidates always sorted and searched, never masked whole."""
    with mock.patch.object(_exact_matmul, "_BLOCK", 0):
        return _exact_matmul._unsure_sorted(rows, columns, limit)


@pytest.mark.parametrize("swap", [False, True], ids=["more rows", "more columns"])
def test_a_limit_of_exactly_the_unsure_count_lists_them_one_less_says_many(swap):
    # rows_0·columns_j = 2**60 >= 2**52 for j = 0, 1; every other pair is 2**30 or less: two unsure elements
    rows, columns = np.array([2.0**30, 1.0]), np.array([2.0**30, 2.0**30, 1.0, 4.0])
    if swap:
        rows, columns = columns, rows
    for unsure in (_exact_matmul._unsure, _exact_matmul._unsure_sorted, _searched):
        assert unsure(rows, columns, 1) is _exact_matmul.MANY
        found = unsure(rows, columns, 2)
        pairs = sorted(zip(found[0].tolist(), found[1].tolist()))
        assert pairs == ([(0, 0), (1, 0)] if swap else [(0, 0), (0, 1)])


@pytest.fixture
def fresh_cache(monkeypatch):
    _operand_cache.clear()
    monkeypatch.setattr(_operand_cache, "_SMALLEST", 16)
    yield
    _operand_cache.clear()


def test_a_kept_operand_gives_what_a_fresh_one_gives_its_transpose_sharing_the_entry(fresh_cache):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((12, 7)) * 2.0 ** rng.integers(-30, 30, (12, 7))).astype(ml_dtypes.bfloat16)
    kept, view = _operand_cache.operand(w), _operand_cache.operand(w.T)
    assert len(_operand_cache._entries) == 1
    for got, x in ((kept, w), (view, w.T)):
        assert np.array_equal(got.wide, x.astype(np.float64)) and not got.wide.flags.writeable
        for axis in (-1, -2):
            for g, e in zip(got.facts(axis), _extents.extents(x, axis)):
                assert np.array_equal(g, e)
    x = rng.standard_normal((5, 12)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(bits(exact_matmul(x, w)), bits(reference(x, w)))
    assert np.array_equal(bits(exact_matmul(w.T, x.T)), bits(reference(w.T, x.T)))


def test_an_operand_used_once_is_not_kept_and_multiplies_as_a_kept_one_does(fresh_cache, monkeypatch):
    # models/_stacked.py names each stack it makes (`used_once`): its products' bits are the reference's, and the memo
    # holds nothing of it after, inside the block or out (it would never be found again); a stack's transpose, an
    # array with its values but not itself, and the same array once the block is left are kept as before
    monkeypatch.setattr(_exact_matmul, "_WHOLE_FIRST", 16)  # products by rows and columns: their operands kept
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((40, 12)) * 2.0 ** rng.integers(-20, 20, (40, 12))).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((12, 6)).astype(ml_dtypes.bfloat16)
    with _operand_cache.used_once(x):
        assert np.array_equal(bits(exact_matmul(x, w)), bits(reference(x, w)))
        assert [e.bits.shape for e in _operand_cache._entries.values()] == [w.shape]  # w's alone
        _operand_cache.operand(x.copy())  # the same values in another array: kept
        assert len(_operand_cache._entries) == 2
    _operand_cache.clear()
    assert np.array_equal(bits(exact_matmul(x, w)), bits(reference(x, w)))
    assert len(_operand_cache._entries) == 2 and not _operand_cache._made_once  # x kept again, the block forgotten


def test_a_stacked_step_keeps_no_stack_in_the_memo():
    # 10k parameters on 64 ranks kept 81 stacks (32 MB) after 30 steps; now only what a later product finds
    _kernels.clear_kept_operands()
    model = MLP([32, 96, 64, 16])
    engine = ZeroEngine(model, Cluster(64), 3, Adam(lr=1e-3), "bf16-mixed", params=model.init_params())
    engine.step(make_regression(np.random.default_rng(0), 64, 8, [32, 96, 64, 16]))
    assert len(_operand_cache._entries) == 0 and _operand_cache._held[0] == 0
    _kernels.clear_kept_operands()


def test_two_matrices_whose_hashes_collide_are_told_apart(fresh_cache, monkeypatch):
    # the hash only says where to look: with every hash equal, the bits compared keep the answers right
    monkeypatch.setattr(_operand_cache.xxhash, "xxh3_64_intdigest", lambda data: 0)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    for seed in range(3):
        w = np.random.default_rng(seed).standard_normal((8, 6)).astype(ml_dtypes.bfloat16)
        assert np.array_equal(_operand_cache.operand(w).wide, w.astype(np.float64))
        assert np.array_equal(bits(exact_matmul(x, w)), bits(reference(x, w)))


def test_matrices_that_agree_on_the_hashed_sample_are_told_apart(fresh_cache):
    # the key hashes a sample of the elements; two matrices equal there and different elsewhere share a key
    w = np.random.default_rng(5).standard_normal((64, 64)).astype(ml_dtypes.bfloat16)  # 4096 elements: every 8th
    v = w.copy()
    v[0, 1] = -v[0, 1] * 2  # not in the sample
    x = np.random.default_rng(6).standard_normal((3, 64)).astype(ml_dtypes.bfloat16)
    for m in (w, v, w):
        assert np.array_equal(_operand_cache.operand(m).wide, m.astype(np.float64))
        assert np.array_equal(bits(exact_matmul(x, m)), bits(reference(x, m)))
    assert len(_operand_cache._entries) == 1  # the same key: each replaced the one before
    assert _operand_cache._held[0] == sum(e.nbytes for e in _operand_cache._entries.values())  # and its bytes


def test_an_immutable_operand_is_found_by_where_it_lies_after_its_bits_are_compared_once(fresh_cache, monkeypatch):
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((12, 8)) * 2.0 ** rng.integers(-20, 20, (12, 8))).astype(ml_dtypes.bfloat16)
    copies = [np.frombuffer(w.tobytes(), w.dtype).reshape(w.shape) for _ in range(2)]  # two gathers' windows
    assert all(type(_operand_cache.immutable_owner(c)) is bytes for c in copies)
    assert _operand_cache.immutable_owner(w) is None and _operand_cache.immutable_owner(w[1:].T) is None
    monkeypatch.setattr(_exact_matmul, "_WHOLE_FIRST", 16)  # these products go by rows and columns: kept operands
    compared = []
    same = _operand_cache._same
    monkeypatch.setattr(_operand_cache, "_same", lambda kept, b: compared.append(kept.shape) or same(kept, b))
    x = rng.standard_normal((5, 12)).astype(ml_dtypes.bfloat16)
    for _ in range(3):  # every rank's look-up of each window, forward (W.T) and backward (W)
        for c in copies:
            assert np.array_equal(bits(exact_matmul(x, c)), bits(reference(x, c)))
            assert np.array_equal(bits(exact_matmul(c.T, x.T)), bits(reference(c.T, x.T)))
            got = _operand_cache.operand(c)
            assert np.array_equal(got.wide, w.astype(np.float64))
            for axis in (-1, -2):
                for g, e in zip(got.facts(axis), _extents.extents(w, axis)):
                    assert np.array_equal(g, e)
    assert [key[1] for key in _operand_cache._entries].count(w.shape) == 1  # one entry for both windows,
    assert len(_operand_cache._at) == 2  # found at two places
    assert compared.count(w.shape) == 1  # the second window's bits compared with the first's once, then never
    # a mutable matrix with the same bits is still compared, and a changed one is told apart
    v = w.copy()
    v[3, 3] = -v[3, 3] * 4
    for m in (w, v):
        assert np.array_equal(bits(exact_matmul(x, m)), bits(reference(x, m)))
    assert compared.count(w.shape) == 2  # w: found by content, its bits compared; v: another key


def test_the_immutable_operands_found_by_address_stay_within_their_budget(fresh_cache, monkeypatch):
    monkeypatch.setattr(_operand_cache, "_AT_BYTES", 3 * 64 * 2)  # three 8 x 8 bf16 windows
    held = [np.frombuffer(np.random.default_rng(s).standard_normal((8, 8)).astype(ml_dtypes.bfloat16).tobytes(),
                          ml_dtypes.bfloat16).reshape(8, 8) for s in range(5)]
    for m in held:
        assert np.array_equal(_operand_cache.operand(m).wide, m.astype(np.float64))
    assert len(_operand_cache._at) == 3 and _operand_cache._at_held[0] == 3 * 64 * 2
    kept = [owner for owner, _ in _operand_cache._at.values()]
    assert len(kept) == 3 and all(o is m.base.base for o, m in zip(kept, held[2:]))  # the newest kept


def test_the_cache_stays_within_its_budget(fresh_cache, monkeypatch):
    monkeypatch.setattr(_operand_cache, "_BUDGET_BYTES", 3 * 64 * 10)  # three 8 x 8 entries: 64 x (2 + 8) bytes each
    for seed in range(6):
        _operand_cache.operand(np.random.default_rng(seed).standard_normal((8, 8)).astype(ml_dtypes.bfloat16))
    assert len(_operand_cache._entries) == 3
    held = sum(e.nbytes for e in _operand_cache._entries.values())
    assert held <= _operand_cache._BUDGET_BYTES and _operand_cache._held[0] == held  # the running count is the sum
    monkeypatch.setattr(_operand_cache, "_LARGEST", 63)  # an operand past a quarter of the budget is not kept
    _operand_cache.clear()
    big = np.random.default_rng(9).standard_normal((8, 8)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(_operand_cache.operand(big).wide, big.astype(np.float64)) and not _operand_cache._entries


@pytest.mark.parametrize("name", NARROW)
def test_the_extents_of_pieces_measured_together_are_each_piece_s_own(name):
    # `extent_of_pieces` against the widened values (`want`) and its twin `extent`: every finite pattern of the format
    # cut into pieces of 1 to 300 elements, with an all-zero piece, a piece of -0 alone, and NaN (and inf) in one
    dtype, p = NARROW[name]
    values = finite_patterns(dtype)
    rng = np.random.default_rng(p)
    pieces, start = [], 0
    while start < len(values):
        size = int(rng.integers(1, 301))
        pieces.append(values[start:start + size])
        start += size
    pieces += [np.zeros(5, dtype), -np.zeros(3, dtype), np.array([1.0, np.nan, 2.0], dtype)]
    if name != "fp8_e4m3":  # E4M3FN has no inf
        pieces.append(np.array([-np.inf, 0.5], dtype))
    got = _extents.extent_of_pieces(np.concatenate(pieces), [len(x) for x in pieces])
    assert got == [_extents.extent(x) for x in pieces]
    with np.errstate(invalid="ignore"):
        for x, g in zip(pieces, got):
            x64 = x.astype(np.float64)
            if not np.isfinite(x64).all():
                assert g is None
            else:
                assert g == (want(x64, p) if x64.any() else (0.0, 1.0))


def _tensors_a_step_hands_over(rng):
    """What an engine's `prepare` may be given: activations of several shapes, a gradient's transposed view, two
    arrays with the same bits, an fp16 one, and ones kept out (float32, empty, over `_SMALL_BYTES`)."""
    x = (rng.standard_normal((8, 96)) * 2.0 ** rng.integers(-20, 20, (8, 96))).astype(ml_dtypes.bfloat16)
    kept = [x, x.copy(), rng.standard_normal((96, 8)).astype(ml_dtypes.bfloat16).T,
            rng.standard_normal((8, 16)).astype(np.float16), rng.standard_normal((4, 5, 6)).astype(ml_dtypes.bfloat16)]
    kept_out = [rng.standard_normal((8, 8)).astype(np.float32), np.zeros((0, 8), ml_dtypes.bfloat16),
                rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)]
    return kept, kept_out


def test_extents_remembered_together_are_what_each_product_then_finds(monkeypatch):
    _operand_cache.clear()
    kept, kept_out = _tensors_a_step_hands_over(np.random.default_rng(11))
    _operand_cache.remember_extents(kept + kept_out)
    assert len(_operand_cache._extents_kept) == len(kept) - 1  # the two arrays with the same bits share an entry
    monkeypatch.setattr(_operand_cache, "extent", mock.Mock(side_effect=AssertionError("measured again")))
    for x in kept:  # found, not measured: and what the widened values say
        assert _operand_cache.kept_extent(x) == want(x.astype(np.float64).ravel(), NARROW[
            "fp16" if x.dtype == np.float16 else "bf16"][1])
    _operand_cache.clear()


def test_remembered_extents_whose_hashes_collide_are_told_apart(monkeypatch):
    # every hash equal: one entry survives, the others are measured again when asked, and every answer is right
    _operand_cache.clear()
    monkeypatch.setattr(_operand_cache.xxhash, "xxh3_64_intdigest", lambda data: 0)
    rng = np.random.default_rng(12)
    xs = [(rng.standard_normal((4, 6)) * 2.0**s).astype(ml_dtypes.bfloat16) for s in (-30, 0, 30)]
    _operand_cache.remember_extents(xs)
    assert len(_operand_cache._extents_kept) == 1
    for x in xs + xs[::-1]:
        assert _operand_cache.kept_extent(x) == want(x.astype(np.float64).ravel(), 8)
    _operand_cache.clear()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_zero3_step_measures_each_rank_s_activations_and_gradients_together(monkeypatch, workers):
    # the hint at work: with `prepare` wired (parallel/data/_compute.py), the products of a step measure none of their
    # activations or gradients alone; without it, each rank its own; the bits the same either way (against the oracle)
    model, n = MLP([32, 96, 64, 16]), 8
    params = model.init_params(np.random.default_rng(0))
    batches = make_regression(np.random.default_rng(1), n, 8, [32, 16])
    policy = get_precision("bf16-mixed")
    measured = mock.Mock(side_effect=_extents.extent)
    monkeypatch.setattr(_operand_cache, "extent", measured)
    monkeypatch.setattr(_kernels, "_PREPARE_FROM_BYTES", 0)  # 8 ranks' 12 KB an op: past the gate only by lowering it
    counts = []
    for wired in (True, False):
        if not wired:
            monkeypatch.setattr(_operand_cache, "remember_extents", lambda tensors: None)
            monkeypatch.setitem(_kernels.ARITHMETICS, "portable",
                                dataclasses.replace(_kernels.ARITHMETICS["portable"], prepare=None))
        _operand_cache.clear()
        measured.reset_mock()
        # the loop over ranks, where the hint serves (one worker otherwise runs each op once: models/_stacked.py)
        engine = ZeroEngine(model, Cluster(n, workers=workers, stack_ranks=False), 3, Adam(lr=1e-3), policy,
                            params=params)
        engine.step(batches)
        counts.append(measured.call_count)
        oracle = Reference(model, Adam(lr=1e-3), policy, world_size=n, params=params, order="ring-native")
        oracle.step(batches)
        assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))
    _operand_cache.clear()
    # the three weight matrices once each (every rank's copy has the same bits; on several workers two ranks' threads
    # may both measure one before either keeps it, the same answer twice); wired, besides them, the stacked operand of
    # each layer's forward and dx products (_rank_products.py: one product for the ranks after the first); unwired,
    # x and dy of three layers on every rank, one by one (each op of stage 3 is its own run, so several workers get
    # the hint too)
    weights = [counts[0] - 2 * 3, counts[1] - 2 * 3 * n]
    assert all(3 <= w <= 3 * workers for w in weights) and (workers > 1 or weights == [3, 3])


def test_the_hint_is_taken_for_many_ranks_or_large_tensors_and_skipped_for_few_small_ones(monkeypatch):
    # its fixed cost outweighs what few ranks' small products save (_kernels.py): below both gates nothing is measured
    # or noted, and an earlier op's noted tensors do not stay; 32 tensors, or 128 KB in all, and both are done
    remembered = mock.Mock()
    monkeypatch.setattr(_operand_cache, "remember_extents", remembered)
    rng = np.random.default_rng(7)

    def tensors(count, rows):  # `count` distinct bf16 (rows, 64) activations: 128 bytes a row
        return [rng.standard_normal((rows, 64)).astype(ml_dtypes.bfloat16) for _ in range(count)]

    cases = [(tensors(4, 16), False),  # zerosim train's default: 4 ranks, 8 KB
             (tensors(31, 33), False),  # 31 ranks, 130,944 bytes: just below both gates
             (tensors(32, 1), True),  # 32 ranks, 4 KB
             (tensors(2, 512), True)]  # 2 ranks, 131,072 bytes
    for xs, taken in cases:
        _rank_products.prepare(tensors(3, 2))  # an earlier op's batch
        remembered.reset_mock()
        _kernels._prepare_portable(xs)
        assert remembered.call_count == int(taken), len(xs)
        batch = _rank_products._batch[0]
        assert (batch is not None and batch.tensors == xs) if taken else batch is None
    _rank_products.clear()


@pytest.mark.parametrize("name", NARROW)
def test_facts_remembered_by_content_are_each_axis_s_own_either_way_round(name, monkeypatch):
    # `kept_facts` (both axes in one pass, kept for the product that reads the other axis) against `want`, the widened
    # values by hand, for a matrix and the transposed view of another; then found, not measured, and a forced hash
    # collision costs a measurement, never a wrong answer; NaN gives no facts; 1-D and large operands are not kept
    dtype, p = NARROW[name]
    rng = np.random.default_rng(p)
    x = (rng.standard_normal((32, 48)) * 2.0 ** rng.integers(-6, 6, (32, 48))).astype(dtype)
    x[3] = 0  # an all-zero row: q is +inf there
    m = (rng.standard_normal((40, 24)) * 2.0 ** rng.integers(-6, 6, (40, 24))).astype(dtype)
    _operand_cache.clear()
    for operand in (x, m.T):
        both = _operand_cache.kept_facts(operand)
        wide = operand.astype(np.float64)
        for axis, (largest, q) in enumerate(both):
            lines = np.moveaxis(wide, axis, -1)
            assert [(a, b) for a, b in zip(largest.tolist(), q.tolist())] == [want(line, p) for line in lines]
    monkeypatch.setattr(_operand_cache, "extents_along", mock.Mock(side_effect=AssertionError("measured again")))
    def same(got, operand):  # each axis's (max, q) arrays equal to a fresh `extents` of the operand
        fresh = [_extents.extents(operand, 0), _extents.extents(operand, 1)]
        return all(np.array_equal(g[0], f[0]) and np.array_equal(g[1], f[1]) for g, f in zip(got, fresh))

    for operand in (x, m.T, x.T, m):  # found: the same matrices, either way round
        assert same(_operand_cache.kept_facts(operand), operand)
    monkeypatch.undo()
    _operand_cache.clear()
    monkeypatch.setattr(_operand_cache.xxhash, "xxh3_64_intdigest", lambda data: 0)
    for operand in (x, m.T, x):  # one key for all: each replaces the one before, every answer right
        assert same(_operand_cache.kept_facts(operand), operand)
    assert len(_operand_cache._facts_kept) == 1 and _operand_cache._facts_held[0] == x.nbytes
    y = x.copy()
    y[5, 7] = np.nan
    assert _operand_cache.kept_facts(y) == [None, None]
    assert _operand_cache.kept_facts(x[0]) is None  # 1-D
    assert _operand_cache.kept_facts(np.zeros((256, 128), dtype)) is None  # past `_SMALLEST`: the large cache's
    _operand_cache.clear()


def test_stacked_small_products_keep_a_tiny_negative_sums_minus_zero():
    """The ranks' small dW, made several whole products at a time (_exact_matmul.py `_shortcut_stacked`), choose once
    for the stack whether an exact zero is made +0 before or after rounding to float32: a product whose sum is a tiny
    negative (-2**-160: below half of float32's smallest subnormal) keeps its -0, an exact zero of -0 products is +0,
    as in each product made alone; checked against exact rational sums (`reference`), product by product."""
    rng = np.random.default_rng(63)
    n, m, k, width = 48, 16, 8, 32  # 18,432 elements: facts by rows and columns, 30 products a group
    a = rng.standard_normal((n, m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k, width)).astype(ml_dtypes.bfloat16)
    a[5, 0] = 0
    a[5, 0, 0] = 2.0**-80
    b[5, 0] = -(2.0**-80)  # row 0 of product 5: one product each, -2**-160, and zeros
    a[5, 1] = 0  # row 1: every product ±0 (b has negatives): an exact zero
    a[40, 3] = -0.0
    out = exact_matmul(a, b)
    for p in (0, 5, 29, 30, 40, 47):  # the first and last of both groups, the special rows'
        assert bits(out[p]).tolist() == bits(reference(a[p], b[p])).tolist(), p
    assert np.signbit(out[5, 0]).all() and not np.signbit(out[5, 1]).any() and not np.signbit(out[40, 3]).any()


@pytest.mark.parametrize("once", [True, False])
def test_unsure_elements_settled_from_operands_widened_for_one_product(once):
    """Operands kept by no memo are widened into this thread's scratch buffers (Operand.wide_in), and a 2-D
    product's float64 c made in another (`_shortcut`): the unsure elements settled after c is made read the
    operands' rows and columns again, so they must still hold the operands. Row 0 of a holds 2**60 first and -2**60
    last, over two equal rows of b, values near 1 between them: every element of it unsure (1 in 48 of the product),
    their float64 sums wrong (the small products lost beside 2**60), so that only exact sums from a's and b's lines
    settle them; checked against exact rational sums (`reference`). The second product, made with the same buffers,
    leaves the first's answer as it was."""
    rng = np.random.default_rng(7)
    m, k, n = 48, 160, 64  # 17,920 elements of a and b: by facts, not one bound over the whole; c fits in a's buffer
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    a[0, 0], a[0, -1] = 2.0**60, -(2.0**60)
    b[-1] = b[0]
    with _operand_cache.used_once(a) if once else contextlib.nullcontext():
        out = exact_matmul(a, b)
    kept = out.copy()
    exact_matmul(b.T.copy(), a.T.copy())  # the same buffers, other operands
    assert bits(out).tolist() == bits(reference(a, b)).tolist()
    assert bits(out).tolist() == bits(kept).tolist()


def test_clearing_the_kept_operands_may_keep_the_scratch_buffers():
    """`clear_kept_operands(buffers=False)` forgets every operand kept and every product prepared, and keeps the
    float64 scratch buffers (memory only: benchmarks/yardstick.py empties the memos between contenders, as a run
    keeps the buffers from step to step); the default lets them go too."""
    from zerosim.precision.arithmetic import _scratch

    w = np.random.default_rng(5).standard_normal((256, 160)).astype(ml_dtypes.bfloat16)  # large enough to be kept
    x = np.random.default_rng(6).standard_normal((64, 256)).astype(ml_dtypes.bfloat16)
    for buffers in (False, True):
        _rank_products.prepare([x, x.copy()])  # two ranks' next operands noted, to be forgotten
        exact_matmul(x, w)
        assert _rank_products._batch[0] is not None
        held = dict(_scratch._local.buffers)
        assert len(_operand_cache._entries) >= 1 and held
        _kernels.clear_kept_operands(buffers=buffers)
        assert len(_operand_cache._entries) == 0 and _rank_products._batch[0] is None
        assert (getattr(_scratch._local, "buffers", {}) == {}) is buffers
        if not buffers:
            assert all(_scratch._local.buffers[s] is b for s, b in held.items())  # the same arrays

"""`exact_matmul(a, b, out=...)`: the product put in an array the caller gives (a rank's dW inside the ranks' packed
gradients, models/layers/_basic.py), the same bits as a fresh product; and the packed gradients the stacked backward
writes there, the same bits as the per-rank gradients packed by a concatenate.

References: test_exact_matmul's `HARD` table (hand-worked dot products, ties among them) and `reference` (Python's
Fraction sums of the K products, rounded once by integer arithmetic); the same product without `out` (its own
tests prove it); for packing, `np.concatenate` of each rank's tensors flattened, written out here.
"""

import ml_dtypes
import numpy as np
import pytest
from helpers import bits, same
from test_exact_matmul import HARD, reference

from zerosim import MLP, get_precision
from zerosim.models.layers import _basic
from zerosim.precision.arithmetic import _norm_bound, exact_matmul

pytestmark = pytest.mark.pinned  # bits that must be the same on every machine


def _inside(shape, rows: int = 3, offset: int = 5):
    """(view, base): a float32 view of `shape` in the middle of a NaN-filled array, at an odd offset and with a
    batch stride not its own size (as a rank's dW lies in the packed gradients), so a path that left an element
    unwritten, or wrote past its view, shows."""
    size = int(np.prod(shape[1:])) if len(shape) > 2 else int(np.prod(shape))
    n = shape[0] if len(shape) > 2 else 1
    base = np.full((n, offset + size + rows), np.nan, np.float32)
    view = base[:, offset:offset + size].reshape(shape)
    assert np.shares_memory(view, base)
    return view, base


def _hard_operands():
    """a (M, K) whose rows are HARD's rows of a (zero-padded to one K), b (K, M) whose column j is row j's column
    of b, and the hand-worked answers on the diagonal of a @ b."""
    cases = list(HARD.values())
    k = max(len(row) for row, _, _ in cases)
    a = np.zeros((len(cases), k), np.float32)
    b = np.zeros((k, len(cases)), np.float32)
    for i, (row, column, _) in enumerate(cases):
        a[i, :len(row)], b[:len(column), i] = row, column
    return a, b, np.array([want for _, _, want in cases], np.float32)


def test_the_hard_table_into_a_view_holds_the_exact_sums_rounded_once_ties_to_even():
    a, b, want = _hard_operands()
    out, base = _inside((a.shape[0], b.shape[1]))
    with np.errstate(over="ignore"):
        got = exact_matmul(a, b, out=out)
        fresh = exact_matmul(a, b)
    assert got is out
    assert bits(np.diagonal(out)).tolist() == bits(want).tolist()  # ties and -0 by hand
    assert bits(out).tolist() == bits(reference(a, b)).tolist() == bits(fresh).tolist()
    assert np.isnan(base[:, :5]).all() and np.isnan(base[:, -3:]).all()  # nothing written outside the view


@pytest.mark.parametrize("shape, spread, case", [
    ((24, 40, 30), 0, "fp32, one bound: written by the norms' path as it rounds"),
    ((24, 40, 30), 30, "fp32 over 2**-30 .. 2**30: suspects settled in place"),
    ((3, 16, 20, 12), 6, "fp32, batched (a stack of ranks' dW into their rows)"),
    ((12, 64, 9), 0, "fp32 with NaN and inf: the long way, copied in"),
])
def test_a_product_into_a_view_has_the_fresh_products_bits(shape, spread, case):
    rng = np.random.default_rng(len(case))
    *batch, m, k, n = shape
    def values(s):
        return (rng.standard_normal(s) * 2.0 ** rng.integers(-spread, spread + 1, s)).astype(np.float32)

    a, b = values((*batch, m, k)), values((*batch, k, n))
    if "NaN" in case:
        a[1, 3], b[2, 4], a[5, 0] = np.nan, np.inf, -np.inf
    a[:, 2] = 0.0  # a dead column of a ...
    b[..., 1] = 0.0  # ... and of b: exact +0 whatever the bound
    out, base = _inside((*batch, m, n))
    with np.errstate(invalid="ignore", over="ignore"):
        got = exact_matmul(a, b, out=out)
        fresh = exact_matmul(a, b)
    assert got is out and bits(out).tolist() == bits(fresh).tolist()
    if not batch and "NaN" not in case:
        assert bits(out).tolist() == bits(reference(a, b)).tolist()


def test_narrow_and_float64_products_are_copied_into_out():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 33)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((33, 6)).astype(ml_dtypes.bfloat16)
    out, _ = _inside((7, 6))
    assert exact_matmul(a, b, out=out) is out
    assert bits(out).tolist() == bits(reference(a.astype(np.float32), b.astype(np.float32))).tolist()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out64 = np.empty((7, 6))
    assert exact_matmul(a64, b64, out=out64) is out64 and bits(out64).tolist() == bits(a64 @ b64).tolist()


@pytest.mark.bad_input("formats and casts", unchanged=True)
def test_an_out_of_another_shape_or_dtype_is_refused_before_anything_is_written():
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    for wrong in (np.zeros((4, 2), np.float32), np.zeros((2, 4), np.float64), np.zeros((1, 4), np.float32)):
        with pytest.raises(ValueError, match="out must be a float32 array of shape"):
            exact_matmul(a, b, out=wrong)
        assert not wrong.any()


def test_the_norms_bound_writes_into_out_where_it_rounds(monkeypatch):
    # the point of `out`: the fp32 path rounds into it, making no array of its own (a copy into out would pass the
    # bit tests above)
    answers, real = [], _norm_bound.rounded_by_norms
    monkeypatch.setattr(_norm_bound, "rounded_by_norms", lambda *args: answers.append(real(*args)) or answers[-1])
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 40)).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)
    out, _ = _inside((16, 24))
    exact_matmul(a, b, out=out)
    fresh = exact_matmul(a, b)
    assert [x[0] is out for x in answers] == [True, False] and answers[1][0] is fresh


def test_a_sparse_short_product_into_a_transposed_view_has_the_exact_sums(monkeypatch):
    # a dW over a micro-batch under ReLU masks (rows of a holding 0 to 8 nonzeros, made in groups, some gathered and
    # put back by row, some in place) into an out whose rows are strided (a transposed array): every element written,
    # each the exact sum, and the suspects settled where they lie
    monkeypatch.setattr(_norm_bound, "_BLOCK", 4 * 48)  # blocks of 4 rows
    rng = np.random.default_rng(23)
    a = np.zeros((40, 32), np.float32)
    for i in range(40):
        held = rng.choice(32, i % 9, replace=False)
        a[i, held] = rng.standard_normal(len(held)) * 2.0 ** rng.integers(-20, 21, len(held))
    b = (rng.standard_normal((32, 48)) * (rng.random((32, 48)) < 0.5)).astype(np.float32)
    b[:, 5] = 0.0
    base = np.full((48, 40), np.nan, np.float32)
    out = base.T  # (40, 48), its rows strided
    assert exact_matmul(a, b, out=out) is out
    assert bits(out).tolist() == bits(reference(a, b)).tolist() == bits(exact_matmul(a, b)).tolist()


def _ranks_case(rows, d_in, d_out, precision, n=3):
    rng, f = np.random.default_rng(7), get_precision(precision).compute_format
    def spread(shape):
        return (rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 7, shape)).astype(f.dtype)

    return f, n, spread((n * rows, d_in)), spread((n * rows, d_out)), spread((d_out, d_in))


@pytest.mark.parametrize("rows, d_in, d_out, precision", [
    (8, 32, 96, "fp32"),  # batched fp32: the stack's product written into the ranks' rows at once
    (32, 256, 300, "fp32"),  # rank by rank: each rank's dW straight into its row
    (8, 32, 96, "bf16-mixed"),  # rounded to bf16 by the layer, then copied in
])
def test_gradients_written_into_the_packed_rows_equal_each_ranks_own_concatenated(rows, d_in, d_out, precision):
    f, n, x, dy, w = _ranks_case(rows, d_in, d_out, precision)
    model = MLP([d_in, d_out])  # one Linear: its w then its b, as `pack` orders them
    packed, views = model.packed_ranks(0, n, f.dtype)
    packed[...] = np.nan  # whatever np.empty held: every element must be written
    _, dw, db = _basic.linear_backward_ranks(dy, (x,), w, f, n, out=views)
    assert dw is views["w"] and db is views["b"]
    for r in range(n):
        _, own_w, own_b = _basic.linear_backward(dy[r * rows:(r + 1) * rows], (x[r * rows:(r + 1) * rows],), w, f)
        assert bits(packed[r]).tolist() == bits(np.concatenate([own_w.reshape(-1), own_b.reshape(-1)])).tolist()


def test_pack_ranks_is_the_concatenate_of_each_ranks_tensors():
    model, n = MLP([5, 7, 6, 3]), 4
    rng = np.random.default_rng(3)
    for layer in range(len(model.layers)):
        specs = model.layer_specs(layer)
        if not specs:
            assert model.pack_ranks(layer, {}, n) is None
            continue
        tensors = {s.name: rng.standard_normal((n, *s.shape)).astype(np.float32) for s in specs}
        tensors[specs[0].name][0, 0] = -0.0  # a sign of zero and a NaN payload travel as bits
        tensors[specs[-1].name][1].reshape(-1)[0] = np.uint32(0x7FC00123).view(np.float32)
        want = np.concatenate([tensors[s.name].reshape(n, -1) for s in specs], axis=1)
        got = model.pack_ranks(layer, tensors, n)
        assert got.shape == want.shape and bits(got).tolist() == bits(want).tolist()
        assert all(same(got[r], model.pack(layer, {k: t[r] for k, t in tensors.items()})) for r in range(n))
        packed, views = model.packed_ranks(layer, n, np.float32)  # the layout a backward writes into
        assert all(views[s.name][r].flags.c_contiguous and np.shares_memory(views[s.name][r], packed[r])
                   for s in specs for r in range(n))
        for s in specs:
            views[s.name][...] = tensors[s.name]
        assert bits(packed).tolist() == bits(want).tolist()
    assert model.pack_ranks(0, {"w": [np.zeros((7, 5))] * n, "b": np.zeros((n, 7))}, n) is None  # a list per rank

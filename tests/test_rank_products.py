"""Every rank's product by the same matrix made as one (precision/arithmetic/_rank_products.py): the same bits as each
rank's own exact product (against exact rational sums, and against the product made alone), never taken for an
operand changed after it was stacked, a different partner, or a product that is not finite."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from test_exact_matmul import reference

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
from zerosim.models import make_regression
from zerosim.precision import get_precision
from zerosim.precision.arithmetic import _exact_matmul, _rank_products, clear_kept_operands, exact_matmul

FORMATS = {ml_dtypes.bfloat16: 20, np.float16: 4, ml_dtypes.float8_e4m3fn: 2}  # dtype: binades of spread that fit


@pytest.fixture(autouse=True)
def fresh():
    clear_kept_operands()
    yield
    clear_kept_operands()


@pytest.fixture
def alone(monkeypatch):
    """Counts the products made alone (one per rank that computes its own, one per stacked product)."""
    made = []
    real = _exact_matmul._exact_alone
    monkeypatch.setattr(_exact_matmul, "_exact_alone",
                        lambda a, b, once=False, out=None: made.append(a.shape) or real(a, b, once, out))
    return made


def operands(dtype, n, rows, k, d, seed, spread=20):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal((rows, k)) * 2.0 ** rng.integers(-spread, spread, (rows, k))).astype(dtype)
          for _ in range(n)]
    w = (rng.standard_normal((d, k)) * 2.0 ** rng.integers(-spread, spread, (d, k))).astype(dtype)
    return xs, w


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("shared", [False, True])
def test_each_rank_gets_the_exact_product_of_its_own_operand(dtype, shared, alone):
    xs, w = operands(dtype, 5, 3, 6, 4, seed=1, spread=FORMATS[dtype])
    xs[2] = xs[2][:1].copy()  # ranks may hold different numbers of rows
    windows = [np.frombuffer(w.tobytes(), w.dtype).reshape(w.shape)] * 5 if shared else [w.copy() for _ in range(5)]
    _rank_products.prepare(xs)
    for x, window in zip(xs, windows):
        got = exact_matmul(x, window.T)
        assert np.array_equal(bits(got), bits(reference(x, w.T)))
    assert len(alone) == 2  # the first rank's own product and one stacked product for the four others
    assert alone[1] == (3 + 1 + 3 + 3, 6)


def test_tokens_stack_as_rows_and_come_back_in_their_shape(alone):
    # a transformer's (B, L, D) activations: each rank's block has its own (B, L, N) shape
    xs, w = operands(ml_dtypes.bfloat16, 3, 6, 5, 4, seed=6)
    tokens = [x.reshape(2, 3, 5) for x in xs]
    _rank_products.prepare(tokens)
    for t, x in zip(tokens, xs):
        got = exact_matmul(t, w.T)
        assert got.shape == (2, 3, 4) and np.array_equal(bits(got.reshape(6, 4)), bits(reference(x, w.T)))
    assert len(alone) == 2


def test_an_operand_changed_after_it_was_stacked_gets_a_fresh_product(alone):
    xs, w = operands(ml_dtypes.bfloat16, 4, 2, 5, 3, seed=2)
    _rank_products.prepare(xs)
    for x in xs[:2]:
        exact_matmul(x, w.T)  # the second asks: the others' products are stacked now
    xs[3][1, 2] = -xs[3][1, 2] * 2 + 1  # in place, after it was stacked
    for x in xs[2:]:
        assert np.array_equal(bits(exact_matmul(x, w.T)), bits(reference(x, w.T)))
    assert len(alone) == 3  # rank 0's own, the stack, rank 3's fresh one


@pytest.mark.parametrize("collide", [False, True])
def test_a_rank_with_other_weights_computes_its_own(alone, collide, monkeypatch):
    if collide:  # every partner's hash equal: the bytes compared on a hit keep them apart
        monkeypatch.setattr(_rank_products.xxhash, "xxh3_64_intdigest", lambda data: 0)
    xs, w = operands(ml_dtypes.bfloat16, 4, 2, 5, 3, seed=3)
    v = w.copy()
    v[0, 0] = -v[0, 0] * 4 + 1
    partners = [w, w, v, w]  # rank 2's differ (tensor parallelism: each rank its own piece)
    _rank_products.prepare(xs)
    for x, p in zip(xs, partners):
        assert np.array_equal(bits(exact_matmul(x, p.T)), bits(reference(x, p.T)))
    assert len(alone) == 3  # rank 0's own, the stack (ranks 1, 2, 3) for w, rank 2's own for v
    # and a product nobody else asks for is the first one's own: no stack
    alone.clear()
    _rank_products.prepare(xs)
    exact_matmul(xs[0], w.T)
    exact_matmul(xs[1], v.T)
    assert len(alone) == 2


def test_a_product_that_is_not_finite_is_left_to_each_rank(alone):
    xs, w = operands(ml_dtypes.bfloat16, 3, 2, 4, 3, seed=4, spread=2)
    xs[2][0, 1] = np.inf  # the stacked product holds an inf or NaN: not used, each rank its own as before
    _rank_products.prepare(xs)
    got = [exact_matmul(x, w.T) for x in xs]
    assert len(alone) == 1 + 1 + 2  # rank 0's own, the stack (unused), ranks 1 and 2 their own
    for x, g in zip(xs, got):
        assert np.array_equal(bits(g), bits(_exact_matmul._exact_alone(x, w.T)), equal_nan=False)


def test_nothing_is_stacked_without_a_prepared_batch_or_for_operands_that_do_not_stack(alone):
    xs, w = operands(ml_dtypes.bfloat16, 3, 2, 4, 3, seed=5)
    for x in xs:
        exact_matmul(x, w.T)
    assert len(alone) == 3
    _rank_products.prepare([xs[0], xs[1].astype(np.float16)])  # two dtypes: no batch
    assert _rank_products._batch[0] is None
    _rank_products.prepare([xs[0], xs[0]])  # one distinct tensor: no batch
    assert _rank_products._batch[0] is None
    _rank_products.prepare(xs)
    clear_kept_operands()  # forgets the batch too
    assert _rank_products._batch[0] is None


@pytest.mark.parametrize("workers", [1, 2])
def test_a_zero3_step_stacks_its_ranks_forward_and_dx_products_and_equals_the_oracle(workers, alone):
    model, n = MLP([32, 96, 64, 16]), 32  # 32 ranks: the hint's gate by count (_kernels.py), the ops being small
    params = model.init_params(np.random.default_rng(0))
    batches = make_regression(np.random.default_rng(1), n, 8, [32, 16])
    policy = get_precision("bf16-mixed")
    # stack_ranks=False: the loop over ranks, where the hint serves (by default one worker runs each layer's op once
    # for every rank: models/_stacked.py, tests/test_stacked_ranks.py)
    engine = ZeroEngine(model, Cluster(n, workers=workers, stack_ranks=False), 3, Adam(lr=1e-3), policy, params=params)
    alone.clear()  # make_regression's teacher ran its own products
    engine.step(batches)
    stacked = sum(1 for shape in alone if shape[0] == 8 * (n - 1))
    # forward and dx of each of three layers: one stacked product each; each rank's dW (dy.T @ x) its own
    assert stacked == 6 and len(alone) == 6 + 6 + 3 * n
    oracle = Reference(model, Adam(lr=1e-3), policy, world_size=n, params=params, order="ring-native")
    oracle.step(batches)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))


@pytest.mark.parametrize("rows", [32, 64])  # a stack of 21,504 elements (facts by content), of 43,008 (an entry)
def test_a_stacked_operand_is_used_once_and_kept_nowhere(rows):
    # the stack is made for one product: its float64 copy and facts are for that product alone, so the operand caches
    # hold nothing of it afterwards (kept, it would never be found again and would push out the weights' entry); the
    # weights are kept as before, and every rank's block has the bits of its own product made alone
    from zerosim.precision.arithmetic import _operand_cache

    xs, w = operands(ml_dtypes.bfloat16, 8, rows, 96, 512, seed=9, spread=4)
    w = np.frombuffer(w.tobytes(), w.dtype).reshape(w.shape)  # a ZeRO-3 gather's immutable window: stacked by address
    _rank_products.prepare(xs)
    got = [exact_matmul(x, w.T) for x in xs]
    stack_bytes = 7 * rows * 96 * 2
    assert [e.bits.shape for e in _operand_cache._entries.values()] == [(512, 96)]  # w.T's matrix, kept
    assert all(len(data) != stack_bytes for data, _, _ in _operand_cache._facts_kept.values())
    for x, g in zip(xs, got):
        assert np.array_equal(bits(g), bits(_exact_matmul._exact_alone(x, w.T)))

"""The meta backend against the numpy simulator: same shapes, same trace, same ledgers, no data.

The numpy backend is what we can see; the meta backend must record exactly what it records (except
the ring's own working buffers, kind "comm", and activations, which the meta model leaves out), so
that what it reports at 7B-175B scale can be trusted.
"""

import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Adam, Cluster, MixedPrecision, ZeroEngine
from zerosim.analysis.costs import get_preset
from zerosim.collectives import all_gather, all_reduce, reduce_scatter
from zerosim.models import make_regression
from zerosim.models.gpt import GPT, MetaGPT
from zerosim.models.meta import MetaModel, like
from zerosim.precision import cast
from zerosim.precision.cast import MetaArray, MetaDataError, has_values

BF16 = np.dtype(ml_dtypes.bfloat16)
# the ring's scratch (simulator's own) and activations (left out by the meta model)
NOT_ENGINE = ("comm", "activations")


# ---------------------------------------------------------------- MetaArray answers like numpy

INDEXES = [  # (shape, key): numpy's answer on a real array is the expected shape
    ((10,), slice(2, 7)),
    ((10,), slice(None, None, 3)),
    ((10,), slice(8, 100)),  # past the end: clipped, as numpy does
    ((10,), slice(5, 2)),  # empty
    ((4, 6), (slice(1, 3), 2)),
    ((4, 6), 3),
    ((4, 6), Ellipsis),
    ((5,), Ellipsis),
    ((), Ellipsis),  # the whole array, a 0-d one too (`out[...] = r`)
    ((2, 3, 4), (Ellipsis, slice(1, None))),
    ((5,), None),
]


@pytest.mark.parametrize("shape, key", INDEXES)
def test_indexing_gives_numpys_shape(shape, key):
    assert MetaArray(shape, np.float16)[key].shape == np.zeros(shape)[key].shape


@pytest.mark.parametrize(
    "shape, new", [((12,), (3, 4)), ((12,), (-1, 6)), ((3, 4), (12,)), ((3, 4), -1), ((0,), (0, 5))]
)
def test_reshape_like_numpy(shape, new):
    assert MetaArray(shape, np.float32).reshape(new).shape == np.zeros(shape).reshape(new).shape


@pytest.mark.parametrize("shape", [(3, 4), (np.int64(3), np.int32(4)), (3.0, 4), (True, 4), [3, 4], 7, np.int64(7),
                                   np.array([3, 4]), ()])
def test_a_shape_is_numpys_whatever_it_is_given_as(shape):
    """Every shape made of Python ints, as numpy's own arrays report theirs: the views and copies a step makes reuse
    it as it is (MetaArray._of), so nothing downstream ever holds a numpy integer or a float."""
    a = MetaArray(shape, "float32")
    want = np.empty(np.asarray(shape, dtype=np.int64).tolist() if np.ndim(shape) else int(shape)).shape
    assert a.shape == want and all(type(n) is int for n in a.shape) and a.dtype == np.dtype(np.float32)
    for b in (a.T, a.copy(), a.ravel(), a.reshape(a.shape), a[...], a.astype(np.float16)):
        assert all(type(n) is int for n in b.shape) and isinstance(b.dtype, np.dtype)


MADE = [  # every way a step makes a data-less array, done to a numpy array of the same shape and dtype alike
    lambda a: a,
    lambda a: a[1:, ::2],
    lambda a: a[0],
    lambda a: a.reshape(-1),
    lambda a: a.reshape(6, 2),
    lambda a: a.T,
    lambda a: a.copy(),
    lambda a: a.ravel(),
    lambda a: a.astype(np.float64),
    lambda a: a.reshape(-1).view(np.uint8),
    lambda a: a * 2,
    lambda a: a <= 0,
    lambda a: np.zeros_like(a, dtype=np.int8),
    lambda a: np.concatenate([a.reshape(-1), a.reshape(-1)[:5]]),
    lambda a: np.empty((7, 3), np.float32, like=a),
]


@pytest.mark.parametrize("make", MADE)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_every_array_made_has_numpys_bytes(make, dtype):
    """A data-less array's nbytes, set when it is made (whichever way), is what numpy's array made alike reports."""
    real, meta = make(np.zeros((3, 4), dtype)), make(MetaArray((3, 4), dtype))
    assert (meta.shape, meta.dtype, meta.nbytes) == (real.shape, real.dtype, real.nbytes)
    assert type(meta.nbytes) is int


@pytest.mark.bad_input("cluster and backends")
def test_reshape_to_a_wrong_size_is_an_error():
    with pytest.raises(ValueError, match="cannot reshape"):
        MetaArray((12,), np.float32).reshape(5, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, BF16])
def test_size_and_bytes(dtype):
    a = MetaArray((3, 5), dtype)
    assert (a.ndim, a.size, a.itemsize, a.nbytes, len(a)) == (
        2,
        15,
        np.dtype(dtype).itemsize,
        15 * np.dtype(dtype).itemsize,
        3,
    )
    assert a.T.shape == (5, 3)
    assert a.astype(np.float32).dtype == np.float32 and a.astype(np.float32).shape == (3, 5)
    assert a.copy().shape == a.shape and a.copy() is not a


ARITH = [  # (operation, operand dtypes): the result dtype numpy gives (NEP 50 weak scalars included)
    (lambda a, b: a + b, (np.float16, np.float16)),
    (lambda a, b: a * b, (np.float16, np.float32)),
    (lambda a, b: a / np.float32(4), (np.float16, np.float16)),
    (lambda a, b: a * 0.5, (BF16, BF16)),
    (lambda a, b: a / b, (BF16, np.float32)),
    (lambda a, b: np.sqrt(a), (np.float32, np.float32)),
    (lambda a, b: a <= 0, (np.float16, np.float16)),
    (lambda a, b: -a, (np.float64, np.float64)),
]


@pytest.mark.parametrize("op, dtypes", ARITH)
def test_arithmetic_gives_numpys_shape_and_dtype(op, dtypes):
    real = op(np.ones((2, 3), dtypes[0]), np.ones(3, dtypes[1]))
    meta = op(MetaArray((2, 3), dtypes[0]), MetaArray((3,), dtypes[1]))
    assert (meta.shape, meta.dtype) == (real.shape, real.dtype)


def test_arithmetic_with_a_real_array():
    meta = MetaArray((2, 3), np.float16) * np.ones(3, np.float32)
    assert (meta.shape, meta.dtype) == ((2, 3), np.float32)


def test_in_place_keeps_the_target():
    a = MetaArray((4,), np.float32)
    b = a
    b *= np.float32(0.5)
    b += MetaArray((4,), np.float32)
    assert b is a and a.dtype == np.float32


def test_assignment_writes_nothing_but_checks_the_index():
    a = MetaArray((4,), np.float16)
    a[1:3] = 7.0
    a[...] = 0
    with pytest.raises(IndexError):
        a[9] = 1.0


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("ask", [np.asarray, float, bool, lambda a: a.tolist(), lambda a: np.sum(a)])
def test_asking_for_values_is_a_clear_error(ask):
    with pytest.raises(MetaDataError):
        ask(MetaArray((3,), np.float32))


def test_numpy_creation_with_like_gives_meta():
    proto = MetaArray((1,), np.float32)
    z = np.zeros(10, dtype=np.float64, like=proto)
    assert not has_values(z) and z.shape == (10,) and z.dtype == np.float64
    c = np.concatenate([MetaArray((3,), np.float16), MetaArray((4,), np.float16)])
    assert c.shape == (7,) and c.dtype == np.float16


@pytest.mark.parametrize("fmt", ["fp64", "fp32", "fp16", "bf16", "fp8_e4m3"])
def test_cast_of_meta_changes_only_the_dtype(fmt):
    a = MetaArray((5,), np.float32)
    out = cast(a, fmt)
    assert not has_values(out) and out.shape == (5,) and out.dtype == cast(np.zeros(1, np.float32), fmt).dtype
    assert not has_values(a) and has_values(np.zeros(1))


def test_the_backend_allocates_meta_through_the_ledger():
    c = Cluster(3, backend="meta", hosted="all")
    buf = c.ranks[1].ledger.alloc("x", 1000, np.float16, "params", fill=0)
    assert not has_values(buf.array) and c.ranks[1].ledger.current("params") == 2000


# ---------------------------------------------------------------- collectives: the same trace, O(N)

def _pair(n, granularity):
    return Cluster(n, trace=granularity), Cluster(n, backend="meta", hosted="all", trace=granularity)


def _same_trace(a, b):
    assert a.trace.calls == b.trace.calls
    assert a.trace.events == b.trace.events  # every field but the copied values


@given(n=st.integers(1, 7), length=st.integers(0, 40), dtype=st.sampled_from([np.float32, np.float16, BF16]),
       wire=st.sampled_from([None, "fp32"]), op=st.sampled_from(["sum", "avg", "avg_premul", "avg_predivide"]),
       granularity=st.sampled_from(["hop", "call"]))
def test_reduce_scatter_and_all_reduce_trace_like_the_ring(n, length, dtype, wire, op, granularity):
    real, meta = _pair(n, granularity)
    got_real = reduce_scatter(real, [np.ones(length, dtype) for _ in range(n)], op=op, wire=wire)
    got_meta = reduce_scatter(meta, [MetaArray((length,), dtype) for _ in range(n)], op=op, wire=wire)
    assert [(g.shape, g.dtype) for g in got_meta] == [(g.shape, g.dtype) for g in got_real]
    got_real = all_reduce(real, [np.ones((length, 1), dtype) for _ in range(n)], op=op, wire=wire)
    got_meta = all_reduce(meta, [MetaArray((length, 1), dtype) for _ in range(n)], op=op, wire=wire)
    assert [(g.shape, g.dtype) for g in got_meta] == [(g.shape, g.dtype) for g in got_real]
    _same_trace(real, meta)


@given(n=st.integers(1, 7), data=st.data(), granularity=st.sampled_from(["hop", "call"]))
def test_all_gather_and_counts_trace_like_the_ring(n, data, granularity):
    counts = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    length = data.draw(st.integers(0, 30))
    real, meta = _pair(n, granularity)
    s = -(-length // n)
    uneven = [max(0, min(length, (r + 1) * s) - r * s) for r in range(n)]  # reduce-scatter's real shard sizes
    for sizes, kw in ((counts, {"counts": counts}), (uneven, {}), (uneven, {"wire": "fp32"})):
        got_real = all_gather(real, [np.ones(k, np.float16) for k in sizes], **kw)
        got_meta = all_gather(meta, [MetaArray((k,), np.float16) for k in sizes], **kw)
        assert [(g.shape, g.dtype) for g in got_meta] == [(g.shape, g.dtype) for g in got_real]
    counts_rs = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    total = sum(counts_rs)
    reduce_scatter(real, [np.ones(total, np.float16) for _ in range(n)], counts=counts_rs)
    reduce_scatter(meta, [MetaArray((total,), np.float16) for _ in range(n)], counts=counts_rs)
    _same_trace(real, meta)


def test_call_granularity_is_one_event_per_rank_at_1024_ranks():
    n, s = 1024, 1000
    c = Cluster(n, backend="meta", hosted="all", trace="call")
    reduce_scatter(c, [MetaArray((n * s,), np.float16)] * n, tag="g")
    all_gather(c, [MetaArray((s,), np.float16)] * n, tag="p")
    assert len(c.trace.events) == 2 * n
    assert {e.bytes for e in c.trace.events} == {(n - 1) * s * 2}  # (N-1)/N of the buffer, per phase


def test_meta_inputs_are_checked():
    c = Cluster(3, backend="meta", hosted="all")
    with pytest.raises(ValueError, match="one array per local rank"):
        reduce_scatter(c, [MetaArray((6,), np.float16)] * 2)
    with pytest.raises(ValueError, match="same dtype"):
        reduce_scatter(c, [MetaArray((6,), np.float16)] * 2 + [MetaArray((6,), np.float32)])
    with pytest.raises(ValueError, match="length"):
        reduce_scatter(c, [MetaArray((6,), np.float16)] * 2 + [MetaArray((5,), np.float16)])
    with pytest.raises(ValueError, match="add up"):
        reduce_scatter(c, [MetaArray((6,), np.float16)] * 3, counts=[1, 1, 1])
    with pytest.raises(ValueError, match="flatten"):
        all_gather(c, [MetaArray((2, 3), np.float16)] * 3)


# ---------------------------------------------------------------- engines: the same ledgers and trace

def meta_twin(model) -> MetaModel:
    """A meta model with exactly `model`'s flat layout: one layer per layer, same window sizes."""
    return MetaModel(
        [(layer.name, b - a) for layer, (a, b) in zip(model.layers, map(model.layer_window, range(len(model.layers))))]
    )


def _engine_events(ledger):
    return [(e.action, e.name, e.kind, e.nbytes, e.phase) for e in ledger.timeline if e.kind not in NOT_ENGINE]


@given(
    widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    n=st.integers(1, 6),
    stage=st.integers(0, 3),
    precision=st.sampled_from(
        ["fp16-mixed", "bf16-mixed", "fp32", "bf16-pure", MixedPrecision(compute="fp16", reduce="fp32")]
    ),
    granularity=st.sampled_from(["hop", "call"]),
)
def test_meta_engine_records_what_the_numpy_engine_records(widths, n, stage, precision, granularity):
    mlp = MLP(widths)
    real = ZeroEngine(mlp, Cluster(n, trace=granularity), stage, Adam(lr=1e-3), precision)
    real.step(make_regression(np.random.default_rng(0), n, 2, widths))
    twin = meta_twin(mlp)
    meta = ZeroEngine(
        twin, Cluster(n, backend="meta", hosted="all", trace=granularity), stage, Adam(lr=1e-3), precision
    )
    meta.step(twin.batches(meta.cluster, 2))
    for a, b in zip(real.cluster.ranks, meta.cluster.ranks):
        assert _engine_events(b.ledger) == _engine_events(a.ledger)  # every alloc and free, in order, same phase
        drop = lambda d: {k: v for k, v in d.items() if k not in NOT_ENGINE}  # noqa: E731
        assert drop(b.ledger.peak_by_kind()) == drop(a.ledger.peak_by_kind())
    _same_trace(real.cluster, meta.cluster)


def test_meta_loss_has_no_value():
    twin = meta_twin(MLP([2, 3]))
    cluster = Cluster(2, backend="meta", hosted="all")
    losses = ZeroEngine(twin, cluster, 1, Adam()).step(twin.batches(cluster))
    assert all(np.isnan(x) for x in losses)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_7_5b_step_on_64_ranks_allocates_nothing(stage):
    model = MetaModel.from_preset(get_preset("zero-paper-7.5b"))
    tracemalloc.start()
    engine = ZeroEngine(model, Cluster(64, backend="meta", hosted="all", trace="call", timeline=False), stage, Adam())
    engine.step(model.batches(engine.cluster))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64e6  # bookkeeping only (the real model states would be 1.9-120 GB per rank, x64)
    assert engine.cluster.ranks[63].ledger.peak() > 1.8e9


def test_block_units_merge_each_transformer_block():
    preset = get_preset("gpt2-small")
    modules, blocks = MetaModel.from_preset(preset), MetaModel.from_preset(preset, unit="block")
    assert modules.num_params == blocks.num_params == preset.total
    assert [layer.name for layer in blocks.layers] == ["wte", "wpe"] + [f"h.{i}" for i in range(12)] + ["ln_f"]
    assert blocks.layers[2].count == 12 * 768**2 + 13 * 768  # the GPT-2 block: 12d² + 13d


# ---------------------------------------------------------------- one representative rank stands for all

@given(
    layers=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    n=st.integers(1, 12),
    stage=st.integers(0, 3),
    precision=st.sampled_from(
        ["fp16-mixed", "bf16-mixed", "fp32", "bf16-pure", MixedPrecision(compute="fp16", reduce="fp32")]
    ),
    optimizer=st.sampled_from(["adam", "sgd", "lion", "adan"]),
    k=st.integers(1, 2),
)
def test_the_representative_rank_accounts_for_every_rank(layers, n, stage, precision, optimizer, k):
    # The meta backend's default hosts rank 0 only and summarises the ring in closed form: its ledger must be
    # every rank's ledger (event by event), and the trace's bytes every rank's bytes, exactly as when all N
    # ranks are hosted ("all", which the tests above hold equal to the numpy simulator).
    from zerosim import get_optimizer

    model = MetaModel([(f"l{i}", c) for i, c in enumerate(layers)])
    runs = {}
    for hosted in ("all", "representative"):
        cluster = Cluster(n, backend="meta", hosted=hosted, trace="call")
        engine = ZeroEngine(model, cluster, stage, get_optimizer(optimizer), precision, accumulation_steps=k)
        engine.step([[batch] * k for batch in model.batches(cluster)] if k > 1 else model.batches(cluster))
        runs[hosted] = cluster
    every, lone = runs["all"], runs["representative"]
    assert len(lone.ranks) == 1 and every.trace.calls == lone.trace.calls
    stand_in = lone.ranks[0].ledger
    everything = lambda led: [(e.action, e.name, e.kind, e.nbytes, e.phase) for e in led.timeline]  # noqa: E731  staging too
    for rank in every.ranks:
        assert everything(rank.ledger) == everything(stand_in), rank.index
        assert rank.ledger.peak_by_kind() == stand_in.peak_by_kind() and rank.ledger.peak() == stand_in.peak()
    assert every.trace.sent_totals(n) == lone.trace.sent_totals(n) == [every.trace.bytes_sent(r) for r in range(n)]
    assert [lone.trace.bytes_sent(r, collective="all_gather") for r in range(n)] == [
        every.trace.bytes_sent(r, collective="all_gather") for r in range(n)
    ]
    assert every.trace.volume_by_collective() == lone.trace.volume_by_collective()


def test_a_representative_rank_keeps_a_per_call_trace():
    with pytest.raises(ValueError, match="representative rank keeps one summary per call"):
        Cluster(8, backend="meta", trace="hop")
    assert (
        Cluster(8, backend="meta").trace.granularity == "call"
        and Cluster(8, backend="meta", hosted="all").trace.granularity == "hop"
    )


# ---------------------------------------------------------------- one way to model a tensor without data

def test_a_tensor_without_data_is_one_class_wherever_it_is_made():
    """The meta backend's arrays, a meta model's initial weights and the costs' measuring arrays are one class,
    MetaArray (precision/cast/_meta_array.py): a meta model's weights were once a zero-stride broadcast of real zeros
    (values a reader could read) beside the backend's MetaArray (none to read)."""
    from zerosim.backends._meta import MetaBackend

    backend_array = MetaBackend(2).empty((3,), np.float32)
    for weights in (MetaModel.from_preset(get_preset("zero-paper-7.5b")).init_params(),
                    MetaGPT(GPT(9, 8, 2, 1, 6)).init_params()):
        assert type(weights) is type(backend_array) is MetaArray and weights.dtype == np.float32
        with pytest.raises(MetaDataError):
            np.asarray(weights)


def test_a_twins_arrays_checked_once_are_what_metaarray_makes():
    # `like` on the meta backend (models/meta/_arrays.py) checks each shape and dtype once and makes every later array
    # of the pair from that check: each must be a new MetaArray equal to what the constructor makes (Python ints, a
    # np.dtype), whatever spelling of the shape and dtype came first; a list shape and a bad dtype as the constructor.
    x = MetaArray((2,), np.float32)
    made = [like(x, (np.int64(3), 4), np.float32), like(x, (3, 4), np.float32), like(x, (3, 4), "float32")]
    assert len({id(a) for a in made}) == 3
    for a in made + [like(x, [3, 4], BF16), like(x, 7, BF16)]:
        b = MetaArray(a.shape, a.dtype)
        assert type(a) is MetaArray and (a.shape, a.dtype) == (b.shape, b.dtype)
        assert all(type(n) is int for n in a.shape) and isinstance(a.dtype, np.dtype)
    assert (like(x, [3, 4], BF16).shape, like(x, 7, BF16).shape) == ((3, 4), (7,))
    with pytest.raises(TypeError):
        like(x, (3, 4), "not a dtype")


def test_a_twins_saved_tensors_are_new_arrays_each_forward():
    # A twin remembers what its forward saves and its backward makes by shape, from shared checked templates
    # (models/meta/_decoder.py): each call must hand out new arrays of the spec's shapes and dtypes, never a template.
    twin = MetaGPT(GPT(64, 32, 2, 2, 16))
    unit, x = twin.layers[1], MetaArray((2, 16, 32), np.float16)
    (out, first), (again, second) = (unit.forward({}, x, "fp16") for _ in range(2))
    assert out is not again and (out.shape, out.dtype) == (again.shape, again.dtype) == (x.shape, np.float16)
    head_out = twin.layers[-1].forward({}, x, "fp16")[0]  # another unit's output: its own shape (B, L, V)
    assert head_out.shape == (2, 16, 64) and head_out is not out
    spec = unit.spec(x.shape, "fp16")
    assert list(first) == list(second) == list(spec)
    for name, (shape, dtype) in spec.items():
        assert first[name] is not second[name] and (first[name].shape, first[name].dtype) == (shape, np.dtype(dtype))
    grads = [unit.backward({}, x, first, "fp16")[1] for _ in range(2)]
    assert all(grads[0][k] is not grads[1][k] and grads[0][k].shape == tuple(unit.param_shapes[k]) for k in grads[0])

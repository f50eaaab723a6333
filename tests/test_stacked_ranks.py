"""One computation for every rank's op (models/_stacked.py) gives the bits, events and ledgers of the loop over ranks.

Yardsticks: the same engine run rank by rank (`Cluster(N, stack_ranks=False)`, the naive twin: each rank's `Pass.run`
on its own micro-batch, what the oracle tests check), the whole log pickled to bytes, every rank's state bit for bit;
for the layers, each rank's own call on its own rows. Each engine case also counts the stacked computations, so a
case that never stacks fails instead of passing for nothing. No test here times anything.
"""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest
from helpers import same, snapshot
from hypothesis import given
from hypothesis import strategies as st

import zerosim.parallel.data._compute as compute_module
import zerosim.parallel.data._gather as gather_module
from zerosim import MLP, Cluster, ZeroEngine, get_optimizer, get_precision
from zerosim.models import GELU, HalfMSE, Linear, ReLU, make_classification, make_regression
from zerosim.parallel.data import CommSchedule, Hooks
from zerosim.models.layers import _basic

# (stage, model options, precision, optimizer, ranks, rows per rank, engine options): each a path the stacked ops take
CASES = [
    (3, {}, "bf16-mixed", "adam", 4, 3, {}),  # the yardstick's path: ZeRO-3, the shared gathered window
    (2, {}, "bf16-mixed", "adam", 3, 5, {}),  # each rank's own params buffer: weights compared bit for bit
    (3, {"activation": "gelu"}, "fp16-mixed", "sgd", 3, 4, {}),  # GELU (portable tanh); fp16 with its loss scale
    (3, {}, "fp32", "adamw", 2, 3, {"accumulation_steps": 2}),  # two micro-steps
    (3, {"bias": False}, "bf16-mixed", "lion", 5, 2, {"checkpoint": True}),  # checkpoints kept, recomputes from them
    (0, {"activation": "gelu"}, "bf16-mixed", "adam", 3, 4, {"checkpoint": True, "accumulation_steps": 2}),
    (3, {}, "bf16-mixed", "adam", 4, 3, {"recipe": "fsdp2"}),  # per-parameter chunks: a copy per rank, compared
    (3, {}, "bf16-mixed", "adam", 4, 3, {"recipe": "deepspeed-zero3", "comm": CommSchedule(reduce_bucket_size=40)}),
    (1, {}, "bf16-mixed", "adam", 4, 3, {"comm": CommSchedule(reduce_bucket_size=40)}),  # the last micro-step's buckets
    (0, {}, "fp16-mixed", "adam", 3, 4, {"accumulation_steps": 2}),  # a micro-step as one run: op by op inside it
    (1, {"activation": "gelu"}, "bf16-mixed", "sgd", 4, 2, {}),
    (3, {"loss": "xent"}, "bf16-mixed", "adam", 3, 4, {}),  # cross-entropy's loss op rank by rank, the layers stacked
    ("hpz", {}, "bf16-mixed", "adam", 4, 3, {"shard_group": 2}),  # backward gathers from the secondary pieces
    # fp32 dW of 32 rows of 300 and 250 wide, rank by rank (_basic.py `_BATCHED_BELOW`), written into the packed rows
    (3, {}, "fp32", "adam", 2, 32, {"widths": [5, 300, 250, 3]}),
    (2, {}, "fp32", "sgd", 3, 32, {"widths": [5, 300, 250, 3]}),
    # stages 0/1 in fp32: the first micro-step's dW and db written into each rank's gradient buffer (_reduce.py
    # `grads_room`), batched (small) and rank by rank (300 and 250 wide); the second micro-step adds to them
    (1, {}, "fp32", "adam", 4, 3, {"accumulation_steps": 2}),
    (0, {"bias": False}, "fp32", "sgd", 3, 32, {"widths": [5, 300, 250, 3], "accumulation_steps": 2}),
    (1, {}, "fp32", "adamw", 2, 32, {"widths": [5, 300, 250, 3]}),
]


def _run(case, stack: bool, steps: int = 3):
    stage, options, precision, opt, n, rows, extra = case
    extra = dict(extra)
    k = extra.pop("accumulation_steps", 1)
    widths = extra.pop("widths", [5, 7, 6, 3])
    model = MLP(widths, **options)
    make = make_classification if options.get("loss") == "xent" else make_regression
    data = make(np.random.default_rng(2), n * steps * k, rows, widths)
    engine = ZeroEngine(model, Cluster(n, stack_ranks=stack), stage, get_optimizer(opt, lr=1e-2), precision,
                        params=model.init_params(np.random.default_rng(3)), accumulation_steps=k, **extra)
    losses = []
    for s in range(steps):
        mine = [data[(s * n + r) * k:(s * n + r + 1) * k] for r in range(n)]
        losses.append(engine.step(mine if k > 1 else [m[0] for m in mine]))
    return engine, losses


def _native(case):
    """`case` on the machine's sgemm ("native"): its products are not rows apart, so each rank's is made as its own
    matrix of a stack (models/_stacked.py)."""
    stage, options, precision, *rest = case
    return (stage, options, get_precision(precision).with_(arithmetic="native"), *rest)


# the yardstick's 10k-parameter MLP on 64 ranks of 8 rows (benchmarks/yardstick.py, "small"): its 512 stacked rows
# multiplied as one (512, K) product by OpenBLAS 0.3.31's SkylakeX kernels part from the ranks' own (8, K) products in
# the last bit (seen when the rows were stacked; a smaller case's sgemm agrees either way, so it tests nothing there)
NATIVE_MANY = (3, {}, "bf16-mixed", "adam", 64, 8, {"widths": [32, 96, 64, 16]})


def _case_id(c) -> str:
    precision = c[2] if isinstance(c[2], str) else f"{c[2].compute_format.name}-{c[2].arithmetic}"
    return f"{c[0]}-{precision}-{c[3]}-{'-'.join(map(str, c[6])) or 'plain'}-{c[4]}"


@pytest.mark.parametrize("case", CASES + [_native(c) for c in CASES] + [_native(NATIVE_MANY)], ids=_case_id)
def test_stacked_ranks_give_the_loops_bits_log_and_ledgers(case, monkeypatch):
    calls = []
    real = compute_module.run_stacked
    monkeypatch.setattr(compute_module, "run_stacked", lambda *a: calls.append(a[1]) or real(*a))
    stacked, stacked_losses = _run(case, True)
    ran = len(calls)
    loop, loop_losses = _run(case, False)
    assert ran > 0 and len(calls) == ran  # it ran stacked, and never with stack_ranks=False
    assert stacked_losses == loop_losses
    assert same(snapshot(stacked), snapshot(loop))
    assert pickle.dumps(stacked.cluster.trace.log) == pickle.dumps(loop.cluster.trace.log)
    for a, b in zip(stacked.cluster.ranks, loop.cluster.ranks):
        assert a.ledger.timeline == b.ledger.timeline and a.ledger.peak_by_kind() == b.ledger.peak_by_kind()


def test_checkpointed_forwards_and_recomputes_are_stacked(monkeypatch):
    # the forward that keeps its block's input, the recompute that starts from it and the ones after it run once for
    # every rank (their checkpoints kept and freed rank by rank at the landing); "keep input" computes nothing and
    # stays on the loop. The bits, log and ledgers are the loop's: the engine cases above
    ops = []
    real = compute_module.run_stacked
    monkeypatch.setattr(compute_module, "run_stacked", lambda *a: ops.append(a[1]) or real(*a))
    _run(CASES[4], True, steps=1)
    kinds = {(op.kind, op.checkpoint, op.from_checkpoint) for op in ops}
    assert {("forward", True, False), ("forward", False, False), ("recompute", False, True)} <= kinds
    assert "keep input" not in {kind for kind, _, _ in kinds}


@pytest.mark.parametrize("stack", [True, False])
def test_an_op_level_selective_checkpoint_keeps_the_loop_and_its_refusal(stack):
    # what an op-sac checkpoint keeps besides the block's input is `Pass._selective`'s to say; for an MLP's layers,
    # which keep no products' outputs, it refuses: stacked or not, the same refusal
    model = MLP([5, 7, 6, 3])
    model.checkpoint = "op-sac"
    engine = ZeroEngine(model, Cluster(3, stack_ranks=stack), 3, get_optimizer("adam", lr=1e-2), "bf16-mixed",
                        params=model.init_params(np.random.default_rng(3)), checkpoint=True)
    with pytest.raises(ValueError, match="op-level selective checkpointing"):
        engine.step(make_regression(np.random.default_rng(2), 3, 4, [5, 3]))


def test_ranks_whose_weights_differ_each_use_their_own(monkeypatch):
    # stage 2: rank 1's params changed by hand (a replica gone wrong): the weights' bit comparison refuses one
    # computation for fc0, so each rank multiplies by its own, as the loop does; the other layers still stack
    case = (2, {}, "bf16-mixed", "adam", 3, 4, {})
    layers = []
    real = compute_module.run_stacked
    monkeypatch.setattr(compute_module, "run_stacked", lambda *a: layers.append(a[1].layer) or real(*a))

    def run(stack):
        stage, options, precision, opt, n, rows, _ = case
        model = MLP([5, 7, 6, 3])
        engine = ZeroEngine(model, Cluster(n, stack_ranks=stack), stage, get_optimizer(opt, lr=1e-2), precision,
                            params=model.init_params(np.random.default_rng(3)))
        engine.cluster.ranks[1].params.array[3] += 1  # bf16: one weight of fc0 moves
        data = make_regression(np.random.default_rng(2), n, rows, [5, 3])
        return engine, engine.step(data)

    (a, la), (b, lb) = run(True), run(False)
    assert la == lb and same(snapshot(a), snapshot(b))
    assert pickle.dumps(a.cluster.trace.log) == pickle.dumps(b.cluster.trace.log)
    assert set(layers) == {-1, 1, 2, 3, 4}  # fc0 (layer 0) went rank by rank, forward and backward; -1: the loss


def _stacked_and_loop(stage, n, steps, write, monkeypatch, **options):
    """The engine run stacked and as the loop, `write(engine, s)` before each step s (a user's hand on the replicas),
    each step's stacked layers recorded: ((stacked engine, its losses, [layers stacked in step s]), (loop, losses))."""
    per_step = []
    real = compute_module.run_stacked
    monkeypatch.setattr(compute_module, "run_stacked", lambda *a: per_step[-1].append(a[1].layer) or real(*a))

    def run(stack):
        model = MLP([5, 7, 6, 3])
        engine = ZeroEngine(model, Cluster(n, stack_ranks=stack), stage, get_optimizer("adam", lr=1e-2), "fp32",
                            params=model.init_params(np.random.default_rng(3)), **options)
        data = make_regression(np.random.default_rng(2), n * steps, 4, [5, 3])
        losses = []
        for s in range(steps):
            write(engine, s)
            per_step.append([])
            losses.append(engine.step(data[s * n:(s + 1) * n]))
        return engine, losses

    stacked = run(True)
    return (*stacked, per_step[:steps]), run(False)


FC0_WEIGHT = 3  # an element of fc0's W in the flat params (fc0 comes first: W (7, 5) then b)


@pytest.mark.parametrize("stage", [0, 1])
def test_a_replica_written_between_steps_is_compared_again_and_read_as_written(stage, monkeypatch):
    # stages 0/1 run a micro-step as one run, each layer's replicas compared once in it (_gather.py `shared_units`):
    # step 0 finds every layer alike and stacks it; the user then moves one weight of rank 1's fc0, and step 1 must
    # compare again, send fc0 rank by rank (forward and backward) and give rank 1 its own bits: the loop's, the same
    # write made. An answer kept past its run (a step) would stack fc0 with rank 0's weights, and rank 1's bits part
    def write(engine, s):
        if s == 1:
            engine.cluster.ranks[1].params.array[FC0_WEIGHT] += 1

    (a, la, layers), (b, lb) = _stacked_and_loop(stage, 3, 2, write, monkeypatch)
    assert {0, 2, 4} <= set(layers[0])  # step 0: every Linear stacked (layers 1, 3 are ReLUs)
    assert 0 not in layers[1] and {2, 4} <= set(layers[1])  # step 1: fc0 rank by rank, the others still stacked
    assert la == lb and same(snapshot(a), snapshot(b))
    assert pickle.dumps(a.cluster.trace.log) == pickle.dumps(b.cluster.trace.log)


def test_a_replica_written_inside_a_step_by_a_hook_is_read_as_written(monkeypatch):
    # stage 2 reduces each unit's gradients between its backward and the next op (`ZeroEngine.run` calls the
    # `reduce_unit` hook there), so a run is one op and nothing is kept from one to the next: a hook that moves rank
    # 1's fc0 weight after fc1's reduction (a replica gone wrong in mid-step) has fc0's backward run rank by rank with
    # rank 1's new bits, as the loop does. An answer kept from fc0's forward would stack its backward with rank 0's
    def reduce_unit(ctx, layer, first):
        if layer == 2:  # fc1, reduced after its backward, before fc0's
            ctx.ranks[1].params.array[FC0_WEIGHT] += 1
        return Hooks().reduce_unit(ctx, layer, first)

    (a, la, layers), (b, lb) = _stacked_and_loop(2, 3, 1, lambda e, s: None, monkeypatch,
                                                 hooks=Hooks(reduce_unit=reduce_unit))
    assert layers[0].count(0) == 1 and layers[0].count(2) == 2  # fc0's forward stacked, its backward not; fc1 both
    assert la == lb and same(snapshot(a), snapshot(b))
    assert pickle.dumps(a.cluster.trace.log) == pickle.dumps(b.cluster.trace.log)


# (stage, engine options, times a step compares each Linear's replicas): the bit comparison (`_same_bits`, one call per
# tensor and later rank) counted, for the MLP's 3 Linear layers (W and b) on 3 ranks: once in each run of ops that
# reads the layer (_gather.py `shared_units`), never once per op
COMPARES = [
    (1, {}, 1),  # a micro-step is one run: its forward and backward, 2 reads, compare once
    (1, {"accumulation_steps": 2}, 2),  # two micro-steps, two runs: compared again in the second
    (0, {"checkpoint": True}, 1),  # forward, recompute and backward, 3 reads in one run: once
    (2, {}, 2),  # each op a run of its own (its gradients reduced after it, a hook's place): forward and backward
]


@pytest.mark.parametrize("stage, options, times", COMPARES, ids=lambda c: str(c))
def test_each_layers_replicas_are_compared_once_a_run(stage, options, times, monkeypatch):
    calls = []
    real = gather_module._same_bits
    monkeypatch.setattr(gather_module, "_same_bits", lambda a, b: calls.append(a.shape) or real(a, b))
    n, k, model = 3, options.get("accumulation_steps", 1), MLP([5, 7, 6, 3])
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer("adam", lr=1e-2), "fp32",
                        params=model.init_params(np.random.default_rng(3)), **options)
    data = make_regression(np.random.default_rng(2), n * k, 4, [5, 3])
    engine.step([data[r * k:(r + 1) * k] for r in range(n)] if k > 1 else data)
    each = [(7, 5), (7,), (6, 7), (6,), (3, 6), (3,)] * (n - 1)  # every Linear's W and b, against each later rank
    assert sorted(calls) == sorted(each * times)


@pytest.mark.parametrize("widths", [[5, 7, 6, 3], [5, 300, 250, 3]])  # dW batched, and rank by rank
def test_the_first_micro_steps_gradients_are_made_in_each_ranks_buffer(widths, monkeypatch):
    # stage 1, fp32, two micro-steps: the first's stacked backward writes every rank's dW and db into its (Ψ,)
    # gradient buffer itself, so nothing is assigned there after (no `stage_grads` for a stacked op); the second's adds
    # to them (`stage_grads`, rank by rank). The bits are the loop's: CASES above
    staged = []
    real = compute_module.stage_grads
    monkeypatch.setattr(compute_module, "stage_grads", lambda *a: staged.append((a[3], a[5])) or real(*a))
    model, n = MLP(widths), 3
    engine = ZeroEngine(model, Cluster(n), 1, get_optimizer("adam", lr=1e-2), "fp32",
                        params=model.init_params(np.random.default_rng(3)), accumulation_steps=2)
    data = make_regression(np.random.default_rng(2), 2 * n, 4, [widths[0], widths[-1]])
    engine.step([data[2 * r:2 * r + 2] for r in range(n)])
    assert sorted(staged) == sorted([(layer, False) for layer in (0, 2, 4) for _ in range(n)])


def test_a_patched_or_overridden_layer_runs_rank_by_rank(monkeypatch):
    # what `rows_apart` vouches for is the class's own forward and backward: a patched one (a test's injected failure,
    # a learner's own backward) or a subclass's override is run by each rank, as written
    layer = Linear(3, 2)
    assert layer.stacks_rows() and ReLU().stacks_rows() and GELU().stacks_rows()

    class Mine(Linear):
        def backward(self, p, dy, cache, fmt):
            return super().backward(p, dy, cache, fmt)

    assert not Mine(3, 2).stacks_rows()
    monkeypatch.setattr(Linear, "backward", lambda self, p, dy, cache, fmt: None)
    assert not layer.stacks_rows()
    monkeypatch.undo()
    layer.forward = lambda p, x, fmt: None  # on the instance
    assert not layer.stacks_rows()


def test_a_failure_inside_the_stacked_op_leaves_nothing_half_updated(monkeypatch):
    # the stacked op computes for every rank before any rank's state moves: a failure there frees the step's
    # transients, keeps every model state, and the next step gives what a run that never failed gives
    case = (3, {}, "bf16-mixed", "adam", 3, 4, {})
    engine, _ = _run(case, True, steps=1)
    before, states = snapshot(engine), [set(r.ledger.live) for r in engine.cluster.ranks]
    real = Linear.flops

    def failing(self, x_shape, kind):
        if kind == "backward" and self.name == "fc1":
            raise RuntimeError("injected failure in fc1's backward")
        return real(self, x_shape, kind)

    monkeypatch.setattr(Linear, "flops", failing)
    stacked_ops = []
    real_run = compute_module.run_stacked
    monkeypatch.setattr(compute_module, "run_stacked", lambda *a: stacked_ops.append(a[1]) or real_run(*a))
    data = make_regression(np.random.default_rng(7), 3, 4, [5, 3])
    with pytest.raises(RuntimeError, match="injected failure"):
        engine.step(data)
    assert stacked_ops[-1].kind == "backward" and stacked_ops[-1].layer == 2  # it failed inside fc1's stacked op
    assert same(snapshot(engine), before) and [set(r.ledger.live) for r in engine.cluster.ranks] == states
    monkeypatch.undo()
    clean, _ = _run(case, True, steps=1)
    assert same(snapshot(engine), snapshot(clean))
    assert engine.step(data) == clean.step(data) and same(snapshot(engine), snapshot(clean))


# -- the layers: n ranks' rows as one batch against each rank's own call -------------------------------------------

# magnitudes spread so that float32 sums of a rank's rows round, in an order that shows: 2**25 + 1 + 1 - 2**25 is 0
# added left to right in float32 and 2 in another order
VALUES = [2.0**25, -(2.0**25), 1.0, -1.0, 3.0, 0.5, -0.75, 2.0**-9, 0.0, -0.0, 1.5 * 2**12, -(2.0**13)]
FORMATS = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
PRESETS = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "fp32": "fp32"}


@st.composite
def stacked_case(draw):
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    n, rows, d_in, d_out = (draw(st.integers(2, 5)), draw(st.integers(1, 6)), draw(st.integers(1, 7)),
                            draw(st.integers(1, 5)))
    finite = 2.0**14 if fmt == "fp16" else 2.0**30  # fp16 holds up to 65,504

    def array(shape):
        flat = draw(st.lists(st.sampled_from([v for v in VALUES if abs(v) < finite]), min_size=int(np.prod(shape)),
                             max_size=int(np.prod(shape))))
        return np.array(flat, np.float32).reshape(shape).astype(FORMATS[fmt])

    return fmt, n, array((n * rows, d_in)), array((n * rows, d_out)), array((d_out, d_in)), array((d_out,))


@given(stacked_case())
def test_each_ranks_rows_of_a_stacked_batch_have_the_bits_of_its_own_call(case):
    fmt, n, x, dy, w, b = case
    f = get_precision(PRESETS[fmt]).compute_format  # portable kernels, the default
    rows = x.shape[0] // n
    mine = [slice(r * rows, (r + 1) * rows) for r in range(n)]
    linear = Linear(x.shape[1], w.shape[0])
    p = {"w": w, "b": b}
    y, cache = linear.forward(p, x, f)
    dx, grads = linear.backward_ranks(p, dy, cache, f, n)
    for r, part in enumerate(mine):
        y_r, cache_r = linear.forward(p, x[part], f)
        dx_r, grads_r = linear.backward(p, dy[part], cache_r, f)
        assert same(y[part], y_r) and same(dx[part], dx_r)
        assert same(grads["w"][r], grads_r["w"]) and same(grads["b"][r], grads_r["b"])
    for layer in (ReLU(), GELU()):
        out, cache = layer.forward({}, x, f)
        back, none = layer.backward_ranks({}, x, cache, f, n)  # x as the incoming gradient: any (n·B, D) will do
        assert none == {}
        for part in mine:
            out_r, cache_r = layer.forward({}, x[part], f)
            assert same(out[part], out_r) and same(back[part], layer.backward({}, x[part], cache_r, f)[0])


@pytest.mark.parametrize("rows, d_in, d_out, precision, batched", [
    (8, 32, 96, "bf16-mixed", True), (32, 256, 300, "bf16-mixed", True), (8, 32, 96, "fp32", True),
    (32, 256, 300, "fp32", False)])
def test_each_ranks_dw_has_its_own_bits_batched_or_rank_by_rank(rows, d_in, d_out, precision, batched):
    # 16- and 8-bit dW, and below 2**14 elements of a rank's dy and x fp32 too, are one batched product over the
    # ranks, larger fp32 ones each rank's own: all against each rank's own `linear_backward`, on values spread over
    # 2**-6 .. 2**6 (bf16: so the proofs' bounds work)
    rng, n, f = np.random.default_rng(11), 3, get_precision(precision).compute_format
    def spread(shape):
        return (rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 7, shape)).astype(f.dtype)

    x, dy, w = spread((n * rows, d_in)), spread((n * rows, d_out)), spread((d_out, d_in))
    dx, dw, db = _basic.linear_backward_ranks(dy, (x,), w, f, n)
    assert isinstance(dw, np.ndarray) == batched
    for r in range(n):
        own = _basic.linear_backward(dy[r * rows:(r + 1) * rows], (x[r * rows:(r + 1) * rows],), w, f)
        assert same(dx[r * rows:(r + 1) * rows], own[0]) and same(dw[r], own[1]) and same(db[r], own[2])


@given(stacked_case(), st.sampled_from([1.0, 2.0**12, 0.5]))
def test_each_ranks_half_mse_of_a_stacked_batch_is_its_own(case, scale):
    fmt, n, y, _, _, _ = case
    f = get_precision(PRESETS[fmt]).compute_format
    target = y[::-1].astype(np.float32) * np.float32(0.75)  # (n·B, D) other values from the same table
    rows, loss = y.shape[0] // n, HalfMSE()
    losses, cache = loss.forward_ranks(y, target, f, n)
    dy = loss.backward_ranks(cache, f, n, scale=scale)
    for r in range(n):
        part = slice(r * rows, (r + 1) * rows)
        own, own_cache = loss.forward(y[part], target[part], f)
        assert np.float64(losses[r]).tobytes() == np.float64(own).tobytes()  # the same float, NaN and -0 included
        assert same(cache["y - t"][part], own_cache["y - t"]) and same(dy[part], loss.backward(own_cache, f, scale))


@pytest.mark.parametrize("rows, width", [(8, 16), (8, 96), (33, 17), (64, 160)])
@pytest.mark.parametrize("precision", ["bf16-mixed", "fp32"])
def test_each_ranks_half_mse_sum_of_many_elements_is_its_own(rows, width, precision):
    # blocks of 128 to 10,240 elements: NumPy's pairwise summation (blocks of 8, halves past 128) and its 8,192-element
    # buffer both come into play; each rank's loss against its own `forward`, bit for bit
    rng, n, f = np.random.default_rng(5), 4, get_precision(precision).compute_format
    y = (rng.standard_normal((n * rows, width)) * 2.0 ** rng.integers(-8, 9, (n * rows, width))).astype(f.dtype)
    target = rng.standard_normal((n * rows, width)).astype(np.float32)
    losses, _ = HalfMSE().forward_ranks(y, target, f, n)
    for r in range(n):
        own, _ = HalfMSE().forward(y[r * rows:(r + 1) * rows], target[r * rows:(r + 1) * rows], f)
        assert np.float64(losses[r]).tobytes() == np.float64(own).tobytes()


def test_the_batch_sum_of_a_ranks_rows_adds_them_in_row_order():
    # db = each rank's column sums of dy, in float32, in row order, as `linear_backward` adds a rank's own, by hand:
    # (((1 + 1) + 1) + 2**25) - 2**25 = 4 (float32 rounds 2**25 + 3 to 2**25 + 4); from the last row up it is 3
    rows = [[1.0], [1.0], [1.0], [2.0**25], [-(2.0**25)]]
    dy = np.array(rows * 2, np.float32).astype(ml_dtypes.bfloat16)  # (2·5, 1) two ranks
    f, w = get_precision("bf16-mixed").compute_format, np.ones((1, 1), ml_dtypes.bfloat16)
    x = np.ones((10, 1), ml_dtypes.bfloat16)
    _, grads = Linear(1, 1).backward_ranks({"w": w, "b": w[0]}, dy, {"input": x}, f, 2)
    assert grads["b"].astype(np.float32).tolist() == [[4.0], [4.0]]
    _, own = Linear(1, 1).backward({"w": w, "b": w[0]}, dy[:5], {"input": x[:5]}, f)
    assert own["b"].astype(np.float32).tolist() == [4.0]


def test_stack_ranks_must_be_a_bool():
    with pytest.raises(ValueError, match="stack_ranks must be True or False"):
        Cluster(2, stack_ranks="no")
    assert not Cluster(2, workers=2).pool.stacks  # threads run the ranks one by one
    assert _basic.Layer("x").stacks_rows() is False


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e4m3", "fp32"])
def test_every_rank_s_input_cast_together_is_its_own_cast(fmt):
    # `passes_of` casts every rank's micro-batch in one go: rank i's rows must be the bits `Pass` gives it alone,
    # over float32 patterns that round every way (ties, subnormals, overflow, NaN, -0), not only the data's
    from zerosim.cluster import MemoryLedger
    from zerosim.models import Pass, passes_of

    n, rows, width = 5, 4, 7
    patterns = np.random.default_rng(0).integers(0, 2**32, size=(n * rows, width), dtype=np.uint64).astype(np.uint32)
    xs = patterns.view(np.float32)
    xs[0, :4] = [np.nan, -0.0, np.inf, 1 + 2.0**-8]  # and values that tie in bf16
    batches = [(xs[i * rows:(i + 1) * rows].copy(), None) for i in range(n)]
    model = MLP([width, 3])
    together = passes_of(model, batches, fmt, [MemoryLedger(i) for i in range(n)])
    for i, (x, _) in enumerate(batches):
        alone = Pass(model, x, None, fmt, ledger=MemoryLedger(i)).a
        mine = together[i].a
        assert mine.dtype == alone.dtype and mine.shape == alone.shape
        assert mine.tobytes() == alone.tobytes()  # bit for bit, NaN's and -0's patterns included
    views, stack = together[0].stacks["a"]  # remembered for the first forward's stack: the passes' own inputs
    assert all(v is w.a for v, w in zip(views, together)) and stack.shape == (n * rows, width)


def test_inputs_that_differ_in_shape_or_kind_are_cast_rank_by_rank():
    from zerosim.cluster import MemoryLedger
    from zerosim.models import passes_of

    model = MLP([3, 2])
    rng = np.random.default_rng(1)
    ragged = [(rng.standard_normal((2 + i, 3)).astype(np.float32), None) for i in range(3)]
    labels = [(np.arange(6).reshape(2, 3), None) for _ in range(3)]  # integers pass unchanged
    for batches in (ragged, labels):
        made = passes_of(model, batches, "bf16", [MemoryLedger(i) for i in range(3)])
        assert not made[0].stacks  # no stack to remember
        for work, (x, _) in zip(made, batches):
            assert work.a.shape == x.shape
    assert all(w.a is x for w, (x, _) in zip(passes_of(model, labels, "bf16", [None] * 3), labels))


def _passes(n=4, rows=3, widths=(5, 7, 3), fmt="bf16"):
    from zerosim.cluster import MemoryLedger
    from zerosim.models import passes_of

    model = MLP(list(widths))
    batches = make_regression(np.random.default_rng(0), n, rows, list(widths))
    return model, passes_of(model, batches, fmt, [MemoryLedger(i) for i in range(n)])


def _op(model, kind, layer=None):
    from zerosim.models import schedule

    return next(op for op in schedule(model) if op.kind == kind and layer in (None, op.layer))


def _differs(name):
    """A change to pass 2 that `stacks` must refuse (each what the loop over passes alone may run)."""
    def fmt(passes, model):
        passes[2].fmt = get_precision("fp16-mixed").compute_format

    def shape(passes, model):
        passes[2].a = passes[2].a[:2]

    def dtype(passes, model):
        passes[2].a = passes[2].a.astype(np.float32)

    def keeps_values(passes, model):
        passes[2].keep_values = True

    def no_ledger(passes, model):
        passes[2].saved.ledger = None

    return {"fmt": fmt, "shape": shape, "dtype": dtype, "keeps values": keeps_values, "no ledger": no_ledger}[name]


@pytest.mark.parametrize("change", ["fmt", "shape", "dtype", "keeps values", "no ledger"])
def test_stacks_refuses_passes_that_differ_in_any_respect_and_takes_them_alike(change):
    """models/_stacked.py `stacks`: every pass asked every question; pass 2 changed in one respect is refused."""
    from zerosim.models._stacked import stacks

    model, passes = _passes()
    forward = _op(model, "forward", 0)
    assert stacks(passes, forward, model)  # alike: one cast stack's rows
    same_shape = passes[1].a.copy()  # equal, but not the cast stack's own rows: alike
    passes[1].a = same_shape
    assert stacks(passes, forward, model)
    _differs(change)(passes, model)
    assert not stacks(passes, forward, model)


def test_stacks_refuses_a_backward_without_every_pass_s_saved_tensors_and_a_loss_whose_targets_differ():
    from zerosim.models._stacked import stacks

    model, passes = _passes()
    loss = _op(model, "loss")
    for work in passes:  # what the last forward hands the loss: one (B, 3) activation each
        work.a = np.zeros((3, 3), ml_dtypes.bfloat16)
    assert stacks(passes, loss, model)
    passes[3].target = passes[3].target[:2]
    assert not stacks(passes, loss, model)
    model, passes = _passes()
    for work in passes:
        work.dy = np.zeros((3, 7), ml_dtypes.bfloat16)
        work.saved.items[0] = {}
    backward = _op(model, "backward", 0)
    assert stacks(passes, backward, model)
    del passes[1].saved.items[0]
    assert not stacks(passes, backward, model)


def test_on_the_machine_s_sgemm_only_2d_layers_stack():
    """Native products are a rank's matrix each (a stack of (B, D) matrices); a GPT's (B, L, d) units multiply their
    B·L tokens as one matrix, which stacking would change: they run rank by rank, while an MLP's ops stack."""
    from zerosim.models import GPT
    from zerosim.models._stacked import stacks

    native = get_precision("bf16-mixed").with_(arithmetic="native")
    model, passes = _passes()
    forward = _op(model, "forward", 0)
    assert stacks(passes, forward, model)
    for work in passes:
        work.fmt = native.compute_format
    assert stacks(passes, forward, model)  # 2-D: the Linear's forward is handed the (n, B, D) stack
    gpt = GPT(vocab=8, d_model=8, n_heads=2, n_layers=1, seq_len=4)
    ops = []
    real = compute_module.run_stacked
    for fmt, stacked in ((native, False), ("bf16-mixed", True)):
        ops.clear()
        compute_module.run_stacked = lambda *a: ops.append(a[1]) or real(*a)
        try:
            engine = ZeroEngine(gpt, Cluster(2), 3, get_optimizer("adam"), fmt,
                                params=gpt.init_params(np.random.default_rng(0)))
            ids = np.random.default_rng(1).integers(0, 8, (2, 2, 4))
            engine.step([(i, i) for i in ids])
        finally:
            compute_module.run_stacked = real
        assert bool(ops) is stacked


@pytest.mark.parametrize("change", ["a what more", "another what"])
def test_passes_that_kept_different_tensors_are_refused_together_and_nothing_is_freed(change):
    """models/_run.py `drop_ranks`: every pass must have kept the first's whats under the key, no more and no fewer;
    one that did not is refused before any ledger frees a buffer (each ledger as it was: its totals and live names)."""
    from zerosim.models._run import drop_ranks, put_ranks

    _, passes = _passes()
    saves = [work.saved for work in passes]
    put_ranks(saves, 0, "fc0", ("input",), [[np.zeros((3, 5), np.float32) for _ in passes]])
    extra = saves[2].ledger.adopt("fc0.other", np.zeros(4, np.float32), "activations")
    saves[2].items[0] = {"input": saves[2].items[0]["input"], "other": extra} if change == "a what more" else {
        "other": extra}
    before = [(save.ledger.current(), sorted(save.ledger.live)) for save in saves]
    with pytest.raises(ValueError, match="the passes kept different tensors under 0"):
        drop_ranks(saves, 0)
    assert [(save.ledger.current(), sorted(save.ledger.live)) for save in saves] == before

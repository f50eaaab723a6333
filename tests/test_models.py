"""Models and the driver: layout, seed 004's table, whole-model gradients, checkpointing, memory, data."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim.cluster import MemoryLedger
from zerosim.models import (
    MLP,
    Model,
    ReLU,
    TinyNet,
    forward_backward,
    loss_and_grad,
    make_classification,
    make_regression,
    needs_params,
    predict,
    schedule,
)
from zerosim.precision import cast, get_format

# Finite differences as in test_layers.py: h = 1e-6 gives error ~h^2 |f'''| + u |f| / h < 1e-8 here; 1e-6 tolerates.
FD_STEP = 1e-6
FD_TOL = 1e-6


def fd_gradient(model, theta, x, t):
    """Central differences of the float64 loss in each of the P parameters."""
    g = np.zeros_like(theta)
    for k in range(len(theta)):
        e = np.zeros_like(theta)
        e[k] = FD_STEP
        up = loss_and_grad(model, theta + e, x, t, "fp64")[0]
        down = loss_and_grad(model, theta - e, x, t, "fp64")[0]
        g[k] = (up - down) / (2 * FD_STEP)
    return g


def mlp_task(model, rng, B):
    x = rng.standard_normal((B, model.widths[0]))
    if model.loss.name == "xent":
        return x, rng.integers(0, model.widths[-1], B)
    return x, rng.standard_normal((B, model.widths[-1]))


# -- layout -------------------------------------------------------------------------------------

def test_tinynet_flat_layout_is_w1_w2_w3_w4():
    m = TinyNet()
    assert [(s.layer, s.name, s.shape, s.offset, s.size) for s in m.specs] == [
        (0, "w", (1, 2), 0, 2), (2, "w", (1, 1), 2, 1), (2, "b", (1,), 3, 1)]
    assert m.num_params == 4 and [m.layer_window(i) for i in range(3)] == [(0, 2), (2, 2), (2, 4)]
    flat = m.init_params()
    assert flat.dtype == np.float32 and flat.tolist() == [2.0, -3.0, 1.0, 0.5]
    p = m.unflatten(flat, 2)
    p["b"][0] = 9.0  # a view: writes land in the flat vector
    assert flat[3] == 9.0 and m.unflatten(flat, 1) == {}
    local = m.unflatten(np.array([7.0, 8.0], np.float32), 2)  # just layer 2's window, as ZeRO-3 gathers it
    assert local["w"].tolist() == [[7.0]] and local["b"].tolist() == [8.0]
    assert m.pack(2, {"b": np.array([4.0]), "w": np.array([[3.0]])}).tolist() == [3.0, 4.0]


def test_mlp_layout_and_blocks():
    m = MLP([3, 5, 4, 2], activation="gelu", loss="xent")
    assert [l.name for l in m.layers] == ["fc0", "act0", "fc1", "act1", "fc2"]
    assert m.checkpoint_blocks == [(0, 2), (2, 4), (4, 5)]
    assert m.num_params == (3 * 5 + 5) + (5 * 4 + 4) + (4 * 2 + 2)
    assert [s.offset for s in m.specs] == [0, 15, 20, 40, 44, 52]
    assert MLP([3, 2], bias=False).num_params == 6
    with pytest.raises(ValueError):
        Model([ReLU(), ReLU()], m.loss, checkpoint_blocks=[(0, 1)])  # blocks must cover every layer
    with pytest.raises(ValueError, match=r"saved_blocks \[\(0, 2\)\] must be checkpoint blocks"):
        Model([ReLU(), ReLU()], m.loss, checkpoint_blocks=[(0, 1), (1, 2)], saved_blocks=[(0, 2)])


def test_a_saved_block_runs_as_without_checkpointing():
    """Model.saved_blocks: the blocks checkpointing leaves alone keep their caches in forward and are not recomputed
    (the schedule's ops by hand for an MLP of three blocks whose last is saved)."""
    from zerosim.models._schedule import schedule

    m = MLP([3, 5, 4, 2])  # fc0 act0 | fc1 act1 | fc2
    saved = Model(m.layers, m.loss, checkpoint_blocks=m.checkpoint_blocks, saved_blocks=[(4, 5)])
    ops = [(op.kind, op.layer, op.save) for op in schedule(saved, checkpoint=True)]
    assert ops == [("forward", 0, False), ("forward", 1, False), ("forward", 2, False), ("forward", 3, False),
                   ("forward", 4, True),  # the saved block: its cache kept
                   ("loss", -1, True), ("backward", 4, True),  # no recompute of fc2
                   ("recompute", 2, True), ("keep input", 3, True), ("backward", 3, True), ("backward", 2, True),
                   ("recompute", 0, True), ("keep input", 1, True), ("backward", 1, True), ("backward", 0, True)]


# -- seed 004 -----------------------------------------------------------------------------------

SEED_TABLE = [
    # gpu, h, a = ReLU(h), y = w3 a + w4, loss = 0.5 (y - t)^2, grads [w1, w2, w3, w4]
    (0, -7.0, 0.0, 0.5, 10.125, [0.0, 0.0, 0.0, -4.5]),  # ReLU is off: only w4 learns
    (1, 1.0, 1.0, 1.5, 15.125, [-11.0, -5.5, -5.5, -5.5]),
]


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("gpu, h, a, y, loss, grads", SEED_TABLE)
def test_seed_004_table(gpu, h, a, y, loss, grads, fmt, checkpoint):
    m = TinyNet()
    x, t = TinyNet.seed_batches()[gpu]
    events = []
    got_loss, g = loss_and_grad(m, m.init_params(), x, t, fmt, checkpoint=checkpoint, events=events)
    outs = [done.values["out"] for op, done in events if op.kind == "forward"]
    assert [float(o[0, 0]) for o in outs] == [h, a, y] and all(o.dtype == get_format(fmt).dtype for o in outs)
    assert got_loss == loss and g.dtype == get_format(fmt).dtype and g.tolist() == grads


def test_seed_004_checkpointing_gathers_layer_1_again():
    # Seed 004 Stage 3: forward gathers layer 1, layer 2; backward gathers layer 1 (recompute h, a),
    # layer 2 (its grads), layer 1 (its grads): five gathers, one more than without checkpointing.
    m = TinyNet()
    w = cast(m.init_params(), "fp16")
    x, t = TinyNet.seed_batches()[1]
    for checkpoint, expected in [(False, [0, 2, 2, 0]), (True, [0, 2, 0, 2, 0])]:
        log = []
        forward_backward(m, x, t, "fp16", lambda i: log.append(i) or m.unflatten(w, i), checkpoint=checkpoint)
        assert log == expected
        assert [op.layer for op in schedule(m, checkpoint) if needs_params(m, op)] == expected  # what an engine gathers


# -- whole-model gradients ----------------------------------------------------------------------

@pytest.mark.parametrize("gpu", [0, 1])
def test_tinynet_gradient_matches_finite_differences(gpu):
    m = TinyNet()
    x, t = TinyNet.seed_batches()[gpu]
    theta = m.init_params().astype(np.float64)
    np.testing.assert_allclose(
        loss_and_grad(m, theta, x, t, "fp64")[1], fd_gradient(m, theta, x, t), rtol=FD_TOL, atol=FD_TOL
    )


@pytest.mark.parametrize("loss", ["mse", "xent"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp_gradient_matches_finite_differences(activation, loss):
    rng = np.random.default_rng(5)
    m = MLP([4, 6, 5, 3], activation=activation, loss=loss)
    theta = 0.5 * rng.standard_normal(m.num_params)  # biases nonzero too
    x, t = mlp_task(m, rng, B=3)
    for checkpoint in (False, True):
        _, g = loss_and_grad(m, theta, x, t, "fp64", checkpoint=checkpoint)
        np.testing.assert_allclose(g, fd_gradient(m, theta, x, t), rtol=FD_TOL, atol=FD_TOL)


# -- checkpointing ------------------------------------------------------------------------------

@given(widths=st.lists(st.integers(1, 6), min_size=2, max_size=6), B=st.integers(1, 4),
       fmt=st.sampled_from(["fp16", "bf16", "fp32"]), activation=st.sampled_from(["relu", "gelu"]),
       loss=st.sampled_from(["mse", "xent"]), seed=st.integers(0, 2**16))
def test_checkpointing_changes_no_bit(widths, B, fmt, activation, loss, seed):
    if loss == "xent":
        widths[-1] = max(widths[-1], 2)
    rng = np.random.default_rng(seed)
    m = MLP(widths, activation=activation, loss=loss)
    theta = 0.5 * rng.standard_normal(m.num_params).astype(np.float32)
    x, t = mlp_task(m, rng, B)
    plain_loss, plain = loss_and_grad(m, theta, x, t, fmt)
    ckpt_loss, ckpt = loss_and_grad(m, theta, x, t, fmt, checkpoint=True)
    assert ckpt_loss == plain_loss and ckpt.tobytes() == plain.tobytes()


def activation_bytes(m, B, fmt, checkpoint):
    """Peak saved-for-backward bytes, from shapes alone: each layer saves its (B, D) input in fmt."""
    s = get_format(fmt).itemsize
    w = m.widths
    K = len(w) - 1  # Linear layers; fc_k's input is (B, w[k]), act_k's input is (B, w[k+1])
    loss_cache = B * w[-1] * 4 + (B * 8 if m.loss.name == "xent" else 0)  # fp32 (B, D_out) [+ int64 labels]
    fc_inputs = [B * w[k] * s for k in range(K)]
    act_inputs = [B * w[k + 1] * s for k in range(K - 1)] + [0]
    if not checkpoint:
        return sum(fc_inputs) + sum(act_inputs) + loss_cache  # everything is live when the loss is computed
    # Forward ends holding every block input plus the loss cache; backward of block k holds the inputs
    # of blocks before it plus block k's rebuilt caches.
    backward = [sum(fc_inputs[:k]) + fc_inputs[k] + act_inputs[k] for k in range(K)]
    return max(sum(fc_inputs) + loss_cache, *backward)


@pytest.mark.parametrize("loss", ["mse", "xent"])
@pytest.mark.parametrize("fmt", ["fp16", "fp32"])
def test_ledger_measures_activations_and_checkpointing_lowers_the_peak(fmt, loss):
    m = MLP([8, 32, 32, 32, 32, 4], activation="gelu", loss=loss)
    B = 4
    x, t = mlp_task(m, np.random.default_rng(6), B)
    peaks = {}
    for checkpoint in (False, True):
        ledger = MemoryLedger(rank=0)
        loss_and_grad(m, m.init_params(), x, t, fmt, checkpoint=checkpoint, ledger=ledger)
        peaks[checkpoint] = ledger.peak("activations")
        assert peaks[checkpoint] == activation_bytes(m, B, fmt, checkpoint)
        assert ledger.current("activations") == 0 and not ledger.live  # everything saved was consumed
    assert peaks[True] < peaks[False]


def test_checkpointing_fetches_recomputed_layers_again():
    m = MLP([5, 7, 7, 7, 3])
    w = cast(m.init_params(), "bf16")
    x, t = mlp_task(m, np.random.default_rng(7), 2)
    counts = {}
    for checkpoint in (False, True):
        calls, events = [], []
        forward_backward(
            m, x, t, "bf16", lambda i: calls.append(i) or m.unflatten(w, i), checkpoint=checkpoint, events=events
        )
        counts[checkpoint] = calls
        recomputed = [op.layer for op, _ in events if op.kind == "recompute"]
    assert recomputed == [4, 2, 0]  # each (fc, act) block re-runs its fc; the last fc alone is not re-run
    assert sorted(counts[True]) == sorted(counts[False] + recomputed)


# -- precision and hooks ------------------------------------------------------------------------

def test_low_precision_run_rounds_and_differs_from_fp32():
    m = MLP([6, 8, 3], activation="gelu")
    x, t = mlp_task(m, np.random.default_rng(8), 4)
    theta = m.init_params()
    events = []
    loss16, g16 = loss_and_grad(m, theta, x, t, "fp16", events=events)
    loss32, g32 = loss_and_grad(m, theta, x, t, "fp32")
    for op, done in events:
        if op.kind == "forward":
            out = done.values["out"]
            assert out.dtype == np.float16 and np.array_equal(cast(out.astype(np.float64), "fp16"), out)
    assert loss16 != loss32 and not np.array_equal(g16.astype(np.float32), g32)
    assert np.allclose(g16.astype(np.float32), g32, rtol=1e-2, atol=1e-2)  # close: fp16 keeps ~3 digits


def test_loss_scale_scales_gradients_not_the_loss():
    m = MLP([4, 5, 2])
    x, t = mlp_task(m, np.random.default_rng(9), 3)
    theta = m.init_params()
    loss1, g1 = loss_and_grad(m, theta, x, t, "fp32")
    loss2, g2 = loss_and_grad(m, theta, x, t, "fp32", loss_scale=1024.0)
    assert loss1 == loss2 and np.array_equal(g2, 1024 * g1)  # a power of two scales fp32 exactly


@pytest.mark.bad_input("models")
def test_get_params_in_the_wrong_format_is_refused():
    m = TinyNet()
    x, t = TinyNet.seed_batches()[0]
    w32 = m.init_params()
    with pytest.raises(TypeError, match="fp16"):
        forward_backward(m, x, t, "fp16", lambda i: m.unflatten(w32, i))


def test_predict_is_the_forward_pass():
    m = MLP([3, 4, 2], activation="gelu")
    x, t = mlp_task(m, np.random.default_rng(10), 5)
    events = []
    loss_and_grad(m, m.init_params(), x, t, "bf16", events=events)
    forward_out = [done.values["out"] for op, done in events if op.kind == "forward"][-1]
    assert predict(m, m.init_params(), x, "bf16").tobytes() == forward_out.tobytes()


# -- data ---------------------------------------------------------------------------------------

def test_tasks_have_the_promised_shapes_and_repeat_with_the_seed():
    reg = make_regression(np.random.default_rng(0), 3, 4, [5, 6, 2])
    cls = make_classification(np.random.default_rng(0), 2, 4, [5, 6, 3])
    assert len(reg) == 3 and all(x.shape == (4, 5) and t.shape == (4, 2) and t.dtype == np.float32 for x, t in reg)
    assert len(cls) == 2 and all(
        x.dtype == np.float32 and t.shape == (4,) and t.dtype == np.int64 and t.max() < 3 for x, t in cls
    )
    again = make_regression(np.random.default_rng(0), 3, 4, [5, 6, 2])
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(reg, again))


@pytest.mark.parametrize("loss, make", [("mse", make_regression), ("xent", make_classification)])
def test_a_student_learns_the_teachers_task(loss, make):
    widths = [6, 16, 4]
    batches = make(np.random.default_rng(11), 4, 32, widths)
    student = MLP(widths, loss=loss)
    theta = student.init_params(np.random.default_rng(12))
    mean_loss = lambda: np.mean([loss_and_grad(student, theta, x, t, "fp32")[0] for x, t in batches])
    before = mean_loss()
    for _ in range(100):  # plain SGD, full batch
        for x, t in batches:
            theta -= 0.1 * loss_and_grad(student, theta, x, t, "fp32")[1]
    assert mean_loss() < 0.5 * before

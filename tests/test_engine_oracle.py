"""Every ZeRO stage equals the single-device oracle bit for bit, and stays near float64.

The oracle (zerosim.reference.Reference) reduces the micro-batch gradients with the naive twin in
the ring's order; it shares no code with the ring or the engines' sharding. Equality is checked on
bit patterns, so -0.0 vs 0.0 or a NaN would show.
"""

import numpy as np
import pytest
from helpers import accepted_recipes, bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Cluster, Reference, TinyNet, ZeroEngine, get_optimizer
from zerosim.models import make_regression

ELEMENTWISE = {
    "adam": dict(lr=1e-2),
    "adamw": dict(lr=1e-2, weight_decay=0.1),
    "sgd": dict(lr=1e-2, momentum=0.9),
    "lion": dict(lr=1e-3),
    "adan": dict(lr=1e-2),
}


def run_pair(widths, n, stage, precision, opt, steps, checkpoint, seed, reduction="seeds", reduce=None, loss_scale=1.0,
             allreduce="ring", workers=1):
    rng = np.random.default_rng(seed)
    model = MLP(widths, activation="gelu" if seed % 2 else "relu")
    params = model.init_params(np.random.default_rng(seed + 1))
    data = make_regression(rng, n * steps, 3, widths)
    from zerosim.precision import get_precision

    policy = get_precision(precision).with_(
        reduction=reduction, reduce=reduce, loss_scale=loss_scale, allreduce=allreduce
    )
    engine = ZeroEngine(
        model, Cluster(n, workers=workers), stage, get_optimizer(opt, **ELEMENTWISE[opt]), policy,
        checkpoint=checkpoint, params=params
    )
    # stages 2/3 reduce as backward finishes each unit: deepspeed-zero12's all-reduce order depends on it
    ref = Reference(model, get_optimizer(opt, **ELEMENTWISE[opt]), policy, world_size=n, params=params,
                    reduce_every_micro_step=stage >= 2)
    for s in range(steps):
        batches = data[s * n : (s + 1) * n]
        got, want = engine.step(batches), ref.step(batches)
        assert got == want  # the same losses, per rank
    return engine, ref, model, params, data


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    # sr: draws per element, not per shard
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed", "bf16-pure-sr"]),
    opt=st.sampled_from(sorted(ELEMENTWISE)),
    steps=st.integers(1, 3),
    checkpoint=st.booleans(),
    reduce=st.sampled_from([None, "fp32"]),  # FSDP's reduce_dtype: 16-bit compute, fp32 on the wire
    loss_scale=st.sampled_from([1.0, 2.0**10, 1000.0]),
    seed=st.integers(0, 2**16),
    workers=st.sampled_from([1, 2, 4]),  # the ranks' compute and updates on a pool of threads (cluster/_pool.py)
    data=st.data(),
)
def test_every_stage_equals_the_oracle_bitwise(
    widths, n, stage, precision, opt, steps, checkpoint, reduce, loss_scale, seed, workers, data
):
    from zerosim.precision import get_precision

    # every recipe the engine runs here (where the framework it follows runs it, with this policy: docs/recipes.md),
    # NCCL's all-reduce chunk map at stage 0
    policy = get_precision(precision).with_(loss_scale=loss_scale)
    reduction = data.draw(st.sampled_from(accepted_recipes(stage, policy)), label="reduction")
    reduce = None if reduction == "ddp" else reduce  # DDP reduces in the gradient's own dtype
    allreduce = data.draw(st.sampled_from(["ring", "nccl"]), label="allreduce") if stage == 0 else "ring"
    engine, ref, *_ = run_pair(
        widths, n, stage, precision, opt, steps, checkpoint, seed, reduction, reduce, loss_scale, allreduce, workers
    )
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    want_state = ref.optimizer_state()
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(want_state[name])), name
    # and every rank's 16-bit params after the refresh: the oracle's, whole (stages 0-2) or its shard (3)
    want16 = ref.compute_params()
    for i, rank in enumerate(engine.cluster.ranks):
        held = engine.compute_params(i)
        if stage < 3:
            assert np.array_equal(bits(held[: len(want16)]), bits(want16)), f"rank {i}"
        else:
            own = engine.region(rank.index)  # its shard in the layout's order (per-parameter chunks: partition.py)
            real = engine.layout.arrange(np.ones(len(want16)))[own] == 1  # not padding
            assert np.array_equal(bits(held[real]), bits(engine.layout.arrange(want16)[own][real])), f"rank {i}"
    assert engine.t == ref.t == steps


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_uneven_parameter_count_straddles_shards(stage):
    # 3*5+5 + 5*2+2 = 32 params on 6 ranks: s = 6, padding 4, layers straddle shard borders
    engine, ref, model, *_ = run_pair([3, 5, 2], 6, stage, "fp16-mixed", "adam", 2, False, 7)
    assert model.num_params % 6 != 0
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    n=st.integers(1, 5),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed", "bf16-pure-sr"]),
    opt=st.sampled_from(sorted(ELEMENTWISE)),
    k=st.integers(1, 2),
    every_micro_step=st.booleans(),
    block=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_the_speed_yardstick_oracle_equals_the_exact_oracle_bitwise(
    widths, n, precision, opt, k, every_micro_step, block, seed
):
    # Reference(order="ring-native") is benchmarks/engine.py's yardstick: NumPy's adds in the wire dtype
    # and the optimizer stepped in blocks of STEP_BLOCK elements. Both must leave every bit where the exact
    # oracle (float64 adds rounded once, one whole-vector step) leaves it; blocks of 1..9 elements make the
    # block borders fall everywhere on these small models.
    import zerosim.optim._base as base  # STEP_BLOCK: the oracle's blocks (and the engines')

    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    data = make_regression(np.random.default_rng(seed + 1), n * k * 2, 3, widths)
    runs = [Reference(model, get_optimizer(opt, **ELEMENTWISE[opt]), precision, world_size=n, params=params,
                      accumulation_steps=k, reduce_every_micro_step=every_micro_step, order=how)
            for how in ("ring", "ring-native")]
    saved, base.STEP_BLOCK = base.STEP_BLOCK, block
    try:
        for step in range(2):
            batches = [data[(step * n + r) * k : (step * n + r + 1) * k] for r in range(n)]
            assert runs[0].step(batches) == runs[1].step(batches)
    finally:
        base.STEP_BLOCK = saved
    exact, native = runs
    assert np.array_equal(bits(exact.master()), bits(native.master()))
    assert np.array_equal(bits(exact.compute_params()), bits(native.compute_params()))
    for name, got in native.optimizer_state().items():
        assert np.array_equal(bits(got), bits(exact.optimizer_state()[name])), name


U32 = 2.0**-24  # fp32 unit roundoff


def gamma(k, u):
    """Higham's gamma_k: the relative error bound of k roundings with unit roundoff u."""
    return k * u / (1 - k * u)


def sgd_step_bound(data, W, b, n, uc, lr):
    """(w64 after one float64 SGD step, a bound on |w_engine - w64|) for a single Linear layer.

    The engine's path, rounding by rounding (models/layers/_basic.py, models/layers/_losses.py, the ring, the update):
    x, W, b rounded to the compute format (uc each); y = x W^T + b accumulated in fp32 (gamma_{D+1})
    and rounded to the compute format (uc); y - t and the division by B in fp32 (2 u32), rounded to
    the compute format (uc); dW = dy^T x and db = sum dy accumulated in fp32 (gamma_B) and rounded
    (uc); the N micro-batch gradients summed on the ring in the compute format (gamma_{N-1}), cast
    to fp32 and divided by N (u32); w - lr*g in fp32 (lr, the product and the difference: 3 u32).
    Each bound multiplies an absolute-value computation (A = |x||W|^T + |b|, ...) by its unit
    roundoffs; products of two roundoffs are dropped and covered by the final factor 1.01 (every
    k*u here is below 1e-2, so the dropped terms are below 1% of the kept ones).
    """
    d = W.shape[1]
    g64, err, mag = np.zeros(W.size + b.size), np.zeros(W.size + b.size), np.zeros(W.size + b.size)
    for x, t in data:
        x, t = x.astype(np.float64), t.astype(np.float64)
        B = x.shape[0]
        y = x @ W.T + b
        A = np.abs(x) @ np.abs(W).T + np.abs(b)  # bounds |y| and every partial sum of it
        e_y = (3 * uc + gamma(d + 1, U32)) * A
        dy = (y - t) / B
        e_dy = e_y / B + (2 * U32 + uc) * (np.abs(y - t) + e_y) / B
        m_dy = np.abs(dy) + e_dy  # bounds |dy| as the engine holds it
        e_dw = (e_dy.T @ np.abs(x)) + (m_dy.T @ np.abs(x)) * (2 * uc + gamma(B, U32))
        e_db = e_dy.sum(0) + m_dy.sum(0) * (uc + gamma(B, U32))
        g = np.concatenate([(dy.T @ x).ravel(), dy.sum(0)])
        e = np.concatenate([e_dw.ravel(), e_db])
        g64 += g
        err += e
        mag += np.abs(g) + e
    err += gamma(n - 1, uc) * mag  # the ring's N-1 roundings in the compute format
    g64 /= n
    err = err / n + U32 * (np.abs(g64) + err / n)  # cast to fp32 is exact; / N rounds once
    w64 = np.concatenate([W.ravel(), b]) - lr * g64
    bound = lr * err + 3 * U32 * (lr * (np.abs(g64) + err) + np.abs(w64))
    return w64, 1.01 * bound, g64


@pytest.mark.slow
@given(
    d_in=st.integers(1, 12),
    d_out=st.integers(1, 5),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    seed=st.integers(0, 2**16),
)
def test_one_step_is_within_the_derived_distance_of_float64(d_in, d_out, n, stage, precision, seed):
    from zerosim.precision import get_precision

    rng = np.random.default_rng(seed)
    model = MLP([d_in, d_out])
    params = rng.standard_normal(model.num_params).astype(np.float32)  # weights and biases
    data = make_regression(rng, n, 4, [d_in, d_out])
    lr = 0.1
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer("sgd", lr=lr), precision, params=params)
    engine.step(data)
    W = params[: d_in * d_out].reshape(d_out, d_in).astype(np.float64)
    uc = get_precision(precision).compute_format.unit_roundoff
    w64, bound, g64 = sgd_step_bound(data, W, params[d_in * d_out :].astype(np.float64), n, uc, lr)
    assert np.all(np.abs(engine.full_master().astype(np.float64) - w64) <= bound)
    # and the bound is tight enough to matter: a wrong sign or a missing / N would break it
    assert np.max(bound) < 0.5 * lr * np.max(np.abs(g64)) or np.max(np.abs(g64)) < 1e-6


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    n=st.integers(1, 6),
    stage=st.sampled_from([0, 1]),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    seed=st.integers(0, 2**16),
)
def test_muon_at_stages_0_and_1_equals_the_oracle_bitwise(widths, n, stage, precision, seed):
    # Stage 1 shards Muon's momentum and all-gathers it for Newton-Schulz; the oracle runs whole matrices.
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    data = make_regression(np.random.default_rng(seed + 1), 2 * n, 3, widths)
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer("muon", lr=0.02), precision, params=params)
    ref = Reference(model, get_optimizer("muon", lr=0.02), precision, world_size=n, params=params)
    for s in range(2):
        assert engine.step(data[s * n : (s + 1) * n]) == ref.step(data[s * n : (s + 1) * n])
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    assert np.array_equal(bits(engine.full_optimizer_state()["b"]), bits(ref.optimizer_state()["b"]))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_loss_scaling_by_a_power_of_two_changes_no_bit(stage):
    # Seed 004 with SGD (whose step is proportional to the gradient, unlike Adam's): w <- w - lr * g_avg
    # with g_avg = [-5.5, -2.75, -2.75, -5.0]. A power-of-two loss scale multiplies every fp16 gradient
    # exactly (no overflow: 11 * 2**10 < 65504) and the fp32 unscale divides exactly, so S = 1024 must
    # give the very bits that S = 1 gives, and both the fp32 arithmetic written out here.
    from zerosim.precision import MixedPrecision

    want = np.float32([2.0, -3.0, 1.0, 0.5]) - np.float32(0.01) * np.float32([-5.5, -2.75, -2.75, -5.0])
    for scale in (1.0, 2.0**10):
        engine = ZeroEngine(
            TinyNet(),
            Cluster(2),
            stage,
            get_optimizer("sgd", lr=0.01),
            MixedPrecision("fp16", "fp32", loss_scale=scale),
        )
        engine.step(TinyNet.seed_batches())
        assert np.array_equal(bits(engine.full_master()), bits(want)), scale


def test_loss_scaling_rescues_gradients_that_underflow_fp16():
    # TinyNet, GPU 0's sample (y = 0.5) with t = 0.5 - 2**-25 (exact in fp32: its spacing below 0.5 is
    # 2**-25): dL/dy = 2**-25 is half of fp16's smallest subnormal 2**-24, a tie that rounds to even,
    # to 0, so unscaled SGD moves nothing. Scaled by 2**16 it is 2**-9, exact in fp16, and the fp32
    # unscale gives back 2**-25: w4 (the bias, dy/dw4 = 1) moves by lr * 2**-25 exactly.
    from zerosim.precision import MixedPrecision

    x, _ = TinyNet.seed_batches()[0]
    target = np.float32([[0.5 - 2.0**-25]])
    moved = {}
    for scale in (1.0, 2.0**16):
        engine = ZeroEngine(
            TinyNet(), Cluster(1), 1, get_optimizer("sgd", lr=1.0), MixedPrecision("fp16", "fp32", loss_scale=scale)
        )
        engine.step([(x, target)])
        moved[scale] = float(engine.full_master()[3]) - 0.5
    assert moved[1.0] == 0
    assert moved[2.0**16] == -(2.0**-25)

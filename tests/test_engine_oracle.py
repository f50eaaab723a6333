"""Every ZeRO stage equals the single-device oracle bit for bit, and stays near float64.

The oracle (zerosim.reference.Reference) reduces the micro-batch gradients with the naive twin in
the ring's order; it shares no code with the ring or the engines' sharding. Equality is checked on
bit patterns, so -0.0 vs 0.0 or a NaN would show.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster, MLP, Reference, ZeroEngine, get_optimizer
from zerosim.models import make_regression

ELEMENTWISE = {
    "adam": dict(lr=1e-2),
    "adamw": dict(lr=1e-2, weight_decay=0.1),
    "sgd": dict(lr=1e-2, momentum=0.9),
    "lion": dict(lr=1e-3),
    "adan": dict(lr=1e-2),
}


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"uint{a.dtype.itemsize * 8}")


def run_pair(widths, n, stage, precision, opt, steps, checkpoint, seed, average="avg", reduce=None):
    rng = np.random.default_rng(seed)
    model = MLP(widths, activation="gelu" if seed % 2 else "relu")
    params = model.init_params(np.random.default_rng(seed + 1))
    data = make_regression(rng, n * steps, 3, widths)
    from zerosim.precision import get_precision

    policy = get_precision(precision).with_(average=average, reduce=reduce)
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer(opt, **ELEMENTWISE[opt]), policy, checkpoint=checkpoint, params=params)
    ref = Reference(model, get_optimizer(opt, **ELEMENTWISE[opt]), policy, world_size=n, params=params)
    for s in range(steps):
        batches = data[s * n : (s + 1) * n]
        got, want = engine.step(batches), ref.step(batches)
        assert got == want  # the same losses, per rank
    return engine, ref, model, params, data


@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed", "bf16-pure-sr"]),  # sr: draws per element, not per shard
    opt=st.sampled_from(sorted(ELEMENTWISE)),
    steps=st.integers(1, 3),
    checkpoint=st.booleans(),
    average=st.sampled_from(["avg", "avg_predivide", "avg_premul"]),
    reduce=st.sampled_from([None, "fp32"]),  # FSDP's reduce_dtype: 16-bit compute, fp32 on the wire
    seed=st.integers(0, 2**16),
)
def test_every_stage_equals_the_oracle_bitwise(widths, n, stage, precision, opt, steps, checkpoint, average, reduce, seed):
    engine, ref, *_ = run_pair(widths, n, stage, precision, opt, steps, checkpoint, seed, average, reduce)
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    want_state = ref.optimizer_state()
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(want_state[name])), name
    # and every rank's 16-bit params are the cast of the master (stage 3: its shard of it)
    assert engine.t == ref.t == steps


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_uneven_parameter_count_straddles_shards(stage):
    # 3*5+5 + 5*2+2 = 32 params on 6 ranks: s = 6, padding 4, layers straddle shard borders
    engine, ref, model, *_ = run_pair([3, 5, 2], 6, stage, "fp16-mixed", "adam", 2, False, 7)
    assert model.num_params % 6 != 0
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))


# Adam moves a weight by at most lr * (1 - b1) / sqrt(1 - b2) per step when 1 - b1 > sqrt(1 - b2)
# (Kingma & Ba 2015, section 2.1), with bias correction included: 3.16 lr for b1 = 0.9, b2 = 0.999.
# Two runs from the same fp32 start can therefore differ by at most twice the sum of their moves;
# anything beyond that is a bug (a wrong sign, a lost shard, a stale weight), not rounding.
ADAM_STEP_BOUND = (1 - 0.9) / np.sqrt(1 - 0.999)


@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    steps=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_stays_within_the_derived_distance_of_float64_adam(widths, n, stage, precision, steps, seed):
    engine, _, model, params, data = run_pair(widths, n, stage, precision, "adam", steps, False, seed)
    exact = Reference.float64(model, get_optimizer("adam", lr=1e-2), world_size=n, params=params)
    for s in range(steps):
        exact.step(data[s * n : (s + 1) * n])
    lr = ELEMENTWISE["adam"]["lr"]
    tolerance = 2 * steps * ADAM_STEP_BOUND * lr * (1 + 1e-6)  # 1e-6: the fp32 rounding of the master itself
    assert np.max(np.abs(engine.full_master().astype(np.float64) - exact.master()), initial=0) <= tolerance


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

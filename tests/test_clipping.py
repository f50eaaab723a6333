"""Gradient clipping by global norm over sharded gradients (issue 11, Must show 3).

The engine's norm comes from each rank's sum of squares over its shard and a SUM all-reduce
(parallel/data/_step_checks.py); the oracle sums the same N shards of its unsharded gradient with the naive
twin in the ring's order, so the two are the same bits at every stage (stage 0 too, where every rank
holds the whole gradient and must still count each element once). Against the norm of the whole
gradient computed another way -- float64 of the exact squares, correctly rounded sums -- the
distance is bounded by `clipping.norm_error_bound(N)`, derived in its docstring. torch's clip coefficient is checked
on a table of values worked out by hand from torch's expression.
"""

import math

import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.cluster import GradClip, OptimizerStep
from zerosim.models import make_regression
from zerosim.parallel.data import clip_coefficient
from zerosim.parallel.data import norm_error_bound as norm_bound
from zerosim.precision import get_precision


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 7), min_size=2, max_size=4),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    k=st.integers(1, 2),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    max_norm=st.sampled_from([1e-3, 0.05, 1.0, 1e6]),  # clips hard, clips, maybe, never (coefficient 1)
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_the_sharded_norm_is_the_oracles_at_every_stage(widths, n, stage, k, precision, max_norm, steps, seed):
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    data = make_regression(np.random.default_rng(seed + 1), steps * n * k, 3, widths)
    policy = get_precision(precision)
    engine = ZeroEngine(
        model,
        Cluster(n),
        stage,
        get_optimizer("adam", lr=1e-2),
        policy,
        params=params,
        accumulation_steps=k,
        clip_grad=max_norm,
    )
    ref = Reference(model, get_optimizer("adam", lr=1e-2), policy, world_size=n, params=params, accumulation_steps=k,
                    reduce_every_micro_step=stage >= 2, clip_grad=max_norm)
    for s in range(steps):
        mine = data[s * n * k : (s + 1) * n * k]
        batches = [mine[r * k : (r + 1) * k] for r in range(n)]
        assert engine.step(batches) == ref.step(batches)
    clipped = engine.cluster.trace.of_type(GradClip)
    assert [c.norm for c in clipped] == ref.norms  # exactly: the same partials, added in the same order
    assert all(c.coef == clip_coefficient(c.norm, max_norm) for c in clipped)
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name


@given(
    widths=st.lists(st.integers(1, 8), min_size=2, max_size=4),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    seed=st.integers(0, 2**16),
)
def test_the_norm_is_within_the_derived_bound_of_the_float64_norm(widths, n, stage, precision, seed):
    # max_norm 1e30 never clips (the coefficient is exactly 1), so each rank's grad32 is the unclipped gradient
    model = MLP(widths)
    data = make_regression(np.random.default_rng(seed + 1), n, 3, widths)
    engine = ZeroEngine(model, Cluster(n, keep_values=True), stage, get_optimizer("sgd", lr=0.0), precision,
                        params=model.init_params(np.random.default_rng(seed)), clip_grad=1e30)
    engine.step(data)
    (clip,) = engine.cluster.trace.of_type(GradClip)
    steps = sorted(engine.cluster.trace.of_type(OptimizerStep), key=lambda e: e.rank)
    whole = steps[0].values["grad32"] if stage == 0 else np.concatenate([e.values["grad32"] for e in steps])
    g64 = whole.astype(np.float64)
    n64 = math.sqrt(math.fsum((g64 * g64).tolist()))
    assert clip.coef == 1.0
    assert abs(clip.norm - n64) <= norm_bound(n) * n64, (clip.norm, n64, norm_bound(n))
    # tight: counting stage 0's whole gradient on every rank (x sqrt(N)) breaks it at N >= 2
    assert norm_bound(n) < 1e-6


# torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, on fp32 tensors. `t + 1e-6` rounds 1e-6 to fp32
# (9.99999997e-07) and the sum to fp32; `max_norm / t` is `t.reciprocal() * max_norm` (torch/_tensor.py: __rdiv__):
# fl32(1/d), then fl32(r * fl32(max_norm)).
CLIP_TABLE = [
    # norm, max_norm, coefficient, why
    (0.5, 1.0, 1.0, "below max_norm: 1/(0.5 + 1e-6) * 1 ~ 1.999996 clamps to 1"),
    (0.0, 1.0, 1.0, "a zero gradient: 1/1e-6 clamps to 1"),
    (
        2.0,
        1.0,
        0.5 - 2.0**-22,
        "d = fl32(2 + 1e-6): the fp32 spacing at 2 is 2**-22 = 2.38e-7, 1e-6 is 4.19 of them -> d = 2 + 2**-20; "
        "1/d = 0.5 (1 - 2**-21 + ...) = 0.5 - 2**-22 + 2**-43, the spacing below 0.5 is 2**-25 -> 0.5 - 2**-22",
    ),
    (
        1.0,
        0.1,
        13421760 * 2.0**-27,
        "d = 1 + 2**-20 (8.39 spacings of 2**-23 round to 8); r = fl32(1 - 2**-20 + 2**-40) = 1 - 2**-20; "
        "fl32(0.1) = 13421773 * 2**-27; r * that = (13421773 - 12.80000019) * 2**-27 -> 13421760 * 2**-27 = "
        "0.09999990463",
    ),
    (
        3.0,
        1.0,
        11184807 * 2.0**-25,
        "d = 3 + 2**-20 (spacing 2**-22 at 3: 4.19 -> 4); 1/d = 1/3 - 2**-20/9 + ... = 0.33333322736, the spacing in "
        "[0.25, 0.5) is 2**-25: 11184807.44 spacings -> 11184807 * 2**-25 = 0.33333322405815125",
    ),
]


@pytest.mark.parametrize("norm, max_norm, want, why", CLIP_TABLE, ids=[row[-1][:24] for row in CLIP_TABLE])
def test_torch_clip_coefficient_table(norm, max_norm, want, why):
    assert clip_coefficient(norm, max_norm) == want, why


def test_clipping_scales_every_ranks_gradient_before_the_optimizer():
    # At max_norm = norm / 2 every rank's fp32 gradient, as its optimizer reads it, is the unclipped one times
    # torch's coefficient (0.5 * (1 - ~1e-6)), one fp32 rounding per element (`_foreach_mul_`): stage 2, 3 ranks.
    widths, n = [4, 6, 3], 3
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(0))
    data = make_regression(np.random.default_rng(1), n, 4, widths)

    def grads(max_norm):
        engine = ZeroEngine(model, Cluster(n, keep_values=True), 2, get_optimizer("sgd", lr=1.0), "fp32", params=params,
                            clip_grad=max_norm)
        engine.step(data)
        (clip,) = engine.cluster.trace.of_type(GradClip)
        return clip, [
            e.values["grad32"] for e in sorted(engine.cluster.trace.of_type(OptimizerStep), key=lambda e: e.rank)
        ]

    c0, free = grads(1e30)
    c1, half = grads(c0.norm / 2)
    assert c1.norm == c0.norm and 0.5 * (1 - 1e-5) < c1.coef < 0.5
    for got, g in zip(half, free):
        assert np.array_equal(bits(got), bits(g * np.float32(c1.coef)))


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1.0", True])
def test_bad_max_norm_is_refused_before_anything_is_built(bad):
    with pytest.raises(ValueError, match="clip_grad .* must be a finite number > 0 or None"):
        ZeroEngine(MLP([2, 2]), Cluster(2), 1, get_optimizer("adam"), "fp32", clip_grad=bad)


# clip_norm="torch": torch's clip_grad_norm_ (clip_grad.py: _get_total_norm), per-tensor norms then the norm of the
# stacked norms, against the shards' sum. MLP([2, 1]) from zero weights, every rank x = (3, 3), t = -1: the fp32
# gradient is w = (3, 3), b = (1,) exactly (y - t = 1). Each row by hand (fp32 values in hex):
#   shards:  the sum of squares 9 + 9 + 1 = 19 exact in any order; fl32(sqrt 19 = 4.35889894...) = 0x1.16f834p+2
#   torch:   norm(w) = fl32(sqrt 18 = 4.24264068...) = 0x1.0f876cp+2 = 4.2426404953...; norm(b) = 1;
#            the stacked norms' squares: 17.99999837236... + 1 = 18.99999837236..., rounded to fp32 (spacing 2**-19
#            at 16): 19 - 2**-19 = 0x1.2ffffep+4 (2.8e-7 away, against 1.6e-6 to 19);
#            fl32(sqrt(19 - 2**-19) = 4.35889872...) = 0x1.16f832p+2: one ulp below the shards' norm
# (torch 2.13.0 itself: get_total_norm([tensor([3., 3.]), tensor([1.])]) = 4.358898639678955 = 0x1.16f832p+2, and
# vector_norm(tensor([3., 3., 1.])) = 4.358899116516113 = 0x1.16f834p+2.)
CLIP_NORM_TABLE = [
    ("shards", float.fromhex("0x1.16f834p+2"), "fl32(sqrt(19))"),
    ("torch", float.fromhex("0x1.16f832p+2"), "fl32(sqrt(fl32(fl32(sqrt 18)**2 + 1)))"),
]


@pytest.mark.parametrize("how, want, why", CLIP_NORM_TABLE)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_torch_norm_on_a_hand_derived_case(how, want, why, n):
    model, zeros = MLP([2, 1]), np.zeros(3, np.float32)
    policy = get_precision("fp32").with_(reduction="ddp")
    batches = [(np.float32([[3.0, 3.0]]), np.float32([[-1.0]]))] * n
    engine = ZeroEngine(model, Cluster(n), 0, get_optimizer("sgd", lr=1.0), policy, params=zeros, clip_grad=1.0,
                        clip_norm=how)
    ref = Reference(model, get_optimizer("sgd", lr=1.0), policy, world_size=n, params=zeros, clip_grad=1.0,
                    clip_norm=how)
    engine.step(batches)
    ref.step(batches)
    clip = [e for e in engine.cluster.trace.log if isinstance(e, GradClip)][0]
    assert clip.norm == ref.norms[0] == want, why
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))  # -g * clip_coef(norm), the same bits
    assert (clip.needs == ()) == (how == "torch")  # torch's: each rank alone, no all-reduce; the shards': one


@pytest.mark.bad_input("config", unchanged="the engine is not built")
@pytest.mark.parametrize("stage, how, message", [
    (0, "torch-ish", "clip_norm must be one of"),
    (1, "torch", "clip_norm='torch' is clip_grad_norm_ on a whole gradient, which only stage 0 holds"),
])
def test_bad_clip_norm_is_refused(stage, how, message):
    with pytest.raises(ValueError, match=message):
        ZeroEngine(MLP([2, 1]), Cluster(2), stage, get_optimizer("sgd"), "fp32", clip_grad=1.0, clip_norm=how)


@pytest.mark.slow
@given(widths=st.lists(st.integers(1, 7), min_size=2, max_size=4), n=st.integers(1, 5),
       precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]), recipe=st.sampled_from(["seeds", "ddp"]),
       max_norm=st.sampled_from([1e-3, 0.1, 10.0]), seed=st.integers(0, 2**16))
def test_the_torch_norm_is_the_oracles(widths, n, precision, recipe, max_norm, seed):
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    policy = get_precision(precision).with_(reduction=recipe)
    engine = ZeroEngine(model, Cluster(n), 0, get_optimizer("adam", lr=1e-2), policy, params=params,
                        clip_grad=max_norm, clip_norm="torch")
    ref = Reference(model, get_optimizer("adam", lr=1e-2), policy, world_size=n, params=params, clip_grad=max_norm,
                    clip_norm="torch")
    data = make_regression(np.random.default_rng(seed + 1), 2 * n, 3, widths)
    for s in range(2):
        assert engine.step(data[s * n : (s + 1) * n]) == ref.step(data[s * n : (s + 1) * n])
    got = [e.norm for e in engine.cluster.trace.log if isinstance(e, GradClip)]
    assert got == ref.norms[: len(got)]
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))

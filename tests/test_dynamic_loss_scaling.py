"""Dynamic loss scaling in the engines: an overflow on one rank skips the step on every rank, changes
nothing but the scale, and the oracle skips the same steps (issue 11, Must show 1 and 2).

The scalers' own state machines are checked against hand-derived tables in tests/test_loss_scaling.py;
MPI against the simulator, overflows injected the same way, in tests/mpi/training_check.py. Overflows
are injected as a real run meets them: one rank's micro-batch has a target far beyond the compute
format (fp16: 6e4; bf16: 3e38), so its loss-scaled gradient dL/dy = S·(y - t)/B rounds to inf.
"""

import numpy as np
import pytest
from helpers import accepted_recipes, bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.cluster import LossScaleUpdate
from zerosim.models import make_regression
from zerosim.precision import LossScaleAtMinimum, get_precision

HUGE = {"fp16": 6e4, "bf16": 3e38}  # a target whose gradient overflows the format at any scale >= 4 (batch 3)
# small windows, so that growth and DeepSpeed's hysteresis happen within a few steps; a start at 2**10, where
# these small MLPs' own gradients rarely overflow, so that most overflows are the injected ones
SCALERS = {"torch": (("growth_interval", 2), ("init_scale", 2.0**10)),
           "deepspeed": (("hysteresis", 2), ("init_scale", 2.0**10), ("scale_window", 2))}


def snapshot(engine) -> dict:
    """Everything a skipped step must leave alone, on every rank, as bit patterns."""
    return {
        "t": engine.t,
        "master": [bits(m).copy() for m in engine.master_shards()],
        "optimizer": [{k: bits(v).copy() for k, v in s.items()} for s in engine.optimizer_shards()],
        "params": [bits(engine.compute_params(i)).copy() for i in range(engine.cluster.local_size)],
    }


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


def inject(data: list, where: dict, value: float) -> list:
    """A copy of the micro-batches with target[0, 0] = value in micro-batch `where[step]` of each step (0-based
    index)."""
    data = list(data)
    for index in where.values():
        x, t = data[index]
        t = t.copy()
        t[0, 0] = value
        data[index] = (x, t)
    return data


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    n=st.integers(1, 5),
    stage=st.integers(0, 3),
    k=st.integers(1, 2),
    scaler=st.sampled_from(sorted(SCALERS)),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed"]),
    steps=st.integers(2, 5),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_injected_overflows_skip_on_every_rank_change_nothing_and_match_the_oracle(
    widths, n, stage, k, scaler, precision, steps, seed, data
):
    scaled = get_precision(precision).with_(loss_scale=scaler, loss_scale_options=SCALERS[scaler])
    reduction = data.draw(st.sampled_from(accepted_recipes(stage, scaled)), label="reduction")  # the engine's list
    hit = data.draw(st.sets(st.integers(1, steps), min_size=1), label="overflow steps")
    rank = data.draw(st.integers(0, n - 1), label="overflowing rank")
    micro = data.draw(st.integers(0, k - 1), label="its micro-batch")
    policy = get_precision(precision).with_(loss_scale=scaler, loss_scale_options=SCALERS[scaler], reduction=reduction)
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    per_step = n * k
    clean = make_regression(np.random.default_rng(seed + 1), steps * per_step, 3, widths)
    batches = inject(clean, {s: (s - 1) * per_step + rank * k + micro for s in hit}, HUGE[policy.compute])
    engine = ZeroEngine(
        model, Cluster(n), stage, get_optimizer("adam", lr=1e-2), policy, params=params, accumulation_steps=k
    )
    ref = Reference(model, get_optimizer("adam", lr=1e-2), policy, world_size=n, params=params, accumulation_steps=k,
                    reduce_every_micro_step=stage >= 2)
    for s in range(1, steps + 1):
        mine = batches[(s - 1) * per_step : s * per_step]
        step = [mine[r * k : (r + 1) * k] for r in range(n)]
        before = snapshot(engine)
        engine.step(step)
        ref.step(step)
        (decision,) = engine.cluster.trace.of_type(LossScaleUpdate)[-1:]
        want = ref.decisions[-1]
        assert (decision.skipped, decision.scale_before, decision.scale_after) == (
            want.skip,
            want.scale_before,
            want.scale_after,
        )
        # the injected micro-batch overflows (a step may overflow by itself too)
        assert decision.found_inf or s not in hit
        if decision.skipped:
            assert same(snapshot(engine), before), f"step {s} was skipped but changed the state"
        assert engine.t == ref.t and engine.iteration == s
        assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
        for name, got in engine.full_optimizer_state().items():
            assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name
        assert np.array_equal(bits(engine.full_params()), bits(ref.compute_params()))
        assert engine.scaler.state_dict() == ref.scaler.state_dict()


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_skip_is_agreed_through_a_max_all_reduce_of_one_flag(stage):
    # N = 3, rank 2's micro-batch overflows: every rank records one all-reduce of a one-element fp32 flag with
    # op "max" and purpose "check", and every rank skips (no optimizer step event at all).
    n, widths = 3, [4, 5, 2]
    model = MLP(widths)
    data = inject(make_regression(np.random.default_rng(0), n, 3, widths), {1: 2}, HUGE["fp16"])
    engine = ZeroEngine(
        model, Cluster(n), stage, get_optimizer("adam", lr=1e-2), get_precision("fp16-mixed").with_(loss_scale="torch")
    )
    engine.step(data)
    trace = engine.cluster.trace
    checks = [c for c in trace.calls if c.purpose == "check"]
    # an all-reduce is recorded as its two phases: the reduce-scatter with MAX, then the all-gather
    assert [(c.collective, c.op, c.elements, c.dtype, c.tag) for c in checks] == [
        ("all_reduce", "max", n, "fp32", "overflow flag"), ("all_reduce", "gather", n, "fp32", "overflow flag")]
    (decision,) = trace.of_type(LossScaleUpdate)
    assert decision.skipped and decision.found_inf and decision.needs == tuple(c.call for c in checks)
    assert (decision.scale_before, decision.scale_after, engine.t, engine.iteration) == (2.0**16, 2.0**15, 0, 1)
    assert not [e for e in trace.log if type(e).__name__ == "OptimizerStep"]
    assert all(
        not [
            b
            for b in r.ledger.live.values()
            if b.kind not in ("params", "grads", "master") and not b.kind.startswith("optim")
        ]
        for r in engine.cluster.ranks
    )  # the step's transient buffers were freed


def _train(policy, steps: int, n: int = 4, stage: int = 2, widths=(16, 64, 64, 4)):
    """(engine, losses, skipped steps, scales used): the MLP trained `steps` steps on fresh teacher micro-batches."""
    model = MLP(list(widths))
    data = make_regression(np.random.default_rng(0), n * steps, 16, list(widths))
    engine = ZeroEngine(
        model,
        Cluster(n),
        stage,
        get_optimizer("adam", lr=1e-2),
        policy,
        params=model.init_params(np.random.default_rng(1)),
    )
    losses, skipped, scales = [], [], []
    for s in range(steps):
        scales.append(engine.scaler.scale)
        t = engine.t
        losses.append(float(np.mean(engine.step(data[s * n : (s + 1) * n]))))
        if engine.t == t:
            skipped.append(s + 1)
    return engine, losses, skipped, scales


@pytest.mark.slow
@pytest.mark.pinned
def test_fp16_training_at_2_16_raises_with_a_static_scale_and_recovers_with_dynamic_scaling():
    # The MLP [16, 64, 64, 4] in fp16 at S = 2**16 (both frameworks' initial scale): its first gradients
    # overflow fp16. A static scale stops the run at step 1, nothing changed; torch's GradScaler and DeepSpeed's
    # DynamicLossScaler skip the first steps, back off, and then train: measured here, step by step.
    static = get_precision("fp16-mixed").with_(loss_scale=2.0**16)
    engine, *_ = _train(static, 0)
    before = snapshot(engine)
    model_batches = make_regression(np.random.default_rng(0), 4, 16, [16, 64, 64, 4])
    with pytest.raises(FloatingPointError, match=r"NaN or inf \(loss scale 65536 may be too large\); no parameter or "
                                                 r"optimizer state"):
        engine.step(model_batches)
    assert same(snapshot(engine), before)

    steps = 40
    for scaler, want_skipped, want_scales in (
        ("torch", [1, 2], [2.0**16, 2.0**15] + [2.0**14] * 38),  # backs off at once: x0.5 per overflow
        # hysteresis 2: the first overflow keeps S
        ("deepspeed", [1, 2, 3], [2.0**16] * 2 + [2.0**15] + [2.0**14] * 37),
    ):
        engine, losses, skipped, scales = _train(static.with_(loss_scale=scaler), steps)
        assert skipped == want_skipped, scaler  # measured: the early overflows, and none after
        assert scales == want_scales, scaler
        assert engine.t == steps - len(skipped)
        assert np.all(np.isfinite(losses[len(skipped):]))
        assert losses[-1] < 0.5 * losses[len(skipped)], (scaler, losses[len(skipped)], losses[-1])  # it trains
        assert np.all(np.isfinite(engine.full_master()))


def test_a_gradient_that_underflows_fp16_survives_with_loss_scaling():
    # The MLP on inputs and targets scaled by 2**-10 (tiny activations and errors, as in Micikevicius et al.'s
    # Figure 3): one step in fp16 at S = 1 flushes most weight gradients to zero; at S = 2**16 every one
    # survives. Measured against the same step in fp32 (which holds each of these gradients, the smallest
    # 9e-13, as a normal number): "flushed" = fp32's averaged gradient is nonzero but fp16's is exactly 0.
    # Measured: 59% flushed at S = 1, 0.3% at S = 2**8, 0.06% at 2**12, none at 2**16.
    from zerosim.analysis.numerics import flushed_fraction, one_step_gradient

    widths = [16, 64, 64, 4]
    data = [
        (x * np.float32(2.0**-10), t * np.float32(2.0**-10))
        for x, t in make_regression(np.random.default_rng(3), 2, 16, widths)
    ]
    g32 = one_step_gradient(widths, data, get_precision("fp32"))
    unscaled = one_step_gradient(widths, data, get_precision("fp16-mixed"))
    scaled = one_step_gradient(widths, data, get_precision("fp16-mixed").with_(loss_scale=2.0**16))
    lost, kept = flushed_fraction(unscaled, g32), flushed_fraction(scaled, g32)
    assert lost > 0.5, lost  # more than half of the weights would not move at all
    assert kept == 0.0, kept
    # and where both are nonzero, the scaled fp16 gradient is the fp32 one to within fp16's relative precision
    ok = g32 != 0
    rel = np.abs(scaled[ok].astype(np.float64) - g32[ok]) / np.abs(g32[ok])
    assert np.median(rel) < 2.0**-10, np.median(rel)


def test_deepspeed_stops_at_its_minimum_scale_on_every_rank_with_nothing_changed():
    # min_scale 2**15, hysteresis 1: the first overflow lowers 2**16 -> 2**15, the second is at the minimum and
    # DeepSpeed gives up ("Current loss scale already at minimum"), before any state changes.
    policy = get_precision("fp16-mixed").with_(
        loss_scale="deepspeed", loss_scale_options={"min_scale": 2.0**15, "hysteresis": 1}
    )
    engine, *_ = _train(policy, 1)
    assert engine.scaler.scale == 2.0**15 and engine.t == 0
    before = snapshot(engine)
    with pytest.raises(LossScaleAtMinimum, match="already at minimum"):
        engine.step(make_regression(np.random.default_rng(0), 8, 16, [16, 64, 64, 4])[4:])
    assert same(snapshot(engine), before) and engine.iteration == 1


def test_a_static_scale_told_to_skip_skips_and_keeps_its_scale():
    # DeepSpeed's static LossScaler: the ZeRO optimizer still checks for overflow and skips; the scale stays.
    policy = get_precision("fp16-mixed").with_(loss_scale=2.0**16, loss_scale_options={"on_overflow": "skip"})
    engine, losses, skipped, scales = _train(policy, 3)
    assert skipped == [1, 2, 3] and scales == [2.0**16] * 3 and engine.t == 0

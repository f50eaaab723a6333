"""Gradient accumulation: K micro-batches per rank per step, at every stage, bit for bit with the oracle.

Letters: N ranks, K micro-steps, P parameters, s = ceil(P/N), Ψ = N*s.

Stages 0/1 accumulate each rank's own gradients across the K micro-steps in a full (Ψ,) buffer and
reduce once; stages 2/3 reduce-scatter every micro-step and accumulate the reduced (s,) shard (as
DeepSpeed does). The oracle is told which order to follow (`reduce_every_micro_step`), so every
stage equals it bitwise; the two orders themselves give different bits in 16-bit accumulation.
"""

import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, SGD, Adam, Cluster, Reference, ZeroEngine
from zerosim.cluster import Compute, LedgerEvent, OptimizerStep
from zerosim.models import make_regression
from zerosim.precision import get_precision


def micro_batches(rng, n, k, batch, widths):
    """Per rank, a list of K (x, target) micro-batches."""
    flat = make_regression(rng, n * k, batch, widths)
    return [flat[r * k : (r + 1) * k] for r in range(n)]


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    n=st.integers(1, 8),
    k=st.integers(1, 4),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    grad_accum=st.sampled_from([None, "fp32"]),
    checkpoint=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_accumulating_stages_equal_the_oracle_bitwise(widths, n, k, stage, precision, grad_accum, checkpoint, seed):
    rng = np.random.default_rng(seed)
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed + 1))
    policy = get_precision(precision).with_(grad_accum=grad_accum)
    engine = ZeroEngine(
        model, Cluster(n), stage, Adam(lr=1e-2), policy, checkpoint=checkpoint, params=params, accumulation_steps=k
    )
    ref = Reference(
        model,
        Adam(lr=1e-2),
        policy,
        world_size=n,
        params=params,
        accumulation_steps=k,
        reduce_every_micro_step=stage >= 2,
    )
    for _ in range(2):
        data = micro_batches(rng, n, k, 3, widths)
        assert engine.step(data) == ref.step(data)  # per rank: the mean of its K micro-batch losses
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name
    assert np.array_equal(bits(engine.full_params()), bits(ref.compute_params()))


def test_one_micro_step_is_the_plain_step():
    # K = 1 given as a list of one pair, or as the pair itself: the same run, bit for bit.
    widths, n = [4, 5, 3], 3
    data = make_regression(np.random.default_rng(0), n, 2, widths)
    a = ZeroEngine(MLP(widths), Cluster(n), 2, Adam(lr=1e-2), "bf16-mixed")
    b = ZeroEngine(MLP(widths), Cluster(n), 2, Adam(lr=1e-2), "bf16-mixed", accumulation_steps=1)
    assert a.step(data) == b.step([[d] for d in data])
    assert np.array_equal(bits(a.full_master()), bits(b.full_master()))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_steps_end_is_labelled_the_last_micro_step(stage):
    # What a step does after its last micro-step's backward (stages 0/1's gradient reduction, the overflow check, the
    # norm's all-reduce with clipping, stages 1/2's refresh; stages 2/3's last bucket too) belongs to micro-step K - 1,
    # as a reader of the timeline or its Chrome trace takes the label: found by its place in the log (after the last
    # compute), not by its purpose.
    widths, n, k = [4, 6, 3], 3, 3
    cluster = Cluster(n, trace="call")
    engine = ZeroEngine(MLP(widths), cluster, stage, Adam(lr=1e-2), "fp16-mixed", clip_grad=1.0,
                        accumulation_steps=k)
    engine.step(micro_batches(np.random.default_rng(0), n, k, 2, widths))
    log = cluster.trace.log
    last_compute = max(i for i, e in enumerate(log) if isinstance(e, Compute))
    assert {e.micro for e in log if isinstance(e, Compute)} == set(range(k))
    after = [e for e in log[last_compute:] if type(e).__name__ == "Call"]
    purposes = [e.purpose for e in after]
    assert purposes.count("check") == 2  # the overflow flag's all-reduce, then the norm's
    assert ("reduce grads" in purposes or stage > 1) and ("refresh params" in purposes) == (stage in (1, 2))
    assert {e.micro for e in after} == {k - 1}


# ---------------------------------------------------------------- the gradient buffer across micro-steps

WIDTHS = [8, 32, 32, 8]  # P = 8*32+32 + 32*32+32 + 32*8+8 = 1608; largest layer window 1056


def grads_bytes_at_each_micro_step(stage, n, k, grad_accum=None):
    """(what rank 0's ledger holds of kind "grads" when each micro-step's forward begins, its peak during them)."""
    model = MLP(WIDTHS)
    cluster = Cluster(n)
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-3), get_precision("fp16-mixed").with_(grad_accum=grad_accum),
                        accumulation_steps=k)
    start = len(cluster.trace.log)
    engine.step(micro_batches(np.random.default_rng(1), n, k, 4, WIDTHS))
    held = _grads_before(cluster, start)  # replay the log: the ledger's kind total right after each event
    at_start, peak = [], held
    for e in cluster.trace.log[start:]:
        if isinstance(e, LedgerEvent) and e.phase != "forward/backward":
            break  # the micro-steps are over: the end-of-step reduction and update hold other buffers
        if isinstance(e, LedgerEvent) and e.rank == 0 and e.kind == "grads":
            held = e.kind_total
            peak = max(peak, held)
        elif isinstance(e, Compute) and e.rank == 0 and e.kind == "forward" and e.layer == 0:
            at_start.append(held)
    return engine, at_start, peak


def _grads_before(cluster, start):
    """Bytes of kind "grads" rank 0 held when the step began (its resting gradient buffer)."""
    events = [e for e in cluster.trace.log[:start] if isinstance(e, LedgerEvent) and e.rank == 0 and e.kind == "grads"]
    return events[-1].kind_total


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("grad_accum, itemsize", [(None, 2), ("fp32", 4)])
def test_the_gradient_buffer_across_micro_steps(stage, grad_accum, itemsize):
    # Seed 001, "gradient accumulation buffers": at stages 0/1 a full gradient buffer (2Ψ bytes in
    # fp16, 4Ψ in fp32) lives across all K micro-steps; at stages 2/3 only the (s,) shard does, plus
    # one layer's fresh fp16 gradients while it is reduce-scattered.
    n, k = 4, 3
    P = 8 * 32 + 32 + 32 * 32 + 32 + 32 * 8 + 8
    s = -(-P // n)
    engine, at_start, peak = grads_bytes_at_each_micro_step(stage, n, k, grad_accum)
    assert engine.model.num_params == P
    largest = 32 * 32 + 32  # fc1's window, the largest layer
    if stage < 2:
        assert at_start == [itemsize * n * s] * k  # the whole padded buffer, every micro-step
        assert peak == itemsize * n * s
    else:
        assert at_start == [itemsize * s] * k  # only the shard
        assert peak == itemsize * s + 2 * largest  # + one layer's fp16 gradients in flight


# ---------------------------------------------------------------- the two orders, in 16 bits and in fp32

U16, U32 = 2.0**-11, 2.0**-24  # unit roundoffs of fp16 and fp32


def gamma(m, u):
    return m * u / (1 - m * u)  # Higham's bound for m roundings


def averaged_gradient(stage, grad_accum, n, k, data, params):
    """(the fp32 gradient each rank's optimizer read, concatenated over ranks; every micro-gradient g_rk)."""
    model = MLP(WIDTHS)
    cluster = Cluster(n, keep_values=True)
    policy = get_precision("fp16-mixed").with_(grad_accum=grad_accum)
    engine = ZeroEngine(model, cluster, stage, SGD(lr=0.0), policy, params=params, accumulation_steps=k)
    engine.step(data)
    steps = sorted(cluster.trace.of_type(OptimizerStep), key=lambda e: e.rank)
    g32 = np.concatenate([e.values["grad32"] for e in steps])[: model.num_params].astype(np.float64)
    micro = np.zeros((n, k, model.num_params))  # (N, K, P): every local gradient, as fp16 values
    for e in cluster.trace.of_type(Compute):
        if e.kind == "backward" and e.values["grads"]:
            a, b = model.layer_window(e.layer)
            micro[e.rank, e.micro, a:b] = model.pack(e.layer, e.values["grads"]).astype(np.float64)
    return g32, micro


def test_stage1_and_stage2_differ_in_16bit_accumulation_and_stay_within_the_bound():
    # Stage 1 sums each rank's K micro-gradients first (fp16), then over ranks on the ring (fp16);
    # stage 2 sums over ranks every micro-step, then the K reduced shards (fp16). Same numbers, another
    # order: other bits — the "ZeRO-1 and ZeRO-2 give different losses" reports users file. Each order
    # is a summation tree whose leaf-to-root paths have at most (K-1) + (N-1) additions, so
    #   |sum - exact| <= gamma_{N+K-2}(u16) * sum |g_rk|            (Higham, Accuracy & Stability §4.2)
    # for 16-bit accumulation, and with fp32 accumulation the K-1 local (stage 1) or shard (stage 2)
    # additions round to fp32 instead: <= (gamma_{K-1}(u32) + gamma_{N-1}(u16)) * sum|g| to first order
    # (the products of two roundoffs are below u16*u32*NK and covered by the factor 1.01). Then the
    # cast to fp32 is exact and / (N*K) rounds once: + u32 * |exact| / (N*K).
    n, k = 4, 4
    model = MLP(WIDTHS)
    params = model.init_params(np.random.default_rng(3))
    data = micro_batches(np.random.default_rng(4), n, k, 4, WIDTHS)
    got = {}
    for stage in (1, 2):
        for acc in (None, "fp32"):
            got[stage, acc], micro = averaged_gradient(stage, acc, n, k, data, params)
    exact = micro.sum(axis=(0, 1)) / (n * k)  # float64: exact for these few fp16 terms
    mag = np.abs(micro).sum(axis=(0, 1)) / (n * k)
    bound16 = 1.01 * gamma(n + k - 2, U16) * mag + U32 * np.abs(exact)
    bound32 = 1.01 * (gamma(k - 1, U32) + gamma(n - 1, U16)) * mag + U32 * np.abs(exact)
    assert not np.array_equal(got[1, None], got[2, None])  # the two 16-bit orders disagree
    for stage in (1, 2):
        assert np.all(np.abs(got[stage, None] - exact) <= bound16)
        assert np.all(np.abs(got[stage, "fp32"] - exact) <= bound32)
    # and the fp32-accumulated results sit closer to the exact sum than the 16-bit ones, on the whole
    err = {key: np.abs(g - exact).sum() for key, g in got.items()}
    assert err[1, "fp32"] < err[1, None] and err[2, "fp32"] < err[2, None]


# ---------------------------------------------------------------- bad input

@pytest.mark.bad_input("engine steps", unchanged=True)
def test_accumulation_needs_k_micro_batches_per_rank():
    engine = ZeroEngine(MLP([3, 2]), Cluster(2), 1, Adam(), accumulation_steps=2)
    one_each = make_regression(np.random.default_rng(0), 2, 2, [3, 2])
    with pytest.raises(ValueError, match="a list of 2 \\(x, target\\) pairs"):
        engine.step(one_each)
    assert engine.t == 0


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_accumulation_steps_must_be_a_positive_integer(k):
    with pytest.raises(ValueError, match="accumulation_steps"):
        ZeroEngine(MLP([3, 2]), Cluster(2), 1, Adam(), accumulation_steps=k)

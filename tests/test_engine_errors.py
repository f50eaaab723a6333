"""Bad input gets a clear error, raised before any state changes."""

import numpy as np
import pytest

from zerosim import Adam, Cluster, MLP, Muon, TinyNet, ZeroEngine, get_optimizer
from zerosim.precision import MixedPrecision


def snapshot(engine):
    return [
        {name: buf.array.copy() for name, buf in rank.ledger.live.items()} for rank in engine.cluster.ranks
    ]


def same(a, b):
    return all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x) for x, y in zip(a, b))


def test_wrong_number_of_micro_batches():
    engine = ZeroEngine(TinyNet(), Cluster(2), 1, Adam(lr=0.1))
    before = snapshot(engine)
    with pytest.raises(ValueError, match="one \\(x, target\\) micro-batch per local rank \\(2\\), got 1"):
        engine.step(TinyNet.seed_batches()[:1])
    assert same(before, snapshot(engine)) and engine.t == 0


def test_nan_input_is_refused_before_anything_runs():
    engine = ZeroEngine(TinyNet(), Cluster(2), 2, Adam(lr=0.1))
    before = snapshot(engine)
    bad = TinyNet.seed_batches()
    bad[1] = (np.array([[np.nan, 1.0]], np.float32), bad[1][1])
    with pytest.raises(ValueError, match="rank 1: the micro-batch input contains NaN"):
        engine.step(bad)
    assert same(before, snapshot(engine))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_overflowing_gradients_change_no_parameter_or_state(stage):
    # fp16 max is 65504: a loss scale of 2**20 overflows the fp16 gradients to inf
    engine = ZeroEngine(TinyNet(), Cluster(2), stage, Adam(lr=0.1), MixedPrecision("fp16", "fp32", loss_scale=2.0**20))
    keep = {k: v for k, v in zip(("master", "m", "v"), (engine.full_master(), *engine.full_optimizer_state().values()))}
    params = [engine.compute_params(i) for i in range(2)]
    with pytest.raises(FloatingPointError, match="NaN or inf.*loss scale.*no parameter or optimizer state was changed"):
        engine.step(TinyNet.seed_batches())
    assert np.array_equal(engine.full_master(), keep["master"])
    assert all(np.array_equal(a, b) for a, b in zip(engine.full_optimizer_state().values(), (keep["m"], keep["v"])))
    assert all(np.array_equal(engine.compute_params(i), params[i]) for i in range(2)) and engine.t == 0
    assert all(k in ("params", "grads", "master", "optim:m", "optim:v") for k in engine.cluster.ranks[0].ledger.by_kind())


@pytest.mark.parametrize("stage", [2, 3])
def test_muon_is_refused_where_gradients_are_sharded(stage):
    with pytest.raises(ValueError, match=f"muon cannot run at ZeRO stage {stage}.*whole"):
        ZeroEngine(MLP([4, 4, 2]), Cluster(2), stage, Muon(lr=0.02))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(stage=4), "ZeRO stage must be one of"),
        (dict(precision="fp12-mixed"), "unknown precision preset"),
        (dict(params=np.zeros(3, np.float32)), "params must have shape \\(4,\\)"),
        (dict(params=np.array([1, np.inf, 0, 0], np.float32)), "NaN or inf"),
    ],
)
def test_bad_engine_arguments(kwargs, message):
    args = dict(stage=1, precision="fp16-mixed") | kwargs
    with pytest.raises(ValueError, match=message):
        ZeroEngine(TinyNet(), Cluster(2), args.pop("stage"), Adam(lr=0.1), **args)


def test_unknown_optimizer_name():
    with pytest.raises(ValueError, match="unknown optimizer 'adamax'"):
        get_optimizer("adamax")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rounding="up"), "unknown rounding 'up'"),
        (dict(master="fp16"), "master copy in fp16 would lose the updates"),
        (dict(average="mean"), "unknown averaging 'mean'"),
        (dict(loss_scale=0), "loss_scale must be positive"),
        (dict(compute="fp12"), "unknown floating-point format 'fp12'"),
    ],
)
def test_bad_precision_policies(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MixedPrecision(**kwargs)

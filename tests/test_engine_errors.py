"""Bad input gets a clear error, raised before any state changes."""

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, Muon, TinyNet, ZeroEngine, get_optimizer
from zerosim.precision import MixedPrecision


def snapshot(engine):
    return [
        {name: buf.array.copy() for name, buf in rank.ledger.live.items()} for rank in engine.cluster.ranks
    ]


def same(a, b):
    return all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x) for x, y in zip(a, b)
    )


@pytest.mark.bad_input("engine steps", unchanged=True)
def test_wrong_number_of_micro_batches():
    engine = ZeroEngine(TinyNet(), Cluster(2), 1, Adam(lr=0.1))
    before = snapshot(engine)
    with pytest.raises(ValueError, match="one \\(x, target\\) micro-batch per local rank \\(2\\), got 1"):
        engine.step(TinyNet.seed_batches()[:1])
    assert same(before, snapshot(engine)) and engine.t == 0


@pytest.mark.bad_input("engine steps", unchanged=True)
def test_nan_input_is_refused_before_anything_runs():
    engine = ZeroEngine(TinyNet(), Cluster(2), 2, Adam(lr=0.1))
    before = snapshot(engine)
    bad = TinyNet.seed_batches()
    bad[1] = (np.array([[np.nan, 1.0]], np.float32), bad[1][1])
    with pytest.raises(ValueError, match="rank 1: the micro-batch input contains NaN"):
        engine.step(bad)
    assert same(before, snapshot(engine))


@pytest.mark.bad_input("engine steps", unchanged=True)
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
    assert all(
        k in ("params", "grads", "master", "optim:m", "optim:v") for k in engine.cluster.ranks[0].ledger.by_kind()
    )


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("recipe", ["fsdp2", "deepspeed-zero3"])
def test_distributed_muon_is_refused_on_per_parameter_shards(recipe):
    # Moonshot's Distributed Muon gathers a matrix among the ranks whose flat shard touches it
    cluster = Cluster(2)
    with pytest.raises(ValueError, match="Muon sharding 'distributed' runs on flat shards; ZeRO-3 here cuts them"):
        ZeroEngine(MLP([4, 4, 2]), cluster, 3, Muon(lr=0.02, sharding="distributed"), recipe=recipe)
    assert cluster.ranks[0].ledger.current() == 0  # refused before anything was allocated


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(stage=4), "ZeRO stage must be one of"),
        (dict(precision="fp12-mixed"), "unknown precision preset"),
        (dict(params=np.zeros(3, np.float32)), "params must have shape \\(4,\\)"),
        (dict(params=np.array([1, np.inf, 0, 0], np.float32)), "NaN or inf"),
    ],
)
@pytest.mark.bad_input("engine arguments")
def test_bad_engine_arguments(kwargs, message):
    args = dict(stage=1, precision="fp16-mixed") | kwargs
    with pytest.raises(ValueError, match=message):
        ZeroEngine(TinyNet(), Cluster(2), args.pop("stage"), Adam(lr=0.1), **args)


@pytest.mark.bad_input("optimizers")
def test_unknown_optimizer_name():
    with pytest.raises(ValueError, match="unknown optimizer 'adamax'"):
        get_optimizer("adamax")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rounding="up"), "unknown rounding 'up'"),
        (dict(master="fp16"), "master copy in fp16 would lose the updates"),
        (dict(reduction="mean"), "unknown reduction recipe 'mean'"),
        # a collective op, not a recipe
        (dict(reduction="avg_premul"), "unknown reduction recipe 'avg_premul'; choose one of"),
        (dict(loss_scale=0), "loss_scale must be a positive finite number"),
        (dict(loss_scale=float("inf")), "loss_scale must be a positive finite number"),
        (dict(loss_scale="apex"), "unknown loss_scale 'apex'; give a number > 0 or one of torch, dynamic, deepspeed"),
        (
            dict(loss_scale="torch", loss_scale_options={"growth_interval": 0}),
            "growth_interval must be an integer >= 1",
        ),
        (dict(loss_scale="torch", loss_scale_options={"window": 5}), "do not fit loss scale 'torch'"),
        (dict(loss_scale="deepspeed", loss_scale_options={"hysteresis": 0}), "hysteresis must be an integer >= 1"),
        (dict(unscale="multiply"), "unknown unscale 'multiply'"),
        (dict(allreduce="tree"), "unknown allreduce 'tree'"),
        (dict(seed=1.5), "seed must be an integer"),
        (dict(compute="fp12"), "unknown floating-point format 'fp12'"),
    ],
)
@pytest.mark.bad_input("precision policies")
def test_bad_precision_policies(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MixedPrecision(**kwargs)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda x, t: (x, t.T), r"rank 1: half-MSE needs targets of shape \(batch, outputs\) = \(3, 2\), got \(2, 3\)"),
        (lambda x, t: (x.ravel(), t), r"rank 1: the input must have shape \(batch, 4\)"),
        (lambda x, t: (x[:, :3], t), r"rank 1: the input must have shape \(batch, 4\), got \(3, 3\)"),
        (lambda x, t: (x, t * np.nan), "rank 1: the targets contain NaN"),
    ],
)
@pytest.mark.bad_input("engine steps", unchanged=True)
def test_malformed_micro_batches_name_the_rank_and_run_nothing(bad, message):
    from zerosim.models import make_regression

    engine = ZeroEngine(MLP([4, 5, 2]), Cluster(2), 3, Adam(lr=0.1))
    batches = make_regression(np.random.default_rng(0), 2, 3, [4, 5, 2])
    before = snapshot(engine)
    with pytest.raises(ValueError, match=message):
        engine.step([batches[0], bad(*batches[1])])
    assert same(before, snapshot(engine)) and engine.t == 0
    engine.step(batches)  # and the engine still works
    assert engine.t == 1


@pytest.mark.bad_input("engine steps")
def test_class_labels_are_checked():
    from zerosim.models import make_classification

    engine = ZeroEngine(MLP([4, 3], loss="xent"), Cluster(2), 1, Adam(lr=0.1))
    (x0, l0), (x1, l1) = make_classification(np.random.default_rng(0), 2, 5, [4, 3])
    with pytest.raises(ValueError, match=r"rank 0: class labels must lie in \[0, 3\)"):
        engine.step([(x0, l0 + 3), (x1, l1)])
    with pytest.raises(ValueError, match="rank 1: cross-entropy needs integer class labels"):
        engine.step([(x0, l0), (x1, l1.astype(np.float32))])


@pytest.mark.bad_input("engine steps", unchanged=True)
@pytest.mark.parametrize("stage", [2, 3])
def test_a_rank_failing_mid_backward_leaves_nothing_behind(stage, monkeypatch):
    # Rank 1 raises inside its layer-0 backward, while its layer-2 gradients were already reduced
    # (stage 2/3) and layer 0 was gathered (stage 3): every buffer of the failed step must be freed.
    from zerosim.models import make_regression
    from zerosim.models.layers import _basic as layers

    engine = ZeroEngine(MLP([4, 5, 2]), Cluster(2), stage, Adam(lr=0.1))
    batches = make_regression(np.random.default_rng(0), 2, 3, [4, 5, 2])
    real = layers.Linear.backward
    calls = {"n": 0}

    def flaky(self, p, dy, cache, fmt):
        calls["n"] += 1
        if calls["n"] == 4:  # rank 0: fc1, fc0; rank 1: fc1, then fc0 fails
            raise RuntimeError("injected failure in backward")
        return real(self, p, dy, cache, fmt)

    monkeypatch.setattr(layers.Linear, "backward", flaky)
    with pytest.raises(RuntimeError, match="injected failure"):
        engine.step(batches)
    for rank in engine.cluster.ranks:
        assert set(rank.ledger.live) == {"params", "grads", "master", "m", "v"}, rank.ledger.live.keys()
    monkeypatch.setattr(layers.Linear, "backward", real)
    engine.step(batches)
    assert engine.t == 1

"""The ledger measures what the seeds' formulas predict, per stage, padding included.

Per rank, with Ψ = N*s the padded parameter count and s = ceil(P/N) (seed 001's table, Adam, K = 12):
    stage 0: 2Ψ params + 2Ψ grads + 12Ψ            = 16Ψ
    stage 1: 2Ψ + 2Ψ + 12Ψ/N                        = 4Ψ + 12Ψ/N
    stage 2: 2Ψ + 2Ψ/N + 12Ψ/N                      = 2Ψ + 14Ψ/N
    stage 3: 2Ψ/N + 2Ψ/N + 12Ψ/N                    = 16Ψ/N
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.models import make_regression

MODEL_STATE = ("params", "grads", "master", "optim:m", "optim:v")


def seed001_bytes(stage, P, N):
    s = -(-P // N)
    psi = N * s  # padded
    return {0: 16 * psi, 1: 4 * psi + 12 * psi // N, 2: 2 * psi + 14 * psi // N, 3: 16 * psi // N}[stage]


def resting(ledger):
    return sum(v for k, v in ledger.by_kind().items() if k in MODEL_STATE)


@given(
    widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed"]),
)
def test_resting_model_state_equals_seed_formula(widths, n, stage, precision):
    model = MLP(widths)
    engine = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-3), precision)
    want = seed001_bytes(stage, model.num_params, n)
    assert [resting(r.ledger) for r in engine.cluster.ranks] == [want] * n
    data = make_regression(np.random.default_rng(0), n, 2, widths)
    engine.step(data)
    assert [resting(r.ledger) for r in engine.cluster.ranks] == [want] * n  # nothing leaked by a step
    assert set(engine.cluster.ranks[0].ledger.by_kind()) <= set(MODEL_STATE)  # all transient buffers freed


WIDTHS = [8, 64, 64, 64, 8]  # three big layers: a whole model is ~3x one layer


def run_one_step(stage, n=4):
    model = MLP(WIDTHS)
    engine = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-3), "fp16-mixed")
    engine.step(make_regression(np.random.default_rng(0), n, 2, WIDTHS))
    windows = [b - a for a, b in (model.layer_window(i) for i in range(len(model.layers)))]
    return engine, model, max(windows)


def test_stage2_gradient_peak_is_one_layer_plus_shard():
    engine, model, largest = run_one_step(2)
    s = engine.layout.shard_size
    for rank in engine.cluster.ranks:
        assert rank.ledger.peak("grads") == 2 * s + 2 * largest  # fp16: shard + the largest layer's grads
        assert rank.ledger.peak("grads") < 2 * model.num_params


def test_stage3_parameter_peak_is_one_layer_plus_shard():
    engine, model, largest = run_one_step(3)
    s = engine.layout.shard_size
    for rank in engine.cluster.ranks:
        assert rank.ledger.peak("params") == 2 * s + 2 * largest
        assert rank.ledger.peak("params") < 2 * model.num_params


@pytest.mark.parametrize("stage", [0, 1])
def test_stages_0_1_hold_whole_gradients(stage):
    engine, model, _ = run_one_step(stage)
    for rank in engine.cluster.ranks:
        assert rank.ledger.peak("grads") == 2 * engine.layout.padded

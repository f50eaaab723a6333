"""Elementwise optimizers stepped in cache-sized blocks (optim/_base.py `step_in_blocks`, the engines' update and
the oracle's speed yardstick) against one step over the whole buffer: every bit of w and of the state, with block
borders everywhere and the values where a rounding shows (subnormals, ±0, huge, inf, NaN); and a whole engine
whose shards are cut in blocks of a few elements against the same engine stepping each shard at once."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import bits, same, snapshot

import zerosim.optim._base as base
from zerosim import MLP, Cluster, ZeroEngine
from zerosim.models import make_regression
from zerosim.optim import SGD, Adam, AdamW, Adan, Lion

OPTIMIZERS = [Adam(lr=1e-3), Adam(lr=0.3, betas=(0.5, 0.75), eps=1e-3), Adam(lr=1e-3, formula="torch"),
              Adam(lr=1e-3, formula="deepspeed"), AdamW(lr=1e-2), SGD(lr=0.1, momentum=0.9), Lion(lr=1e-3),
              Adan(lr=1e-3)]


def _buffers(n, dtype, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(dtype)
    g = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 5, n)).astype(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3e38, -3e38], dtype)
    g[: min(n, special.size)] = special[: min(n, special.size)]
    return w, g


def _steps(opt, w, g, block):
    w, state = w.copy(), {k: np.zeros_like(w) for k in opt.state_names}
    for t in range(1, 4):
        if block is None:
            opt.step(w, g * np.asarray(t % 3 + 1, w.dtype), state, t)
        else:
            base.step_in_blocks(opt, w, g * np.asarray(t % 3 + 1, w.dtype), state, t)
    return w, state


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{o.name}-{getattr(o, 'formula', '')}")
def test_blocks_give_the_whole_buffers_bits(opt, dtype, monkeypatch):
    if getattr(opt, "formula", "seed") != "seed" and dtype != np.float32:
        pytest.skip("the torch and deepspeed formulas model fp32 kernels")
    w, g = _buffers(100, dtype, 3)
    with np.errstate(all="ignore"):
        want_w, want_state = _steps(opt, w, g, None)
        for block in (1, 7, 64, 99, 100, 4096):  # borders everywhere; one block; a block longer than the buffer
            monkeypatch.setattr(base, "STEP_BLOCK", block)
            got_w, got_state = _steps(opt, w, g, block)
            assert np.array_equal(bits(got_w), bits(want_w)), block
            assert same(got_state, want_state), block


@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_an_engine_stepping_its_shards_in_blocks_of_five_gives_the_same_bits_and_log(stage, precision, monkeypatch):
    def run(block):
        monkeypatch.setattr(base, "STEP_BLOCK", block)
        model = MLP([6, 9, 5, 3])  # 128 params: shards of 32 on 4 ranks, 7 blocks of 5 each
        data = make_regression(np.random.default_rng(0), 8, 4, [6, 3])
        engine = ZeroEngine(model, Cluster(4, workers=2), stage, Adam(lr=1e-2), precision,
                            params=model.init_params(np.random.default_rng(1)))
        losses = [engine.step([data[s * 4 + r: s * 4 + r + 1] for r in range(4)]) for s in range(2)]
        return losses, snapshot(engine), pickle.dumps(engine.cluster.trace.log)

    whole, blocks = run(2**17), run(5)
    assert whole[0] == blocks[0] and same(whole[1], blocks[1]) and whole[2] == blocks[2]

"""Checkpoints written by an earlier zerosim still load, bit for bit (issue 21, Must show 1).

tests/fixtures/checkpoints_v1/ holds five small checkpoints saved by zerosim before the engine was redesigned
(format version 1): an MLP [4, 5, 3] (43 parameters) trained for two Adam steps (lr 1e-2) on 3 ranks, one per
stage, with the flat layout and both per-parameter layouts, static and both dynamic loss scalers. Each name says
how it was made: s<stage>-<reduction>-<precision>-<loss scaler or None>. The initial weights are
`init_params(default_rng(0))`, the data `make_regression(default_rng(1), 6, 3, widths)`, rank r's micro-batch of
step s is number (s - 1)·3 + r.

Here the same run is repeated with today's code and every saved state must equal it bit for bit: the fp32
masters (or, pure, the 16-bit weights), the optimizer state, the 16-bit params, t, the iteration count and the
loss scaler's state — as saved (N = 3, the saved stage) and resharded (N = 2 at stage 3, or 2 for the ZeRO-1/2 recipe).
"""

import os

import numpy as np
import pytest
from helpers import bits, same

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.models import make_regression
from zerosim.precision import get_precision

pytestmark = pytest.mark.pinned  # golden bits: two steps of training, as an earlier zerosim saved them

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints_v1")
WIDTHS, N, STEPS = [4, 5, 3], 3, 2
NAMES = sorted(os.listdir(FIXTURES))


def trained(name: str):
    """The run the fixture `name` was saved from, repeated with today's code."""
    stage, reduction, precision, scaler = name.split("-", 1)[0], *_parts(name)
    policy = get_precision(precision).with_(reduction=reduction)
    if scaler != "None":
        policy = policy.with_(loss_scale=scaler)
    model = MLP(WIDTHS)
    engine = ZeroEngine(model, Cluster(N), int(stage[1]), Adam(lr=1e-2), policy,
                        params=model.init_params(np.random.default_rng(0)))
    data = make_regression(np.random.default_rng(1), STEPS * N, 3, WIDTHS)
    for s in range(STEPS):
        engine.step(data[s * N : (s + 1) * N])
    return engine


def _parts(name: str) -> tuple:
    """(reduction, precision, scaler) of a fixture's name; reductions and presets hold dashes themselves."""
    rest = name.split("-", 1)[1]
    for reduction in ("deepspeed-zero12", "deepspeed-zero3", "fsdp2", "seeds", "ddp"):
        if rest.startswith(reduction + "-"):
            precision, scaler = rest[len(reduction) + 1 :].rsplit("-", 1)
            return reduction, precision, scaler
    raise ValueError(name)


def whole(engine) -> dict:
    return {"master": bits(engine.full_master()), "params": bits(engine.full_params()),
            "optimizer": {k: bits(v) for k, v in engine.full_optimizer_state().items()}}


def test_there_is_a_fixture_per_stage_and_per_layout():
    assert [n[:2] for n in NAMES] == ["s0", "s1", "s2", "s3", "s3"]
    assert {"deepspeed-zero3", "fsdp2"} <= {_parts(n)[0] for n in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_written_before_the_redesign_loads_as_saved_bit_for_bit(name):
    want = trained(name)
    got = ckpt.load(os.path.join(FIXTURES, name), Cluster(N), MLP(WIDTHS))
    assert (got.t, got.iteration) == (want.t, want.iteration) and want.iteration == STEPS
    assert got.scaler.state_dict() == want.scaler.state_dict()
    assert same([bits(m) for m in got.master_shards()], [bits(m) for m in want.master_shards()])
    assert same(got.optimizer_shards(), want.optimizer_shards())
    assert same([bits(got.compute_params(i)) for i in range(N)], [bits(want.compute_params(i)) for i in range(N)])


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_written_before_the_redesign_reshards_bit_for_bit(name):
    stage = 2 if _parts(name)[0] == "deepspeed-zero12" else 3  # a stage its saved recipe runs at
    got = ckpt.load(os.path.join(FIXTURES, name), Cluster(2), MLP(WIDTHS), stage=stage)
    assert same(whole(got), whole(trained(name)))

"""The precision policy's `arithmetic`: the kernels the models run on, carried to every layer, engine = oracle under
both, and the portable kernels' products and functions the exact values rounded once.

Whether the portable numbers are the same on other machines is checked by running the tests marked `pinned` under
other BLAS kernels and NumPy SIMD builds (.ci/run); here, that a layer's products are the exact ones.
"""

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers import bits, same, snapshot

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.models import GPT, make_regression, make_sequence_task
from zerosim.models.layers import linear_forward
from zerosim.precision import get_format, get_precision
from zerosim.precision.arithmetic import ARITHMETICS, arithmetic_of, f32_of_fraction


def exact_rows_times_columns(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (B, D_in) @ w.T by exact rational sums, each rounded once to float32."""
    return np.array([[f32_of_fraction(sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(row, col)),
                                          Fraction(0))) for col in w] for row in x], np.float32)


@pytest.mark.pinned
def test_a_portable_linear_layer_gives_the_exact_products_rounded_once_and_a_native_one_numpys():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((6, 33)).astype(np.float32), rng.standard_normal((5, 33)).astype(np.float32)
    portable, _ = linear_forward(x, w, None, get_format("fp32").with_arithmetic("portable"))
    native, _ = linear_forward(x, w, None, get_format("fp32").with_arithmetic("native"))
    assert np.array_equal(bits(portable), bits(exact_rows_times_columns(x, w)))
    assert np.array_equal(bits(native), bits(x @ w.T))
    assert not np.array_equal(bits(portable), bits(native))  # sgemm's fp32 sums round on the way: it differs


def test_the_policy_carries_its_arithmetic_to_the_compute_format_which_still_equals_the_plain_format():
    native = get_precision("fp16-mixed").with_(arithmetic="native")
    assert get_precision("fp16-mixed").arithmetic == "portable"  # the default
    assert native.compute_format.arithmetic == "native" and arithmetic_of(native.compute_format).name == "native"
    assert native.compute_format == get_format("fp16") and hash(native.compute_format) == hash(get_format("fp16"))
    assert arithmetic_of("fp16").name == arithmetic_of(np.float16).name == "portable"  # a name or a dtype: the default
    assert sorted(ARITHMETICS) == ["native", "portable"]


@pytest.mark.bad_input("precision policies")
def test_an_unknown_arithmetic_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="unknown arithmetic 'exact'; choose one of 'portable', 'native'"):
        get_precision("fp32").with_(arithmetic="exact")


@pytest.mark.parametrize("arithmetic", sorted(ARITHMETICS))
@pytest.mark.parametrize("stage", [0, 3])
def test_every_stage_equals_the_oracle_bit_for_bit_under_either_arithmetic(arithmetic, stage):
    policy = get_precision("bf16-mixed").with_(arithmetic=arithmetic)
    gpt = GPT(6, 16, 2, 1, 6, activation="gelu")
    init, n = gpt.init_params(np.random.default_rng(1)), 3
    data = make_sequence_task(np.random.default_rng(0), 2 * n, 4, 3, 6, "copy")
    engine = ZeroEngine(gpt, Cluster(n), stage, get_optimizer("adam", lr=1e-2), policy, params=init)
    oracle = Reference(gpt, get_optimizer("adam", lr=1e-2), policy, n, init)
    for step in range(2):
        assert engine.step(data[step * n : (step + 1) * n]) == oracle.step(data[step * n : (step + 1) * n])
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))


def test_the_two_arithmetics_are_two_runs():
    # the choice reaches the model: an MLP trained under each ends with other bits (the same to a few ulps)
    runs = {}
    for arithmetic in ARITHMETICS:
        model = MLP([16, 64, 64, 4])
        engine = ZeroEngine(model, Cluster(2), 2, get_optimizer("adam", lr=1e-3),
                            get_precision("fp32").with_(arithmetic=arithmetic),
                            params=model.init_params(np.random.default_rng(0)))
        for step, batch in enumerate(make_regression(np.random.default_rng(1), 6, 8, [16, 64, 64, 4])):
            if step % 2 == 0:
                engine.step([batch, batch])
        runs[arithmetic] = snapshot(engine)
    assert not same(runs["portable"], runs["native"])
    gap = np.abs(runs["portable"]["master"][0].view(np.float32) - runs["native"]["master"][0].view(np.float32))
    assert gap.max() < 1e-5


def test_a_checkpoint_resumes_under_either_arithmetic_and_an_old_one_as_portable(tmp_path):
    from zerosim import checkpoint as ckpt

    model = MLP([4, 5, 3])
    native = get_precision("bf16-mixed").with_(arithmetic="native")
    engine = ZeroEngine(model, Cluster(2), 2, get_optimizer("adam", lr=1e-2), native,
                        params=model.init_params(np.random.default_rng(0)))
    engine.step(make_regression(np.random.default_rng(1), 2, 3, [4, 5, 3]))
    ckpt.save(engine, str(tmp_path / "ckpt"))
    assert ckpt.load(str(tmp_path / "ckpt"), Cluster(2), model).precision.arithmetic == "native"  # as saved
    asked = ckpt.load(str(tmp_path / "ckpt"), Cluster(2), model, precision="bf16-mixed")  # the kernels, not a format
    assert asked.precision.arithmetic == "portable" and same(asked.master_shards(), engine.master_shards())
    with pytest.raises(Exception, match="master"):  # a format still may not change on load
        ckpt.load(str(tmp_path / "ckpt"), Cluster(2), model, precision="bf16-pure")
    old = str(Path(__file__).parent / "fixtures" / "checkpoints_v1" / "s2-seeds-fp16-mixed-deepspeed")  # from before
    assert ckpt.load(old, Cluster(3), MLP([4, 5, 3])).precision.arithmetic == "portable"

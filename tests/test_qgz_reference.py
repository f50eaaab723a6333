"""QgzReference: the oracle whose reduction sends every parameter DeepSpeed's qgZ takes through the int4 collective
(issue 26, Must show 3's qgZ runs). Its reduced gradient is checked against the collective's naive twin for those
parameters and against the plain oracle's for the others; a model qgZ takes nothing from runs as the plain oracle."""

import numpy as np
import pytest

from zerosim import MLP, Reference, get_optimizer
from zerosim.collectives.quantized import LocoState, naive_all_to_all_quant_reduce
from zerosim.models import GPT, make_sequence_task
from zerosim.precision import get_precision
from zerosim.reference import QgzReference

FP16 = get_precision("fp16-mixed").with_(loss_scale=2.0**8)


def test_quantized_parameters_get_the_naive_twins_sum_over_nodes_and_the_rest_the_plain_ring():
    """W = 8 in 2 nodes of 4. GPT(8, 16, 2, 1, 8): every weight matrix and both embeddings have M % 16 == 0 and
    groups of a multiple of 8 elements (the kernels' loads), the 1-D LayerNorm and bias vectors go the plain way.
    After `finish` divides by W, a qgZ parameter's gradient is the naive twin's Σ/n (unscaled by S = 2^8, a power
    of two: exact), the others the plain oracle's."""
    gpt, n, d = GPT(8, 16, 2, 1, 8), 8, 4
    init = gpt.init_params(np.random.default_rng(1))
    ref = QgzReference(gpt, get_optimizer("adam"), FP16, n, init, gpus_per_node=d)
    plain = Reference(gpt, get_optimizer("adam"), FP16, n, init)
    assert ref.quantized == ((0, "wte"), (0, "wpe"), (1, "w_qkv"), (1, "w_o"), (1, "w1"), (1, "w2"), (2, "w_head"))
    data = make_sequence_task(np.random.default_rng(0), n, 4, 3, 8, "copy")
    grads = [ref.gradient(*b)[1] for b in data]
    got, want = ref.reduce(grads), plain.reduce(grads)
    for s in gpt.specs:
        window = slice(s.offset, s.offset + s.size)
        if (s.layer, s.name) in ref.quantized:
            twin = np.concatenate(naive_all_to_all_quant_reduce([g[window] for g in grads], s.shape, d))
            assert got[window].tobytes() == (twin.astype(np.float32) / np.float32(2.0**8)).tobytes(), s.name
        else:
            assert got[window].tobytes() == want[window].tobytes(), s.name
    calls = [c for c in ref.trace.calls if c.collective == "all_to_all"]
    assert len(calls) == 4 * len(ref.quantized)  # int4 and scales, in the node and across nodes, per parameter


def test_a_model_qgz_takes_nothing_from_runs_as_the_plain_oracle():
    """MLP([3, 5, 2]) on 4 ranks in 2 nodes: 15 and 10 elements, not multiples of 2W = 8: every gradient falls back
    to the plain reduction, so the losses and the master are the oracle's, bit for bit."""
    model, n = MLP([3, 5, 2]), 4
    init = model.init_params(np.random.default_rng(2))
    ref = QgzReference(model, get_optimizer("adam", lr=1e-2), FP16, n, init, gpus_per_node=2, loco=LocoState())
    plain = Reference(model, get_optimizer("adam", lr=1e-2), FP16, n, init)
    rng = np.random.default_rng(3)
    for _ in range(3):
        batches = [(rng.standard_normal((2, 3)), rng.standard_normal((2, 2))) for _ in range(n)]
        assert ref.step(batches) == plain.step(batches)
    assert ref.quantized == () and ref.master().tobytes() == plain.master().tobytes()


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("precision, n, d, message", [
    ("bf16-mixed", 8, 4, "read fp16"),  # both kernels read the gradient through a __half*
    (FP16, 8, 8, "at least 2"),  # one node: DeepSpeed falls back to reduce_scatter_coalesced
    (FP16, 8, 3, "whole number"),
    (FP16, 8, 0, "positive integer"),
])
def test_qgz_reference_refuses_what_qgz_cannot_run(precision, n, d, message):
    with pytest.raises(ValueError, match=message):
        QgzReference(GPT(6, 16, 2, 1, 6), get_optimizer("adam"), precision, n, gpus_per_node=d)

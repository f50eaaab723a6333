"""qgZ group sizes DeepSpeed's kernels cannot load are refused, naming the constraint, before anything changes
(issue 33, Build 5). The kernels (DeepSpeed 0.19.8, the same in 0.19.6: csrc/quantization/swizzled_quantize.cu,
quant_reduce.cu) read a quantization group 16 bytes at a time: 8 fp16 values per thread in `swizzled_quant_kernel`
(`mem_access::load_global<quantize::granularity>`, granularity 16 in csrc/includes/quantization_utils.h, a
`ld.global.v4.u32` that needs 16-byte alignment), 8 int4 values (4 bytes) per thread in `dequant_reduce`. So the
elements of one group, M/G with G = max(rows, cols, W), must be a multiple of 8; and `launch_swizzled_quant_impl`
launches nothing for groups of more than 512 threads × 16 × 5 = 40,960 elements (total_unroll 2..10 only)."""

import numpy as np
import pytest

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.collectives.quantized import (
    QGZ_ELEMENTS_PER_LOAD,
    QGZ_MAX_GROUP,
    LocoState,
    all_to_all_quant_reduce,
    check_qgz,
    naive_all_to_all_quant_reduce,
)
from zerosim.parallel.data.zeropp import Wire
from zerosim.precision import get_precision
from zerosim.reference import QgzReference

FP16 = get_precision("fp16-mixed").with_(loss_scale=2.0**8)

# (shape, W, nodes, the group size M/G, admitted?) — a comment per row says why
ROWS = [
    ((16, 6), 4, 2, 6, False),  # the case: G = max(16, 6, 4) = 16 groups of 6 = 12 bytes, not 16
    ((16, 4), 4, 2, 4, False),  # groups of 4: half a 16-byte load
    ((8, 3), 4, 2, 3, False),  # groups of 3: odd, not even whole int4 bytes
    ((16, 12), 4, 2, 12, False),  # 24 bytes: the second load of a group starts mid-vector
    ((16, 8), 4, 2, 8, True),  # 8 fp16 = one 16-byte load a thread
    ((32, 16), 8, 2, 16, True),  # two loads
    ((4096, 11008), 16, 2, 4096, True),  # a llama-7b MLP matrix: G = 11008 groups of 4096
    ((40960, 40960), 16, 2, 40960, True),  # the largest group the swizzle kernel launches for (total_unroll 10)
    ((40976, 40976), 16, 2, 40976, False),  # 16 more: total_unroll 12, no kernel launched, nothing written
]


@pytest.mark.parametrize("shape, w, nodes, per_group, admitted", ROWS)
def test_the_group_size_table(shape, w, nodes, per_group, admitted):
    g = max(shape[0], shape[1], w)
    assert int(np.prod(shape)) // g == per_group
    if admitted:
        assert check_qgz(shape, w, nodes) == g
    else:
        with pytest.raises(ValueError, match="16 bytes at a time|40,960"):
            check_qgz(shape, w, nodes)


def test_the_constants_are_the_kernels():
    """16-byte loads of 2-byte fp16 values; 512 threads × (2 steps × 8 halves) × 5 external unrolls."""
    assert QGZ_ELEMENTS_PER_LOAD == 16 // 2
    assert QGZ_MAX_GROUP == 512 * (2 * 8) * 5


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_a_16_by_6_gradient_on_2_by_2_is_refused_before_anything_changes():
    """MLP([6, 16, 8]): its first weight is (16, 6) (M = 96 = 12·2W, so qgZ would take it): 16 groups of 6."""
    model, cluster = MLP([6, 16, 8]), Cluster(4, gpus_per_node=2)
    assert any(s.shape in ((16, 6), (6, 16)) for s in model.specs)
    with pytest.raises(ValueError, match=r"groups of 6 elements.*16 bytes at a time.*swizzled_quantize\.cu"):
        ZeroEngine(model, cluster, 3, get_optimizer("adam"), FP16, recipe="deepspeed-zero3",
                   wire=Wire(zero_quantized_gradients=True))
    assert all(not r.ledger.live for r in cluster.ranks) and not cluster.trace.calls
    with pytest.raises(ValueError, match="16 bytes at a time"):
        QgzReference(model, get_optimizer("adam"), FP16, 4, model.init_params(np.random.default_rng(0)),
                     gpus_per_node=2, recipe="deepspeed-zero3")


@pytest.mark.bad_input("collectives", unchanged=True)
def test_the_collective_refuses_before_locos_state_or_the_trace_changes():
    """A LoCo state past reset_T would be reset by a call that runs: a refused call leaves it and the trace alone."""
    loco = LocoState(err_beta=0.8, reset_T=0, idx=5)
    cluster = Cluster(4, gpus_per_node=2)
    grads = [np.ones(96, np.float16) for _ in range(4)]
    for call in (lambda: all_to_all_quant_reduce(cluster, grads, (16, 6), 2, loco=loco, key="w"),
                 lambda: naive_all_to_all_quant_reduce(grads, (16, 6), 2, loco=loco, key="w")):
        with pytest.raises(ValueError, match="16 bytes at a time"):
            call()
    assert loco.idx == 5 and loco.buffers == {} and not cluster.trace.calls

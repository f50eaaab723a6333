"""A collective returns a handle: the trace calls it recorded; work names the handles it waited for (issue 21).

Every collective hands back, with its results, `.handle`: the numbers of the `Call`s it appended to the trace,
in order — one for a reduce-scatter, all-gather or broadcast; two for an all-reduce (its reduce-scatter and
all-gather phases); two per loop for NCCL's all-reduce. The engine's events name these handles: a ZeRO-3
compute waits for its layer's gather, the optimizer for the last reduce-scatter and the checks. Nothing
counts trace entries by hand (tests/test_architecture.py checks the source).
"""

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, ZeroEngine, all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.cluster import Call, Compute, Handle, LossScaleUpdate, OptimizerStep
from zerosim.collectives import nccl_all_reduce
from zerosim.models import make_regression
from zerosim.precision import get_precision


def ones(n, length=6, dtype=np.float16):
    return [np.ones(length, dtype) for _ in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_each_collective_names_exactly_the_calls_it_recorded(n):
    c = Cluster(n)
    before = len(c.trace.calls)  # (the test may count: it is checking the handles against the trace)
    cases = [(reduce_scatter, (ones(n),), 1), (all_gather, (ones(n, 2),), 1), (all_reduce, (ones(n),), 2),
             (broadcast, (ones(n),), 1)]
    for collective, args, calls in cases:
        out = collective(c, *args, **({"root": 0} if collective is broadcast else {}))
        assert isinstance(out.handle, Handle) and len(out) == n
        assert tuple(out.handle) == tuple(range(before, before + calls)), collective.__name__
        assert [c.trace.calls[k].call for k in out.handle] == list(out.handle)
        before += calls


def test_nccl_all_reduce_names_both_phases_of_every_loop():
    c = Cluster(3)
    out = nccl_all_reduce(c, ones(3, 40), chunk_bytes=16)  # 40 fp16 on 3 ranks, 8 per chunk: loops of 24 elements
    assert len(out.handle) == 2 * 2 and tuple(out.handle) == tuple(range(len(c.trace.calls)))


def test_handles_join_and_a_cleared_trace_forgets_them():
    c = Cluster(2)
    a, b = reduce_scatter(c, ones(2)).handle, all_gather(c, ones(2, 3)).handle
    assert a + b == (0, 1) and isinstance(a + b, Handle)
    assert c.trace.live(a + b) == (0, 1)
    c.trace.clear()
    assert c.trace.live(a + b) == ()  # a handle of the cleared trace names nothing any more
    again = reduce_scatter(c, ones(2)).handle
    assert c.trace.live(again) == (0,)


def test_handles_joined_at_once_are_the_handles_added_one_by_one():
    # Handle.joined (what a loop over many buckets gathers its handles with) against the fold of + it replaces:
    # every mix of empty and full handles, of old and new generations, in every order
    import itertools

    parts = [Handle(), Handle((), 2), Handle((3,)), Handle((4, 5), 1), Handle((6,), 2)]
    for k in range(len(parts) + 1):
        for mix in itertools.permutations(parts, k):
            folded = sum(mix, Handle())
            joined = Handle.joined(mix)
            assert type(joined) is Handle and joined == folded and joined.generation == folded.generation, mix


def test_a_stage_3_step_names_its_handles():
    # MLP [3, 4, 2] on 2 ranks, a dynamic scaler (so the overflow flag is all-reduced) and clipping (the norm)
    model = MLP([3, 4, 2])
    policy = get_precision("fp16-mixed").with_(loss_scale="torch")
    engine = ZeroEngine(model, Cluster(2), 3, Adam(lr=1e-2), policy, clip_grad=1.0)
    engine.step(make_regression(np.random.default_rng(0), 2, 2, [3, 4, 2]))
    log = engine.cluster.trace.log
    calls = {e.call: e for e in log if isinstance(e, Call)}
    for e in log:
        # reads weights: waits for their gather
        if isinstance(e, Compute) and e.kind != "loss" and e.name.startswith("fc"):
            (waited,) = e.needs
            assert calls[waited].purpose == "gather params" and calls[waited].tag == f"{e.name} params"
            assert log.index(calls[waited]) < log.index(e)
    decision = next(e for e in log if isinstance(e, LossScaleUpdate))
    assert [calls[k].tag for k in decision.needs] == ["overflow flag", "overflow flag"]  # an all-reduce: two phases
    steps = [e for e in log if isinstance(e, OptimizerStep)]
    assert [calls[k].tag for k in steps[0].needs] == ["fc0 grads", "overflow flag", "overflow flag",
                                                      "gradient norm²", "gradient norm²"]

"""DDP's buckets (parallel/data/recipes/_param_buckets.py, parallel/data/recipes/_ddp_reduce.py): torch's rule by hand
and against torch itself where it is installed, every bucket its own all-reduce in the engine and the oracle, and the
bits a bucket's bounds decide (issue 25, item 2)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import bits
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bucket_allreduce import run as run_pair  # noqa: E402 (tests/ is on the path)

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
from zerosim.optim import get_optimizer
from zerosim.parallel.data import CommSchedule, GradientRecipe
from zerosim.parallel.data.recipes import (
    MIB,
    DDPBuckets,
    bucket_assignment_by_size,
    ddp_buckets,
    ready_order,
    registration,
)
from zerosim.precision import get_precision

FP16 = get_precision("fp16-mixed").with_(reduction="ddp")
H = 2.0**-11  # half of fp16's spacing at 1: 1 + H is a tie, which rounds to even, 1

# MLP([3, 4, 2]) in fp16 (2 bytes an element), registration order: fc0.w 12 elements [0, 12) = 24 B, fc0.b 4 [12, 16)
# = 8 B, fc1.w 8 [16, 24) = 16 B, fc1.b 2 [24, 26) = 4 B (units 0 and 2; the ReLU, unit 1, holds nothing).
# Gradient-ready order: fc1.b, fc1.w, fc0.b, fc0.w.
W0, B0, W1, B1 = (0, 0, 12), (0, 12, 16), (2, 16, 24), (2, 24, 26)
DDP_TABLE = [
    ((MIB, 25 * MIB), False, [[W0, B0, W1, B1]],
     "iteration 1 (find_unused_parameters=False): [sys.maxsize], one bucket in registration order"),
    ((MIB, 25 * MIB), True, [[B1, W1, B0, W0]], "rebuilt with the defaults: 52 B < 1 MiB, one bucket in ready order"),
    ((20, 30), True, [[B1, W1], [B0, W0]],
     "4 + 16 = 20 >= 20 closes the first bucket (the crossing parameter is in it); 8 + 24 = 32 >= 30 the second"),
    ((4, 24), True, [[B1], [W1, B0], [W0]],
     "4 >= 4; then 16 + 8 = 24 >= 24: a bucket across two layers (fc1.w with fc0.b); 24 >= 24 alone"),
    ((10, 10), True, [[B1, W1], [B0, W0]], "bucket_cap_mb given: first = cap; 4 + 16 >= 10, 8 + 24 >= 10"),
]


@pytest.mark.parametrize("caps, rebuilt, want, why", DDP_TABLE)
def test_ddp_buckets_table(caps, rebuilt, want, why):
    params = registration(MLP([3, 4, 2]).specs)
    assert params == [W0, B0, W1, B1]
    assert ddp_buckets(params, 2, caps, rebuilt) == want, why


def test_compute_bucket_assignment_by_size_table():
    # no indices: registration order, limits advance per closed bucket, then sorted by smallest index
    assert bucket_assignment_by_size([10, 10, 10], [15, 25]) == [[0, 1], [2]]  # 20 >= 15; 10 < 25 left open
    assert bucket_assignment_by_size([30, 1, 1], [15, 25]) == [[0], [1, 2]]  # 30 >= 15 alone; 2 < 25
    # indices given (the rebuild: tensors in ready order, their parameter indices beside): not sorted
    assert bucket_assignment_by_size([4, 16, 8, 24], [20, 30], [3, 2, 1, 0]) == [[3, 2], [1, 0]]  # 20 >= 20, 32 >= 30
    # 28 >= 25; the last repeats
    assert bucket_assignment_by_size([4, 16, 8, 24], [25], [3, 2, 1, 0]) == [[3, 2, 1], [0]]


def test_ddp_caps_follow_torch_rule():
    assert DDPBuckets().caps == (MIB, 25 * MIB)  # _DEFAULT_BUCKET_CAP_MB, _DEFAULT_FIRST_BUCKET_BYTES
    assert DDPBuckets(10).caps == (10 * MIB, 10 * MIB)  # bucket_cap_mb given: the first bucket is no smaller
    assert DDPBuckets(0.5, first_bucket_mb=0.25).caps == (MIB // 4, MIB // 2)
    assert DDPBuckets(100 / MIB).caps == (100, 100)  # int(bucket_cap_mb * 2**20) bytes


@pytest.mark.bad_input("config", unchanged="nothing is built")
@pytest.mark.parametrize("cap", [0, -1, float("nan"), float("inf"), "25", True, 0.1 / MIB])
def test_bad_ddp_caps_are_refused(cap):
    with pytest.raises(ValueError, match="DDP's bucket_cap_mb must be a finite number of MiB"):
        CommSchedule(bucket_cap_mb=cap)


@pytest.mark.bad_input("config", unchanged="the engine is not built")
def test_ddp_refuses_deepspeeds_bucket_knob():
    with pytest.raises(ValueError, match="reduction 'ddp' forms DDP's own buckets.*drop reduce_bucket_size"):
        ZeroEngine(MLP([3, 4, 2]), Cluster(2), 0, Adam(), FP16, comm=CommSchedule(reduce_bucket_size=10))


def ddp_step(caps_mb, rebuilt: bool, allreduce="ring") -> tuple:
    """(g the engine's optimizer read, g the oracle's): one step of MLP([1, 1]) on 3 ranks from zero weights, SGD lr
    1 (master = -g), rank r's gradient 3·a_r in both w and b (x = 1, t = -3·a_r), a = (1, H, H). `rebuilt`: as
    from DDP's second iteration on (its buckets rebuilt in gradient-ready order)."""
    model, zeros = MLP([1, 1]), np.zeros(2, np.float32)
    batches = [(np.float32([[1.0]]), np.float32([[t]])) for t in (-3.0, -3 * H, -3 * H)]
    recipe, comm = GradientRecipe("ddp", allreduce), CommSchedule(bucket_cap_mb=caps_mb[1], first_bucket_mb=caps_mb[0])
    engine = ZeroEngine(model, Cluster(3), 0, get_optimizer("sgd", lr=1.0), FP16, params=zeros, recipe=recipe,
                        comm=comm)
    ref = Reference(model, get_optimizer("sgd", lr=1.0), FP16, world_size=3, params=zeros, recipe=recipe, ddp=comm.ddp)
    engine.ddp_rebuilt = ref.ddp_rebuilt = rebuilt
    engine.step(batches)
    ref.step(batches)
    return -engine.full_master(), -ref.master()


# Rank r sends fl16(3·a_r · fl32(1/3)) = a_r (mark_variable_ready_dense; 3·a·fl32(1/3) is within fp32's rounding of
# a) in both elements. "ring": zerosim's N equal shards of each bucket; chunk c ends at rank c and is summed
# ((x[c+1] + x[c+2]) + x[c]); ending at rank 0: (H + H) + 1 = 1 + 2**-10 exact; at rank 1: (H + 1 -> 1) + H -> 1.
DDP_BITS_TABLE = [
    ((None, None), False, [1 + 2 * H, 1.0], "iteration 1: one bucket [w, b]: w is chunk 0 (1 + 2**-10), b chunk 1 (1)"),
    ((None, None), True, [1.0, 1 + 2 * H], "rebuilt, one bucket [b, w] (ready order): b is chunk 0, w chunk 1"),
    ((1 / MIB, 1 / MIB), True, [1 + 2 * H, 1 + 2 * H],
     "rebuilt with 1-byte caps: [b] and [w], two 1-element buckets; each element is chunk 0 of its own all-reduce"),
]


@pytest.mark.parametrize("caps, rebuilt, want, why", DDP_BITS_TABLE)
def test_a_three_rank_fp16_ddp_bucket_by_hand(caps, rebuilt, want, why):
    got, oracle = ddp_step(caps, rebuilt)
    assert got.tolist() == want, why
    assert np.array_equal(bits(got), bits(oracle))


# test_bucket_allreduce.WIDTHS = [6, 9, 7, 4]: Linear layers of 54 + 9, 63 + 7, 28 + 4 elements
def run(n, precision, allreduce, caps=(None, None), steps=3, k=1, seed=1, cluster=None):
    """test_bucket_allreduce's engine-beside-oracle run, with the `ddp` recipe at stage 0 and DDP's caps (MiB)."""
    policy = get_precision(precision).with_(reduction="ddp", allreduce=allreduce)
    return run_pair(0, policy, None, n, None, k, steps, seed, DDPBuckets(caps[1], caps[0]), cluster=cluster)


@pytest.mark.parametrize("allreduce", ["ring", "nccl", "gloo"])
@pytest.mark.parametrize("precision", ["fp16-mixed", "bf16-mixed"])
def test_ddp_buckets_equal_the_oracle(allreduce, precision):
    # caps of 40 and 100 bytes: four rebuilt buckets from step 2 on (fp16: 4 + 28 + 7 * 2 B ...; see the trace test)
    engine, oracle = run(3, precision, allreduce, caps=(40 / MIB, 100 / MIB), k=2)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))


def test_the_trace_shows_ddp_buckets_rebuilt_after_the_first_step():
    cluster = Cluster(3, trace="call")
    run(3, "fp16-mixed", "gloo", caps=(40 / MIB, 100 / MIB), steps=2, cluster=cluster)
    grads = [c for c in cluster.trace.calls if c.purpose == "reduce grads"]
    # step 1: one bucket, every parameter in registration order (units 0, 2, 4), 165 elements, two phases.
    # step 2, ready order, bytes at 2 an element: fc2.b 8 + fc2.w 56 = 64 >= 40 closes bucket 1 (the first cap);
    # fc1.b 14 + fc1.w 126 = 140 >= 100 bucket 2; fc0.b 18 + fc0.w 108 = 126 >= 100 bucket 3
    assert [(c.collective, c.layers, c.elements) for c in grads] == [("gloo_all_reduce", (0, 2, 4), 165)] * 2 + [
        ("gloo_all_reduce", (4,), 32)] * 2 + [("gloo_all_reduce", (2,), 70)] * 2 + [("gloo_all_reduce", (0,), 63)] * 2


def test_a_result_bit_depends_on_ddp_bucket_size():
    # the same three steps with DDP's default caps (one bucket) and with small caps (three from step 2 on): each
    # all-reduce's chunk map covers its own bucket, so elements change the rank their sum ends at, and some bits
    whole = run(3, "fp16-mixed", "nccl")[0].full_master()
    small = run(3, "fp16-mixed", "nccl", caps=(40 / MIB, 100 / MIB))[0].full_master()
    assert not np.array_equal(bits(whole), bits(small))
    # at N = 2 nothing differs (docs/explanation/time.md's "N >= 3"): each element's sum is x0 + x1 whichever rank it
    # ends at
    two = [run(2, "fp16-mixed", "nccl", caps=caps)[0].full_master() for caps in ((None, None), (40 / MIB, 100 / MIB))]
    assert np.array_equal(bits(two[0]), bits(two[1]))
    # and on step 1 alone nothing differs: iteration 1 is one bucket whatever the caps (find_unused_parameters=False)
    one = run(3, "fp16-mixed", "nccl", steps=1)[0].full_master()
    assert np.array_equal(bits(one), bits(run(3, "fp16-mixed", "nccl", caps=(40 / MIB, 100 / MIB), steps=1)[0]
                                      .full_master()))


TORCH_PROBE = textwrap.dedent("""
    import json, os, sys, tempfile
    import torch, torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_module
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    widths, cap, first = json.loads(sys.argv[1])
    if first is not None:  # the first bucket's cap is torch's constant, read only when bucket_cap_mb is None
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(first * 2**20)
        ddp_module._DEFAULT_BUCKET_CAP_MB, cap = cap, None
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    torch.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(widths) - 2 else [])
    model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=cap)
    out = []
    for _ in range(3):
        model(torch.randn(2, widths[0])).sum().backward()
        data = model._get_ddp_logging_data()
        out.append([data.get("bucket_sizes"), data.get("rebuilt_bucket_sizes"),
                    data.get("rebuilt_per_bucket_param_indices")])
    print(json.dumps(out))
    dist.destroy_process_group()
""")


@pytest.mark.slow  # ~10 s each: a torch process
@pytest.mark.parametrize("widths, cap, first", [
    ([8, 16, 4], None, None),  # the defaults: one bucket, rebuilt as one in ready order
    ([8, 16, 4], 300 / MIB, None),  # bucket_cap_mb 300 bytes
    ([6, 9, 7, 4], 0.0002, 0.0001),  # 209 and 104 bytes: a first bucket smaller than the rest
    ([16, 32, 32, 8], 0.003, None),
])
def test_ddp_buckets_are_torchs(widths, cap, first):
    pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
    import json

    run_ = subprocess.run([sys.executable, "-c", TORCH_PROBE, json.dumps([widths, cap, first])], capture_output=True,
                          text=True, timeout=300)
    assert run_.returncode == 0, run_.stderr
    iterations = json.loads(run_.stdout.strip().splitlines()[-1])
    params = registration(MLP(widths).specs)  # fp32 in torch: 4 bytes an element
    index = {p: i for i, p in enumerate(params)}
    caps = DDPBuckets(cap, first).caps
    initial = ddp_buckets(params, 4, caps, rebuilt=False)
    assert iterations[0][0] == ", ".join(str(sum(b - a for _, a, b in bucket) * 4) for bucket in initial)
    rebuilt = ddp_buckets(params, 4, caps, rebuilt=True)
    assert iterations[2][1] == ", ".join(str(sum(b - a for _, a, b in bucket) * 4) for bucket in rebuilt)
    assert iterations[2][2] == ", ".join(" ".join(str(index[p]) for p in bucket) for bucket in rebuilt)
    assert [p for bucket in rebuilt for p in bucket] == ready_order(params)


@pytest.mark.slow  # ~2 s
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), precision=st.sampled_from(["fp16-mixed", "bf16-mixed"]),
       allreduce=st.sampled_from(["ring", "nccl", "gloo"]), cap=st.sampled_from([None, 2, 40, 100, 300, 10**6]),
       first=st.sampled_from([None, 1, 30, 64]), k=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_ddp_buckets_of_any_cap_equal_the_oracle(n, precision, allreduce, cap, first, k, seed):
    caps = (None if first is None else first / MIB, None if cap is None else cap / MIB)  # bytes -> MiB
    engine, oracle = run(n, precision, allreduce, caps=caps, steps=3, k=k, seed=seed)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))
    assert np.array_equal(bits(engine.full_params()), bits(oracle.compute_params()))

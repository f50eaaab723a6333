"""DeepSpeed ZeRO-1/2 on its default path (parallel/data/recipes/_bucket_allreduce.py): each gradient bucket
all-reduced whole, units in the order backward finishes them, against hand-derived rows, the owner-reduce path the flag
turns off, and the oracle run with the same recipe and bucket size (issue 25, Must show 1)."""

import numpy as np
import pytest
from helpers import accepted_recipes, bits
from hypothesis import given, settings
from hypothesis import strategies as st
from test_recipes import linear_step  # noqa: E402 (tests/ is on the path)

from zerosim import MLP, SGD, Adam, Cluster, Reference, ZeroEngine
from zerosim.models import make_regression
from zerosim.parallel.data import CommSchedule, GradientRecipe
from zerosim.parallel.data.layouts import FlatLayout
from zerosim.parallel.data.recipes import ALL_REDUCING, RECIPES, DDPBuckets, bucket_slices, ipg_buckets, split_calls
from zerosim.parallel.data.recipes._bucket_allreduce import call_chunks
from zerosim.precision import get_precision

FP16 = get_precision("fp16-mixed")
H = 2.0**-11  # half of fp16's spacing at 1: 1 + H is a tie, which rounds to even, 1

# One Linear(1 -> 1) layer, N = 3, fp16, ZeRO-2, one bucket [w, b]. Rank r's gradient is 3·a_r in both elements
# (x = 1, t = -3·a_r), a = (1, H, H). div_(3) on CUDA: 3·a · fl32(1/3) = a·(1 + 2**-25·...) rounds to a in fp32
# already (spacing 2**-23 at 1), so each rank sends a_r exactly. The flat layout's shards are [0, 1), [1, 2),
# [2, 3): w is rank 0's, b is rank 1's.
#   owner reduce (flag off): dist.reduce to each owner, the ring from owner+1: w = (a1 + a2) + a0 = 2H + 1 = 1 + 2**-10
#                            (exact); b = (a2 + a0) + a1 = (H + 1 -> tie -> 1) + H -> 1
#   all-reduce, NCCL's map:  the 2-element bucket is one chunk, chunk 0 = [0, 2) (alignUp(divUp(2, 3), 8) = 8
#                            elements): both sums start at rank 1: (a1 + a2) + a0 = 1 + 2**-10
#   all-reduce, gloo's map:  6 segments of 1 element, chunk 0 = segments 0-1 = [0, 2); gloo's order (a2 + a1) + a0
#                            = 1 + 2**-10 (the first add commutes)
#   all-reduce, "ring":      zerosim's N equal shards of the bucket, [0, 1), [1, 2). Stage 1 (end of backward,
#                            flat order): the bucket is [w, b], the owners' order again: w = 1 + 2**-10, b = 1.
#                            Stage 2 (as backward makes them, gradient-ready order: b before w): the bucket is
#                            [b, w]; chunk 0 = b ends at rank 0: (a1 + a2) + a0 = 1 + 2**-10; chunk 1 = w ends at
#                            rank 1: (a2 + a0) + a1 -> 1
# The engine's g (master = -g after SGD lr 1 from 0) is these sums, /K = 1, unscaled by S = 1: exact.
HAND_TABLE = [
    ("deepspeed-zero12-reduce", "ring", [1 + 2 * H, 1.0], "b reduced to rank 1: (H + 1) ties to 1, + H ties to 1"),
    ("deepspeed-zero12", "nccl", [1 + 2 * H, 1 + 2 * H], "NCCL's chunk 0 holds both: (H + H) + 1 is exact"),
    ("deepspeed-zero12", "gloo", [1 + 2 * H, 1 + 2 * H], "gloo's chunk 0 holds both: (H + H) + 1"),
    ("deepspeed-zero12", "ring", {1: [1 + 2 * H, 1.0], 2: [1.0, 1 + 2 * H]},
     "equal shards of a 2-element bucket: [w, b] in flat order at stage 1, [b, w] in ready order at stage 2"),
]


@pytest.mark.parametrize("name, allreduce, want, why", HAND_TABLE, ids=[f"{r[0]}-{r[1]}" for r in HAND_TABLE])
@pytest.mark.parametrize("stage", [1, 2])
def test_a_three_rank_fp16_bucket_by_hand(name, allreduce, want, why, stage):
    got, oracle = linear_step(FP16.with_(reduction=name, allreduce=allreduce), stage, [[1.0]] * 3,
                              [[-3.0], [-3 * H], [-3 * H]])
    assert got.tolist() == (want[stage] if isinstance(want, dict) else want), why
    assert np.array_equal(bits(got), bits(oracle))  # the oracle, run with the same recipe, agrees bit for bit


# bucket_slices: average_tensor's rank_and_offsets. Layers of 5 and 7 elements at [0, 5) and [5, 12); N = 3, s = 4.
SLICE_TABLE = [
    ([1, 0], [(1, 5, 8), (2, 8, 12), (0, 0, 4), (1, 4, 5)],
     "backward's order: layer 1 [5, 12) cut at 8 (rank 1 | rank 2), then layer 0 [0, 5) cut at 4; rank 1's pieces "
     "[5, 8) and [4, 5) are not adjacent in the bucket, so they stay two slices"),
    ([0, 1], [(0, 0, 4), (1, 4, 8), (2, 8, 12)], "flat order: rank 1's [4, 5) and [5, 8) merge (same owner, adjacent)"),
]


@pytest.mark.parametrize("layers, want, why", SLICE_TABLE)
def test_bucket_slices_table(layers, want, why):
    assert bucket_slices(FlatLayout(12, 3, ((0, 5), (5, 12))), layers) == want, why


def test_split_calls_table():
    slices = [(0, 0, 4), (1, 4, 8), (2, 8, 12)]
    assert split_calls(slices, None) == [slices]  # no limit: one call
    assert split_calls(slices, 12) == [slices]  # 12 is not > 12: allreduce_and_scatter's `numel > numel_per_bucket`
    assert split_calls(slices, 5) == [slices[:2], slices[2:]]  # 4, then 8 > 5: the call ends with the slice that passed
    assert split_calls(slices, 3) == [[s] for s in slices]


# DeepSpeed's ipg rule, parameter by parameter (param_buckets.ipg_buckets). Parameters (unit, a, b) registered as
# unit 0's w [0, 4) and b [4, 5), unit 1's w [5, 10) and b [10, 12), unit 3's w [12, 14); gradient-ready order is the
# reverse: 3w (2 elements), 1b (2), 1w (5), 0b (1), 0w (4).
W0, B0, W1, B1, W3 = (0, 0, 4), (0, 4, 5), (1, 5, 10), (1, 10, 12), (3, 12, 14)
READY = [W3, B1, W1, B0, W0]
IPG_TABLE = [
    (None, [[W3], [B1, W1], [B0, W0]], "no bucket size: each unit's parameters together (seed 004's schedule)"),
    (9, [[W3, B1, W1], [B0, W0]], "2 + 2 + 5 = 9 is not > 9: one bucket; then 1 + 4"),
    (
        8,
        [[W3, B1], [W1, B0], [W0]],
        "2 + 2 + 5 > 8: sent before 1w joins, a bound between unit 1's b and w; "
        "5 + 1 + 4 > 8: another between unit 0's b and w",
    ),
    (
        3,
        [[p] for p in READY],
        "2 + 2 > 3; 1w (5) passes 3 alone and still joins the empty bucket; 5 + 1 > 3; 1 + 4 > 3",
    ),
    (100, [READY], "everything fits"),
]


@pytest.mark.parametrize("limit, want, why", IPG_TABLE)
def test_ipg_buckets_table(limit, want, why):
    assert ipg_buckets(READY, limit) == want, why


def test_call_chunks_cover_the_call_once():
    for how in ("ring", "nccl", "gloo"):
        for m in (0, 1, 7, 100, 5000):
            chunks, direction = call_chunks(m, 3, 2, how)
            covered = np.zeros(m, int)
            for _, a, b in chunks:
                covered[a:b] += 1
            assert (covered == 1).all() and direction == (-1 if how == "gloo" else 1)


WIDTHS = [6, 9, 7, 4]


def run(stage, policy, recipe, n, bucket, k=1, steps=2, seed=1, ddp=DDPBuckets(), clip=None, cluster=None):
    model = MLP(WIDTHS)
    params = model.init_params(np.random.default_rng(seed))
    clipping = dict(clip_grad=0.05, clip_norm=clip) if clip else {}  # 0.05: below the norms here, so it clips
    engine = ZeroEngine(model, cluster or Cluster(n), stage, Adam(lr=1e-2), policy, params=params, recipe=recipe,
                        **clipping,
                        comm=CommSchedule(reduce_bucket_size=bucket, bucket_cap_mb=ddp.bucket_cap_mb,
                                          first_bucket_mb=ddp.first_bucket_mb), accumulation_steps=k)
    oracle = Reference(model, Adam(lr=1e-2), policy, world_size=n, params=params, recipe=recipe, accumulation_steps=k,
                       reduce_every_micro_step=stage >= 2, reduce_bucket_size=bucket, ddp=ddp, **clipping)
    data = make_regression(np.random.default_rng(seed + 1), steps * n * k, 3, WIDTHS)
    for s in range(steps):
        mine = data[s * n * k : (s + 1) * n * k]
        batches = [mine[r * k : (r + 1) * k] for r in range(n)]
        assert engine.step(batches) == oracle.step(batches)
    return engine, oracle


@pytest.mark.slow  # ~3 s; the fast lane keeps the fixed multi-unit cases below
@settings(max_examples=60, deadline=None)
@given(
    stage=st.integers(0, 3),
    allreduce=st.sampled_from(["ring", "nccl", "gloo"]),
    n=st.integers(1, 5),
    bucket=st.sampled_from([None, 1, 40, 80, 150, 10**9]),
    k=st.integers(1, 2),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed"]),
    reduce=st.sampled_from([None, "fp32"]),
    grad_accum=st.sampled_from([None, "fp32"]),
    first=st.sampled_from([None, 1, 30, 100]),
    steps=st.integers(1, 3),
    clip=st.sampled_from([None, "shards", "torch"]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_every_recipe_and_bucket_size_equals_the_oracle(stage, allreduce, n, bucket, k, precision, reduce, grad_accum,
                                                         first, steps, clip, seed, data):
    clip = "shards" if clip == "torch" and stage > 0 else clip  # torch's norm needs the whole gradient: stage 0
    clipping = dict(clip_grad=0.05, clip_norm=clip) if clip else {}
    # every recipe the engine runs at this stage with this policy and clipping (tests/helpers.py asks the engine)
    name = data.draw(st.sampled_from(accepted_recipes(stage, get_precision(precision).with_(grad_accum=grad_accum),
                                                      **clipping)), label="recipe")
    ddp = DDPBuckets()
    if name == "ddp":  # DDP's own caps, in bytes of its 16-bit gradients (bucket elements * 2), instead
        ddp = DDPBuckets(None if bucket is None else bucket * 2 / 2**20, None if first is None else first * 2 / 2**20)
        bucket = None
    if RECIPES[name].collective not in ALL_REDUCING and (stage > 0 or bucket is not None):
        allreduce = "ring"  # only an all-reduce has a chunk map to choose (the engine refuses the others)
    policy = get_precision(precision).with_(reduce=None if name == "ddp" else reduce, grad_accum=grad_accum)
    engine, oracle = run(stage, policy, GradientRecipe(name, allreduce), n, bucket, k, steps, seed=seed, ddp=ddp,
                         clip=clip)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))
    assert np.array_equal(bits(engine.full_params()), bits(oracle.compute_params()))


def test_the_bucket_size_changes_bits_on_the_default_path_only():
    # layers of 63, 70 and 32 elements (6*9+9, 9*7+7, 7*4+4); N = 3 fp16. One unit per bucket, or all three in one:
    # the all-reduce's chunk map moves with the bucket's bounds, the owner reduce does not
    fp16 = get_precision("fp16-mixed")
    for name, differs in (("deepspeed-zero12", True), ("deepspeed-zero12-reduce", False)):
        recipe = GradientRecipe(name, "nccl" if name == "deepspeed-zero12" else "ring")
        small = run(2, fp16, recipe, 3, None, steps=1)[0].full_master()
        whole = run(2, fp16, recipe, 3, 10**9, steps=1)[0].full_master()
        assert (not np.array_equal(bits(small), bits(whole))) == differs, name


def test_the_trace_shows_one_all_reduce_per_bucket_in_ready_order():
    cluster = Cluster(3, trace="call")
    model = MLP(WIDTHS)
    engine = ZeroEngine(model, cluster, 2, Adam(), FP16, recipe=GradientRecipe("deepspeed-zero12", "gloo"),
                        comm=CommSchedule(reduce_bucket_size=140))
    engine.step(make_regression(np.random.default_rng(0), 3, 2, WIDTHS))
    grads = [c for c in cluster.trace.calls if c.purpose == "reduce grads"]
    # gradient-ready order, parameter by parameter (units 4, 2, 0 are the Linear layers; ReLUs hold nothing):
    # fc2.b 4, fc2.w 28, fc1.b 7, fc1.w 63, fc0.b 9 add up to 111 <= 140; fc0.w (54) would pass 140: the bound falls
    # between fc0's bias and its weight. Each bucket two phases (reduce-scatter, all-gather)
    assert [(c.collective, c.layers, c.elements) for c in grads] == [
        ("gloo_all_reduce", (4, 2, 0), 111)] * 2 + [("gloo_all_reduce", (0,), 54)] * 2
    # gloo's 6 segments of ceil(111 / 6) = 19 elements over the bucket (the last 16), two per rank
    assert grads[0].chunk_map == ((0, 38), (38, 76), (76, 111))


@pytest.mark.parametrize("allreduce", ["ring", "nccl", "gloo"])
@pytest.mark.parametrize("stage", [1, 2])
def test_a_bucket_of_several_units_in_ready_order_equals_the_oracle(allreduce, stage):
    # all three Linear layers in one bucket, last layer first: where each element sits in the bucket (and so its
    # chunk) depends on that order; the oracle forms the bucket on its own (ready_buckets)
    engine, oracle = run(stage, get_precision("fp16-mixed"), GradientRecipe("deepspeed-zero12", allreduce), 4, 10**9)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))


# -- issue 33: ZeRO-1 with fp32 gradient accumulation ---------------------------------------------------------------

# Must show 3. One 3-rank fp16 ZeRO-1 bucket with grad_accum_dtype fp32, K = 2: MLP([1, 3]) (w is 3x1, b is 3; x = 1,
# so dw_j = db_j = -t_j), every rank on the same two micro-batches, so rank r's fp32 accumulator for w_j (and b_j)
# is a_j = k0_j + k1_j, exactly (fp32). The bucket is [w0 w1 w2 b0 b1 b2], one all-reduce at the end of backward.
#   DeepSpeed 0.19.6: setup_buckets allocates the bucket with dtype=self.dtype (fp16) and get_gradient_for_reduction
#                     copies `param.grad_accum.to(self.dtype)` in: fl16(a), then average_tensor's div_(3) on CUDA,
#                     fl16(fl32(fl16(a) * fl32(1/3))), then the fp16 ring: v + v is exact, fl16(2v + v)
#   DeepSpeed 0.19.8: the bucket is `_gradient_reduction_buffer_dtype()` = fp32: fl16(fl32(a * fl32(1/3))) (the cast
#                     to communication_data_type fp16 in allreduce_bucket), the same fp16 ring, added as it is to the
#                     fp32 partition (_add_to_grad_partition_buffer)
# fl32(1/3) = 11184811 * 2**-25; in [0.25, 0.5) fp32's spacing is 2**-25 and fp16's 2**-12 (8192 of those); in [0.5, 1)
# fp16's is 2**-11, in [1, 2) 2**-10. Each column is the reduced sum the optimizer reads (before / K and / S).
E12 = 2.0**-12
ACCUM_TABLE = [
    # (k0, k1, a, 0.19.6's sum, 0.19.8's sum, why)
    (1.0, 2 * E12, 1 + 2 * E12, 1.0, 1.0,
     "0.19.6: fl16(1 + 2**-11) ties to 1; 1 * fl32(1/3) -> fl16: 11184811 / 8192 = 1365.33 -> 1365 * 2**-12; "
     "2730 * 2**-12 (exact) + 1365 * 2**-12 = 4095 * 2**-12 = 2047.5 * 2**-11, a tie -> 2048 * 2**-11 = 1. "
     "0.19.8: (1 + 2**-11) * 11184811 = 11190272.3 -> 11190272 * 2**-25 = 1366 * 2**-12 (exact in fp16); "
     "4098 * 2**-12 = 1024.5 * 2**-10, a tie -> 1024 * 2**-10 = 1. The same: this element does not differ"),
    (1.125, 2 * E12, 1.125 + 2 * E12, 1.125, 1153 * 2.0**-10,
     "0.19.6: fl16(1.125 + 2**-11) = 1152.5 * 2**-10 ties to 1152 * 2**-10 = 1.125; 1.125 * fl32(1/3) = 12582912.4 "
     "* 2**-25 -> 0.375 (fp32 and fp16); 0.375 * 3 = 1.125 exactly. 0.19.8: 12582912.4 + 5461.3 = 12588373.7 -> "
     "12588374 * 2**-25 = 1536.67 * 2**-12 -> 1537 * 2**-12; 3074 * 2**-12 (exact) + 1537 * 2**-12 = 4611 * 2**-12 = "
     "1152.75 * 2**-10 -> 1153 * 2**-10 = 1.1259765625. Differs"),
    (1.0, 3 * E12, 1 + 3 * E12, 1025 * 2.0**-10, 1.0,
     "0.19.6: fl16(1 + 3 * 2**-12) = 1024.75 * 2**-10 -> 1025 * 2**-10; * fl32(1/3) = 11195733.4 * 2**-25 -> "
     "11195733; / 8192 = 1366.67 -> 1367 * 2**-12; 4101 * 2**-12 = 1025.25 * 2**-10 -> 1025 * 2**-10 = 1.0009765625. "
     "0.19.8: 11184811 + 3 * 11184811 / 4096 = 11193003.0 -> 11193003 * 2**-25; / 8192 = 1366.33 -> 1366 * 2**-12; "
     "4098 * 2**-12 = 1024.5 * 2**-10, a tie -> 1.0. Differs (the exact mean, a itself, is 1.000732421875)"),
]


def _f16(x: float) -> float:  # float64 -> fp16, one rounding (NumPy's own conversion, not zerosim's)
    return float(np.float16(np.float64(x)))


def _f32(x: float) -> float:
    return float(np.float32(np.float64(x)))


def _ds_bucket_sum(a: float, n: int, fp32_bucket: bool) -> float:
    """One element of the table in float64 arithmetic with explicit roundings (shares no code with zerosim): every
    rank holds the fp32 accumulator a; the bucket (fp16 or fp32), div_(n) on CUDA, the fp16 ring."""
    x = a if fp32_bucket else _f16(a)
    v = _f16(_f32(x * _f32(1 / n)))  # CUDA: x * fl32(1/n) in fp32 (exact in float64), then the fp16 wire
    total = v
    for _ in range(n - 1):
        total = _f16(total + v)  # every hop rounds to fp16 (equal addends: the ring's order does not matter)
    return total


@pytest.mark.parametrize("k0, k1, a, v196, v198, why", ACCUM_TABLE, ids=["ties-alike", "1.125", "1+3e"])
def test_zero1_fp32_accumulation_bucket_under_0_19_6_and_0_19_8_by_hand(k0, k1, a, v196, v198, why):
    # the hand values against float64 arithmetic done here (independent of zerosim) ...
    assert _f32(k0 + k1) == a, "the fp32 accumulator holds k0 + k1 exactly"
    assert (_ds_bucket_sum(a, 3, fp32_bucket=False), _ds_bucket_sum(a, 3, fp32_bucket=True)) == (v196, v198), why
    # ... and the engine, which follows 0.19.8, against its column (and the oracle, bit for bit)
    model = MLP([1, 3])
    zeros = np.zeros(model.num_params, np.float32)
    micro = [(np.float32([[1.0]]), np.float32([[-k0] * 3])), (np.float32([[1.0]]), np.float32([[-k1] * 3]))]
    policy = FP16.with_(reduction="deepspeed-zero12", grad_accum="fp32")
    engine = ZeroEngine(model, Cluster(3), 1, SGD(lr=1.0), policy, params=zeros, accumulation_steps=2)
    oracle = Reference(model, SGD(lr=1.0), policy, world_size=3, params=zeros, accumulation_steps=2)
    engine.step([micro] * 3)
    oracle.step([micro] * 3)
    g = -engine.full_master()  # master = 0 - g, g = the reduced sum / K (K = 2: exact)
    assert (2 * g).tolist() == [v198] * 6, why
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))


def test_the_table_shows_where_the_two_releases_differ():
    differ = [row[:2] for row in ACCUM_TABLE if row[3] != row[4]]
    assert differ == [(1.125, 2 * E12), (1.0, 3 * E12)]  # two of the three elements (each twice: w_j and b_j)


# Must show 2. DeepSpeed ZeRO-1 with grad_accum_dtype fp32 equals the oracle bit for bit (it did not before issue 33:
# the bucket was fp16, the oracle's fp32). fp16 runs stage_1_and_2.py ("deepspeed-zero12"); for bf16 DeepSpeed runs
# BF16_Optimizer instead ("deepspeed-bf16-optimizer"; "deepspeed-zero12" is refused: tests/test_bf16_optimizer.py).
ZERO1_FP32_ACCUM = {"fp16-mixed": "deepspeed-zero12", "bf16-mixed": "deepspeed-bf16-optimizer"}


@pytest.mark.parametrize("allreduce", ["ring", "nccl"])  # zerosim's N equal chunks, NCCL's aligned per-loop chunks
@pytest.mark.parametrize("bucket", [None, 10**9])  # whole buffer at the end of backward, or buckets in ready order
@pytest.mark.parametrize("reduce", [None, "fp32"])
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("precision", sorted(ZERO1_FP32_ACCUM))
def test_zero1_with_fp32_accumulation_equals_the_oracle(precision, k, n, reduce, bucket, allreduce):
    policy = get_precision(precision).with_(grad_accum="fp32", reduce=reduce)
    engine, oracle = run(1, policy, GradientRecipe(ZERO1_FP32_ACCUM[precision], allreduce), n, bucket, k=k, steps=2)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))
    assert np.array_equal(bits(engine.full_params()), bits(oracle.compute_params()))


# -- the two DeepSpeed ZeRO-1/2 paths, compared on gradients without a BLAS in them ----------------------------------

# docs/recipes.md, the table under deepspeed-zero12: (N, bucket) -> how many of MLP([64, 96, 96, 10])'s 16,522 fp32
# gradient elements differ between the default path (NCCL's map) and the owner reduce, one fp16 ZeRO-2 reduction.
# The gradients are drawn, not computed: a GEMM's summation order differs between BLAS kernels (issue 33), a draw
# from PCG64's integer stream and a cast do not, and the reductions are elementwise and in zerosim's fixed orders,
# so these counts hold on every CPU. (The oracle runs each path; it equals the engine bit for bit, above.)
DOCS_DIFFER = {(3, None): 2451, (3, 10**9): 4309, (4, None): 3954, (4, 10**9): 6102, (8, None): 7043, (8, 10**9): 9215}
FRACTION_WIDTHS = [64, 96, 96, 10]


def _drawn_fp16_gradients(n: int, seed: int = 0) -> list:
    """N ranks' (Ψ,) fp16 gradients, zero padding: uniform in [-1/2, 1/2) times 2**-e, e uniform in 0..9 (so they
    span ten binades), from `rng.random` and `rng.integers` (no libm, no BLAS), rounded once to fp16."""
    from zerosim.collectives import ShardLayout
    from zerosim.precision import cast

    P = MLP(FRACTION_WIDTHS).num_params
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        g = np.zeros(ShardLayout(P, n).padded)  # (Ψ,) float64
        g[:P] = (rng.random(P) - 0.5) * 2.0 ** -rng.integers(0, 10, P)
        out.append(cast(g, FP16.compute_format))
    return out


def _reduced(name: str, allreduce: str, grads: list, bucket) -> np.ndarray:
    model = MLP(FRACTION_WIDTHS)
    oracle = Reference(model, Adam(), FP16, world_size=len(grads), recipe=GradientRecipe(name, allreduce),
                       reduce_every_micro_step=True, reduce_bucket_size=bucket)  # ZeRO-2: ready-order ipg buckets
    return oracle.reduce(grads)[: model.num_params]  # (P,) the fp32 gradient the optimizer reads


@pytest.mark.pinned  # a pinned count, kernel-independent by construction: CI reruns it under other BLAS kernels
@pytest.mark.parametrize("n, bucket", sorted(DOCS_DIFFER, key=str))
def test_default_and_owner_reduce_paths_differ_by_these_fractions(n, bucket):
    grads = _drawn_fp16_gradients(n)
    default = _reduced("deepspeed-zero12", "nccl", grads, bucket)
    owner = _reduced("deepspeed-zero12-reduce", "ring", grads, bucket)
    differ = int(np.sum(bits(default) != bits(owner)))
    print(f"N = {n}, bucket {bucket}: {differ} of {default.size} elements differ ({100 * differ / default.size:.1f} %)")
    assert differ == DOCS_DIFFER[n, bucket]

"""Per-parameter partitions: DeepSpeed ZeRO-3's (`deepspeed-zero3`) and FSDP2's (`fsdp2`) (issue 11, Must show 4).

DeepSpeed cuts each parameter of n elements in N chunks of ceil(n/N); FSDP2 cuts it on dim 0, in chunks of
ceil(rows/N) rows (parallel/data/layouts/_partition.py); rank r owns the r-th chunk of every parameter. The owner
decides the order of an element's ring sum, so each layout gives other bits than zerosim's flat one: the hand-derived
rows below fail if the engine shards by another layout.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_recipes import bits, linear_step  # noqa: E402 (tests/ is on the path)

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim import checkpoint as ckpt
from zerosim.checkpoint import consolidated, inspect, read_state
from zerosim.models import GPT, make_regression, make_sequence_task
from zerosim.parallel.data import CommSchedule
from zerosim.parallel.data.layouts import FlatLayout, ParamLayout
from zerosim.precision import get_precision

DS3 = get_precision("fp16-mixed").with_(reduction="deepspeed-zero3")


# ---------------------------------------------------------------- the layout, by hand

def test_the_layout_of_two_parameters_of_5_and_3_elements_on_3_ranks():
    # c = ceil(5/3) = 2 and ceil(3/3) = 1, s = 3: rank 0 holds p1[0:2] p2[0:1], rank 1 p1[2:4] p2[1:2],
    # rank 2 p1[4:5] + 1 padding, p2[2:3]. (The flat layout: s = ceil(8/3) = 3, rank r owns [3r, 3r+3).)
    lay = ParamLayout((5, 3), ((0, 8),), 3)
    assert (lay.chunks, lay.shard_size, lay.padded) == ((2, 1), 3, 9)
    assert [lay.own(r) for r in range(3)] == [slice(0, 3), slice(3, 6), slice(6, 9)]
    x = np.arange(1, 9, dtype=np.float32)  # model order: p1 = 1..5, p2 = 6..8
    assert lay.arrange(x).tolist() == [1, 2, 6, 3, 4, 7, 5, 0, 8]  # shard order, padding 0
    assert lay.unarrange(lay.arrange(x)).tolist() == x.tolist()
    assert lay.owner_chunks(8) == [(0, 0, 2), (1, 2, 4), (2, 4, 5), (0, 5, 6), (1, 6, 7), (2, 7, 8)]
    assert lay.owner_chunks(9)[-1] == (0, 8, 9)  # a vector padded past P: its zero tail summed at rank 0
    assert lay.counts(0) == (3, 3, 3) and lay.owned_piece(0, 2) == (0, 3)
    assert lay.draw_index(lay.own(2)) == ((0, 4, 1), (2, 7, 1))  # (offset in the shard, model index, count)
    flat = FlatLayout(8, 3, ((0, 8),))
    assert [flat.own(r) for r in range(3)] == [slice(0, 3), slice(3, 6), slice(6, 9)] and flat.counts(0) == (3, 3, 2)
    assert flat.owner_chunks(9) == [(0, 0, 3), (1, 3, 6), (2, 6, 9)]  # the flat shards: rank r's sum ends at rank r


def test_fsdp2_cuts_each_parameter_on_dim_0():
    # MLP [3, 5, 2] on N = 3: fc0.w (5, 3) -> ceil(5/3) = 2 rows = 6 elements; fc0.b (5,) -> 2; fc1.w (2, 5) -> 1 row
    # = 5, so rank 2 holds none of it; fc1.b (2,) -> 1. DeepSpeed's element chunks would be 5, 2, 4, 1.
    lay = ParamLayout.for_model(MLP([3, 5, 2]), 3, dim0=True)
    assert (lay.rows, lay.chunks, lay.shard_size) == ((5, 5, 2, 2), (6, 2, 5, 1), 14)
    assert lay.owner_chunks(32) == [(0, 0, 6), (1, 6, 12), (2, 12, 15), (0, 15, 17), (1, 17, 19), (2, 19, 20),
                                  (0, 20, 25), (1, 25, 30), (2, 30, 30), (0, 30, 31), (1, 31, 32), (2, 32, 32)]


def test_units_are_one_piece_of_every_shard():
    # MLP [3, 5, 2]: fc0 (w 15, b 5), the activation (no weights), fc1 (w 10, b 2) on N = 3: chunks 5, 2 | 4, 1,
    # s = 12; fc1 sits at [7, 12) of every shard, and a bucket of both units at [0, 12); a range cutting a
    # parameter is refused
    lay = ParamLayout.for_model(MLP([3, 5, 2]), 3)
    assert lay.chunks == (5, 2, 4, 1) and lay.windows == ((0, 20), (20, 20), (20, 32))
    assert lay.counts(1) == (0, 0, 0) and lay.owned_piece(1, 1) == (0, 0)
    assert lay.owned_piece(2, 0) == lay.owned_piece(2, 2) == (7, 12) and lay.counts(2) == (5, 5, 5)
    assert lay.owned_range(0, 32, 1) == (0, 12) and lay.range_counts(0, 32) == (12, 12, 12)
    g = np.arange(12, dtype=np.float32)  # fc1's 12 gradients in model order
    wire = lay.to_wire(20, 32, g)  # rank-major: w[0:4] b[0:1] | w[4:8] b[1:2] | w[8:10] pad pad, pad
    assert wire.tolist() == [0, 1, 2, 3, 10, 4, 5, 6, 7, 11, 8, 9, 0, 0, 0]
    assert lay.from_wire(20, 32, wire).tolist() == g.tolist()
    with pytest.raises(ValueError, match=r"\[20, 25\) is not a run of whole parameters"):
        lay.range_counts(20, 25)


# ---------------------------------------------------------------- the recipe, by hand

# MLP([4, 2]) from zero weights, SGD lr 1, batch 1 (test_recipes.linear_step): dW[i, j] = -t[i] x[j], db = -t.
# N = 4, x = 1: every element's gradient is 8192 on rank 0 and 4 on ranks 1-3. div_(4) in fp16 is exact: 2048, 1.
# The ring sum ending at owner c adds ((x[c+1] + x[c+2]) + x[c+3]) + x[c] in fp16 (spacing 2 above 2048):
#   owner 0: (1 + 1) + 1 = 3, + 2048 = 2051 -> tie, to even 2052      owner 1: 2 + 2048 = 2050, + 1 = 2051 -> 2052
#   owner 2: 1 + 2048 = 2049 -> 2048, + 1 -> 2048, + 1 -> 2048          owner 3: 2048 + 1 + 1 + 1 -> 2048 each time
# Per-parameter chunks: W (8): c = 2 -> owners 0 0 1 1 2 2 3 3; b (2): c = 1 -> owners 0 1.
# The flat layout (P = 10, s = 3) would own W 0 0 0 1 1 1 2 2 and b 2 3: W[4:6] 2052 and b 2048 instead.
DS3_ROWS = [
    ("per-parameter owners decide the ring order", DS3, [[1.0] * 4] * 4, [[-8192.0] * 2] + [[-4.0] * 2] * 3,
     [2052.0] * 4 + [2048.0] * 4 + [2052.0] * 2),
    # reduce in fp32: cast first (3 * 2**-24 is exact in fp32), then div_(4): 0.75 * 2**-24, exact in fp32; the fp32
    # ring
    # sums 3 * 2**-24; `.to(fp16)` (the grad-accumulation dtype): exact. (DeepSpeed ZeRO-1/2 divides in fp16 first:
    # 0.75 * 2**-24 rounds to 2**-24, the sum is 4 * 2**-24.)
    ("cast to the wire, then divide", DS3.with_(reduce="fp32"), [[1.0] * 4] * 4, [[-3 * 2.0**-24] * 2] * 4,
     [3 * 2.0**-24] * 10),
    # reduce in fp32: rank 0 holds 1, rank 1 2**-11, the others 0; / 4: 0.25 and 2**-13; the sum 0.25 + 2**-13 is exact
    # in fp32; `.to(fp16)`: the spacing at 0.25 is 2**-12, a tie, to even: 0.25 ...
    ("the reduced fp32 piece rounds into fp16", DS3.with_(reduce="fp32"), [[1.0] * 4] * 4,
     [[-1.0] * 2, [-(2.0**-11)] * 2, [0.0] * 2, [0.0] * 2], [0.25] * 10),
    # ... unless gradients accumulate in fp32 (data_types.grad_accum_dtype): `.to(fp32)` keeps 0.25 + 2**-13
    ("grad_accum fp32 keeps it", DS3.with_(reduce="fp32", grad_accum="fp32"), [[1.0] * 4] * 4,
     [[-1.0] * 2, [-(2.0**-11)] * 2, [0.0] * 2, [0.0] * 2], [0.25 + 2.0**-13] * 10),
]


# FSDP2 in fp32 at N = 4: NCCL's AVG pre-multiplies by fl32(1/4) = 0.25 (exact): rank 0's 2**26 -> 2**24, the others'
# 4 -> 1. The fp32 ring (spacing 2 above 2**24) gives owner 0 or 1: 2**24 + 4, owner 2 or 3: 2**24 (as above).
# On dim 0, W (2, 4) is one row per rank: owners 0 0 0 0 1 1 1 1, b owners 0 1: every element 2**24 + 4. (DeepSpeed's
# element chunks would own W[4:8] by ranks 2 and 3, and the flat layout W[6:8] and b: 2**24 there.)
DS3_ROWS.append(("fsdp2: dim-0 owners decide the ring order", get_precision("fp32").with_(reduction="fsdp2"),
                 [[1.0] * 4] * 4, [[-(2.0**26)] * 2] + [[-4.0] * 2] * 3, [2.0**24 + 4] * 10))


@pytest.mark.parametrize("name, policy, xs, ts, want", DS3_ROWS, ids=[row[0] for row in DS3_ROWS])
def test_deepspeed_zero3_table(name, policy, xs, ts, want):
    got, oracle = linear_step(policy, 3, xs, ts)
    assert got.tolist() == want
    assert np.array_equal(bits(got), bits(oracle))


def test_a_gathered_unit_holds_its_padded_chunks():
    # DeepSpeed all-gathers every rank's padded chunk: fc1 (w 10, b 2) on N = 3 arrives as 3 * (4 + 1) = 15 fp16
    # elements, 30 bytes (flat: fc1's 12 elements, 24 bytes)
    model = MLP([3, 5, 2])
    for policy, nbytes in ((DS3, 30), (get_precision("fp16-mixed"), 24)):
        engine = ZeroEngine(model, Cluster(3), 3, get_optimizer("adam"), policy)
        engine.step(make_regression(np.random.default_rng(1), 3, 2, [3, 5, 2]))
        sizes = {e.nbytes for e in engine.cluster.ranks[0].ledger.timeline if e.name == "layer 2 params (gathered)"}
        assert sizes == {nbytes}


# ---------------------------------------------------------------- engine = oracle, bit for bit

COMMS = [None, "deepspeed", CommSchedule(reduce_bucket_size=40, prefetch_bucket_size=30, max_reuse_distance=100)]


@pytest.mark.slow
@settings(max_examples=40)
@given(
    recipe=st.sampled_from(["deepspeed-zero3", "fsdp2"]),
    widths=st.lists(st.integers(1, 7), min_size=2, max_size=4),
    n=st.integers(1, 5),
    k=st.integers(1, 2),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed", "fp32", "fp16-pure-sr", "fp16-reduce32", "fp16-accum32"]),
    opt=st.sampled_from(["adam", "adamw", "sgd", "lion"]),
    checkpoint=st.booleans(),
    comm=st.sampled_from(range(len(COMMS))),
    scale=st.sampled_from([1.0, 512.0, "torch", "deepspeed"]),
    clip=st.sampled_from([None, 0.05]),
    seed=st.integers(0, 2**16),
)
def test_per_parameter_recipes_equal_the_oracle(
    recipe, widths, n, k, precision, opt, checkpoint, comm, scale, clip, seed
):
    base = {"fp16-reduce32": DS3.with_(reduce="fp32"), "fp16-accum32": DS3.with_(grad_accum="fp32")}.get(precision)
    policy = (base or get_precision(precision)).with_(reduction=recipe).with_(
        loss_scale=scale, loss_scale_options={"init_scale": 2.0**15, "growth_interval": 2} if scale == "torch" else {})
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    data = make_regression(np.random.default_rng(seed + 1), 3 * n * k, 3, widths)
    engine = ZeroEngine(model, Cluster(n), 3, get_optimizer(opt, lr=1e-2), policy, params=params, accumulation_steps=k,
                        checkpoint=checkpoint, comm=COMMS[comm], clip_grad=clip)
    ref = Reference(model, get_optimizer(opt, lr=1e-2), policy, world_size=n, params=params, accumulation_steps=k,
                    reduce_every_micro_step=True, clip_grad=clip)
    for s in range(3):
        mine = data[s * n * k : (s + 1) * n * k]
        step = [mine[r * k : (r + 1) * k] for r in range(n)]
        assert engine.step(step) == ref.step(step)
    assert engine.t == ref.t
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    assert np.array_equal(bits(engine.full_params()), bits(ref.compute_params()))
    for name, state in engine.full_optimizer_state().items():
        assert np.array_equal(bits(state), bits(ref.optimizer_state()[name]))


def test_a_gpt_trains_on_per_parameter_partitions_like_the_oracle():
    # attention blocks hold many parameters per unit (LayerNorms, QKV, projections, FFN): 3 ranks, 3 steps
    vocab, n = 7, 3
    model = GPT(vocab, 8, 2, 2, 8)
    params = model.init_params(np.random.default_rng(2))
    engine = ZeroEngine(model, Cluster(n), 3, get_optimizer("adam", lr=1e-2), DS3, params=params, checkpoint=True)
    ref = Reference(
        model, get_optimizer("adam", lr=1e-2), DS3, world_size=n, params=params, reduce_every_micro_step=True
    )
    rng = np.random.default_rng(3)
    for _ in range(3):
        step = make_sequence_task(rng, n, 2, 3, vocab, "copy")
        assert engine.step(step) == ref.step(step)
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    assert np.array_equal(bits(engine.full_params()), bits(ref.compute_params()))


# ---------------------------------------------------------------- checkpoints

@pytest.mark.slow
@settings(max_examples=12)
@given(
    recipe=st.sampled_from(["deepspeed-zero3", "fsdp2"]),
    n=st.integers(1, 5),
    m=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_a_per_parameter_checkpoint_resumes_and_reshards(tmp_path_factory, recipe, n, m, seed):
    widths = [3, 5, 2]
    model = MLP(widths)
    policy = DS3.with_(loss_scale="deepspeed", reduction=recipe)
    params = model.init_params(np.random.default_rng(seed))
    data = make_regression(np.random.default_rng(seed + 1), 4 * n, 3, widths)
    whole = ZeroEngine(model, Cluster(n), 3, get_optimizer("adam", lr=1e-2), policy, params=params)
    for s in range(2):
        whole.step(data[s * n : (s + 1) * n])
    folder = str(tmp_path_factory.mktemp("ckpt"))
    ckpt.save(whole, folder)
    resumed = ckpt.load(folder, Cluster(n), model)  # the same run: bitwise equal after two more steps
    resharded = ckpt.load(folder, Cluster(m), model)  # N -> M: equal to the consolidated state
    saved = consolidated(folder)
    master = np.concatenate([saved[f"{model.layers[s.layer].name}.{s.name}"].reshape(-1) for s in model.specs])
    assert np.array_equal(bits(resharded.full_master()), bits(master))
    assert np.array_equal(bits(resharded.full_params()), bits(read_state(folder).params))
    for s in range(2, 4):
        assert resumed.step(data[s * n : (s + 1) * n]) == whole.step(data[s * n : (s + 1) * n])
    assert np.array_equal(bits(resumed.full_master()), bits(whole.full_master()))
    assert np.array_equal(bits(resumed.full_params()), bits(whole.full_params()))
    state = read_state(folder)  # continuing at M ranks equals the oracle at M started from the same state
    ref = Reference(model, get_optimizer("adam", lr=1e-2), policy, world_size=m, reduce_every_micro_step=True)
    ref.set_state(state.params, state.master, state.optimizer, state.t)
    ref.scaler = state.loss_scaler(policy)
    more = make_regression(np.random.default_rng(seed + 2), 2 * m, 3, widths)
    for s in range(2):
        assert resharded.step(more[s * m : (s + 1) * m]) == ref.step(more[s * m : (s + 1) * m])
    assert np.array_equal(bits(resharded.full_master()), bits(ref.master()))


def test_inspect_names_each_ranks_chunks_and_padding(tmp_path):
    # MLP [3, 5, 2] on N = 3: fc0.w 15 -> 5 | fc0.b 5 -> 2 | fc1.w 10 -> 4 | fc1.b 2 -> 1; rank 2 holds fc0.w[10:15],
    # fc0.b[4:5] + 1 padding, fc1.w[8:10] + 2 padding and no element of fc1.b (1 padding): 8 real, 4 padding
    engine = ZeroEngine(MLP([3, 5, 2]), Cluster(3), 3, get_optimizer("adam"), DS3)
    ckpt.save(engine, str(tmp_path / "ds3"))
    text = inspect(str(tmp_path / "ds3"))
    assert (
        "per-parameter layout (DeepSpeed ZeRO-3)" in text
        and "shard size s = 12, padded length 36 (4 padding elements)" in text
    )
    assert "12 real; fc0.w[0:5], fc0.b[0:2], fc1.w[0:4], fc1.b[0:1]" in text
    assert (
        "8 real + 4 padding; fc0.w[10:15], fc0.b[4:5] + 1 padding, fc1.w[8:10] + 2 padding, fc1.b[none] + 1 padding"
        in text
    )
    fsdp2 = ZeroEngine(MLP([3, 5, 2]), Cluster(3), 3, get_optimizer("adam"), DS3.with_(reduction="fsdp2"))
    ckpt.save(fsdp2, str(tmp_path / "fsdp2"))
    text = inspect(str(tmp_path / "fsdp2"))  # chunks 6, 2, 5, 1 (test_fsdp2_cuts_each_parameter_on_dim_0)
    assert "per-parameter layout (FSDP2, Shard(0))" in text
    assert (
        "4 real + 10 padding; fc0.w[12:15] + 3 padding, fc0.b[4:5] + 1 padding, fc1.w[none] + 5 padding, fc1.b[none] + "
        "1 padding"
        in text
    )

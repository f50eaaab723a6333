"""DeepSpeed's BF16_Optimizer (zero/bf16_optimizer.py, recipe "deepspeed-bf16-optimizer"): what DeepSpeed runs for bf16
parameters with grad_accum_dtype fp32 at ZeRO stage 1 (issue 33). Hand-derived rows, its aligned buffer, its one
all-reduce in the trace, the meta backend, and the configurations it refuses, each before anything is allocated.
Engine = oracle for it: tests/test_bucket_allreduce.py (Must show 2) and tests/test_recipes.py (every combination)."""

import numpy as np
import pytest
from helpers import bits
from test_meta_backend import _engine_events, _same_trace, meta_twin  # noqa: E402 (tests/ is on the path)
from test_recipes import linear_step  # noqa: E402

from zerosim import MLP, Adam, Cluster, ZeroEngine, get_optimizer
from zerosim.models import make_regression
from zerosim.parallel.data.recipes._bf16_optimizer import aligned_length
from zerosim.precision import get_precision

NAME = "deepspeed-bf16-optimizer"
BF16 = get_precision("bf16-mixed").with_(reduction=NAME, grad_accum="fp32")

# One step of MLP([1, 1]) from zero weights with SGD lr 1 (test_recipes.linear_step): g is what the optimizer read.
# Every rank holds 198/128 = 1.546875 (bf16: 8 significant bits) in w and b. N = 3, no division before the wire.
BF16_TABLE = [
    # (policy, g, why)
    (BF16, 1.5390625,
     "bf16 ring: 198/128 + 198/128 = 396/128 (exact, spacing 2/128 in [2, 4)); + 198/128 = 594/128 = 148.5 * 4/128 "
     "(spacing 4/128 in [4, 8)), a tie -> 148 * 4/128 = 4.625; then mul_(1/3) in bf16 (fp32 math): 4.625 * "
     "fl32(1/3) = 1.5416667 -> bf16 (spacing 1/128) 197.33/128 -> 197/128 = 1.5390625; copied into fp32 as it is. "
     "(stage_1_and_2.py's div_ before the sum would give 198/128 back: 0.515625 * 3 is exact)"),
    (BF16.with_(reduce="fp32"), 1.546875,
     "fp32 wire (communication_data_type fp32): 594/128 = 4.640625 exactly; * fl32(1/3) = 1.546875 + 4.7e-8, "
     "below half of fp32's spacing at 1.5 (6e-8): 1.546875, the exact mean; nothing rounds it to bf16 afterwards"),
]


@pytest.mark.parametrize("policy, want, why", BF16_TABLE, ids=["bf16 wire", "fp32 wire"])
def test_bf16_optimizer_by_hand(policy, want, why):
    got, oracle = linear_step(policy, 1, [[1.0]] * 3, [[-198 / 128]] * 3)
    assert got.tolist() == [want] * 2, why
    assert np.array_equal(bits(got), bits(oracle))


ALIGNED = [
    # (P, N, L, why): runtime/utils.py align_dense_tensors(tensor_list, 2 * N): P zero-padded to a multiple of 2N
    (32, 3, 36, "32 % 6 = 2: four zeros"),
    (36, 3, 36, "a multiple of 6 already"),
    (1, 1, 2, "one rank still aligns to 2 elements (nccl_start_alignment_factor)"),
    (33, 4, 40, "33 % 8 = 1: seven zeros (zerosim's own flat layout pads to 36)"),
]


@pytest.mark.parametrize("P, n, L, why", ALIGNED)
def test_the_aligned_length(P, n, L, why):
    assert aligned_length(P, n) == L, why


@pytest.mark.parametrize("allreduce", ["ring", "nccl", "gloo"])
def test_one_all_reduce_of_the_aligned_fp32_buffer_at_the_end_of_backward(allreduce):
    # MLP([3, 5, 2]): P = 32, N = 3: one call over L = 36 elements, in the bf16 wire, whatever reduce_bucket_size says
    # (BF16_Optimizer reads none), after the last of K = 2 micro-steps only
    widths = [3, 5, 2]
    cluster = Cluster(3, trace="call")
    engine = ZeroEngine(MLP(widths), cluster, 1, Adam(), BF16.with_(allreduce=allreduce), comm="deepspeed",
                        accumulation_steps=2)
    data = make_regression(np.random.default_rng(0), 6, 2, widths)
    engine.step([data[2 * r : 2 * r + 2] for r in range(3)])
    grads = [c for c in cluster.trace.calls if c.purpose == "reduce grads"]
    assert {c.elements for c in grads} == {36} and {c.dtype for c in grads} == {"bf16"}
    assert {c.micro for c in grads} == {1}  # every phase of the one all-reduce in the last micro-step


def test_the_meta_backend_records_what_the_numpy_engine_records():
    widths = [4, 7, 3]
    mlp = MLP(widths)
    real = ZeroEngine(mlp, Cluster(3, trace="call"), 1, Adam(), BF16)
    real.step(make_regression(np.random.default_rng(0), 3, 2, widths))
    twin = meta_twin(mlp)
    meta = ZeroEngine(twin, Cluster(3, backend="meta", hosted="all", trace="call"), 1, Adam(), BF16)
    meta.step(twin.batches(meta.cluster, 2))
    for a, b in zip(real.cluster.ranks, meta.cluster.ranks):
        assert _engine_events(b.ledger) == _engine_events(a.ledger)
    _same_trace(real.cluster, meta.cluster)


REFUSED = [
    # (stage, policy, engine arguments, the error names ...)
    (1, get_precision("bf16-mixed").with_(reduction="deepspeed-zero12", grad_accum="fp32"), {},
     r"DeepSpeed runs bf16 parameters with grad_accum_dtype fp32 at ZeRO stage 1 through BF16_Optimizer, not "
     r"stage_1_and_2.py \(0.19.6 and 0.19.8: runtime/engine.py, _do_optimizer_sanity_check returns BFLOAT16\): use "
     r"reduction='deepspeed-bf16-optimizer'$"),
    (1, get_precision("bf16-mixed").with_(reduction="deepspeed-zero12-reduce", grad_accum="fp32"), {},
     "through BF16_Optimizer"),
    (1, get_precision("fp16-mixed").with_(reduction=NAME, grad_accum="fp32"), {},
     r"runs for bf16 parameters with fp32 masters and grad_accum_dtype fp32 only .* got compute=fp16"),
    (1, get_precision("bf16-mixed").with_(reduction=NAME), {}, "got compute=bf16, master=fp32, grad_accum=None"),
    (1, get_precision("bf16-pure").with_(reduction=NAME, grad_accum="fp32"), {}, "master=None"),
    (1, BF16.with_(loss_scale=1024.0), {}, "BF16_Optimizer has no loss scaler"),
    (1, BF16, dict(clip_grad=1.0), r"get_global_norm_of_tensors.* drop clip_grad"),
    (1, BF16, dict(optimizer="muon"), r"Muon path \(_prepare_muon_updates\) is not modelled"),
    (2, BF16, {}, r"runs at ZeRO stage\(s\) 1, not 2"),
]


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("stage, policy, args, message", REFUSED)
def test_what_is_refused_and_why(stage, policy, args, message):
    cluster = Cluster(2)
    args = dict(args)
    optimizer = get_optimizer(args.pop("optimizer", "adam"))
    with pytest.raises(ValueError, match=message):
        ZeroEngine(MLP([3, 2]), cluster, stage, optimizer, policy, **args)
    assert all(not r.ledger.live for r in cluster.ranks)  # refused before anything was allocated


def test_bf16_with_fp32_accumulation_still_runs_stage_1_and_2_at_stage_2():
    # DeepSpeed picks BF16_Optimizer at stage 1 only: at stage 2 stage_1_and_2.py reduces bf16 buckets as usual
    ZeroEngine(MLP([3, 2]), Cluster(2), 2, Adam(), get_precision("bf16-mixed").with_(reduction="deepspeed-zero12",
                                                                                      grad_accum="fp32"))

"""`zerosim diff` on documented pairs: for each, the tensor where the runs part, each run's parting event and the cause
that a hand analysis (the comment above the row) names, before and apart from running diff.

Every row trains the same small MLP (widths 4,6,3: P = 51 parameters, registration order fc0.w [0, 24) as a (6, 4)
matrix, fc0.b [24, 30), fc1.w [30, 48), fc1.b [48, 51); gradient-ready order the reverse) on batches of 2, except
the tensor-parallel row's GPT. The canonical order (zerosim/diff/_names.py) walks a step's micro-batches, then the
reduced gradient, the averaged one, the optimizer's state and the new weights, parameters in model order: the first
parameter that can part in a reduction is fc0.w. Ring facts used by hand (DESIGN.md, "Ring order is NCCL's"): on N
ranks the sum of chunk c starts at rank c+1 and travels c+1 -> c+2 -> ... -> c; zerosim's chunks are the N equal
shards of ceil(P / N) elements. A stage-2/3 run reduces each micro-step (its ring at micro-step k adds the micro-batches
p·K + k of ring positions p), a stage-0/1 run adds each rank's K micro-batches first (rank p holds micro-batches
p·K .. p·K + K - 1). zerosim diff names a ring hop as "hop 1, rank a -> rank b" with the micro-batches the partial sum
holds, in the order it added them.
"""

import json
import math

import pytest

from zerosim.cli.diff_cmd import config_from_flags
from zerosim.diff import diff

MLP = "--widths 4,6,3 --batch 2"
P = 51
OFFSETS = {"fc0.w": 0, "fc0.b": 24, "fc1.w": 30, "fc1.b": 48}  # each parameter's place in the flat vector


def run(a: str, b: str, steps: int = 1):
    return diff(config_from_flags(a, "A"), config_from_flags(b, "B"), steps=steps)


def ring_chunk(i: int, n: int, length: int = P) -> int:
    """Hand formula: element i's chunk among n equal shards of `length` elements."""
    return i // math.ceil(length / n)


def hop1(c: int, n: int) -> str:
    """Hand formula: the first hop of chunk c's sum on n ranks."""
    return f"hop 1, rank {(c + 1) % n} -> rank {(c + 2) % n}"


def parts_at(report, step: int, kind: str, name: str):
    t = report.parting.tensor
    assert (t.step, t.kind, t.name) == (step, kind, name), report.text()
    return report.parting.index


def test_stage_1_vs_3_in_fp16_with_accumulation():
    # Hand: forward and backward read the same fp16 weights (stage 3 gathers copies), so micro-batch gradients agree.
    # Stage 1 adds each rank's K = 2 micro-batches locally in fp16 and reduce-scatters once; stage 3 reduce-scatters
    # each micro-step and adds the reduced pieces (DeepSpeed #1488's discrepancy). Run A's first value B never forms
    # is rank 0's local sum of micro-batches 0 and 1; run B's is its first micro-step ring's first hop, which adds
    # the micro-step-0 batches of ring positions c+1 and c+2 (micro-batches 2(c+1), 2(c+2)) — a pair A never sums.
    r = run(f"{MLP} --precision fp16-mixed --stage 1 --accumulation-steps 2",
            f"{MLP} --precision fp16-mixed --stage 3 --accumulation-steps 2")
    i = parts_at(r, 1, "reduced", "fc0.w")
    c = ring_chunk(i, 4)
    assert r.event_a.what == "accumulation" and "rank 0 adds micro-batch 1's gradient to its micro-batch 0 in fp16" in \
        r.event_a.text
    assert r.event_b.what == "ring hop" and hop1(c, 4) in r.event_b.text
    assert f"micro-batches {{{2 * ((c + 1) % 4)}, {2 * ((c + 2) % 4)}}}" in r.event_b.text
    assert r.rule == "accumulation placement"


def test_two_ranks_vs_four_at_the_same_global_batch():
    # Hand: 2 ranks × 2 accumulation steps read the step's micro-batches 0..3 as 4 ranks do (rank p's j-th is
    # p·K + j). Both are stage 2: each micro-step is reduce-scattered. Run A's micro-step 0 adds ring positions 0
    # and 1, micro-batches 0 and 2, over 2 ranks (shards of 26: fc0.w is in chunk 0, whose sum starts at rank 1:
    # micro-batch 2, then 0); run B adds micro-batches c+1, c+2 at its first hop (shards of 13).
    r = run(f"{MLP} --ranks 2 --accumulation-steps 2", f"{MLP} --ranks 4")
    i = parts_at(r, 1, "reduced", "fc0.w")
    c = ring_chunk(i, 4)
    assert r.event_a.what == "ring hop" and "hop 1, rank 1 -> rank 0" in r.event_a.text
    assert "micro-batches {2, 0}" in r.event_a.text
    assert r.event_b.what == "ring hop" and hop1(c, 4) in r.event_b.text
    assert f"micro-batches {{{(c + 1) % 4}, {(c + 2) % 4}}}" in r.event_b.text
    assert r.rule == "ranks"


def test_ring_vs_nccl_all_reduce_chunk_map():
    # Hand: stage 0 all-reduces the whole gradient. zerosim's ring cuts the padded 52 elements into shards of 13;
    # NCCL's ring all-reduce over the 51 real elements (bf16, one loop: 51 < its 2 MiB chunk) cuts chunks of
    # alignUp(ceil(51 / 4), 16 bytes / 2) = 16 elements (collectives/chunk_maps/_nccl.py cites all_reduce.h runRing).
    # Flat element q is in ring chunk q // 13 and NCCL chunk q // 16: they differ for q in 13..15, 26..31, 39..47,
    # and only there can the bits differ (the same chunk is the same order). Which of those rounds differently first
    # is the data's; its sum starts at rank q // 13 + 1 in run A and q // 16 + 1 in run B.
    r = run(f"{MLP} --stage 0", f"{MLP} --stage 0 --allreduce nccl")
    t = r.parting.tensor
    assert (t.step, t.kind) == (1, "reduced")
    q = OFFSETS[t.name] + r.parting.index
    assert q in [*range(13, 16), *range(26, 32), *range(39, 48)]
    ring, nccl = q // 13, q // 16
    assert r.event_a.what == "ring hop" and hop1(ring, 4) in r.event_a.text
    assert f"micro-batches {{{(ring + 1) % 4}, {(ring + 2) % 4}}}" in r.event_a.text
    assert r.event_b.what == "ring hop" and hop1(nccl, 4) in r.event_b.text
    assert f"micro-batches {{{(nccl + 1) % 4}, {(nccl + 2) % 4}}}" in r.event_b.text
    assert r.rule == "chunk map"


def test_deepspeed_zero12_vs_fsdp2():
    # Hand: DeepSpeed ZeRO-2 divides by N = 4 in bf16 (exact: a power of two) and all-reduces each unit's bucket whole
    # (no bucket size: a unit per bucket). fc0's bucket holds, in gradient-ready order, fc0.b's slices then fc0.w's
    # (_bucket_allreduce.py range_slices: [24, 26), [26, 30), [0, 13), [13, 24)), 30 elements in chunks of 8: fc0.w
    # element i sits at 6 + i, so in chunk (6 + i) // 8. FSDP2 premultiplies by 1/4 (exact too) and reduce-scatters
    # fc0.w's dim-0 shards, 2 of its 6 rows (8 elements) per rank: element i in chunk i // 8. The divisions make the
    # same bits; the chunks differ for i in 2..7, 10..15, 18..23, where the sums start on other ranks.
    r = run(f"{MLP} --stage 2 --reduction deepspeed-zero12", f"{MLP} --stage 3 --reduction fsdp2")
    i = parts_at(r, 1, "reduced", "fc0.w")
    ds, fsdp = (6 + i) // 8, i // 8
    assert ds != fsdp
    assert r.event_a.what == "ring hop" and hop1(ds, 4) in r.event_a.text
    assert r.event_b.what == "ring hop" and hop1(fsdp, 4) in r.event_b.text
    assert r.rule == "layout"


def test_bf16_vs_fp32_optimizer_state():
    # Hand: everything up to the optimizer agrees; Adam's step-1 arithmetic runs in fp32 from zero state in both
    # (torch's fused Adam: widen, fp32 math, store), so m, v and the new master agree; the stored m is rounded to
    # bf16 in run A only (0.1 g is rarely a bf16 number): step 1's stored m of fc0.w, "store" events.
    r = run(f"{MLP} --optim-state bf16", MLP)
    parts_at(r, 1, "stored", "m fc0.w")
    assert (r.event_a.what, r.event_b.what) == ("store", "store")
    assert "bf16" in r.event_a.text and "fp32" in r.event_b.text
    assert r.rule == "optimizer state format"


def test_fp32_vs_16_bit_accumulation():
    # Hand: stage 1, K = 3: each rank adds its three micro-batch gradients before the one reduction, in fp32 in run A
    # (--grad-accum fp32: exact here, then one cast to the bf16 wire) and in bf16 in run B (a rounding at each add:
    # ((g0 + g1) + g2) rounds twice). A rank's partial sum of its first two micro-batches is already other bits in the
    # two formats (fp32 keeps the exact sum, bf16 rounds it): the first event either forms and the other does not is
    # that accumulation, on the same rank with the same micro-batches in both.
    r = run(f"{MLP} --stage 1 --accumulation-steps 3 --grad-accum fp32", f"{MLP} --stage 1 --accumulation-steps 3")
    parts_at(r, 1, "reduced", "fc0.w")
    assert (r.event_a.what, r.event_b.what) == ("accumulation", "accumulation")
    assert "fp32" in r.event_a.text and "bf16" in r.event_b.text
    assert r.event_a.text.replace("fp32", "X") == r.event_b.text.replace("bf16", "X")  # the same rank and pair
    assert r.rule == "accumulation format"


def test_fp32_vs_16_bit_accumulation_of_two_is_identical():
    # Hand: with K = 2 there is one add: bf16 + bf16 in bf16 is their exact sum rounded once (ml_dtypes adds in fp32,
    # which holds the sum of two bf16 numbers exactly unless their exponents are 16 apart), and the fp32 accumulator's
    # exact sum is rounded once to the bf16 wire: the same bits, so the runs do not part.
    r = run(f"{MLP} --stage 1 --accumulation-steps 2 --grad-accum fp32", f"{MLP} --stage 1 --accumulation-steps 2")
    assert r.identical


def test_averaging_before_vs_after_the_sum():
    # Hand: N = 3 (17 elements a shard): DeepSpeed's reduce path divides each rank's bf16 gradient by 3 before the
    # sum (a rounding: 3 is no power of two), zerosim's seeds recipe sums first and divides the fp32 cast. Both reduce
    # to the owner in the same ring order, starting at rank c+1. Run A's first value B never forms: rank c+1's
    # divided gradient (B divides no single gradient); run B's: its first hop's undivided partial sum.
    r = run(f"{MLP} --ranks 3 --reduction deepspeed-zero12-reduce", f"{MLP} --ranks 3")
    i = parts_at(r, 1, "reduced", "fc0.w")
    c = ring_chunk(i, 3)
    assert r.event_a.what == "pre-divide" and r.event_a.text.startswith(f"rank {(c + 1) % 3}:")
    assert r.event_b.what == "ring hop" and hop1(c, 3) in r.event_b.text
    assert r.rule == "averaging variant"


def test_bucket_sizes(tmp_path):
    # Hand: two DeepSpeed configs, ZeRO-2 (deepspeed-zero12: each bucket all-reduced whole), reduce_bucket_size 24
    # and 1000. Backward finishes fc1 (21 elements), then fc0 (30). With 1000 one bucket holds all four parameters in
    # ready order, cut at owner changes (shards of 13): [48, 51), [30, 39), [39, 48), [24, 26), [26, 30), [0, 13),
    # [13, 24): 51 elements in chunks of 13, fc0.w's element i at 27 + i for i < 13 and 40 + (i - 13) after.
    # With 24 fc0 cannot join fc1's bucket (21 + 30 > 24): fc0's bucket is [24, 26), [26, 30), [0, 13), [13, 24),
    # 30 elements in chunks of 8, element i at 6 + i. fc0.w's element i: chunk (6 + i) // 8 with 24, and
    # (27 + i) // 13 or (40 + i - 13) // 13 with 1000; where they differ the sums start on other ranks.
    for size, name in ((24, "a"), (1000, "b")):
        (tmp_path / f"{name}.json").write_text(json.dumps({
            "zero_optimization": {"stage": 2, "reduce_bucket_size": size}, "bf16": {"enabled": True},
            "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}))
    r = run(f"--widths 4,6,3 --ds-config {tmp_path / 'a.json'}", f"--widths 4,6,3 --ds-config {tmp_path / 'b.json'}")
    i = parts_at(r, 1, "reduced", "fc0.w")
    small, large = (6 + i) // 8, (27 + i if i < 13 else 40 + i - 13) // 13
    assert small != large
    assert r.event_a.what == "ring hop" and hop1(small, 4) in r.event_a.text
    assert r.event_b.what == "ring hop" and hop1(large, 4) in r.event_b.text
    assert r.rule == "buckets"


def test_tensor_parallel_1_vs_2():
    # Hand: a GPT on one rank against the same GPT over 2 TP ranks (dp 1 both: the same micro-batch). The
    # vocabulary-parallel embedding sums each token's row with zeros from the other rank (exact), so the embedding's
    # output agrees; block 0's attention output projection W_o is row-parallel: each TP rank multiplies its head's
    # columns and the two partial products are summed by an all-reduce (Megatron's g, tagged 'block0.attn g') — not
    # the one rounding of a product over all 16 inputs. Step 1, micro-batch 0: block0's output parts.
    r = run("--model gpt --ranks 1", "--model gpt --ranks 2 --tp 2")
    t = r.parting.tensor
    assert (t.step, t.slot, t.kind, t.name) == (1, 0, "out", "block0")
    assert r.event_a.what == "forward" and r.event_a.text.startswith("block0.forward")
    assert r.event_b.what == "tensor parallel" and "'block0.attn g'" in r.event_b.text
    assert r.rule == "tensor parallelism"


def test_clipping_on_vs_off():
    # Hand: a fresh MLP's averaged gradient has a global norm of order 1, far above max_norm 1e-3, so run A scales
    # every gradient by 1e-3 / (norm + 1e-6) < 1 at step 1: the averaged gradient parts at its first nonzero
    # element, fc0.w's first, after the same reduced gradient.
    r = run(f"{MLP} --clip-grad 0.001", MLP)
    parts_at(r, 1, "grad32", "fc0.w")
    assert r.event_a.what == "clipping" and "> max_norm 0.001" in r.event_a.text
    assert r.event_b.what == "clipping" and r.event_b.text.startswith("no clipping")
    assert r.rule == "clipping"


def test_stage_1_vs_2_without_accumulation_are_identical():
    # Hand: K = 1. Stage 1 reduce-scatters the whole flat buffer at the end of backward, stage 2 each unit's window as
    # backward makes it: an element's window ∩ shard goes to the same owner, its sum in the same ring order (DESIGN.md:
    # a bucket or a unit changes no owner), and both all-gather the same new bf16 params. Nothing parts.
    r = run(f"{MLP} --stage 1", f"{MLP} --stage 2", steps=2)
    assert r.identical and r.parting is None
    assert "identical" in r.text()


def test_fp16_vs_bf16_compute():
    # Hand: the same fp32 initial weights rounded to fp16 in run A and bf16 in run B: step 0's params part at the
    # first weight whose two roundings differ (bf16 keeps 8 significant bits, fp16 11).
    r = run(f"{MLP} --precision fp16-mixed", MLP)
    parts_at(r, 0, "params", "fc0.w")
    assert (r.event_a.what, r.event_b.what) == ("cast", "cast")
    assert "fp16" in r.event_a.text and "bf16" in r.event_b.text
    assert r.rule == "compute format"


def test_more_ranks_at_the_same_per_rank_batch_see_other_data():
    # Hand: 2 ranks draw 2 micro-batches a step, 4 ranks draw 4: run B's micro-batch 2 does not exist in run A.
    r = run(f"{MLP} --ranks 2", f"{MLP} --ranks 4")
    t = r.parting.tensor
    assert (t.step, t.slot, t.kind) == (1, 2, "input") and r.parting.why == "only in run B"
    assert r.rule == "data"


def test_a_static_loss_scale():
    # Hand: fp16 with a static loss scale of 1024 against fp16's default scale 1: step 1's loss scale is the first
    # logical value of the step, before any micro-batch.
    r = run(f"{MLP} --precision fp16-mixed --loss-scale 1024", f"{MLP} --precision fp16-mixed")
    t = r.parting.tensor
    assert (t.step, t.kind) == (1, "loss scale")
    assert (r.event_a.what, r.event_b.what) == ("loss scale", "loss scale") and "1024" in r.event_a.text
    assert r.rule == "loss scale"


@pytest.mark.slow
def test_an_fp16_sum_that_overflows_in_one_recipe_only():
    # Hand: fp16 with torch's GradScaler starts at S = 2^16. The seeds' recipe sums the four ranks' scaled fp16
    # gradients on the wire; DeepSpeed ZeRO-2's divides each by 4 first (exact) and sums a quarter as much. Where an
    # element's scaled sum passes fp16's largest finite value (65504) but a quarter of it does not, run A's reduced
    # gradient holds an inf, its scaler skips the step (S: 65536 -> 32768) and keeps no reduced gradient; run B steps.
    # The default MLP's first step has such an element in fc0.w: the runs part there, the reduced gradient in run B
    # only, and run B's first event is its first division by 4.
    r = run("--precision fp16-mixed --loss-scale torch", "--precision fp16-mixed --loss-scale torch "
            "--reduction deepspeed-zero12")
    t = r.parting.tensor
    assert (t.step, t.kind, t.name, r.parting.why) == (1, "reduced", "fc0.w", "only in run B")
    assert r.event_a.what == "loss scale" and "skipped step 1" in r.event_a.text and "65536 -> 32768" in r.event_a.text
    assert r.event_b.what == "pre-divide" and "x.div_(N)" in r.event_b.text
    assert r.rule == "averaging variant"

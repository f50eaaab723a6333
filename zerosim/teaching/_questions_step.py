"""The prediction questions of the notebooks on one step and its collectives (01 seed 004 live, 02 the ring, 07 the
exercises, 08 many nodes, 12 Muon, 13 tensor parallelism, 15 real torch): one per section, each computing its answer
from zerosim, as _questions.py's do.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from zerosim.teaching._predict import Question


@lru_cache(maxsize=1)
def _seed004_stage1():
    """Seed 004's step at stage 1, fp16-mixed, checkpointing on (notebook 01's run): (engine, losses)."""
    from zerosim import Adam, Cluster, TinyNet, ZeroEngine

    engine = ZeroEngine(TinyNet(), Cluster(2, keep_values=True), stage=1, optimizer=Adam(lr=0.1),
                        precision="fp16-mixed", checkpoint=True)
    return engine, engine.step(TinyNet.seed_batches())


def _update(rank: int, key: str) -> np.ndarray:
    from zerosim.cluster import OptimizerStep

    engine, _ = _seed004_stage1()
    return next(e.values[key] for e in engine.cluster.trace.of_type(OptimizerStep) if e.rank == rank)


def _rs_bytes() -> float:
    from zerosim.cluster import Call

    engine, _ = _seed004_stage1()
    trace = engine.cluster.trace
    call = next(c.call for c in trace.of_type(Call) if c.purpose == "reduce grads")
    return trace.bytes_sent(0, call=call)


def _lost_update() -> float:
    from zerosim.precision import cast

    return float(cast(np.float64([1.0 + 1e-5]), "fp16")[0])


def _ring_bf16() -> float:
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter
    from zerosim.precision import get_format

    bf16 = get_format("bf16").dtype
    xs = [np.full(4, 2048, bf16)] + [np.ones(4, bf16) for _ in range(3)]
    return float(reduce_scatter(Cluster(4), xs)[0][0])


def _unscaled_in_fp16() -> float:
    """A gradient of 2**-26, scaled by S = 2**16 (2**-10 in fp16, held exactly), unscaled in fp16: × 2**-16."""
    from zerosim.precision import cast

    scaled = cast(np.float64([2.0**-26 * 2.0**16]), "fp16")
    return float(cast(scaled.astype(np.float64) * 2.0**-16, "fp16")[0])


def _planted_caught() -> float:
    from zerosim.teaching import exercises

    return sum(len(ex.planted) for ex in exercises.EXERCISES.values())


@lru_cache(maxsize=1)
def _mesh_tiers() -> dict:
    """Notebook 08's MLP [8, 16, 8] on 2 nodes x 4 GPUs, one fp16-mixed Adam step: {strategy: bytes by tier}."""
    from zerosim import MLP, Adam, Cluster, ZeroEngine

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 8)), rng.standard_normal((2, 8))) for _ in range(8)]
    out = {}
    for name in ("full_shard", "hsdp"):
        options = {} if name == "full_shard" else {"shard_group": 4}
        engine = ZeroEngine(MLP([8, 16, 8]), Cluster(8, gpus_per_node=4), name, Adam(), "fp16-mixed", **options)
        engine.step(batches)
        out[name] = engine.cluster.trace.bytes_by_tier()
    return out


def _hsdp_first_hop() -> float:
    from zerosim.replay import mesh_replay

    return float(mesh_replay("hsdp")["hops"][1]["values"][0])


@lru_cache(maxsize=1)
def _gpt3_strategies() -> dict:
    """GPT-3 175B on 1,024 GPUs in nodes of 8, FSDP's one-ahead prefetch, 20,480 tokens a rank: bytes across nodes."""
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import strategy_step
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule

    gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    return {name: strategy_step(gpt3, 1024, name, 8, group, comm=CommSchedule.fsdp(forward_prefetch=True),
                                tokens=20480).inter for name, group in (("full_shard", None), ("hpz", 8))}


@lru_cache(maxsize=1)
def _muon_sent() -> dict:
    """Notebook 12's MLP [8, 12, 6, 4] on 4 ranks, ZeRO-3, one MuonAdamW step: {plan: bytes rank 0 sends for Muon}."""
    from zerosim import MLP, Cluster, ZeroEngine
    from zerosim.models import make_regression
    from zerosim.optim import MuonAdamW

    widths, out = [8, 12, 6, 4], {}
    model = MLP(widths)
    for plan in ("owner", "gather"):
        engine = ZeroEngine(model, Cluster(4), 3, MuonAdamW(sharding=plan, lr=0.02), "bf16-mixed",
                            params=model.init_params(np.random.default_rng(0)))
        engine.step(make_regression(np.random.default_rng(1), 4, 4, widths))
        trace = engine.cluster.trace
        out[plan] = sum(e.bytes for e in trace.events if e.src == 0 and trace.calls[e.call].tag.startswith("muon"))
    return out


def _muon_balance_64() -> float:
    """Round robin's balance of Llama-3-8B's 224 Newton-Schulz matrices over 64 ranks (notebook 12's last cell)."""
    from zerosim.models import MetaLlama, read_hf_config, shipped_config
    from zerosim.optim import MuonAdamW
    from zerosim.parallel.data import FlatLayout
    from zerosim.parallel.data.muon import balance, muon_matrices, ns_flops, round_robin

    llama = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")))
    split = MuonAdamW()
    mats = muon_matrices(split, llama.specs, FlatLayout.for_model(llama, 1))
    _, rr = round_robin([m.shape for m in mats], 64)
    return balance(rr, [ns_flops(m.shape, split.ns_steps) for m in mats], 64)


def _dp_of_tp8() -> float:
    from zerosim.parallel import ParallelDims

    return len(ParallelDims(256, tp=8).groups("dp").group_of(0))


def _tp_h() -> float:
    """Seed 004's layer 1 split over a TP group of 2 (w1 on GPU 0, w2 on GPU 1), GPU 0's sample x = [1, 3]: the
    all-reduced h."""
    from zerosim.replay import tensor_replay

    return float(tensor_replay("fp16-mixed")["h"][0])


def _tp_dp_ranks() -> float:
    from zerosim.parallel import ParallelDims

    return ParallelDims(8, tp=2).dp


def _nvlink_over_ib() -> float:
    from zerosim.analysis.costs import LINKS

    return LINKS["nvlink4"].bandwidth / LINKS["ib_ndr"].bandwidth


def _megatron_mb(sp: bool) -> float:
    from zerosim.parallel.tensor import megatron_formula

    return megatron_formula(2048, 1, 4096, 32, 8, sp) / 1e6


def _titan_memory_error() -> float:
    from zerosim.analysis.planner import TORCHTITAN_70B, predict_published_run

    return 100 * predict_published_run(TORCHTITAN_70B[0])["memory_error"]


def _torch_zero1_equal() -> float:
    from zerosim.frameworks.torch import compare_zero1, ranks_of, run_torch_kits

    widths = (16, 32, 8)
    zero1 = ranks_of(run_torch_kits(3, widths, 3, 0, zero1=True, fsdp=()), "zero1")
    return 100 * min(r.equal for r in compare_zero1(zero1, widths, "torch", "torch"))


QUESTIONS_STEP = (
    # -- notebook 01: seed 004, live --
    Question(
        "seed004-loss-gpu0",
        "Weights [2, −3, 1, 0.5]; GPU 0's sample is x = [1, 3], t = 5. What is its loss "
        "0.5·(y − t)², with y = w3·ReLU(w1·x1 + w2·x2) + w4?",
        "",
        lambda: _seed004_stage1()[1][0],
        "h = 2·1 − 3·3 = −7, and the ReLU sends it to 0: y = w3·0 + w4 = 0.5, so the loss is 0.5·(0.5 − 5)² = "
        "10.125. That is also why only w4 gets a gradient on GPU 0.",
        wrong=(
            (66.125, "the ReLU left out: h = −7 would pass through, y = −6.5; the ReLU cuts it to 0."),
            (20.25, "(y − t)² without the ½ the loss has."),
        ),
    ),
    Question(
        "seed004-rs-bytes",
        "Stage 1's reduce-scatter of the 4 fp16 gradients on 2 GPUs: how many bytes does GPU 0 send?",
        "B",
        _rs_bytes,
        "A ring over N = 2 has one step: GPU 0 sends its copy of the chunk GPU 1 owns, 2 fp16 values = 4 B, and "
        "keeps its own chunk to add what GPU 1 sends it. (N − 1)/N of the 8 B buffer.",
        wrong=(
            (8, "an all-reduce's 2(N − 1)/N of the buffer: stage 1 needs only its chunk of the sum."),
            (16, "4 fp32 gradients: the wire carries the fp16 ones."),
        ),
    ),
    Question(
        "seed004-mhat-w1",
        "Adam's first step for w1, whose averaged gradient is −5.5 (lr 0.1, β₁ = 0.9): after "
        "the bias correction, what is m̂?",
        "",
        lambda: float(_update(0, "m_hat")[0]),
        "m = 0.9·0 + 0.1·(−5.5) = −0.55 (in fp32: −0.550000011920929), and the correction divides by 1 − 0.9¹ "
        "= 0.1: m̂ = −5.5, the gradient itself. At step 1 Adam's correction undoes the averaging's shrinkage "
        "exactly (up to fp32's rounding).",
        tolerance=1e-6,  # fp32: −0.55 is not exact, and the division by fp32's 0.1 rounds once more
        wrong=(
            (-0.55, "m itself: the bias correction divides it by 1 − β₁ᵗ = 0.1."),
            (-0.5, "a weight's step: m̂/(√v̂ + ε) times the learning rate, not m̂."),
        ),
    ),
    Question(
        "seed004-before-gather-w3",
        "After its update, before the all-gather, what fp16 value does GPU 0 hold for "
        "w3 (GPU 1 owns w3; its new fp32 master is 1.1)?",
        "",
        lambda: float(_update(0, "params_held")[2]),
        "GPU 0 updated only its own shard (w1, w2). Its copy of w3 is still the old 1.0 until the all-gather "
        "brings GPU 1's new value — seed 004's moment of an inconsistent model.",
        wrong=(
            (1.099609375, "GPU 1's new w3 in fp16: GPU 0 receives it only in the all-gather."),
            (1.1, "seed 004's new w3, which fp16 cannot hold (it keeps 1.099609375) and GPU 0 has not yet received."),
        ),
    ),
    Question(
        "seed004-stage1-peak",
        "At stage 1, how many bytes does GPU 0's ledger hold at its peak?",
        "B",
        lambda: _seed004_stage1()[0].cluster.ranks[0].ledger.peak(),
        "At rest 40 B: 8 B each of fp16 weights, fp16 gradients, and its shard's fp32 master, m and v. In "
        "forward/backward it also holds the activations it keeps (8 B); at the optimizer step the 8 B fp32 "
        "gradient shard: 48 B either way.",
        wrong=(
            (40, "what it holds at rest: a phase adds the activations or the fp32 gradient shard."),
            (64, "no sharding: master, m and v of all four weights (12 B each) would be 48 B alone."),
        ),
    ),
    # -- notebook 02: lost updates, the bf16 ring --
    Question(
        "fp16-lost-update",
        "A weight of 1.0 in fp16 gets an update of 1e-5. What does fp16 hold after the add?",
        "",
        _lost_update,
        "fp16's numbers next to 1.0 are 2**-10 ≈ 0.000977 apart; 1 + 1e-5 is far nearer 1.0 than the next one "
        "up, so the add rounds back to 1.0: the update is lost. fp32 (spacing 1.2e-7) keeps it.",
        wrong=(
            (1.00001, "the exact sum: fp16 has no number between 1.0 and 1.0009765625."),
            (1.0009765625, "the next fp16 number: rounding to nearest goes back to 1.0."),
        ),
    ),
    Question(
        "ring-2048-bf16",
        "The same ring as before — rank 0 holds 2048, ranks 1-3 hold 1 — in bf16: what does "
        "rank "
        "0 own after the reduce-scatter?",
        "",
        _ring_bf16,
        "bf16 keeps 8 significant bits: above 2048 its numbers are 16 apart, so every + 1 (or + 2, + 3) on the "
        "way "
        "rounds back to the nearest multiple of 16: every chunk ends at 2048.",
        wrong=(
            (2052, "fp16's answer: with 11 significant bits fp16 keeps 2052; bf16's spacing at 2048 is 16."),
            (2051, "the exact sum."),
        ),
    ),
    # -- notebook 07: exercises --
    Question(
        "unscale-in-fp16",
        "A gradient of 2**-26 was scaled by S = 2**16 (2**-10 in fp16: held exactly). Unscaled "
        "in fp16, multiplied by 1/S, what does it become?",
        "",
        _unscaled_in_fp16,
        "2**-26 is below half of fp16's smallest subnormal (2**-24): multiplied back in fp16 it rounds to 0. "
        "Unscaling belongs in fp32, after the cast, where 2**-26 is an ordinary number: exercise unscale_once.",
        wrong=(
            (2.0**-26, "what an fp32 unscale keeps: fp16 holds nothing below 2**-24."),
            (2.0**-24, "fp16's smallest subnormal: 2**-26 is below half of it, so it rounds to 0."),
        ),
    ),
    Question(
        "planted-caught",
        "The six exercises carry planted wrong solutions (each a reference less one line). How "
        "many does the grader catch?",
        "",
        _planted_caught,
        "Every one: each exercise grades cases smallest first against the oracle or the naive twin, and a "
        "planted bug is kept only if some case catches it (tests/test_exercises.py checks each). The count is "
        "the exercises' own.",
        wrong=(
            (0, "none: a planted bug is there to be caught, and the cell below shows each caught."),
            (6, "one an exercise: several carry more than one."),
        ),
    ),
    # -- notebook 08: many nodes --
    Question(
        "hsdp-ib-bytes",
        "One step of notebook 08's MLP on 2 nodes × 4 GPUs: FULL_SHARD sends 2,940 B over "
        "InfiniBand. How many does HSDP (shard groups of 4) send?",
        "B",
        lambda: _mesh_tiers()["hsdp"]["inter-node"],
        "HSDP's gathers and reduce-scatters stay inside a node; only the replicas' all-reduce of each gradient "
        "shard crosses: 8 ranks × 140 B = 1,120 B.",
        wrong=(
            (2940, "FULL_SHARD's: its world ring leaves the node on two of its eight hops."),
            (0, "none: the two nodes' replicas still all-reduce their gradient shards across."),
        ),
    ),
    Question(
        "hsdp-first-hop",
        "HSDP on 2 × 2 GPUs, seed 004: GPU 1's w3, w4 gradients are [−5.5, −5.5]. FSDP2's fp16 "
        "recipe divides before the ring. What does GPU 1 send GPU 0 for w3?",
        "",
        _hsdp_first_hop,
        "FSDP2 pre-divides by a factor of the world size before its reduce-scatter (here 2: the shard group's) "
        "and by the rest after: −5.5 / 2 = −2.75 is what travels.",
        wrong=(
            (-5.5, "the undivided gradient: FSDP2 divides before it reduces, so the wire never overflows."),
            (-1.375, "divided by all 4 GPUs at once: FSDP2 splits the division, part before and part after."),
        ),
    ),
    Question(
        "hpz-ib-share",
        "GPT-3 175B on 1,024 GPUs in nodes of 8: how many times FULL_SHARD's InfiniBand bytes does hpZ send?",
        "x",
        lambda: _gpt3_strategies()["hpz"] / _gpt3_strategies()["full_shard"],
        "FULL_SHARD's three ring phases a unit (forward gather, backward gather, reduce-scatter) all cross nodes; "
        "hpZ keeps a secondary shard of the weights within the node, so backward's gather stays on NVLink: two "
        "of three phases cross, 2/3.",
        tolerance=0.001,
        wrong=(
            (1 / 3, "only the reduce-scatter crossing: the forward gather still reads the primary shards."),
            (1.0, "no saving: the backward gather reads the node's secondary copy."),
        ),
    ),
    # -- notebook 12: Muon --
    Question(
        "muon-owner-bytes",
        "Notebook 12's MLP on 4 ranks, ZeRO-3, the `owner` plan: how many bytes does rank 0 send for Muon in one step?",
        "B",
        lambda: _muon_sent()["owner"],
        "Under `owner`, each matrix's pieces go to one rank, which orthogonalises it and sends each holder its "
        "slice back: rank 0 sends its pieces of the matrices others own, and the slices of the one it owns. The "
        "`gather` plan (every rank gathers every matrix) sends far more.",
        wrong=(
            (lambda: _muon_sent()["gather"], "the gather plan's: every rank gathers every matrix."),
            (0, "nothing: a matrix straddling two ranks must meet on one of them."),
        ),
    ),
    Question(
        "muon-roundrobin-64",
        "Llama-3-8B's 224 matrices dealt round robin over 64 ranks: the balance, the "
        "busiest "
        "rank's Newton–Schulz FLOPs over the average?",
        "x",
        _muon_balance_64,
        "224 matrices of very different sizes over 64 ranks: dealt in turn, some rank gets more than its share of "
        "the large ones; the balance is the busiest rank's work over the mean (1 is perfect).",
        tolerance=0.002,
        wrong=((1.0, "perfect balance: 224 uneven matrices cannot be dealt evenly over 64 ranks in turn."),),
    ),
    # -- notebook 13: tensor parallelism --
    Question(
        "tp-dp-degree",
        "256 GPUs with TP 8 (TP innermost): how many ranks are in rank 0's data-parallel group?",
        "",
        _dp_of_tp8,
        "TP takes 8 consecutive GPUs; data parallelism runs over what is left: 256 / 8 = 32 ranks that hold the "
        "same TP slice, ranks 0, 8, 16, ...",
        wrong=((8, "the TP group's size."), (256, "the world: ZeRO shards a slice over its DP group only.")),
    ),
    Question(
        "tp-seed004-h",
        "Seed 004's layer 1 split over 2 GPUs (w1 on GPU 0, w2 on GPU 1). For GPU 0's sample x = "
        "[1, 3], the all-reduce sums the partial products w1·x1 and w2·x2: what is h?",
        "",
        _tp_h,
        "GPU 0 computes 2·1 = 2, GPU 1 computes −3·3 = −9, and the all-reduce gives both h = −7, the unsplit "
        "layer's value: Megatron's row-parallel linear.",
        wrong=((2, "GPU 0's partial alone: the all-reduce adds GPU 1's −9."), (-9, "GPU 1's partial alone.")),
    ),
    Question(
        "tp-zero-dp",
        "8 GPUs, TP 2, ZeRO-3 beside it: over how many ranks does ZeRO shard each TP slice?",
        "",
        _tp_dp_ranks,
        "Each TP slice is held by the 8 / 2 = 4 ranks of its data-parallel group; ZeRO shards it four ways.",
        wrong=((8, "the world: a TP slice lives only on its DP group."), (2, "the TP degree.")),
    ),
    Question(
        "megatron-tp8-mb",
        "Megatron's activations per layer (s = 2048, b = 1, h = 4096, a = 32) at TP 8 without "
        "sequence parallelism, in MB?",
        "MB",
        lambda: _megatron_mb(False),
        "sbh(10 + 24/t + 5as/(ht)): TP splits the attention and MLP terms eight ways but not the 10·sbh of the "
        "norms, dropout masks and residual inputs each GPU keeps whole; sequence parallelism splits those too.",
        tolerance=0.001,
        wrong=((lambda: _megatron_mb(True), "with sequence parallelism: sbh(10 + ...)/t."),),
    ),
    Question(
        "nvlink-over-ib",
        "How many times a GPU's share of InfiniBand NDR is its NVLink 4 bandwidth (per direction)?",
        "x",
        _nvlink_over_ib,
        "NVLink 4: 450 GB/s a direction; InfiniBand NDR: 400 Gb/s = 50 GB/s per GPU: 9×. TP's collectives run "
        "inside every block, so they go where the bandwidth is: within a node.",
        wrong=(
            (18, "NVLink's bidirectional 900 GB/s against a one-way 50: a ring sends one way at a time."),
            (8, "400/50: the NDR port's gigabits over its gigabytes."),
        ),
    ),
    Question(
        "titan-memory-error",
        "torchtitan's published Llama 3 70B run (256 H100s, FSDP 32 × TP 8): zerosim's "
        "memory prediction against the measured GiB, error in percent?",
        "%",
        _titan_memory_error,
        "About −50 %: zerosim's ledger and its estimates hold half of the 71.9 GiB torchtitan reports. What no "
        "ledger here holds — the logits and their fp32 copy, Float8's casts, torch.compile's buffers, the "
        "allocator's real fragmentation — is the rest; the error is printed, never tuned away.",
        tolerance=0.05,
        wrong=(
            (0, "no error: a prediction is checked against a measurement, and this one misses what it does not model."),
            (25, "the throughput's error (+25 %, the dense-peak ceiling), not the memory's."),
        ),
    ),
    # -- notebook 15: real torch --
    Question(
        "torch-zero1-equal",
        "ZeRO-1 on 3 gloo processes beside zerosim, torch's own gradients and sqrt: in the "
        "worst of 3 steps, what percent of the parameters are bit-equal?",
        "%",
        _torch_zero1_equal,
        "Every one: Adam is elementwise, so which rank updates an element cannot change its bits, and given the "
        "same gradients and the same square root every operation is the same.",
        wrong=(
            (99, "'almost': the same operations in the same order give the same bits."),
            (0, "'never': ZeroRedundancyOptimizer's whole-parameter partition changes who updates, not what."),
        ),
        needs="torch",
    ),
)

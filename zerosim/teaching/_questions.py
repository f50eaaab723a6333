"""The notebooks' prediction questions: each asks for a number before the cell that computes it, and computes its
own answer from zerosim (a replay, a ledger, a timeline), so `predict` (_predict.py) can grade a typed guess. Every
section of a notebook that computes asks one at least: those below, and by theme _questions_step.py,
_questions_memory.py, _questions_time.py and _questions_pipeline.py.

A question names the misconceptions its common wrong answers come from (seed 001's printed table, the bidirectional
bandwidth, fp16 holding 2.1, ...): the verdict says which one a guess matches. Tolerances are 0 for what is exact
(bytes, an fp16 value, a count) and say why where they are not.
"""

from __future__ import annotations

import math
from functools import lru_cache

from zerosim.teaching._predict import Question
from zerosim.teaching._questions_memory import QUESTIONS_MEMORY
from zerosim.teaching._questions_pipeline import QUESTIONS_PIPELINE
from zerosim.teaching._questions_step import QUESTIONS_STEP
from zerosim.teaching._questions_time import QUESTIONS_TIME

GB = 1e9


@lru_cache(maxsize=8)
def _replay(stage: int):
    from zerosim.replay import replay_live

    return replay_live(stage=stage)[0]


def _fp16_w1() -> float:
    from zerosim.precision import cast

    return float(cast(_replay(1).full_master()[:1], "fp16")[0])


def _ring_2048() -> float:
    import numpy as np

    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    xs = [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16) for _ in range(3)]
    return float(reduce_scatter(Cluster(4), xs)[0][0])


def _ulp(fmt: str) -> float:
    from zerosim.precision import ulp

    return float(ulp(1.0, fmt))


def _states(params: float, ranks: int, stage: int) -> float:
    from zerosim.analysis.costs import model_state_memory

    return model_state_memory(int(params), ranks, stage).total / GB


@lru_cache(maxsize=4)
def _decoder_step(preset: str, ranks: int, stage: int, precision: str, seq_len: int, checkpoint: str, gpu: str):
    """One meta-backend step of a preset's decoder, as `zerosim memory --seq-len` / `zerosim timeline --efficiency
    peak` run it: (its row, its timeline on the GPU's device at peak rates, one link: the device's own NVLink within a
    node of 8 (`Device.link`: NVLink 3 on an A100, 4 on an H100), InfiniBand beyond)."""
    from zerosim.analysis.costs import get_gpu, get_preset, measure_stage
    from zerosim.analysis.timeline import Hardware, simulate
    from zerosim.models.gpt import MetaGPT, strategy_options
    from zerosim.models.llama import MetaLlama
    from zerosim.precision import get_precision

    config = get_preset(preset).config
    twin = MetaLlama if config.layout == "llama" else MetaGPT
    model = twin.from_config(config, seq_len, **strategy_options(checkpoint))
    row, cluster, engine = measure_stage(model, ranks, stage, "adam", precision, micro_batch=(1, seq_len))
    hw = Hardware(get_gpu(gpu).device, "ib_ndr" if ranks > 8 else None, get_precision(precision).compute)
    return row, simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm)


def _fp32_slowdown() -> float:
    args = ("llama-2-7b", 8, 3)
    bf16 = _decoder_step(*args, "bf16-mixed", 4096, "block", "a100-80gb")[1].step_time
    fp32 = _decoder_step(*args, "fp32", 4096, "block", "a100-80gb")[1].step_time
    return fp32 / bf16


def _block_extra() -> float:
    from zerosim.analysis.costs import strategy_costs

    rows = strategy_costs(4, 2048, vocab=50257, d_model=4096, n_heads=32, n_layers=32, strategies=("block",))
    return 100 * rows[0]["extra"]


def _p_bytes() -> float:
    from zerosim.analysis.costs import measure_activations
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT

    return measure_activations(MetaGPT(GPT(50257, 4096, 32, 1, 2048)), 4, 2048).per_block["P"]


def _allreduce_ms() -> float:
    from zerosim.analysis.timeline import ring_collective_time

    return 1e3 * ring_collective_time("all_reduce", 7e9 * 2, 8, "nvlink4")


def _hsdp_rest() -> float:
    from zerosim.viz import measure_mesh_ownership

    return next(r for r in measure_mesh_ownership() if r["strategy"] == "hsdp")["bytes"][5]


def _ddp_aggregate() -> float:
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel

    row = measure_stage(MetaModel.from_params(7_000_000_000, layers=32), 8, 0)[0]
    return 8 * sum(row["resting"].values()) / GB


def _qwz_one() -> float:
    import numpy as np

    from zerosim.precision.quantize import quantize

    return float(quantize(np.float16([1.0, -0.5, 0.25, 0.3]), bits=8, groups=1).payload[0])


def _ns_ranks(plan: str, matrix: str = "0.w") -> float:
    """How many ranks run Newton-Schulz on `matrix` of notebook 12's MLP [8, 12, 6, 4] on 4 ranks, ZeRO-3."""
    import numpy as np

    from zerosim.cluster import Cluster, Compute
    from zerosim.models import MLP, make_regression
    from zerosim.optim import MuonAdamW
    from zerosim.parallel.data import ZeroEngine

    widths = [8, 12, 6, 4]
    model = MLP(widths)
    engine = ZeroEngine(model, Cluster(4), 3, MuonAdamW(sharding=plan, lr=0.02), "bf16-mixed",
                        params=model.init_params(np.random.default_rng(0)))
    engine.step(make_regression(np.random.default_rng(1), 4, 4, widths))
    return len({ev.rank for ev in engine.cluster.trace.log
                if isinstance(ev, Compute) and ev.kind == "newton-schulz" and ev.name.split()[-1] == matrix})


def _tp_tie() -> float:
    """Notebook 13's row [1024, 0.5, 0.25, 0.25] · [1, 1, 1, 1] in fp16, split over a TP group of 2: the ring's sum."""
    import numpy as np

    from zerosim.cluster import Cluster
    from zerosim.collectives import all_reduce
    from zerosim.models.layers import tokens_linear_forward
    from zerosim.parallel import ParallelDims
    from zerosim.precision import cast, get_format

    f = get_format("fp16")
    x, w = cast(np.ones((1, 4)), f), cast(np.array([[1024, 0.5, 0.25, 0.25]]), f)
    partials = [tokens_linear_forward(x[:, 2 * r:2 * r + 2], w[:, 2 * r:2 * r + 2], None, f) for r in range(2)]
    summed = all_reduce(Cluster(2, gpus_per_node=2), partials, group=ParallelDims(2, tp=2).groups("tp"), tag="g")
    return float(summed[0][0, 0])


def _tp_peak_ratio() -> float:
    """Notebook 13's Llama 3 70B on 256 H100s, ZeRO-3, the same tokens per GPU: rank 0's peak at TP 8 over TP 1."""
    from zerosim.analysis.planner import meta_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models import MetaLlama, read_hf_config, shipped_config
    from zerosim.parallel.data import get_comm_schedule

    llama70 = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-70b")), seq_len=8192, checkpoint="block",
                                    attention="flash")
    hw = Hardware("h100", "nvlink4", "bf16", inter_link="ib_ndr")
    peaks = [meta_step(llama70, 256, 3, hw, get_comm_schedule("fsdp"), "bf16-mixed", micro_batch=(2 * t, 8192),
                       gpus_per_node=8, tp=t, sp=t > 1)[1].cluster.ranks[0].ledger.peak() for t in (1, 8)]
    return peaks[1] / peaks[0]


def _cp_contiguous_ratio() -> float:
    """Notebook 16's causal attention over 4 CP ranks cut contiguously: the last rank's query-key pairs over the
    first's, summed over the ring's hops (parallel/context's blocks, as the time model charges them)."""
    from zerosim.parallel.context import block_shapes, block_work

    def pairs(p):
        return sum(block_work(block_shapes("ring", "contiguous", True, 4, p, j, 8)) for j in range(4))

    return pairs(3) / pairs(0)


def _cp_sp_tokens() -> float:
    """Notebook 16's small Llama (d 16, 16-token sequences) over CP 2 x TP 2 with sequence parallelism: the tokens of
    a sequence GPU 0's first norm keeps as its input, read from its ledger (bytes / (B · d · 2 B of bf16))."""
    import numpy as np

    from zerosim import Cluster, ZeroEngine, get_optimizer
    from zerosim.models import Llama
    from zerosim.parallel.context import ContextParallel
    from zerosim.parallel.tensor import TensorParallel

    small = Llama(vocab=16, d_model=16, n_heads=4, n_kv_heads=2, head_dim=4, n_layers=1, seq_len=16, d_ff=24,
                  attention="flash")
    cp = ContextParallel(small, cp=2, tensor=TensorParallel(small, tp=2, sequence_parallel=True))
    engine = ZeroEngine(cp.model, Cluster(4), 3, get_optimizer("adam"), "bf16-mixed", parallelisms=cp.parallelisms)
    draw = np.random.default_rng(0)
    engine.step(cp.batches(engine.dims, [(draw.integers(0, 16, (2, 16)), draw.integers(0, 16, (2, 16)))]))
    kept = next(e.nbytes for e in engine.cluster.ranks[0].ledger.timeline if e.name == "block0.ln1.block input")
    return kept / (2 * 16 * 2)


@lru_cache(maxsize=1)
def _cp_zigzag_step_percent() -> float:
    """Notebook 16's small Llama (8 heads, 2 K/V heads of 128, 2 layers) at 16,384 tokens over CP 4, causal, ZeRO-3
    on H100s: the zigzag cut's step time on the timeline as a percent of the contiguous cut's."""
    from zerosim import Cluster, ZeroEngine, get_optimizer
    from zerosim.analysis.costs import parse_efficiency
    from zerosim.analysis.timeline import Hardware, TimeModel, simulate
    from zerosim.models import MetaLlama, read_hf_config
    from zerosim.parallel.context import ContextParallel

    shape = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2048, "num_attention_heads": 8,
             "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 32768,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False}
    twin = MetaLlama.from_config(read_hf_config(shape, name="small"), seq_len=16384, checkpoint="block",
                                 attention="flash")
    hw, steps = Hardware("h100", "nvlink4", "bf16"), {}
    for split in ("contiguous", "zigzag"):
        cp = ContextParallel(twin, cp=4, split=split)
        cluster = Cluster(4, backend="meta", trace="call", timeline=False, hosted="all")
        engine = ZeroEngine(cp.model, cluster, 3, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
        engine.step(cp.model.batches(cluster, 1, 16384 // 4))
        costs = TimeModel(parse_efficiency("compiled")).costs(cp.model, (1, 4096), hw,
                                                               cp.position_of(cluster, engine.dims))
        steps[split] = simulate(cluster.trace, hw, costs=costs).step_time
    return 100 * steps["zigzag"] / steps["contiguous"]


def _cp_bf16_merge() -> float:
    """Notebook 16's one-hop merge in bf16 (replay --cp 2): GPU 1's ring output."""
    from zerosim.replay import cp_replay

    return cp_replay("bf16-mixed")["output"][0]


def _offload_host_gb() -> float:
    """Notebook 14's 13B on one V100 with ZeRO-Offload (stage 2, Adam, fp16): the host's ledger at rest, in GB."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.offload import Offload

    model = MetaModel.from_params(13_000_000_000, layers=40)
    _, cluster, _ = measure_stage(model, 1, 2, "adam", "fp16-mixed", parallelisms=(Offload("cpu"),))
    return sum(cluster.ranks[0].ledger_of("host").by_kind().values()) / 1e9


def _torch_ddp_equal() -> float:
    from zerosim.frameworks.torch import compare_ddp, run_torch_ddp

    rows = compare_ddp(run_torch_ddp(3, (16, 32, 8), 3, 0), "gloo")
    return 100 * min(r.equal for r in rows)


QUESTIONS = {q.name: q for q in (
    # -- notebook 01: seed 004, live --
    Question("seed004-fp16-w1", "After the step, what fp16 value does every GPU hold for w1 (its fp32 master is 2.1)?",
             "", _fp16_w1,
             "fp16 keeps 11 significant bits: between 2 and 4 its numbers are 2**-9 = 0.001953125 apart, and the one "
             "nearest the master's 2.0999999046325684 is 2.099609375. Seed 004's '2.1' is the fp32 master's value.",
             wrong=((2.1, "the fp32 master's value as seed 004 prints it: fp16 has no 2.1."),
                    (2.0999999046325684, "the fp32 master itself (2.1 rounded to fp32), not its fp16 copy.")),
             digits=12),
    Question("seed004-stage2-peak", "At stage 2, how many bytes does GPU 0's ledger hold at its peak?", "B",
             lambda: _replay(2).cluster.ranks[0].ledger.peak(),
             "At rest a GPU holds 36 B (W 8 + its gradient shard 4 + master, m, v 8 each). During backward it also "
             "holds the activations it saved (6 B) and one layer's fresh 16-bit gradients (4 B) until their "
             "reduce-scatter: 46 B. Stage 1 peaked at 48 B: the whole gradient (8 B) stays through backward.",
             wrong=((48, "stage 1's peak: there the whole 8 B gradient lives through backward."),
                    (36, "what it holds at rest: the peak adds the saved activations and one layer's fresh gradients."),
                    (40, "the optimizer step's peak (the states and the 8 B fp32 gradient shard), not backward's."))),
    Question("seed004-stage3-sent", "At stage 3 (checkpointing on), how many bytes does GPU 0 put on the wire in one "
             "step?", "B", lambda: _replay(3).cluster.trace.sent_totals(2)[0],
             "Each gather of a layer is that layer's window of the flat buffer, so the rank that owns the layer sends "
             "it all: GPU 0 owns layer 1 (w1, w2: 4 B), gathered three times (forward, its recompute under "
             "checkpointing, backward), 12 B, and sends layer 2's gradients to GPU 1 in its reduce-scatter, 4 B: 16 B. "
             "GPU 1's layer 2 is gathered twice (8 B) and it sends layer 1's gradients (4 B): 12 B. The formula's "
             "3Ψ(N−1)/N = 12 B counts two gathers a layer over equal chunks; the recompute adds a third gather of "
             "layer 1, and its owner sends it whole: 16 and 12 B, 14 B on average.",
             wrong=((12, "GPU 1's bytes, or the formula's 3Ψ(N−1)/N = 3·8·1/2 B: two gathers a layer, averaged "
                         "over equal chunks; here each layer's window lies in one rank's shard."),
                    (24, "3Ψ: every gather and reduce-scatter moves (N−1)/N of the buffer, half of it with N = 2."))),
    # -- notebook 02: the ring and rounding --
    Question("ring-2048", "Rank 0 holds 2048 in each of 4 elements, ranks 1-3 hold 1. After a fp16 ring "
             "reduce-scatter, what does rank 0 own?", "", _ring_2048,
             "Chunk 0's partial sum starts at rank 1: 1 + 1 = 2, + 1 = 3, and rank 0 adds its 2048 last: 2051, "
             "which fp16 cannot hold (its spacing above 2048 is 2); the tie rounds to the even 2052. Chunks 2 and 3 "
             "meet 2048 early and lose their 1s one at a time: 2048.",
             wrong=((2051, "the exact sum: fp16 has no 2051 (spacing 2 above 2048)."),
                    (2048, "what chunks 2 and 3 end at: their partial sum meets 2048 before the 1s."))),
    Question("bf16-spacing", "How far apart are bf16's numbers between 1 and 2?", "", lambda: _ulp("bf16"),
             "bf16 keeps 8 significant bits (7 stored): numbers in [1, 2) are 2**-7 = 0.0078125 apart. An update to "
             "1.0 smaller than half of that is lost.",
             wrong=((_ulp("fp16"), "fp16's spacing (11 significant bits): bf16 trades 3 bits of it for fp32's range."),
                    (_ulp("fp32"), "fp32's spacing."))),
    # -- notebook 03: memory by stage --
    Question("zero-paper-stage1", "The ZeRO paper's model: Ψ = 7.5B on 64 GPUs, K = 12. How many GB per GPU at "
             "ZeRO-1?", "GB", lambda: _states(7.5e9, 64, 1),
             "(2 + 2)Ψ + 12Ψ/N = 30 + 1.41 = 31.4 GB: fp16 weights and gradients stay whole, only the optimizer "
             "states (fp32 master, m, v) are sharded.",
             tolerance=0.01,  # the paper prints one decimal: 31.4
             wrong=((120, "stage 0's 16Ψ: nothing sharded."), (16.6, "ZeRO-2's: the gradients sharded too."),
                    (1.9, "ZeRO-3's 16Ψ/N."))),
    Question("ddp-aggregate", "Seed 001: 7B parameters, plain data parallel (16 B a parameter) on 8 GPUs. How many GB "
             "do all eight GPUs hold together for model states?", "GB", _ddp_aggregate,
             "Every GPU holds the same 112 GB (16 × 7e9 B); eight hold 896 GB, seven of which are copies: after each "
             "step every m, v and master is byte for byte the same on every GPU. That redundancy is what ZeRO removes "
             "(ZeRO-3: 112 GB over all eight together).",
             tolerance=0.001,  # the engine pads the flat buffer to a multiple of N: a few bytes
             wrong=((112, "one GPU's share: the question asks for all eight together."),
                    (14, "ZeRO-3's 16Ψ/N per GPU."))),
    Question("llama7b-zero0-peak", "Llama-2-7B on 8 H100s at ZeRO-0 (bf16, Adam, one 4,096-token sequence per GPU, "
             "block checkpointing): the peak per GPU in GB?", "GB",
             lambda: _decoder_step("llama-2-7b", 8, 0, "bf16-mixed", 4096, "block", "h100-80gb")[0]["peak"] / GB,
             "The model states are 16Ψ = 107.8 GB; the peak comes at the optimizer step, when the fp32 gradient "
             "(4Ψ = 27 GB, the whole buffer at stage 0) is live beside them and the activations are already freed: "
             "134.8 GB, more than an H100's 85.5 GB.",
             tolerance=0.005,
             wrong=((107.8, "16Ψ, the states at rest: the step adds the 4Ψ fp32 gradient."),
                    (110.4, "the states plus the activations' peak: those two never live at the same moment."))),
    # -- notebook 04: activations --
    Question("p-bytes", "Seed 001's 7B-class layer: B = 4, H = 32, L = 2048, fp16. How many bytes does the softmax "
             "output P take in one layer?", "B", _p_bytes,
             "P is B·H·L² = 4·32·2048² = 536,870,912 elements of 2 bytes: 1,073,741,824 B (seed 001's 1.07 GB per "
             "layer), the one term that grows with L².",
             wrong=((536870912, "the element count: fp16 takes 2 bytes each."),
                    (4 * 2048 * 4096 * 2, "B·L·d·2, a linear term's size: P is B·H·L², quadratic in L."))),
    Question("block-extra-flops", "Block checkpointing on seed 001's 7B GPT (B = 4, L = 2048): how much more compute "
             "does a step do, in percent?", "%", _block_extra,
             "The backward of a product costs twice its forward, so a step is 1 forward + 2 = 3 forwards; block "
             "checkpointing runs each block's forward once more (not the embedding's or the head's): a little under "
             "one third more, seed 001's '≈ 1/3'.",
             tolerance=0.03,  # the head and the loss are not recomputed, attention's L² terms weigh differently
             wrong=((100, "a second full step: only the forward is run again, and it is a third of the step."),
                    (50, "half a step: the forward is a third of it, not a half."))),
    # -- notebook 05: time --
    Question("nvlink-allreduce", "A ring all-reduce of 7B fp16 gradients (14 GB) on 8 GPUs over NVLink 4 (900 GB/s "
             "bidirectional, α = 3 µs a step): how many ms?", "ms", _allreduce_ms,
             "A ring sends 2(N−1)/N of the buffer each way, one direction at a time: 2·(7/8)·14 GB / 450 GB/s = 54.4 "
             "ms, plus 2(N−1)·α = 42 µs. Seed 001's 31 ms divides by the bidirectional 900 GB/s and leaves out "
             "(N−1)/N.",
             tolerance=0.02,
             wrong=((31, "seed 001's 2 × 14 / 900: the bidirectional rate, which a ring's one-way sends never see."),
                    (62.2, "2 × 14 GB / 450 GB/s: without the ring's (N−1)/N."))),
    Question("fp32-slowdown", "Llama-2-7B on 8 A100 80GB, ZeRO-3, one 4,096-token sequence: how many times longer is "
             "the simulated step in fp32 than in bf16?", "x", _fp32_slowdown,
             "The A100's plain FP32 runs at 19.5 TFLOP/s against 312 for its 16-bit tensor cores (16×); the "
             "memory-bound parts (the optimizer, the norms) and the communication do not speed up with the format, "
             "so the step is about 13× longer. Seed 002's '2× end to end' is a measured whole run: data loading, "
             "memory-bound kernels, and TF32 tensor cores, which PyTorch may use for fp32 matmuls, none of which is "
             "in this roofline at peak rates.",
             tolerance=0.1,  # the answer is a simulated ratio; 10 % tells a right reasoning from a wrong one
             wrong=((2, "seed 002's measured end-to-end speed-up: this is a roofline at peak rates, no TF32."),
                    (16, "312 / 19.5, the peak rates alone: the memory-bound parts do not scale."))),
    # -- notebook 06: precision --
    Question("largest-scaled-gradient", "fp16's largest value is 65504. With a static loss scale S = 2**16, what is "
             "the largest unscaled gradient that does not overflow?", "", lambda: 65504 / 2.0**16,
             "The scaled gradient g·S must stay at or below 65504: g ≤ 65504 / 65536 = 0.99951171875. Loss scaling "
             "lifts small gradients above fp16's underflow; it is also what pushes large ones to inf (and on to NaN). "
             "Seed 000's 'grad scaling prevents this' [NaNs from overflow] is wrong as stated: a dynamic scaler "
             "detects the overflow, skips the step and lowers S; nothing prevents it.",
             wrong=((65504, "fp16's largest value itself: the gradient is multiplied by S before it is stored."),
                    (1.0, "1: 1 × 2**16 = 65536 is already past 65504, and fp16 rounds it to inf."))),
    # -- notebook 07: exercises --
    Question("ring-step0-chunk", "A ring reduce-scatter on 4 ranks, NCCL's order: which chunk does rank 1 send at "
             "step 0?", "", lambda: (1 - 0 - 1) % 4,
             "The partial sum of chunk c starts at rank c + 1, so at step 0 rank r sends chunk r − 1: rank 1 sends "
             "chunk 0, which ends at rank 0 after N − 1 = 3 steps.",
             wrong=((1, "its own chunk: a rank receives its own chunk's sum last and never sends it."),
                    (2, "chunk r + 1: the ring runs the other way."))),
    # -- notebook 08: many nodes --
    Question("hsdp-rest", "An MLP of Ψ = 280 parameters on 2 nodes × 4 GPUs under HSDP (shard groups of 4, fp16, "
             "Adam): how many bytes does GPU 5 hold at rest?", "B", _hsdp_rest,
             "HSDP shards over its node's 4 GPUs, not all 8: 280/4 = 70 parameters per GPU. FSDP2's recipe keeps the "
             "sharded gradients in fp32 (4 B), so 70 × (2 + 4 + 4 + 8) = 1,260 B.",
             wrong=((1120, "16Ψ/4 with 2-byte gradients: FSDP2 keeps HSDP's sharded gradients in fp32."),
                    (560, "FULL_SHARD's 16Ψ/8: HSDP shards over a node, not the world."))),
    # -- notebook 09: will it fit --
    Question("llama3-8b-zero3-states", "Llama-3-8B (8,030,261,248 parameters) on 8 GPUs at ZeRO-3: GB of model "
             "states per GPU?", "GB", lambda: _states(8_030_261_248, 8, 3),
             "16Ψ/N = 16 × 8.03e9 / 8 = 16.06 GB: every one of the 16 bytes a parameter is sharded at stage 3. "
             "Activations come on top, and at 4,096 tokens they are most of the memory.",
             tolerance=0.005,
             wrong=((lambda: _states(8_030_261_248, 8, 0), "16Ψ, stage 0's: nothing sharded."),
                    (lambda: _states(8_030_261_248, 8, 1), "ZeRO-1's (2 + 2)Ψ + 12Ψ/N."))),
    # -- notebook 10: fewer bits --
    Question("qwz-int8-one", "DeepSpeed's symmetric int8 quantizer on one group [1.0, -0.5, 0.25, 0.3]: the scale is "
             "2^8 / (2·absmax). What integer does 1.0 become?", "", _qwz_one,
             "The scale is 256 / 2 = 128, so 1.0 becomes 128 — one past int8's largest, 127: it clamps. Every "
             "group's largest element is clamped so, which is why qwZ shrinks the weights a little (127/128).",
             wrong=((128, "1.0 × 128 before the clamp: int8 stops at 127."),
                    (255, "an unsigned range: the symmetric quantizer keeps a sign, -128..127."))),
    # -- notebook 11: fp16 against bf16 --
    Question("fp16-v-zero", "Adam's first step stores v = (1 − β₂)·g² with β₂ = 0.999. Below which |g| is that 0 in "
             "fp16?", "", lambda: math.sqrt(2.0**-25 / 0.001),
             "fp16's smallest subnormal is 2^-24; anything at or below half of it rounds to 0. (1 − β₂)·g² ≤ 2^-25 "
             "gives |g| ≤ √(2^-25 / 0.001) ≈ 0.00546: every gradient smaller than that gets v = 0, and the update "
             "divides by √0 + ε.",
             tolerance=0.02,
             wrong=((math.sqrt(2.0**-14 / 0.001), "fp16's smallest *normal* (2^-14): subnormals still hold v, down "
                     "to 2^-24."),
                    (2.0**-24, "the smallest subnormal itself: it bounds v = (1 − β₂)·g², not g."))),
    # -- notebook 12: Muon on sharded state --
    Question("muon-distributed-ranks", "Notebook 12's MLP on 4 ranks at ZeRO-3: matrix 0.w (12 × 8) lies on ranks 0 "
             "and 1. With the `distributed` plan, how many ranks run Newton–Schulz on it?", "",
             lambda: _ns_ranks("distributed"),
             "The distributed plan orthogonalises a matrix on the ranks that hold its pieces (Moonshot's): the two "
             "holders each run it on the gathered matrix and keep their own rows, so nothing is sent back.",
             wrong=((1, "the owner plan's: one rank computes and sends the others their slices."),
                    (4, "the gather plan's, the naive twin: every rank gathers and computes every matrix."))),
    # -- notebook 13: tensor parallelism --
    Question("tp-fp16-tie", "fp16, W's row [1024, 0.5, 0.25, 0.25] times x = [1, 1, 1, 1], the row cut over a TP group "
             "of 2 (two columns each): each GPU rounds its partial product to fp16, then the ring adds the two. What "
             "number comes out?", "", _tp_tie,
             "GPU 0's 1024 + 0.5 = 1024.5 lies halfway between fp16's neighbours 1024 and 1025 (their spacing is 1 "
             "there) and a tie rounds to the even one: 1024. GPU 1's 0.25 + 0.25 = 0.5 is exact, and the ring's "
             "1024 + 0.5 ties again: 1024. One unsplit GEMM keeps an fp32 accumulator, rounds once, and gives 1025.",
             wrong=((1025, "one GEMM's answer (and float64's): a single fp32 accumulator rounds once at the end; TP "
                           "rounds each GPU's partial and then the ring's add."),
                    (1024.5, "fp16 holds no 1024.5: between 1024 and 2048 its numbers are 1 apart."))),
    Question("tp-peak-ratio", "Llama 3 70B on 256 H100s at ZeRO-3, the same tokens per GPU (micro-batch 2·TP "
             "sequences of 8,192): rank 0's peak at TP 8 divided by its peak at TP 1?", "x", _tp_peak_ratio,
             "About 1: ZeRO-3 already holds 16Ψ/N of model states per GPU whatever the TP degree (each TP slice is "
             "Ψ/T, cut over N/T ranks), and the activations per GPU stay too (TP cuts a sequence's activations T "
             "ways, and each TP group sees T times the sequences). TP buys a smaller data-parallel degree and "
             "shorter sequences per GPU, not memory, at a fixed number of tokens per GPU.",
             tolerance=0.01,  # the two peaks differ by 2.4 MB in 34.6 GB; what is taught is "the same"
             wrong=((0.125, "1/T: TP cuts the weights T ways, but ZeRO-3 had already cut them over all N GPUs."),
                    (8, "T times the activations: each TP group sees T times the sequences, and TP cuts each T "
                        "ways."))),
    # -- notebook 14: offload --
    Question("offload-host-gb", "13B parameters on one V100 with ZeRO-Offload (ZeRO-2, Adam, fp16 with an fp32 master, "
             "the optimizer on the host as DeepSpeed runs it): how many GB does the host hold at rest?", "GB",
             _offload_host_gb,
             "16Ψ = 208 GB: the fp16 gradient the device sends (2Ψ), the fp32 master (4Ψ), Adam's two fp32 moments "
             "(8Ψ) and DeepSpeed's pinned fp16 copy of the parameters it sends back (2Ψ). The device keeps only the "
             "fp16 parameters, 2Ψ = 26 GB: offload moves the 16 bytes a parameter from the GPU to the host, it does "
             "not make them fewer.",
             wrong=((156, "the master and Adam's moments alone, 12Ψ: the host also keeps the fp16 gradient it is "
                          "sent and the pinned fp16 copy it sends back."),
                    (26, "the device's share, 2Ψ: that is what stays on the GPU."))),
    # -- notebook 16: context parallelism --
    Question("cp-contiguous-ratio", "Causal attention over a CP group of 4, the sequence cut contiguously (rank p "
             "holds chunk p): how many times the first rank's query-key pairs does the last rank compute over the "
             "ring's hops?", "x", _cp_contiguous_ratio,
             "7 = 2C − 1: a chunk attends to its own keys (the diagonal block, half its pairs under the mask) and to "
             "every earlier chunk's in full, so rank p computes p + ½ chunks' worth; the last 3.5, the first 0.5. The "
             "zigzag split cuts the sequence in 2C chunks half as long and gives rank p chunks p and 2C − 1 − p, "
             "which attend to p + ½ and 2C − 1 − p + ½ of them: 2C on every rank.",
             wrong=((4, "C: the last rank sees C chunks of keys, but the first sees half of one, not one (its "
                        "diagonal block is masked above)."),
                    (1, "the same work everywhere: true of the zigzag split, not of the contiguous one."))),
    Question("cp-zigzag-step-percent", "The small Llama below (8 heads, 2 layers) at 16,384 tokens over a CP group "
             "of 4, causal, ZeRO-3 on H100s: the zigzag cut's step time on the timeline, as a percent of the "
             "contiguous cut's?", "%", _cp_zigzag_step_percent,
             "About 70 %: the ring waits for its busiest GPU at every hop, so the contiguous cut's step runs at the "
             "last GPU's 3.5 chunks' worth of attention, the zigzag's at every GPU's 2; but attention is only part "
             "of the step (the MLPs, norms, the optimizer and the exposed communication take the same time either "
             "way), so the step shrinks by less than attention's 2 / 3.5.",
             # a guess within 10 % reads the balance right: the number itself moves with the time model's calibration
             tolerance=0.1,
             wrong=((100, "the same step: the total work is the same, but the ring waits for the busiest GPU at "
                          "every hop, and the zigzag's busiest does 2 chunks' worth, the contiguous cut's 3.5."),
                    (57.142857, "2 / 3.5 = 57 %, true of attention alone: the rest of the step does not change."))),
    Question("cp-sp-tokens", "A Llama's 16-token sequences over CP 2 beside TP 2 with sequence parallelism (4 GPUs = "
             "tp 2 x cp 2): how many tokens of each sequence does GPU 0's first norm keep as its input?", "tokens",
             _cp_sp_tokens,
             "4 = L / (C·T): CP gives each GPU 16 / 2 = 8 tokens of every sequence, and sequence parallelism cuts "
             "those 8 again over the 2 GPUs of its TP group for the norms and the residual stream (Megatron-Core cuts "
             "the batch over CP, then scatters the embedding's output over TP). Attention still runs on the 8, on "
             "half the heads: TP all-gathers the shards before the QKV GEMM.",
             wrong=((8, "L / C, CP's cut alone: sequence parallelism cuts a GPU's tokens again over its TP group."),
                    (16, "the whole sequence: CP and SP each cut it, 2 × 2 ways."))),
    Question("cp-bf16-merge", "bf16, two GPUs, one token each: GPU 1's query scores its own key 0 (value 1) and the "
             "key that arrives from GPU 0, 1 (value 1.015625). The ring merges the two steps as Transformer Engine "
             "does: what is GPU 1's output?", "", _cp_bf16_merge,
             "1.015625: the merge rounds twice. lse = 1 + log1p(e⁻¹) = 1.3132617 (fp32); the first step's term "
             "1 · e^(0 − lse) = 0.2689414 is stored in bf16 as 0.26953125 (rounded up), and adding the second's "
             "1.015625 · e^(1 − lse) = 0.7424... gives 1.0120126, past the midpoint 1.01171875 between bf16's "
             "1.0078125 and 1.015625. One pass of flash attention keeps an fp32 accumulator and gives 1.0078125, "
             "the float64 value's nearest (1.0114228).",
             wrong=((1.0078125, "one pass of flash attention's answer (and float64's nearest bf16): it rounds once; "
                                "the ring stored the first step's term in bf16 before adding the second."),
                    (1.0114228, "float64's value: bf16 has no such number (its spacing at 1 is 2⁻⁷)."))),
    # -- notebook 15: real torch --
    Question("torch-ddp-equal", "Real DDP on 3 gloo processes, 3 steps: in the worst step, what percent of the reduced "
             "gradient's elements does zerosim's `ddp` recipe, adding in gloo's order, reproduce bit for bit?", "%",
             _torch_ddp_equal,
             "Every one: given torch's own local gradients, the reduction is the same fp32 adds in the same order "
             "(gloo's ring over its segments, then DDP's division by N), and IEEE arithmetic is deterministic: the "
             "same operations in the same order give the same bits. Bits differ only where the order or the operation "
             "differs — a ring with other chunks, NumPy's matmuls against MKL's, a sqrt rounded another way.",
             wrong=((99, "'almost all': floating point is not random; the same adds in the same order agree in every "
                         "bit."),
                    (0, "'never bit-exact across implementations': it is, wherever they do the same operations in the "
                        "same order.")),
             needs="torch"),
) + QUESTIONS_STEP + QUESTIONS_MEMORY + QUESTIONS_TIME + QUESTIONS_PIPELINE}

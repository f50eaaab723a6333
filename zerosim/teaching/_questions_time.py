"""The prediction questions of the notebooks on time and on fewer bits (05 overlap, 10 ZeRO++ and fp8) and on precision
(06 the lab, 11 fp16 against bf16): one per section, each computing its answer from zerosim, as _questions.py's do.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from zerosim.teaching._predict import Question


def _prefetch_params_peak() -> float:
    """Four equal units of 272 parameters on 4 ranks, ZeRO-3, FSDP's one-ahead prefetch: rank 0's params peak."""
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression
    from zerosim.parallel.data import CommSchedule

    equal = [16, 16, 16, 16, 16]
    c = Cluster(4)
    ZeroEngine(MLP(equal), c, 3, Adam(lr=1e-3), "fp16-mixed", comm=CommSchedule.fsdp(forward_prefetch=True)).step(
        make_regression(np.random.default_rng(0), 4, 2, equal))
    return c.ranks[0].ledger.peak("params")


def _buckets_of_llama7b() -> float:
    """Llama-7B by module at ZeRO-2 on 64 ranks with reduce_bucket_size 5e8: its gradient reduce-scatter calls."""
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import meta_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule

    modules = MetaModel.from_preset(get_preset("llama-7b"), unit="module")
    _, eng = meta_step(modules, 64, 2, Hardware("h100", "ib_ndr", "fp16"), CommSchedule(reduce_bucket_size=500_000_000),
                       tokens=8192)
    return sum(c.purpose == "reduce grads" for c in eng.cluster.trace.calls)


def _n_star() -> float:
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import latency_bound_ranks
    from zerosim.analysis.timeline import Hardware
    from zerosim.models.meta import MetaModel

    gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    return latency_bound_ranks(gpt3.largest_layer, 20480, Hardware("h100", "ib_ndr", "fp16"))


def _flushed_s1() -> float:
    """Notebook 06's MLP, inputs scaled by 2**-10: % of weight gradients 0 in fp16 (S = 1) but not in fp32."""
    from zerosim.analysis.numerics import flushed_fraction, one_step_gradient
    from zerosim.models import make_regression
    from zerosim.precision import get_precision

    widths = [16, 64, 64, 4]
    tiny = [(x * np.float32(2.0**-10), t * np.float32(2.0**-10))
            for x, t in make_regression(np.random.default_rng(3), 2, 16, widths)]
    g32 = one_step_gradient(widths, tiny, get_precision("fp32"))
    return 100 * flushed_fraction(one_step_gradient(widths, tiny, get_precision("fp16-mixed")), g32)


def _clip_coef() -> float:
    """torch's clip_grad_norm_ coefficient, as zerosim's clipping computes it: max_norm 1 for a global norm of 4."""
    from zerosim.parallel.data import clip_coefficient

    return float(clip_coefficient(4.0, 1.0))


def _fsdp2_six() -> float:
    from zerosim.analysis.numerics import recipe_average
    from zerosim.precision import MixedPrecision

    six = [np.float16([3 * 2.0**-24])] * 6
    return float(recipe_average(six, MixedPrecision("fp16", reduction="fsdp2"))[0] / 2.0**-24)


def _snr_limit() -> float:
    from zerosim.analysis.numerics import adam_snr

    r = adam_snr()
    i = int(np.argmin(np.abs(np.asarray(r.snr) - 1.0)))
    return float(r.limit[i])


@lru_cache(maxsize=1)
def _gather_errors() -> dict:
    """Notebook 10's GPT (the copy task's, 3,600 parameters) gathered by each wire: relative RMS error, in percent,
    against the bf16 wire."""
    from zerosim.collectives.quantized import naive_fp8_all_gather, naive_qwz_all_gather
    from zerosim.models import GPT
    from zerosim.precision import cast

    gpt = GPT(6, 16, 2, 1, 6)
    master = gpt.init_params(np.random.default_rng(1)).astype(np.float32)
    pieces32 = np.array_split(master, 4)
    pieces16 = [cast(p, "bf16") for p in pieces32]
    plain = np.concatenate(pieces16).astype(np.float64)

    def rel(a):
        a = np.asarray(a, np.float64)
        return 100 * math.sqrt(np.mean((a - plain) ** 2) / np.mean(plain**2))

    return {"qwz": rel(naive_qwz_all_gather(pieces16, 64, "bf16")[0]),
            "fp8": rel(naive_fp8_all_gather(pieces32, "bf16")[0])}


def _loco_ratio() -> float:
    """qgZ int4 on the same gradients 64 times (8 ranks, groups of 4): the averaged error without LoCo over with it."""
    from zerosim.cluster import Cluster
    from zerosim.collectives.quantized import LocoState, all_to_all_quant_reduce

    rng = np.random.default_rng(4)
    grads = [(rng.standard_normal(1024) * 0.01).astype(np.float16) for _ in range(8)]
    exact = np.sum([g.astype(np.float64) for g in grads], axis=0) / 2
    out = {}
    for name, loco in (("plain", None), ("loco", LocoState(err_beta=0.8, reset_T=1024))):
        total = np.zeros_like(exact)
        for _ in range(64):
            total += np.concatenate(all_to_all_quant_reduce(Cluster(8), grads, (32, 32), 4, loco=loco, key="g"))
            total -= exact
        out[name] = math.sqrt(np.mean((total / 64) ** 2) / np.mean(exact**2))
    return out["plain"] / out["loco"]


def _qwz_wire_share() -> float:
    """qwZ's int8 payload and one fp32 scale per group of 64, over the bf16 bytes of the same 64·k weights."""
    from zerosim.precision.quantize import quantize

    x = np.float16(np.linspace(-1, 1, 64 * 16))
    q = quantize(x, bits=8, groups=16)
    return (q.payload.nbytes + np.asarray(q.scales, np.float32).nbytes) / (2 * x.size)


def _fp8_sent() -> float:
    """A 4-rank ZeRO-3 step of a small GPT with torchao's fp8 all-gather: bytes rank 0 sends gathering weights."""
    from zerosim import Cluster, ZeroEngine, get_optimizer
    from zerosim.models import GPT, make_sequence_task
    from zerosim.parallel.data.zeropp import Wire

    gpt = GPT(6, 16, 2, 1, 6)
    out = {}
    for name, wire in (("plain", None), ("fp8", Wire(fp8_all_gather="torchao"))):
        c = Cluster(4)
        engine = ZeroEngine(gpt, c, 3, get_optimizer("adam", lr=1e-2), "bf16-mixed",
                            params=gpt.init_params(np.random.default_rng(1)), wire=wire)
        engine.step(make_sequence_task(np.random.default_rng(0), 4, 4, 3, 6, "copy"))
        out[name] = sum(c.trace.bytes_sent(0, call=x.call) for x in c.trace.calls if x.purpose == "gather params")
    return out["fp8"] / out["plain"]


def _qwz_calls() -> float:
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import meta_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data.zeropp import Wire

    gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    _, engine = meta_step(gpt3, 1024, 3, Hardware("h100", "ib_ndr", "fp16"), None, "fp16-mixed", 2048,
                          wire=Wire(zero_quantized_weights=True, weight_groups=2048))
    return sum(x.purpose == "gather params" for x in engine.cluster.trace.calls)


def _fmt(name: str, field: str) -> float:
    from zerosim.precision import get_format

    return float(getattr(get_format(name), field))


def _gpt_underflow_step1() -> float:
    """The copy-task GPT (notebook 11) in fp32, its first step: % of weight gradients that are 0 in fp16 at S = 1."""
    from zerosim import Cluster, ZeroEngine, get_optimizer
    from zerosim.analysis.numerics import backward_values, flushed_share
    from zerosim.models import GPT, make_sequence_task

    gpt = GPT(6, 16, 2, 1, 6)
    data = make_sequence_task(np.random.default_rng(0), 400, 16, 3, 6, "copy")
    cluster = Cluster(2, keep_values=True)
    engine = ZeroEngine(gpt, cluster, 2, get_optimizer("adam", lr=1e-2), "fp32",
                        params=gpt.init_params(np.random.default_rng(1)))
    engine.step(data[0:2])
    return 100 * flushed_share(backward_values(cluster.trace, "grads"), "fp16")


def _copy_task_accuracy() -> float:
    """The copy-task GPT in fp16-mixed without loss scaling, 100 steps on 2 ranks: its held-out accuracy."""
    from zerosim.train import TrainConfig, train

    r = train(TrainConfig(model="gpt", task="copy", precision="fp16-mixed", steps=100, ranks=2, eval_every=100))
    return dict(r.accuracy)[100]


QUESTIONS_TIME = (
    # -- notebook 05: time --
    Question("prefetch-params-peak", "Four equal units of 272 fp16 parameters on 4 ranks at ZeRO-3 (each rank's shard: "
             "544 B). With FSDP's one-unit-ahead prefetch, what is rank 0's peak of parameter bytes?", "B",
             _prefetch_params_peak,
             "The shard (544 B) plus the unit running (544 B) plus the next one, gathered ahead (544 B): 1,632 B. "
             "Prefetch hides a gather behind compute by holding one more unit.",
             wrong=((1088, "one gathered unit: prefetch holds the next one while this one runs."),
                    (2176, "the whole model gathered: ZeRO-3 never holds more than the units in flight."))),
    Question("llama7b-buckets", "Llama-7B's 6.7B gradients at ZeRO-2, reduced in buckets of 5·10⁸ elements "
             "(DeepSpeed's default): how many reduce-scatter calls?", "", _buckets_of_llama7b,
             "A bucket is sent when the next module's gradients would overflow it: 6.7B / 5·10⁸ is 13.5, and modules "
             "do not fill buckets exactly, so the count is a few more than 14.",
             wrong=((1, "one call for the whole gradient: that is the unbucketed stage 0/1 schedule."),
                    (291, "one call a module: that is no bucketing at stage 2."))),
    Question("n-star", "Seed 003: ZeRO-3's overlap fails past some N. For GPT-3 (a block of 1.81B parameters), 20,480 "
             "tokens a rank on H100s over InfiniBand NDR: at what N does a block's gather stop hiding behind its "
             "compute?", "", _n_star,
             "A gather's bandwidth term shrinks toward 2Φ/β as N grows, but its latency grows as (N − 1)·α: once "
             "(N − 1)·α plus the bytes exceeds the block's compute, the gather shows. N* = 1 + 2Φ(T/R − 1/β)/α.",
             tolerance=0.01,
             wrong=((512, "seed 003's 'DP > 512': the point depends on the tokens a rank computes per block."),
                    (1024, "the largest run here: the crossover comes well before."))),
    # -- notebook 06: the precision lab --
    Question("flushed-s1", "One backward of the MLP on inputs scaled by 2**-10, in fp16 without loss scaling: what "
             "percent of the weight gradients are 0 that fp32 keeps?", "%", _flushed_s1,
             "Most of these gradients lie below 2**-25, half of fp16's smallest subnormal: they round to 0. Scaling "
             "the loss by 2**16 lifts every one of them into fp16's range (Micikevicius et al.'s Figure 3).",
             tolerance=0.01,
             wrong=((0, "none: fp16 has no number below 2**-24, and these gradients are smaller."),
                    (100, "all: the larger ones stay above fp16's subnormals."))),
    Question("clip-coef", "Clipping by the global norm: the gradients' norm over all shards is 4 and max_norm 1. By "
                          "what "
             "factor are they multiplied (torch's clip_grad_norm_)?", "", _clip_coef,
             "clip_coef = max_norm / (norm + 1e-6) = 1 / 4.000001 ≈ 0.25; the norm is one number over every rank's "
             "shard (an all-reduce of the squares), so every shard is scaled alike.",
             tolerance=1e-6,
             wrong=((4, "the norm itself: clipping divides by it."), (1, "no clipping: the norm exceeds max_norm."))),
    Question("fsdp2-six", "Six ranks each hold 3·2**-24 in fp16. FSDP2 divides by 4 before the reduction and by 1.5 "
             "after: what is the average, in units of 2**-24?", "", _fsdp2_six,
             "3·2**-24 / 4 = 0.75·2**-24 is below fp16's smallest subnormal and rounds up to 1·2**-24; six of them "
             "sum to 6, and / 1.5 gives 4: not the exact average, 3.",
             wrong=((3.0, "the exact average: the pre-divide rounds each rank's 0.75 up to 1 first."),
                    (0.0, "0: 0.75·2**-24 rounds to the nearest subnormal, 2**-24, not down to 0."))),
    Question("snr-limit", "A gradient whose mean and spread are equal (signal-to-noise 1): what does Adam's m̂/√v̂ "
             "approach?", "", _snr_limit,
             "m̂ estimates the mean μ and v̂ the second moment μ² + σ²: m̂/√v̂ → μ/√(μ² + σ²) = SNR/√(1 + SNR²), "
             "1/√2 ≈ 0.707 at SNR 1. Adam's step shrinks where the gradient is noisy.",
             tolerance=0.02,  # the run's sampled limit at the SNR nearest 1
             wrong=((1, "the clean-gradient limit, |μ|/|μ|: noise lowers it."), (0.5, "SNR/(1 + SNR): the square "
                                                                                    "root is missing."))),
    # -- notebook 10: fewer bits --
    Question("qwz-gather-error", "Gathering a small GPT's weights with qwZ's int8 (groups of 64) instead of bf16: the "
             "relative RMS error against the bf16 wire, in percent?", "%", lambda: _gather_errors()["qwz"],
             "Each group's step is absmax/127: about 0.4 % of the group's largest value, half of that per element "
             "at most; relative to the weights' RMS that is a fraction of a percent, larger than bf16's own rounding.",
             tolerance=0.01,
             wrong=((lambda: _gather_errors()["fp8"], "fp8's error: e4m3 keeps 3 significant bits, int8 in a small "
                                                     "group about 7."),
                    (0, "none: int8 cannot hold bf16's values exactly."))),
    Question("loco-ratio", "qgZ's int4 reduction of the same gradients 64 times: its averaged error without LoCo, over "
             "its averaged error with LoCo's feedback?", "x", _loco_ratio,
             "Without feedback the same rounding error repeats every step and its average never shrinks; LoCo adds "
             "each step's error to the next, so the errors cancel over steps and the average falls: by a large "
             "factor after 64.",
             tolerance=0.05,
             wrong=((1, "no difference: feedback makes the errors cancel over steps."),
                    (64, "1/t exactly: the fed-back error is itself quantized."))),
    Question("e4m3-max", "fp8 e4m3, the format torchao's fp8 all-gather sends: its largest finite value?", "",
             lambda: _fmt("fp8_e4m3", "max"),
             "e4m3 has 4 exponent bits and 3 of significand, and spends no exponent on infinities: 1.75 · 2**8 = 448. "
             "A tensor is scaled so its largest magnitude lands near 448 before the cast, and the scale travels "
             "with it.",
             wrong=((57344, "e5m2's largest: its fifth exponent bit buys range, not precision."),
                    (65504, "fp16's largest."))),
    Question("qwz-wire-share", "qwZ sends int8 weights and one fp32 scale per group of 64: what fraction of the bf16 "
             "bytes is that?", "", _qwz_wire_share,
             "64 bytes of integers plus 4 of scale, against 128 bytes of bf16: 68/128 = 0.53.",
             wrong=((0.5, "the integers alone: each group also sends a 4-byte scale."),
                    (0.25, "int4's: qwZ's weights are int8."))),
    Question("fp8-sent-share", "A small GPT at ZeRO-3 with torchao's fp8 all-gather: rank 0's bytes sent gathering "
             "weights, over the bf16 gather's?", "x", _fp8_sent,
             "e4m3 is one byte against bf16's two: half, plus the amax all-reduce that precomputes each unit's scale "
             "(4 bytes a unit a rank), so a little over 0.5.",
             tolerance=0.001,
             wrong=((0.5, "the payload alone: the scales' amax all-reduce adds a few bytes."),
                    (0.25, "an int4 wire's: fp8 is a byte."))),
    Question("qwz-calls", "GPT-3 175B at ZeRO-3 on 1,024 GPUs with qwZ: how many gather calls does a step make (198 "
             "unquantized)?", "", _qwz_calls,
             "DeepSpeed's quantized gather sends the integers and the scales as two all-gathers: twice the 198 "
             "gathers of 99 units (forward and backward), 396.",
             wrong=((198, "one call a gather: the scales travel in a call of their own."),
                    (99, "one a unit: each unit is gathered in forward and again in backward."))),
    # -- notebook 11: fp16 against bf16 --
    Question("fp16-smallest-normal", "fp16's smallest normal number (seed 001 calls it '6e-5')?", "",
             lambda: _fmt("fp16", "smallest_normal"),
             "fp16's exponent has 5 bits, bias 15: the smallest normal is 2**-14 ≈ 6.1e-5. Below it fp16 still holds "
             "subnormals down to 2**-24, with fewer significant bits.",
             wrong=((2.0**-24, "the smallest subnormal: normals stop at 2**-14."),
                    (2.0**-126, "fp32's (and bf16's) smallest normal."))),
    Question("gpt-underflow-step1", "The copy-task GPT, run in fp32, at its first step: what percent of its weight "
             "gradients would be 0 in fp16 without loss scaling?", "%", _gpt_underflow_step1,
             "Its gradients at step 1 are mostly above fp16's subnormal range: a small share is lost. Unlike the "
             "scaled-down MLP of notebook 06, this model barely needs a loss scale, which the next runs confirm.",
             tolerance=0.05,
             wrong=((0, "none: a few gradients at step 1 are below 2**-25."), (50, "half: most are larger."))),
    Question("copy-task-fp16", "The copy-task GPT in fp16-mixed without loss scaling, 100 steps on 2 ranks: its "
                               "held-out "
             "accuracy?", "", _copy_task_accuracy,
             "1.0: this model's gradients stay in fp16's range, so it learns to copy as fp32 does. What separates the "
             "formats here is where the optimizer keeps its state (section 4).",
             wrong=((0.2, "chance (one in five): it does learn."), (0, "nothing learned: fp16 compute trains "
                                                                      "this model."))),
)

"""Predicted against measured: zerosim run on every published point it carries (analysis/costs/_validation_points.py).

    rows = validate()                      # every point: conditions, source, measured, predicted, error
    factors = fit()                        # the framework factors from the calibration points alone

Each point runs the meta engine at its conditions (its model's data-less twin with the run's checkpointing and
kernels; ZeRO-3 with FSDP's schedule, bf16 with an fp32 master and the run's reduce format; the GPU's rates; NVLink
within a node and the run's network across) and the timeline under the point's efficiency preset: one micro-step
simulated, K micro-steps by the line through K = 1 and 2 (sweep.step_time). Predicted tokens per second per GPU:
the job's tokens / step / GPUs (analysis/costs/_throughput.py). Memory: rank 0's ledger peak is what PyTorch would
allocate; the reserve model (costs/_overheads.py, `reserved`) adds what its caching allocator keeps on top, the figure
torchtitan logs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import median

from zerosim._collector import fewer_collections
from zerosim._dataclass import dataclass
from zerosim.analysis.costs import (
    ALLOCATOR_RESERVE,
    FRAMEWORK,
    EFFICIENCY_PRESETS,
    POINTS,
    TREND,
    config_of,
    get_gpu,
    memory_point,
    mfu,
    model_flops_per_token,
    reserved,
    tokens_per_s_per_gpu,
)
from zerosim.analysis.planner._jobs import check_jobs, in_order
from zerosim.analysis.planner._sweep import meta_step, run_costs, step_time, step_time_of, written_second
from zerosim.analysis.timeline import Hardware, TimeModel

GIB = 1 << 30


@dataclass(frozen=True)
class Prediction:
    """zerosim's numbers for one point, beside the measured ones."""

    point: object  # a validation_points.Point
    tokens_per_s: float  # predicted, per GPU
    step_s: float
    compute_s: float
    exposed_s: float
    allocated: int  # rank 0's ledger peak, bytes
    reserved: int  # with the allocator's reserve, bytes
    mfu: float  # predicted MFU (torchtitan's model FLOPs, analysis/costs/_throughput.py) on the GPU's dense peak
    measured_mfu: float  # the measured run's, counted the same way
    measured_tokens_per_s: float  # the point's, or its published model TFLOP/s over the one FLOPs count

    @property
    def error(self) -> float:
        """predicted / measured − 1 for tokens per second per GPU."""
        return self.tokens_per_s / self.measured_tokens_per_s - 1

    @property
    def memory_error(self) -> float | None:
        m = self.point.memory_gib
        return None if m is None else self.reserved / GIB / m - 1


def _model(point):
    from zerosim.models.gpt import MetaGPT, strategy_options
    from zerosim.models.hf import read_hf_config
    from zerosim.models.llama import MetaLlama

    config = read_hf_config(config_of(point), name=point.model)
    twin = MetaLlama if config.layout == "llama" else MetaGPT
    return config, twin.from_config(config, point.seq_len, kernels=point.kernels, loss=point.loss,
                                    **strategy_options(point.strategy))


@fewer_collections()  # each point's runs keep ~10^5 objects alive a while, as the planner's do
def predict(point, framework: float | None = None, reserve: float = ALLOCATOR_RESERVE) -> Prediction:
    """zerosim's prediction for `point` (framework: the preset's calibrated factor unless given)."""
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.parallel.data.zeropp import Wire
    from zerosim.precision import MixedPrecision

    config, model = _model(point)
    efficiency = EFFICIENCY_PRESETS[point.preset]
    if framework is not None:
        efficiency = replace(efficiency, framework=framework)
    time_model = TimeModel(efficiency, point.fp8, point.loss)
    gpu = get_gpu(point.gpu)
    nodes = point.gpus > point.gpus_per_node
    hw = Hardware(gpu.device, point.links[0], "bf16", inter_link=point.links[1] if nodes else None)
    precision = MixedPrecision(compute="bf16", master="fp32", reduce="fp32" if point.reduce_fp32 else None)
    wire = Wire(fp8_all_gather="torchao") if point.fp8_all_gather else None
    per_node = point.gpus_per_node if nodes else None
    micro, comm = (point.micro_batch, point.seq_len), get_comm_schedule(point.comm)
    spec = spec_of(point)
    # as the planner's rows: a pipeline's step of M micro-batches run at its line's first point (or whole: costs
    # memory_point), its second point writing this run's records again; the data-parallel step's one micro-step, then
    # the line through K = 1 and 2 (sweep.step_time), K = 2 written from the K = 1 run where its micro-step repeats
    pipeline = spec.pp > 1
    K = memory_point(spec, point.accumulation) if pipeline else 1
    result, engine = meta_step(model, point.gpus, point.stage, hw, comm, precision, optimizer="adamw",
                               micro_batch=micro, accumulation_steps=K, wire=wire, gpus_per_node=per_node,
                               time_model=time_model, spec=spec)
    allocated = max(r.ledger.peak() for r in engine.cluster.ranks)  # a pipeline's: its largest stage's
    two = (written_second(engine, hw, run_costs(engine, time_model, hw, spec.micro(*micro)))
           if not pipeline and K < point.accumulation else None)
    t = step_time(model, point.gpus, point.stage, hw, comm, precision, "adamw", micro, point.accumulation,
                  first=step_time_of(result, K), time_model=time_model, gpus_per_node=per_node, wire=wire, spec=spec,
                  second=two, **({"records_from": engine} if pipeline else {}))
    engine.cluster.let_go()  # its peak and records read: the run goes with its last reference (_plan.py `let_go`)
    # the one definition (costs/_throughput.py): a TP (and pipeline) group's GPUs share a batch rank's B·L·K tokens
    tps = tokens_per_s_per_gpu(spec.dims(point.gpus), point.micro_batch * point.seq_len * point.accumulation, t.step)
    peak = hw.device.rate("bf16")
    measured = point.tokens_per_s if point.model_tflops is None else (  # a source that publishes FLOP/s per GPU
        point.model_tflops * 1e12 / model_flops_per_token(config, point.seq_len))
    return Prediction(point, tps, t.step, t.compute, t.exposed, allocated, reserved(allocated, reserve),
                      mfu(tps, config, point.seq_len, peak), mfu(measured, config, point.seq_len, peak), measured)


def spec_of(point):
    """The ParallelSpec a point runs beside data parallelism: its TP (with SP, async TP and the framework's layout),
    its context parallelism and its pipeline."""
    from zerosim.parallel import ParallelSpec

    return ParallelSpec(tp=point.tp, sp=point.sp, tp_layout=point.tp_layout if point.tp > 1 or point.sp else None,
                        async_tp=point.async_tp, cp=point.cp, cp_style=point.cp_style, cp_split=point.cp_split,
                        pp=point.pp, pp_schedule=point.pp_schedule, virtual_stages=point.virtual_stages,
                        pp_split=point.pp_split)


def validate(points=POINTS, factors: dict | None = None, jobs=1, progress=None) -> list:
    """A Prediction for every point, with the calibrated framework factors (or `factors`, by preset). `jobs`: the
    worker processes the points are predicted on, each point a piece of its own (_jobs.py: the same predictions in less
    wall time; "auto": every core; 1, the default: this process); `progress(point)` after each, in order."""
    factors, points = FRAMEWORK if factors is None else factors, tuple(points)
    out = []
    longest = [i for i, point in enumerate(points) if point.pp > 1]  # the pipelines': a third of the CPU, listed last
    for point, made in zip(points, in_order(lambda i: predict(points[i], factors[points[i].preset]), len(points),
                                            check_jobs(jobs), first=longest)):
        out.append(made)
        if progress is not None:
            progress(point)
    return out


def fit(points=POINTS, low: float = 0.2, high: float = 1.5, tolerance: float = 1e-4) -> dict:
    """{preset: framework factor} from the calibration points alone: the factor minimising the sum over that
    preset's calibration points of log²(predicted / measured), found by golden-section search on [low, high].

    Least squares in log space weighs each point by how much the factor moves it: a point whose prediction is
    bound by communication (the factor speeds compute only) barely pulls the fit, as it should."""
    out = {}
    for preset in EFFICIENCY_PRESETS:
        mine = [p for p in points if p.role == "calibration" and p.preset == preset]
        if not mine:
            raise ValueError(f"no calibration point runs the {preset!r} preset")

        def loss(f):
            return sum(math.log(predict(p, f).tokens_per_s / p.tokens_per_s) ** 2 for p in mine)

        out[preset] = golden_section(loss, low, high, tolerance)
    return out


def golden_section(f, a: float, b: float, tolerance: float) -> float:
    """The minimiser of a unimodal f on [a, b], to within `tolerance`."""
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tolerance:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def summary(rows: list) -> dict:
    """Error statistics of tokens per second by role: median and largest |predicted/measured − 1|, points within
    ±35 %; memory's over every point that published it (nothing in the memory model is fitted, so every one is a
    check); and the 8 -> 128 GPU trend (TREND) predicted beside measured."""
    out = {}
    for role in ("calibration", "held-out"):
        mine = [r for r in rows if r.point.role == role]
        if not mine:
            continue
        errs = [abs(r.error) for r in mine]
        out[role] = {"points": len(mine), "median_abs_error": median(errs), "max_abs_error": max(errs),
                     "within_35": sum(e <= 0.35 for e in errs)}
    mem = [abs(r.memory_error) for r in rows if r.memory_error is not None]
    if mem:
        out["memory"] = {"points": len(mem), "median_abs_error": median(mem), "max_abs_error": max(mem)}
    by_key = {r.point.key: r for r in rows}
    if all(k in by_key for k in TREND):
        a, b = (by_key[k] for k in TREND)
        out["trend"] = {"points": TREND, "measured": b.point.tokens_per_s / a.point.tokens_per_s - 1,
                        "predicted": b.tokens_per_s / a.tokens_per_s - 1}
    return out

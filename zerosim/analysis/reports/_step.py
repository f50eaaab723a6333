"""One simulated step at real scale, as a report: what `zerosim timeline` prints (its `--json` is `to_dict()`).

    report = timeline_step(work, DataMesh.of("hsdp", 4096, 8, 64), Hardware("h100", "nvlink4", inter_link="ib_ndr"))
    report.step_s, report.exposed_comm_s, report.by_purpose["gather params"]

The engine runs one step on the meta backend (analysis/planner `meta_step`: data-less arrays, one representative rank)
and the timeline places every event in time; the report is rank 0's view, which stands for every rank. Letters: N
ranks, K micro-steps, B·L tokens per rank per micro-step.
"""

from __future__ import annotations

from dataclasses import field, fields

from zerosim._dataclass import dataclass
from zerosim.analysis.costs import TOKENS, mfu, tokens_per_s_per_gpu
from zerosim.analysis.reports._exposure import exposure
from zerosim.analysis.reports._fit import judge
from zerosim.analysis.timeline import TimeModel


class Report:
    """A report's JSON: every field in order, but those marked `kept()` (the runs it read) and the `optional()` ones
    that are None."""

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("json", True)
                and not (f.metadata.get("optional") and getattr(self, f.name) is None)}


def kept(default=None):
    """A field the report keeps for figures and traces, not in its JSON."""
    return field(default=default, repr=False, compare=False, metadata={"json": False})


def optional():
    """A field the JSON holds only when it is not None (what a run beside tensor parallelism adds)."""
    return field(metadata={"optional": True})


@dataclass(frozen=True)
class StepReport(Report):
    """One step (see the module docstring); `timeline` and `engine` are the run it read."""

    strategy: str | None  # a strategy for many nodes by name, or None (a ZeRO stage)
    shard_group: int | None  # S: HSDP's / MiCS's shard group, hpZ's secondary group; None without one
    gpus_per_node: int | None
    inter_link: str | None
    tiers: dict  # {tier: {"link", "calls", "seconds", "bytes_per_rank"}}
    model: str
    params: int
    units: int  # beside TP: one TP rank's
    ranks: int
    tensor_parallel: dict | None = optional()  # beside TP: {"tp", "sp", "dp", "local_params", "async", "layout"}
    context_parallel: dict | None = optional()  # beside CP: {"cp", "style", "split", "dp", "tokens_per_gpu", ...}
    # beside PP: {"pp", "schedule", "virtual_stages", "micro_batches", "dp", "ranks": [each pipeline rank's compute and
    # idle], "bubble_closed_form", "bubble_formula"}
    pipeline_parallel: dict | None = optional()
    stage: object  # the ZeRO stage, or the strategy's name
    precision: str
    optimizer: str
    device: str
    link: str
    link_note: str
    micro_batch: dict | None  # {"batch", "seq_len"}
    checkpoint: str | None
    accumulation_steps: int
    tokens_per_rank: int  # per step: B·L·K (or the tokens given, times K), one batch rank's (a TP group shares it)
    comm: str  # the schedule in words (describe_comm)
    overlap: bool
    time_model: str
    link_model: str
    step_s: float
    tokens_per_s_per_gpu: float | None  # the job's tokens / step / GPUs (analysis/costs/_throughput.py)
    mfu: float | None  # torchtitan's model FLOPs × tokens/s per GPU / the dense 16-bit peak (None without a shape)
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    overlapped_s: float
    busy_fraction: dict
    by_purpose: dict  # {purpose: {"seconds", "calls", "exposed"}}
    exposure: dict  # {purpose: why it is exposed or hidden} (_exposure.py), for the purposes this step ran
    params_peak_gb: float
    peak_gb: float
    peak: int
    peak_by_kind: dict
    fit: dict | None  # judge's verdict against the workload's GPU
    offload: dict | None = optional()  # with offload: the host's streams and bytes (cli/offload_args.py adds it)
    timeline: object = kept()  # the simulated Timeline (figures, Chrome traces)
    engine: object = kept()  # the meta engine that ran the step


def timeline_step(work, mesh, hardware, tokens: int = TOKENS, wire=None, time_model=None, recipe=None, sp: bool = False,
                  async_tp: bool = False, parallelisms: tuple = (), steps: int = 1,
                  layout: str | None = None, spec=None) -> StepReport:
    """One step of `work` (a Workload) on `mesh` (a DataMesh) over `hardware`, simulated (see the module docstring).
    `tokens`: per rank per micro-step when the model has no micro-batch; `wire`: ZeRO++'s Wire; `recipe`: the
    gradient recipe (None: the plan's default); `time_model`: a TimeModel (None: the datasheet roofline). Beside
    tensor parallelism (the mesh's tp): `sp`, sequence parallelism; `async_tp`, TP's collectives overlapping the GEMMs
    they feed (a bound); `layout`, what a TP rank keeps (parallel/tensor LAYOUTS). `parallelisms`: others beside
    data parallelism (offload), run for `steps` steps (DPU's steady state is the second); the numbers are the whole
    run's (the caller reads one step's window). `spec`: a ParallelSpec in place of `sp`, `async_tp` and `layout`,
    with context parallelism (its degree the mesh's cp) or pipeline parallelism (its degree the mesh's pp: the
    pipeline's engine runs the step's K = M micro-batches a data-parallel rank, one representative rank a stage; rank
    0 is the first stage's, and each pipeline rank's compute and idle share of the step stand beside the bubble's
    closed form)."""
    from zerosim.analysis.costs import peak_rank
    from zerosim.analysis.planner import meta_step
    from zerosim.parallel import ParallelSpec

    time_model = time_model if time_model is not None else TimeModel()
    K, plan = work.accumulation, mesh.plan
    spec = ParallelSpec.of(spec, mesh.dims.tp, sp, layout, async_tp)
    result, engine = meta_step(work.model, None, None, hardware, work.comm, work.precision, tokens, work.optimizer,
                               micro_batch=work.micro, accumulation_steps=K, clip_grad=work.clip_grad, wire=wire,
                               time_model=time_model, mesh=mesh, recipe=recipe, steps=steps,
                               parallelisms=parallelisms, spec=spec)
    sp, async_tp = spec.sp, spec.async_tp
    per_micro = work.tokens_per_micro_step or tokens
    step, compute, comm = result.step_time, float(result.compute_busy[0]), float(result.comm_busy[0])
    exposed, top = float(result.exposed_comm[0]), peak_rank(engine.cluster)  # a pipeline's stages peak apart
    ran = work.comm.under(plan)  # the schedule as the engine ran it (DeepSpeed's overlap_comm by stage)
    ledger = engine.cluster.ranks[top].ledger  # the memory report's rank (costs measure_stage): the one that peaks
    peak, n, tp = ledger.peak(), mesh.dims.world_size, mesh.dims.tp
    tps = tokens_per_s_per_gpu(mesh.dims, per_micro * K, step)  # the job's degrees: dp = N / (T·C·P)
    flops = mfu(tps, work.config if work.micro else None, work.micro[1] if work.micro else 0,
                hardware.device.rate(hardware.compute))
    return StepReport(
        strategy=plan.name or None, shard_group=mesh.group, gpus_per_node=mesh.gpus_per_node,
        inter_link=None if hardware.inter_link is None else hardware.inter_link.name,
        tiers=tier_summary(result, engine.cluster), model=work.model.name, params=work.model.num_params,
        units=len(engine.model.layers), ranks=n,
        tensor_parallel=None if tp == 1 else {"tp": tp, "sp": sp, "dp": n // (tp * spec.pp),
                                              "local_params": engine.model.num_params, "async": async_tp,
                                              "layout": engine.model.layout},
        context_parallel=None if spec.cp == 1 else context_summary(spec, mesh.dims, work.micro, engine),
        pipeline_parallel=None if spec.pp == 1 else pipeline_timing(spec, n, result, engine),
        stage=plan.name or plan.stage, precision=work.precision_name,
        optimizer=work.optimizer, device=hardware.device.name, link=hardware.link.name, link_note=hardware.link.note,
        micro_batch=None if work.micro is None else {"batch": work.micro[0], "seq_len": work.micro[1]},
        checkpoint=work.checkpointing if work.micro else None, accumulation_steps=K, tokens_per_rank=per_micro * K,
        comm=describe_comm(ran), overlap=ran.overlap_comm,
        time_model=time_model.describe() + _beside_tp(time_model, tp, sp, async_tp) + _beside_cp(time_model, spec),
        link_model=link_model(hardware), step_s=step, tokens_per_s_per_gpu=tps, mfu=flops,
        compute_s=compute, comm_s=comm, exposed_comm_s=exposed, overlapped_s=comm - exposed,
        busy_fraction={"compute": compute / step if step else 0.0, "comm": comm / step if step else 0.0},
        by_purpose=(purposes := by_purpose(result)),
        exposure={k: v for k, v in exposure(work.comm, tp, async_tp, spec.cp_style if spec.cp > 1 else None).items()
                  if k in purposes},
        params_peak_gb=ledger.peak("params") / 1e9, peak_gb=peak / 1e9, peak=peak,
        peak_by_kind={k: v for k, v in ledger.peak_by_kind().items() if v},
        fit=None if work.gpu is None else judge(peak, plan.stage, n, work.gpu, work.reserve, work.buckets),
        offload=None, timeline=result, engine=engine,
    )


def _beside_tp(time_model, tp: int, sp: bool, async_tp: bool) -> str:
    """What the time model did beside tensor parallelism, for the "time from:" line: fp8 on the TP GEMMs (and on the
    sequence-parallel all-gathers), async TP's bound."""
    if tp == 1:
        return ""
    out = ""
    if time_model.fp8_gemms:
        out += f"; beside TP {tp}: the blocks' TP GEMMs in fp8" + (", their sequence-parallel all-gathers in fp8 "
                                                                  "(torchao's Float8 TP, TE)" if sp else "")
    if async_tp:
        out += "; async TP as a bound (no compute waits for TP's collectives)"
    return out


def _beside_cp(time_model, spec) -> str:
    """What the time model did beside context parallelism, for the "time from:" line."""
    if spec.cp == 1:
        return ""
    if time_model.efficiency is None or time_model.efficiency.flat is not None:
        return f"; beside CP {spec.cp}: each hop's recorded FLOPs (every tile in full)"
    return f"; beside CP {spec.cp}: each hop's attention on its own block (a causal diagonal block half the pairs)"


def context_summary(spec, dims, micro, engine) -> dict:
    """What a step beside context parallelism says of it: the degree, style and split, the data-parallel degree
    (N / (T·C)), each rank's tokens of a sequence, and the position the representative rank computed (the meta
    backend hosts one rank for all; it computes the busiest position's blocks: parallel/context `position_of`)."""
    from zerosim.analysis.costs import positions_of
    from zerosim.parallel.context import block_shapes, block_work

    where = positions_of(engine.parallelisms.members, engine.cluster, dims)
    pairs = {sum(block_work(block_shapes("ring", spec.cp_split, True, spec.cp, p, j, 2 * spec.cp))
                 for j in range(spec.cp)) for p in range(spec.cp)}
    return {"cp": spec.cp, "style": spec.cp_style, "split": spec.cp_split, "dp": dims.dp,
            "seq_len": None if micro is None else micro[1],
            "tokens_per_rank": None if micro is None else micro[1] // spec.cp,
            "rank0_position": None if where is None else where(engine.cluster.ranks[0].index),
            "balanced": len(pairs) == 1}  # every position's causal attention the same query-key pairs


def pipeline_timing(spec, ranks: int, result, engine) -> dict:
    """What a step beside pipeline parallelism says of it (analysis/reports pipeline_summary's record, and): each
    pipeline rank's compute on the timeline and the share of the step it did not compute (its bubble, and the
    communication it waited for); the pipeline rank whose memory peaks highest (the report's peak); the bubble's
    closed form with every stage costing the first rank's forward, backward and backward-weight a micro-batch and the
    links free (parallel/pipeline bubble_fraction)."""
    from zerosim.analysis.costs import peak_rank
    from zerosim.analysis.reports._memory import pipeline_summary
    from zerosim.parallel.pipeline import BUBBLE_FORMULA, bubble_fraction

    table, step = engine.table, result.step_time
    out = []
    for p, r in enumerate(engine.cluster.ranks):  # the representatives, one a stage, in pipeline order
        busy = float(result.compute_busy[r.index])
        out.append({"rank": p, "gpu": r.index, "compute_s": busy, "idle": 1 - busy / step if step else 0.0})
    kinds = {}
    for iv in result.track(engine.cluster.ranks[0].index, "compute"):
        kinds[iv.category] = kinds.get(iv.category, 0.0) + iv.end - iv.start
    t_f = kinds.get("forward", 0.0)
    t_w = kinds.get("backward-weight", 0.0)
    t_b = t_w + sum(kinds.get(k, 0.0) for k in ("backward", "backward-input", "recompute"))
    M = table.micro_batches
    closed = bubble_fraction(table.name, table.pp, M, table.virtual, t_f / M, t_b / M, t_w / M) if t_f + t_b else 0
    return {**pipeline_summary(spec, ranks, M), "ranks": out, "bubble_closed_form": float(closed),
            "bubble_formula": BUBBLE_FORMULA[table.name], "peak_rank": peak_rank(engine.cluster)}


def by_purpose(result) -> dict:
    """{purpose: {"seconds", "calls", "exposed"}} of rank 0's communication stream, by the purpose each call was made
    for; `exposed`: the part of those calls rank 0's compute did not hide (timeline `comm_by_purpose`)."""
    return result.comm_by_purpose(0)


def describe_comm(comm) -> str:
    """A CommSchedule in words: what differs from seed 004's (one collective per unit, no prefetch)."""
    from zerosim.parallel.data import CommSchedule

    if comm == CommSchedule():
        return "seed 004's: one collective per unit, gather right before a use, no prefetch"
    parts = [
        f"{f}={getattr(comm, f):,}"
        if isinstance(getattr(comm, f), int) and not isinstance(getattr(comm, f), bool)
        else "overlap_comm on at stage 3 only (DeepSpeed's default)"
        if f == "overlap_comm" and comm.overlap_comm is None
        else f"{f}={getattr(comm, f)}"
        for f in comm.__dataclass_fields__
        if f != "framework" and getattr(comm, f) != getattr(CommSchedule(), f)  # its knobs (not whose defaults)
    ]
    return ", ".join(parts)


def link_model(hw) -> str:
    """One line: each link's bandwidth, α per ring step and latency per call (what the ring times assume)."""
    def one(link):
        return (f"{link.name} {link.bandwidth / 1e9:g} GB/s per direction, α {link.alpha * 1e6:g} µs a step, "
                f"{link.base * 1e6:g} µs a call")
    return one(hw.link) + ("" if hw.inter_link is None else "; between nodes " + one(hw.inter_link) +
                           " (NCCL's ring: nodes − 1 steps at its α)")


def tier_summary(result, cluster) -> dict:
    """{tier: {"link", "calls", "seconds" (its calls' time, summed), "bytes_per_rank" (sent, the ranks' average)}};
    beside a pipeline every stage's calls counted on its own ranks (tests/test_pipeline_closed_form.py)."""
    from zerosim.cluster import TIERS

    hw, sent = result.hardware, cluster.trace.bytes_by_tier()
    out = {t: {"link": hw.link_of(t).name, "calls": 0, "seconds": 0.0,
               "bytes_per_rank": sent[t] / cluster.world_size} for t in TIERS}
    for iv in result.track(0, "comm"):
        row = out[iv.event.tier if hw.inter_link is not None else TIERS[0]]
        row["calls"] += 1
        row["seconds"] += iv.end - iv.start
    return out

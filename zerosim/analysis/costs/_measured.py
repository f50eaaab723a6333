"""Memory and communication of ZeRO stages measured, not computed: one step of the real engines on the
meta backend (shapes and dtypes, no data), read back from the ledgers and the trace; and a GPT's
activations, one micro-batch through its data-less twin (models/gpt/_meta.py), read back by name, with
each checkpointing strategy's peak and FLOPs (the compute events') side by side.

This is the second route to the numbers in _memory.py and _comm.py; tests check that the two agree.
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass
from zerosim.analysis.costs._pipeline import pipeline_run, stage_rows
from zerosim.cluster import Cluster, Compute, MemoryLedger
from zerosim.models import forward_backward
from zerosim.optim import get_optimizer
from zerosim.parallel import ParallelSpec
from zerosim.parallel.data import ZeroEngine
from zerosim.parallel.data.multinode import DataMesh
from zerosim.precision import get_precision
from zerosim.progress import progress

MODEL_STATES = ("params", "grads", "master")  # and every optim:* kind: the resting model states


def measure_by_stage(model, ranks: int, optimizer: str = "adam", precision="fp16-mixed", step: bool = True,
                     stages=(0, 1, 2, 3), show_progress: bool | None = None, micro_batch: tuple | None = None,
                     comm=None, clip_grad: float | None = None, wire=None, tp: int = 1, sp: bool = False,
                     gpus_per_node: int | None = None, parallelisms=None, layout: str | None = None,
                     spec=None, micro_batches: int | None = None) -> list:
    """Run each stage on the meta backend; per stage what the ledgers and the trace recorded.

    `micro_batch`: (B, L) for a `MetaGPT` (each rank's sequences and their length), whose activations the
    ledgers then hold too ("activations" in peak_by_kind); None for a `MetaModel` (no activations).
    `comm`: a CommSchedule (buckets and prefetch change the peak); `clip_grad`: clipping by the global norm; `wire`:
    a zeropp.Wire for stage 3's weight gathers (the other stages gather no weights and run without it). One
    micro-step: with gradient accumulation every micro-step holds the same (tests/test_plan.py shows the peak
    does not change with K). `tp`, `sp`: tensor (and sequence) parallelism of that degree beside each stage, `ranks`
    every GPU (the data-parallel degree is ranks / tp), the ranks placed `gpus_per_node` to a node; `layout` what a
    TP rank keeps (parallel/tensor LAYOUTS); or `spec`, a ParallelSpec, says all of these and context parallelism
    (each rank's L / C tokens of every sequence, `micro_batch` then the whole sequences').

    Returns [{"stage", "resting": {kind: bytes}, "peak": bytes, "peak_by_kind": {kind: bytes}, "at_peak": {kind:
    bytes}, "sent": bytes, "ranks_agree": bool}] (and with offload, "host" and "nvme": their tiers'), where resting is
    the model states left after the step
    (params, grads, master, optim:*), peak the most any rank held at once during it (fp32 gradient
    shards and gathered layers included), peak_by_kind each kind's own peak, at_peak what was live at the
    moment of the peak (it sums to peak), sent the most bytes any rank put on the wire. A progress bar
    shows where someone watches (`zerosim.progress`; `show_progress` forces it on or off). `parallelisms(stage)`: the
    other parallelisms a stage runs with (e.g. offload: parallel/offload), or None.
    """
    out = []
    for stage in progress(
        stages, f"{model.num_params / 1e9:.3g}B params on {ranks} ranks", enabled=show_progress, unit="stage"
    ):
        out.append(measure_stage(model, ranks, stage, optimizer, precision, step, micro_batch, comm, clip_grad,
                                 wire if stage == 3 else None, gpus_per_node, tp=tp, sp=sp, layout=layout,
                                 parallelisms=parallelisms(stage) if parallelisms else (), spec=spec,
                                 micro_batches=micro_batches, timeline=False)[0])  # the rows alone: no timeline
    return out


def measure_stage(model, ranks: int | None, stage, optimizer: str = "adam", precision="fp16-mixed", step: bool = True,
                  micro_batch: tuple | None = None, comm=None, clip_grad: float | None = None, wire=None,
                  gpus_per_node: int | None = None, shard_group: int | None = None, tp: int = 1,
                  sp: bool = False, mesh=None, recipe=None, parallelisms=(), totals: bool = True,
                  layout: str | None = None, spec=None, micro_batches: int | None = None,
                  timeline: bool = True) -> tuple:
    """One stage of `measure_by_stage`: (its row, the meta Cluster, the engine) — the cluster's trace holds the
    step's events, so the same run can be placed in time (zerosim.analysis.timeline._simulate). `stage` may be a
    strategy for many nodes by name ("hsdp", "mics", "hpz", ...: parallel/data/_plan.py STRATEGIES) with its
    `shard_group`, the ranks placed `gpus_per_node` to a node; or `mesh`, a `DataMesh` (parallel/data/multinode), says
    all of these and `tp` (then `ranks` and `stage` may be None). The row then also holds "tiers": {tier: bytes one
    rank sent on average}. `recipe`: the gradient recipe (None: the plan's default). With `tp` > 1 (or `sp`) the model
    (a MetaGPT or MetaLlama) runs tensor-parallel (zerosim.parallel.tensor) beside the stage: `ranks` is every GPU,
    the data-parallel degree ranks / tp. `parallelisms`: others beside data parallelism (offload: the row then has
    "host" and "nvme", each {"resting": {kind: bytes}, "peak": bytes} of its ledger, and "device_formula" etc. are
    the caller's); `layout`: what a TP rank keeps (parallel/tensor LAYOUTS). `totals=False` leaves out the row's
    "sent" and "tiers" (the trace's bytes, summed over every call), for a caller that reads only memory (the explorer,
    whose times come from the trace itself): under the profiler
    those sums were a tenth of the explorer's step at 64 ranks. `spec`: a ParallelSpec in place of `tp`, `sp` and
    `layout`, with context parallelism (its degree the mesh's cp; `micro_batch` the whole sequences, each rank then
    running its L / C tokens of them), or pipeline parallelism (pp > 1: the pipeline's engine, one representative
    rank a stage (_pipeline.py), the whole step of `micro_batches` M a data-parallel rank, default P, its peaks those
    of every micro-batch in flight; the row's "pipeline" holds each pipeline rank's, its "peak" the largest).
    `timeline`: each hosted rank's ledger keeps its allocations and frees in order, for a caller that reads the
    cluster's (what was live when, by name); the row needs none (its "at_peak" is the ledger's `at_peak`), and without
    it a pipeline writes its alike actions again instead of running them (parallel/pipeline/_repeat.py)."""
    spec = ParallelSpec.of(spec, mesh.dims.tp if mesh is not None else tp, sp, layout)
    mesh = mesh if mesh is not None else DataMesh.of(stage, ranks, gpus_per_node, shard_group, tp=spec.tp, cp=spec.cp,
                                                     pp=spec.pp)
    spec.check_mesh(mesh)
    ranks = mesh.dims.world_size
    if spec.pp > 1:  # a pipeline: its engine, one representative a stage, the whole step of M micro-batches
        cluster, engine = pipeline_run(model, mesh, spec, optimizer, precision, micro_batch, micro_batches, comm,
                                       clip_grad, wire, recipe, parallelisms, step=step, keep_timeline=timeline)
    else:
        cluster = Cluster(ranks, backend="meta", trace="call", timeline=False, gpus_per_node=mesh.gpus_per_node)
        for r in cluster.ranks:  # each hosted rank's alloc/free order (not in the trace), where the caller reads it
            r.ledger.keep_timeline = timeline
        model, beside = parallel_model(model, spec)
        engine = ZeroEngine(model, cluster, mesh.plan, get_optimizer(optimizer), precision,
                            checkpoint=getattr(model, "checkpointing", False), comm=comm, clip_grad=clip_grad,
                            wire=wire, shard_group=mesh.group, recipe=recipe, parallelisms=(*beside, *parallelisms))
        if step:  # one micro-batch per rank this process hosts (the representative: 1)
            engine.step(model.batches(cluster) if micro_batch is None else model.batches(cluster,
                                                                                          *spec.micro(*micro_batch)))
    resting = [{k: v for k, v in r.ledger.by_kind().items() if k in MODEL_STATES or k.startswith("optim:")}
               for r in cluster.ranks]
    top = peak_rank(cluster)  # of the ranks hosted: all, or the representative (a pipeline's: one a stage)
    row = {
        "stage": mesh.plan.name or mesh.plan.stage,  # a stage number, or a strategy by name
        "resting": resting[top if spec.pp > 1 else 0],  # a pipeline's: the rank that peaks (its stage's states)
        # padded buffers: every rank holds the same (the hosted ones; a pipeline's stages hold their own layers)
        "ranks_agree": spec.pp > 1 or all(r == resting[0] for r in resting),
        "peak": cluster.ranks[top].ledger.peak(),
        "peak_by_kind": {k: v for k, v in cluster.ranks[top].ledger.peak_by_kind().items() if v},
        "at_peak": cluster.ranks[top].ledger.at_peak(),
    }
    if spec.pp > 1:  # each pipeline rank: its units, parameters, peaks, chunks in flight (the first holds the most)
        row["pipeline"] = stage_rows(engine)
        if engine.engines[0].plan.name != mesh.plan.name:  # what the stage's framework runs beside a pipeline
            row["beside_pipeline"] = engine.engines[0].plan.name  # (parallel/pipeline/_beside.py)
    if totals:
        sent = cluster.trace.sent_totals(ranks)  # every rank's, in closed form where the trace summarised (a pipeline
        row["sent"] = max(sent)  # stage's calls on its own ranks: tests/test_pipeline_closed_form.py)
        row["tiers"] = {tier: b / ranks for tier, b in cluster.trace.bytes_by_tier().items()}
        for x in row.get("pipeline", ()):  # each pipeline rank's: its block's first GPU's (they send alike)
            x["sent"] = sent[x["gpus"][0]]
    if parallelisms:  # offload's tiers: what rank `top` holds on its host and NVMe, at rest and at most
        for tier in ("host", "nvme"):
            ledger = cluster.ranks[top].ledger_of(tier)
            row[tier] = {"resting": {k: v for k, v in ledger.by_kind().items() if v}, "peak": ledger.peak()}
    return row, cluster, engine


def peak_rank(cluster) -> int:
    """The position in `cluster.ranks` of the hosted rank whose ledger peaks highest (the first of equals): the rank
    a report's peak, resting states and fit are read from (a pipeline's stages peak apart; alike ranks, the first)."""
    peaks = [r.ledger.peak() for r in cluster.ranks]
    return max(range(len(peaks)), key=peaks.__getitem__)


def tensor_parallel(model, tp: int = 1, sp: bool = False, async_tp: bool = False, layout: str | None = None) -> tuple:
    """(the model the engine runs, the parallelisms beside it): `model` itself and none at tp = 1 without SP, else
    one TP rank's twin and its `TensorParallel` (a MetaGPT's or MetaLlama's shape is needed to split it). A vocabulary
    that does not split over tp is padded as Megatron pads it (up to a multiple of 128·tp: tensor/_vocab.py).
    `layout`: what a TP rank keeps for backward (parallel/tensor LAYOUTS; None: the library's default, Megatron's)."""
    return parallel_model(model, ParallelSpec(tp=tp, sp=sp, tp_layout=layout, async_tp=async_tp))


def parallel_model(model, spec) -> tuple:
    """(the model the engine runs, the parallelisms beside it) for `spec` (a ParallelSpec): `model` itself and none
    without TP or CP, else one TP and CP rank's twin and its parallelisms (a MetaGPT's or MetaLlama's shape is needed
    to split it)."""
    if (spec.tp > 1 or spec.sp or spec.cp > 1) and getattr(model, "gpt", None) is None:
        what = "tensor parallelism splits a transformer's heads, columns and vocabulary" if spec.cp == 1 else \
            "context parallelism cuts a transformer's sequences"
        raise ValueError(f"{what}: give the model's shape (a --model preset or --config with --seq-len), not a "
                         "parameter count")
    return spec.build(model)


def positions_of(parallelisms, cluster, dims):
    """rank -> its CP position as the run computed it (context parallelism's `position_of`), or None without CP:
    what the time model reads to charge each hop its block (analysis/timeline KernelTimes)."""
    return next((p.position_of(cluster, dims) for p in parallelisms if hasattr(p, "position_of")), None)


@dataclass(frozen=True)
class ActivationsMeasured:
    """One rank's activations for one micro-batch of a `MetaGPT`, read from a ledger's timeline."""

    per_block: dict  # {name: bytes} block 0 saves (seed 001 §5e's per-layer table, by its names)
    outside: dict  # {name: bytes} saved outside the blocks: token ids, final LayerNorm, the loss's cache
    peak: int  # the most activation bytes live at once
    peak_at: str  # the buffer whose allocation reached the peak ("loss.labels": when the loss runs; "block31.x2", ...)

    @property
    def per_block_total(self) -> int:
        return sum(self.per_block.values())


def measure_activations(model, batch: int, seq_len: int, precision: str = "fp16-mixed") -> ActivationsMeasured:
    """One micro-batch of (B, L) = (batch, seq_len) through `model` (a MetaGPT) on a ledger: what it saves by name.

    The same driver the engines and the oracle use (models/_run.py), on data-less arrays. The per-block
    table comes from a pass without checkpointing (what each unit's forward saves does not depend on the
    strategy; checkpointing only decides how long it lives); the peak from a pass with the model's own.
    Activations do not depend on the ZeRO stage or on N: every rank keeps its own.
    """
    plain, own = (
        _activation_ledger(model, batch, seq_len, precision, False),
        _activation_ledger(model, batch, seq_len, precision, True),
    )
    allocs = [e for e in plain.timeline if e.action == "alloc"]
    peak = own.peak("activations")
    top = next(e for e in own.timeline if e.action == "alloc" and e.kind_total == peak)  # the first moment of the peak
    block0 = model.layers[1].name.split(".")[0] + "."  # "block0." (units "block0", or "block0.attn" and "block0.ffn")
    return ActivationsMeasured(per_block={e.name[len(block0):]: e.nbytes for e in allocs if e.name.startswith(block0)},
                               outside={e.name: e.nbytes for e in allocs if not e.name.startswith("block")},
                               peak=peak, peak_at=top.name)


def _activation_ledger(model, batch: int, seq_len: int, precision: str, checkpointing: bool) -> MemoryLedger:
    from zerosim.precision.cast import MetaArray  # the data-less tensor (the meta backend's), never the backend's ranks

    fmt = get_precision(precision).compute_format
    flat = MetaArray((model.num_params,), fmt.dtype)  # (P,) compute format, no data
    ledger = MemoryLedger(0, empty=MetaArray)
    ids, target = model.batches(1, batch, seq_len, empty=MetaArray)[0]
    model.check_batch(ids, target)
    forward_backward(model, ids, target, fmt, lambda i: model.unflatten(flat, i), ledger=ledger,
                     checkpoint=checkpointing and model.checkpointing)
    return ledger


def strategy_costs(batch: int, seq_len: int, precision: str = "fp16-mixed", strategies=None, **shape) -> list:
    """Seed 001's checkpointing strategies side by side: one step of the GPT's twin per strategy, on the meta backend.

    `shape`: GPT's vocab, d_model, n_heads, n_layers (its position table is seq_len long). Returns, per
    strategy (default all of `zerosim.models.gpt.STRATEGIES`), {"strategy", "peak" (activation bytes),
    "peak_at" (the buffer that reached it), "flops": {kind: FLOPs} of one rank's compute events
    ("forward", "recompute", "backward", "loss"), "extra": the step's FLOPs over the plain step's, minus one}.
    """
    from zerosim.models import GPT
    from zerosim.models.gpt import STRATEGIES, MetaGPT, strategy_options
    from zerosim.optim import Adam

    rows = []
    for name in strategies or STRATEGIES:
        model = MetaGPT(GPT(seq_len=seq_len, **shape, **strategy_options(name)))
        cluster = Cluster(1, backend="meta")
        ZeroEngine(model, cluster, 0, Adam(), precision, checkpoint=model.checkpointing).step(
            model.batches(cluster, batch)
        )
        ledger, flops = cluster.ranks[0].ledger, {}
        for e in cluster.trace.log:
            if isinstance(e, Compute):
                flops[e.kind] = flops.get(e.kind, 0) + e.flops
        peak = ledger.peak("activations")
        top = next(
            e for e in ledger.timeline if e.action == "alloc" and e.kind == "activations" and e.kind_total == peak
        )
        rows.append({"strategy": name, "peak": peak, "peak_at": top.name, "flops": flops})
    plain = next((sum(r["flops"].values()) for r in rows if r["strategy"] == "none"), None)
    if plain is None:  # the yardstick: the same shape without checkpointing
        plain = sum(strategy_costs(batch, seq_len, precision, ("none",), **shape)[0]["flops"].values())
    for r in rows:
        r["extra"] = sum(r["flops"].values()) / plain - 1
    return rows


def measure_tp_activations(model, batch: int, seq_len: int, precision: str, tp: int, sp: bool,
                           layout: str | None = None) -> ActivationsMeasured:
    """One TP rank's activations for one micro-batch of (batch, seq_len): a meta step of `model` (a MetaGPT or
    MetaLlama) at degree `tp` on tp ranks (the data-parallel degree does not change a rank's activations), read back
    by name: block 0's buffers, what lives outside the blocks, and the peak with the model's own checkpointing."""
    return measure_rank_activations(model, batch, seq_len, precision, ParallelSpec(tp=tp, sp=sp, tp_layout=layout))


def measure_rank_activations(model, batch: int, seq_len: int, precision: str, spec) -> ActivationsMeasured:
    """One rank's activations beside the parallelisms `spec` names (a ParallelSpec: a TP rank's slice, a CP rank's
    L / C tokens) for one micro-batch of (batch, seq_len): a meta step of `model` on tp · cp ranks (the
    data-parallel degree does not change a rank's activations), read back by name: block 0's buffers, what lives
    outside the blocks, and the peak with the model's own checkpointing."""
    # NOTE: a checkpointed block's first unit saves the block's input under the name its norm gives it too
    # ("block0.ln1.block input"), the same bytes: the table keeps one
    one = replace(spec, pp=1, pp_schedule="1f1b", virtual_stages=None, pp_split="torchtitan")  # a pipeline's stage
    # keeps each micro-batch's block buffers as the data-parallel step keeps them (how many, the schedule says)
    _, cluster, _ = measure_stage(model, one.tp * one.cp, 0, "adam", precision, micro_batch=(batch, seq_len),
                                  spec=one)
    own = cluster.ranks[0].ledger  # checkpointed, a block's buffers are born again in its recompute, by name
    allocs = [e for e in own.timeline if e.action == "alloc" and e.kind == "activations"]
    peak = own.peak("activations")
    top = next(e for e in own.timeline if e.action == "alloc" and e.kind == "activations" and e.kind_total == peak)
    return ActivationsMeasured(per_block={e.name[len("block0."):]: e.nbytes for e in allocs
                                          if e.name.startswith("block0.")},
                               outside={e.name: e.nbytes for e in allocs if not e.name.startswith("block")},
                               peak=peak, peak_at=top.name)

"""A pipeline's step on the meta backend: the `PipelineEngine` (parallel/pipeline) a job's ParallelSpec asks for, one
representative rank a pipeline stage, run once; and what a report reads of it, stage by stage.

Letters: N GPUs, P = pp, T = tp, D = N / (P·T) data-parallel ranks, M micro-batches a step (a data-parallel rank's:
Megatron's num_microbatches), V virtual stages a rank, B·L a micro-batch's tokens.

    pipeline_run(model, mesh, spec, "adam", "bf16-mixed", (B, L), M)    (the meta Cluster, the PipelineEngine) after
                                                                        one step: each stage's ZeroEngine on its
                                                                        block of N / P ranks (pp outermost), the
                                                                        representative of stage p the first rank of
                                                                        its block, p·N/P, standing for every rank of
                                                                        its stage (they hold the same shapes)
    line_points(spec, M)                                                the two smaller steps a long step's time lies
                                                                        on the line through (a schedule repeats past
                                                                        its warm-up)
    stage_rows(engine)                                                  per pipeline rank: its units, parameters, peak,
                                                                        activations' peak and chunks in flight (the
                                                                        table's count: GPipe M, 1F1B P − r, ...)

What every other report reads from one meta step (`analysis.costs.measure_stage`, `analysis.planner.meta_step`) it
reads from this one when pp > 1: the ledgers of the representatives (rank 0, the first stage's, holds the most: 1F1B
keeps P micro-batches in flight there, and the embedding), the trace the timeline places in time (each stage's calls
among its own ranks, the activations' sends on the tier between the stages' nodes, so the bubble appears by itself).
The whole step is run, every micro-batch (alike actions written again from a record: parallel/pipeline/_repeat.py):
a pipeline's step is not the line through K = 1 and 2 that the data-parallel step is (its bubble does not grow with
M, and 1F1B refuses M < P).
"""

from __future__ import annotations

from zerosim.analysis.costs._throughput import TOKENS
from zerosim.cluster import Cluster
from zerosim.parallel.data import get_comm_schedule
from zerosim.optim import get_optimizer


def pipeline_run(model, mesh, spec, optimizer: str, precision, micro_batch: tuple | None = None,
                 micro_batches: int | None = None, comm=None, clip_grad: float | None = None, wire=None, recipe=None,
                 parallelisms: tuple = (), steps: int = 1, tokens: int = TOKENS, step: bool = True,
                 keep_timeline: bool = False, records_from=None, time_only: bool = False) -> tuple:
    """(the meta Cluster, the PipelineEngine) of `model` (a data-less twin) on `mesh` (a DataMesh: the ZeRO stage,
    N and the nodes) beside `spec` (a ParallelSpec with pp > 1, and TP), after `steps` steps of M = `micro_batches`
    micro-batches (default P) of `micro_batch` = (B, L) sequences (or `tokens` rows of a MetaModel) a data-parallel
    rank (none when not `step`). `keep_timeline`: each ledger keeps its alloc/free order (which buffer was live when).
    `records_from`: the engine an earlier `pipeline_run` returned for the same job (every argument the same, the same
    `model` object) but M, after its one step: its records of alike actions stand for this step's (none recorded
    anew: parallel/pipeline/_repeat.py `Records`); an engine of another job is not read. `time_only`: the run is read
    for its trace alone (its time): with such records, every action and each stage's step end is written again from
    them and none runs (its ledgers are not the run's).
    What the pipeline does not run beside it is refused here, by name: clipping and offload (their decisions and
    copies span every stage), ZeRO++'s `wire` (its collectives span every rank), a strategy for many nodes. The stage
    runs what its framework runs beside a pipeline (parallel/pipeline/_beside.py: ZeRO-3 with FSDP's `comm` becomes
    torchtitan's no_reshard_no_sync, gathered once a step and reduce-scattered once)."""
    from zerosim.parallel.pipeline import PIPELINE_STRATEGIES, PipelineEngine, plan_beside_pipeline

    if clip_grad is not None:
        raise ValueError("clipping beside pipeline parallelism: the gradient's norm spans every stage "
                         "(Megatron and DeepSpeed all-reduce it over the pipeline group); not modelled yet")
    if parallelisms:
        raise ValueError("offload beside pipeline parallelism is not modelled")
    if wire is not None:  # (ZeroEngine's own rule: ZeRO++'s collectives run over every rank, not a stage's)
        raise ValueError("ZeRO++'s quantized gathers and reductions (and torchao's fp8 all-gather) beside pipeline "
                         "parallelism are not modelled: they run over every rank, not a stage's")
    if mesh.plan.name and mesh.plan.name not in PIPELINE_STRATEGIES:
        raise ValueError(f"{mesh.plan.name} beside pipeline parallelism is not modelled: a stage runs the "
                         f"flat ZeRO stages 0-3 (Megatron's distributed optimizer, torchtitan's FSDP) or "
                         f"{', '.join(PIPELINE_STRATEGIES)}")
    plan = plan_beside_pipeline(mesh.plan, get_comm_schedule(comm))
    spec.check_mesh(mesh)
    dims = spec.dims(mesh.dims.world_size)
    cluster = Cluster(dims.world_size, backend="meta", hosted=dims.groups("pp").group_of(0), trace="call",
                      timeline=False, gpus_per_node=mesh.gpus_per_node)
    for r in cluster.ranks:
        r.ledger.keep_timeline = keep_timeline
    from zerosim.analysis.costs._measured import parallel_model

    whole, beside = parallel_model(model, spec)  # one TP and CP rank's twin and its parallelisms, or the model
    tensor, context = (next((b for b in beside if dim in b.degrees), None) for dim in ("tp", "cp"))
    M = spec.pp if micro_batches is None else micro_batches
    job = (mesh, spec, optimizer, precision, micro_batch, comm, clip_grad, wire, recipe, parallelisms, steps, tokens,
           step, keep_timeline)
    earlier = getattr(records_from, "run_of", (None, None))  # (the model, the other arguments) it was run with
    same = earlier[0] is model and earlier[1] == job
    engine = PipelineEngine(whole, cluster, plan, get_optimizer(optimizer), precision, pp=spec.pp,
                            schedule=spec.pp_schedule, micro_batches=M, virtual_stages=spec.virtual_stages,
                            split_rule=spec.pp_split,
                            tensor=tensor, context=context, checkpoint=getattr(whole, "checkpointing", False),
                            comm=comm, recipe=recipe, records_from=records_from if same else None,
                            time_only=time_only)
    engine.run_of = (model, job)  # what a later run of the same job but M checks before it reads its records
    if step:
        pair = (whole.batches(cluster, batch=tokens) if micro_batch is None else
                whole.batches(cluster, *spec.micro(*micro_batch)))[0]  # every micro-batch the same shapes (a CP
        # rank's L / C tokens of each sequence): one pair stands for all
        for _ in range(steps):
            engine.step([[pair] * M for _ in range(dims.dp)])
    return cluster, engine


def line_points(spec, micro_batches: int) -> tuple | None:
    """(M1, M2): the two smaller step sizes whose simulated times a pipeline's step of M = `micro_batches` lies on the
    line through, or None when M is not past them (run it whole). Past its warm-up a schedule repeats itself: every P
    more micro-batches add the same time on every rank (each the same shapes), so from M1 = the least M' >= 2P with
    M' = M mod P, and M2 = M1 + P, T(M) = T(M1) + (M - M1)/P·(T(M2) - T(M1)); its compute and exposed communication
    likewise (tests/test_pipeline_cli.py holds the line to full simulations of every schedule). The interleaved
    schedules' rounds change with M unless P divides it (torch's microbatches_per_round): then the line needs P | M.
    Its memory is M1's too, the micro-batches in flight saturating by 2P — but for GPipe, which holds all M."""
    from zerosim.parallel.pipeline import get_schedule

    P, M = spec.pp, micro_batches
    looped = get_schedule(spec.pp_schedule).default_virtual > 1
    if looped and M % P:
        return None
    first = 2 * P + (M - 2 * P) % P
    return (first, first + P) if M > first + P else None


def memory_point(spec, micro_batches: int) -> int:
    """The micro-batches M' of the run a pipeline's step of M = `micro_batches` is read from: its memory, and its
    time with the line's second point (`line_points`; planner step_time). The line's first point M1 where the step
    lies on a line, the micro-batches in flight saturating by then; M itself where it does not, or for GPipe, which
    holds all M. The planner's rows and `zerosim validate`'s points both take it."""
    points = None if spec.pp_schedule == "gpipe" else line_points(spec, micro_batches)
    return micro_batches if points is None else points[0]


def stage_rows(engine) -> list:
    """Per pipeline rank p of `engine` (a PipelineEngine on the meta backend, one representative a stage): {"rank",
    "gpus" (its block [lo, hi)), "units" (its first and last unit's names), "layers", "params" (its stages' parameters,
    one TP rank's slice), "peak", "activations" (the ledger's peaks, bytes), "in_flight" (the most micro-batch chunks
    it holds the activations of, from the table)}."""
    rows = []
    for p, (part, rank) in enumerate(zip(engine.stage_models, engine.cluster.ranks)):
        lo = rank.index
        rows.append({"rank": p, "gpus": [lo, lo + engine.dims.world_size // engine.dims.pp],
                     "units": [part.layers[0].name, part.layers[-1].name], "layers": len(part.layers),
                     "params": part.num_params, "peak": rank.ledger.peak(),
                     "activations": rank.ledger.peak("activations"), "in_flight": engine.table.in_flight(p)})
    return rows

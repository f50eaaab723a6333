"""Time at scale: one meta-backend step per (N, stage, link), simulated, and where communication takes over.

Letters: N ranks, Φ a unit's parameters, T tokens per rank per micro-step, R the device's dense 16-bit
rate (FLOP/s), β bytes/s per direction, α seconds per ring step.

The meta backend runs the real engine's schedule on data-less arrays, hosting one representative rank
(its log holds rank 0's computes; every call spans all N), so a 175B step on 4096 ranks takes well under
a second to record and simulate. Each row is rank 0's view: its compute, and the communication its
compute did not hide.

Why exposed communication grows with N (ZeRO-3, one unit gathered ahead). A unit's forward takes
2ΦT/R; its gather (N−1)α + (N−1)/N·2Φ/β. The gather hides behind the previous unit's forward when

    2ΦT/R  >=  (N−1)α + 2Φ/β·(N−1)/N,

so bandwidth alone needs T >= R/β tokens per rank (H100 over InfiniBand NDR: 989e12/50e9 ≈ 19,800),
and past that the ring's latency (N−1)α takes over at N ≈ 1 + 2Φ(T/R − 1/β)/α. Backward carries a
gather and a reduce-scatter on the one communication stream (2× the bytes) against 2× the compute, so
the same bound holds there. `crossover` finds the first N of a sweep where exposed communication is
more than the compute; `latency_bound_ranks` gives the formula's N.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.costs import TOKENS, line_points, parallel_model, pipeline_run, positions_of
from zerosim.analysis.planner._repeat import repeats, twice
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.cluster import Cluster
from zerosim.optim import get_optimizer
from zerosim.parallel import ParallelSpec
from zerosim.parallel.data import ZeroEngine
from zerosim.parallel.data.multinode import DataMesh


@dataclass(frozen=True)
class SweepRow:
    """One simulated step (rank 0's view), seconds; and rank 0's memory peak, bytes."""

    ranks: int
    stage: int
    link: str
    step: float  # the step's time, from its first computation to the end of its refresh
    compute: float  # rank 0's compute stream busy
    comm: float  # the communication stream busy
    exposed: float  # communication while rank 0's compute idled
    peak: int = 0  # the most rank 0's ledger held at once during the step (what a GPU must hold)

    @property
    def exposed_fraction(self) -> float:
        return self.exposed / self.step if self.step else 0.0


def micro_batches(model, cluster, tokens: int, micro_batch: tuple | None, accumulation_steps: int) -> list:
    """What `engine.step` takes on the meta backend: a MetaModel's (tokens, 0) rows, or a decoder twin's (B, L)
    token ids when `micro_batch` = (B, L) is given; a list of K of them per rank with K accumulation steps."""
    if micro_batch is None:
        batches = model.batches(cluster, batch=tokens)
    else:
        batches = model.batches(cluster, *micro_batch)
    return batches if accumulation_steps == 1 else [[b] * accumulation_steps for b in batches]


def meta_step(model, ranks: int | None, stage, hardware: Hardware, comm=None, precision="fp16-mixed",
              tokens: int = TOKENS, optimizer: str = "adam", steps: int = 1, micro_batch: tuple | None = None,
              accumulation_steps: int = 1, clip_grad: float | None = None, wire=None,
              gpus_per_node: int | None = None, shard_group: int | None = None, time_model=None, tp: int = 1,
              sp: bool = False, async_tp: bool = False, mesh=None, recipe=None, parallelisms=(),
              layout: str | None = None, spec=None, records_from=None, time_only: bool = False):
    """Run `steps` steps of `model` on `ranks` meta ranks and simulate them; returns (Timeline, engine). One step
    holds everything a step does, its closing refresh included.

    A `MetaModel` takes `tokens` per rank per micro-step (its layers' FLOPs count rows); a decoder twin (MetaGPT,
    MetaLlama) takes `micro_batch` = (B, L) sequences, its activations in the ledger and its checkpointing
    strategy's recompute in the trace. `accumulation_steps` micro-steps make one step. `stage` may name a strategy for
    many nodes (parallel/data/_plan.py STRATEGIES) with its `shard_group`; `gpus_per_node` places the ranks on nodes;
    or `mesh`, a `DataMesh` (parallel/data/multinode), says all of these and `tp` at once (then `ranks` and `stage`
    may be None). `recipe`: the gradient recipe (a GradientRecipe or its name; None: the plan's default).
    `time_model`: a timeline TimeModel (each kernel class at its achieved rate); None: the datasheet roofline.
    `tp`, `sp`: tensor (and sequence) parallelism beside the stage (a decoder twin's shape; `ranks` every GPU),
    `layout` what a TP rank keeps (parallel/tensor LAYOUTS; None: the library's default).
    `parallelisms`: others beside data parallelism (offload: its copies and CPU step on their own streams). `spec`: a
    ParallelSpec in place of `tp`, `sp`, `async_tp` and `layout`, with context parallelism (`micro_batch` the whole
    sequences; each rank runs its L / C tokens, the time model charges each hop its rank's block). `records_from`:
    beside a pipeline, the engine of a run of the same job but M, whose records this step's alike actions are
    written from (analysis/costs `pipeline_run`); with `time_only` (the Timeline alone is read: not the engine's
    ledgers), every action and the step's end are, where those records hold them all."""
    if type(tokens) is not int or tokens < 1:
        raise ValueError(f"tokens per rank must be a positive integer, got {tokens!r}")
    spec = ParallelSpec.of(spec, mesh.dims.tp if mesh is not None else tp, sp, layout, async_tp)
    mesh = mesh if mesh is not None else DataMesh.of(stage, ranks, gpus_per_node, shard_group, tp=spec.tp, cp=spec.cp,
                                                     pp=spec.pp)
    spec.check_mesh(mesh)
    if spec.pp > 1:  # a pipeline: its engine, every micro-batch of the step (analysis/costs pipeline_run)
        cluster, engine = pipeline_run(model, mesh, spec, optimizer, precision, micro_batch, accumulation_steps, comm,
                                       clip_grad, wire, recipe, parallelisms, steps, tokens,
                                       records_from=records_from, time_only=time_only)
        # a CP rank's L / C tokens, its hops' blocks; each stage's units
        costs = run_costs(engine, time_model, hardware, None if micro_batch is None else spec.micro(*micro_batch))
        return simulate(cluster.trace, hardware, overlap=engine.engines[0].comm.overlap_comm, costs=costs), engine
    cluster = Cluster(mesh.dims.world_size, backend="meta", trace="call", timeline=False,
                      gpus_per_node=mesh.gpus_per_node)
    model, beside = parallel_model(model, spec)  # one TP and CP rank's twin, or the model
    engine = ZeroEngine(model, cluster, mesh.plan, get_optimizer(optimizer), precision, comm=comm,
                        checkpoint=getattr(model, "checkpointing", False), accumulation_steps=accumulation_steps,
                        clip_grad=clip_grad, wire=wire,  # wire: zeropp.Wire, stage 3's gathers in fewer bits
                        shard_group=mesh.group, recipe=recipe, parallelisms=(*beside, *parallelisms))
    local = None if micro_batch is None else spec.micro(*micro_batch)  # a CP rank's L / C tokens
    for _ in range(steps):
        engine.step(micro_batches(model, cluster, tokens, local, accumulation_steps))
    costs = None if time_model is None else time_model.costs(model, local, hardware,
                                                             positions_of(beside, cluster, engine.dims))
    return simulate(cluster.trace, hardware, overlap=engine.comm.overlap_comm, costs=costs), engine


@dataclass(frozen=True)
class StepTime:
    """One step of K micro-steps, rank 0's view, seconds; `simulated`: the micro-step counts actually simulated."""

    step: float
    compute: float
    exposed: float
    simulated: tuple


def step_time(model, ranks: int, stage: int, hardware: Hardware, comm=None, precision="fp16-mixed",
              optimizer: str = "adam", micro_batch: tuple | None = None, accumulation_steps: int = 1,
              tokens: int = TOKENS, first: StepTime | None = None, time_model=None, second: StepTime | None = None,
              **beside) -> StepTime:
    """A step of K micro-steps: simulated for K = 1 and 2, and for K > 2 the line through them.

    The simulated step is affine in K: T(K) = T(1) + (K − 1)·(T(2) − T(1)), and so are compute and exposed
    communication (every micro-step but the last starts and ends with both streams in the same state;
    tests/test_plan.py holds the line to full simulations, every stage, schedule and strategy, to 1e-12 relative:
    float sums in another order). The planner uses it; `zerosim timeline` simulates every micro-step. Beside
    pipeline parallelism (a `spec` with pp > 1 in `beside`) the step of K micro-batches is simulated whole, or, past
    twice the pipeline's warm-up, on the line through two smaller steps its repeating schedule draws
    (analysis/costs line_points); `first`: the step simulated already (of K, or of the line's first point).
    `first`: the K = 1 step when it was simulated already (the planner's memory run); `second`: the K = 2 step when
    it is known already (the planner writes its log from the memory run's: _repeat.py); `beside`: meta_step's
    gpus_per_node, wire, tp, sp, parallelisms, or a `mesh` (a DataMesh) saying `ranks`, `stage`, the nodes and tp at
    once."""
    def run(K):  # its times alone are read: a pipeline's step written from the records it carries (`time_only`)
        result, engine = meta_step(model, ranks, stage, hardware, comm, precision, tokens, optimizer,
                                   micro_batch=micro_batch, accumulation_steps=K, time_model=time_model,
                                   time_only=True, **beside)
        engine.cluster.let_go()  # its times read: the run goes with its last reference (_plan.py `let_go`)
        return StepTime(result.step_time, float(result.compute_busy[0]), float(result.exposed_comm[0]), (K,))

    K = accumulation_steps
    spec = beside.get("spec")
    if spec is not None and spec.pp > 1:  # a pipeline's step: whole, or on the line its repeating schedule draws
        if first is not None and first.simulated == (K,):
            return first
        points = line_points(spec, K)
        if points is None:
            return run(K)
        (m1, m2), one = points, first if first is not None and first.simulated == (points[0],) else run(points[0])
        two = run(m2)
        pairs = zip((one.step, one.compute, one.exposed), (two.step, two.compute, two.exposed))
        return StepTime(*(a + (K - m1) / (m2 - m1) * (b - a) for a, b in pairs), (m1, m2))
    one = first if first is not None else run(1)
    if K == 1:
        return one
    two = second if second is not None and second.simulated == (2,) else run(2)
    pairs = zip((one.step, one.compute, one.exposed), (two.step, two.compute, two.exposed))
    line = (a + (K - 1) * (b - a) for a, b in pairs)
    return StepTime(*line, (1, 2))


def step_time_of(result, micro_steps: int = 1) -> StepTime:
    """The StepTime of a simulated one-step Timeline of `micro_steps` micro-steps (rank 0's view)."""
    return StepTime(result.step_time, float(result.compute_busy[0]), float(result.exposed_comm[0]), (micro_steps,))


def run_costs(engine, time_model, hardware: Hardware, micro_batch: tuple | None = None):
    """The time model's costs for the run of a meta ZeroEngine or PipelineEngine `engine` whose ranks each ran
    `micro_batch` = (B, L) (a CP rank's share: `ParallelSpec.micro`), each rank at its place among the parallelisms
    and, beside a pipeline, each rank's events timed by its own stage's units; None without a time model
    (simulate's own kernel times)."""
    if time_model is None:
        return None
    positions = positions_of(engine.parallelisms.members, engine.cluster, engine.dims)
    if hasattr(engine, "layer_units"):  # a pipeline: a rank's events name its stage model's layers
        return time_model.costs(engine.timed_model, micro_batch, hardware, positions, engine.layer_units())
    return time_model.costs(engine.model, micro_batch, hardware, positions)


def written_second(engine, hardware: Hardware, costs=None) -> StepTime | None:
    """The step of K = 2 micro-steps of `engine`, a meta ZeroEngine that ran one step of one micro-step, written from
    its log instead of run (_repeat.py `twice`: the second step's timeline to the bit) and simulated with the `costs`
    the first was (`run_costs`; the same object keeps its kernel times); None where its step does not repeat
    (`repeats`). What `step_time` takes as `second`."""
    written = twice(engine.cluster.trace, engine.parallelisms.members) if repeats(engine) else None
    if written is None:
        return None
    return step_time_of(simulate(written, hardware, overlap=engine.comm.overlap_comm, costs=costs), 2)


def row_of(result, ranks: int, stage: int, link: str, peak: int = 0) -> SweepRow:
    """Rank 0's numbers from a simulated step."""
    if len(result.step_times) > 1:
        raise ValueError("row_of reads a one-step timeline (its busy times are totals over the log)")
    return SweepRow(ranks, stage, link, result.step_time, float(result.compute_busy[0]), float(result.comm_busy[0]),
                    float(result.exposed_comm[0]), int(peak))


def sweep(model, ranks_list, stages=(1, 2, 3), links=("nvlink4", "ib_ndr"), device: str = "h100", comm=None,
          precision: str = "fp16-mixed", tokens: int = TOKENS, progress=None, time_model=None) -> list:
    """SweepRows for every (link, stage, N), each with rank 0's peak memory. `progress(done, total)` after each."""
    from zerosim.precision import get_precision

    compute = get_precision(precision).compute
    rows, total = [], len(links) * len(stages) * len(ranks_list)
    for link in links:
        hw = Hardware(device, link, compute)
        for stage in stages:
            for n in ranks_list:
                result, engine = meta_step(model, n, stage, hw, comm, precision, tokens, time_model=time_model)
                rows.append(row_of(result, n, stage, link, engine.cluster.ranks[0].ledger.peak()))
                if progress is not None:
                    progress(len(rows), total)
    return rows


def crossover(rows, stage: int, link: str) -> int | None:
    """The smallest N of the sweep at which exposed communication exceeds compute (for `stage`, `link`), or None."""
    for row in sorted((r for r in rows if r.stage == stage and r.link == link), key=lambda r: r.ranks):
        if row.exposed > row.compute:
            return row.ranks
    return None


def latency_bound_ranks(unit_params: float, tokens: int, hardware: Hardware, rate: float | None = None) -> float | None:
    """N at which a unit's gather, (N−1)α + 2Φ/β (large N), equals its forward 2ΦT/R: 1 + 2Φ(T/R − 1/β)/α.
    None when bandwidth alone already exceeds the compute (T < R/β): no N hides it. `rate`: the FLOP/s compute
    runs at (default the device's dense peak; kernel_time.TimeModel.gemm_rate for the calibrated one)."""
    link = hardware.link
    rate = hardware.device.rate(hardware.compute) if rate is None else rate
    slack = 2 * unit_params * (tokens / rate - 1 / link.bandwidth)  # seconds of compute left after the bytes
    if slack <= 0:
        return None
    return 1 + slack / link.alpha

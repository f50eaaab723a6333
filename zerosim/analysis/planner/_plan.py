"""The planner: which ZeRO stage × checkpointing strategy × micro-batch fits a GPU, and how long each step takes.

    p = plan(read_hf_config("config.json"), ranks=64, gpus_per_node=8, gpu="h100-80gb", seq_len=4096,
             global_batch=1024, precision="bf16-mixed")
    p.fitting[0]            # the fastest configuration that fits: its stage, strategy, micro-batch, time, memory

Letters: N ranks, B sequences per rank per micro-step, K micro-steps per step, L tokens per sequence; the global
batch is N·B·K sequences.

Every number is the same code's that `zerosim memory` and `zerosim timeline` run: memory is one micro-step of the
model's data-less twin on the meta backend, read from rank 0's ledger (`costs.measured.measure_stage`: the
peak does not change with K, every micro-step holds the same); time is a whole step of K micro-steps, simulated
(`timeline.sweep.step_time`: that same run is K = 1; past K = 2 the line through K = 1 and 2, which a full
simulation stays on to 1e-12) on the GPU's compute preset over NVLink 4 inside a node or InfiniBand NDR when
the ring spans nodes. So a row is reproduced by running those two commands with its settings (`commands`).

The search is pruned, never guessed: a stage whose model states alone exceed the GPU is skipped (no strategy
or micro-batch can make them smaller), and a strategy's micro-batches are tried smallest first, stopping at
the first that does not fit (every activation grows with B, nothing else changes). Candidates that fit are
ranked by step time.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from dataclasses import asdict, field, replace

from zerosim._collector import fewer_collections
from zerosim._dataclass import dataclass
from zerosim.analysis.costs import (ALLOCATOR_RESERVE, deepspeed_buckets, fit, get_gpu, memory_point,
                                    runtime_overheads)
from zerosim.analysis.planner._jobs import check_jobs, in_order
from zerosim.analysis.planner._sweep import run_costs, step_time, step_time_of, written_second
from zerosim.analysis.timeline import Hardware, TimeModel, get_device, simulate

PLAN_WORDS = {"micro_batches": "K =", "pp": "PP", "pp_schedule": "schedule", "stage": "ZeRO stage"}  # the plan's


def _label(stage: int, strategy: str, B: int, spec, label: str) -> str:
    """One configuration by name, as `plan` tells its `progress`: "ZeRO-3 block B=2 tp 2 pp 4 optimizer-cpu"."""
    return (f"ZeRO-{stage} {strategy} B={B}" + "".join(f" {d} {v}" for d, v in spec.degrees.items())
            + ("" if label == "none" else f" {label}"))


@dataclass(frozen=True)
class PlanRow:
    """One configuration tried: its memory (measured), the verdict, and its step (simulated) when it fits."""

    stage: int
    strategy: str  # a checkpointing strategy (models.gpt.STRATEGIES)
    micro_batch: int  # B
    accumulation: int  # K
    peak: int  # rank 0's ledger peak, bytes
    at_peak: dict  # {kind: bytes} live at the moment of the peak (sums to peak)
    resting: int  # the model states left after the step, bytes
    overheads: int  # the labelled estimates (costs.overheads), bytes
    capacity: int  # the GPU's, bytes
    step_s: float | None = None  # None when it does not fit (not timed)
    compute_s: float | None = None
    exposed_s: float | None = None
    offload: str = "none"  # the offload configuration's label ("none": everything on the device)
    host_peak: int = 0  # rank 0's host ledger peak, bytes (offload)
    nvme_peak: int = 0  # rank 0's NVMe ledger peak, bytes (offload)
    host_fits: bool = True  # the ranks of a node fit its host DRAM and NVMe (costs.host_fit)
    tp: int = 1  # tensor parallelism's degree beside the stage (the data-parallel degree is ranks / (tp · cp · pp))
    cp: int = 1  # context parallelism's degree: each of cp GPUs holds 1/cp of every sequence
    pp: int = 1  # pipeline parallelism's degree: the layers cut into pp stages, K the micro-batches a step
    pp_schedule: str | None = None  # with pp > 1: the schedule (parallel/pipeline SCHEDULES)
    virtual_stages: int | None = None  # with pp > 1: the stages a rank holds (None: the schedule's default)

    @property
    def total(self) -> int:
        return self.peak + self.overheads

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity and self.host_fits

    @property
    def margin(self) -> int:
        return self.capacity - self.total


@dataclass(frozen=True)
class Plan:
    """Every configuration tried, the fitting ones ranked by step time, the stages pruned, and the settings."""

    rows: tuple  # every PlanRow measured
    fitting: tuple  # the rows that fit, fastest first
    pruned: tuple  # ((stage, model-state bytes), ...): stages whose model states alone do not fit
    settings: dict  # what was asked: model, ranks, gpus_per_node, gpu, seq_len, global_batch, precision, ...
    link: str  # the ring's link
    pruned_offload: tuple = ()  # ((stage, device model-state bytes, placement), ...): the same, with an offload
    # (({degree: value}, strategy or None, why), ...): strategies a combination of degrees cannot run, or (None) a
    # combination not tried at all, with the reason
    left_out: tuple = ()

    def commands(self, row: PlanRow, model_flag: str) -> tuple:
        """The `zerosim memory` and `zerosim timeline` command lines that reproduce `row` (model_flag: "--model X"
        or "--config PATH")."""
        s = self.settings
        common = (
            f"{model_flag} --ranks {s['ranks']} --seq-len {s['seq_len']} --batch {row.micro_batch} "
            f"--checkpoint {row.strategy} --gpu {s['gpu']} --precision {s['precision']} --optimizer {s['optimizer']} "
            f"--comm {s['comm']} --kernels {s['kernels']} --loss {s['loss']}"
        )
        if s.get("overlap_comm") is not None:  # the schedule's own default otherwise, as the commands read it
            common += f" --overlap-comm {'on' if s['overlap_comm'] else 'off'}"
        beside = row.tp > 1 or row.cp > 1 or row.pp > 1
        if beside:
            common += " " + self.spec_of(row).flags() + f" --gpus-per-node {s['gpus_per_node']}"
        if row.pp > 1:  # a pipeline's memory depends on its micro-batches in flight
            common += f" --accumulation-steps {row.accumulation}"
        return (
            f"zerosim memory {common}",
            f"zerosim timeline {common} --stage {row.stage}"
            + ("" if row.pp > 1 else f" --accumulation-steps {row.accumulation}") + " "
            + ("" if beside else f"--gpus-per-node {s['gpus_per_node']} ") + s["time_flags"],
        )

    def spec_of(self, row: PlanRow):
        """The ParallelSpec `row` ran beside its stage: its degrees with the plan's options."""
        from zerosim.parallel import ParallelSpec

        s = self.settings
        return ParallelSpec(tp=row.tp, sp=bool(s.get("sp")) and row.tp > 1,
                            tp_layout=s.get("tp_layout") if row.tp > 1 else None, cp=row.cp,
                            cp_style=s.get("cp_style", "ring") if row.cp > 1 else "ring",
                            cp_split=s.get("cp_split", "zigzag") if row.cp > 1 else "zigzag", pp=row.pp,
                            pp_schedule=row.pp_schedule or "1f1b", virtual_stages=row.virtual_stages,
                            pp_split=s.get("pp_split", "torchtitan") if row.pp > 1 else "torchtitan")


def default_precision(gpu) -> str:
    """The precision a plan on `gpu` (a GPUS key or GPU) runs when none is given: bf16-mixed, or fp16-mixed on a GPU
    without bf16 units (the V100: timeline `Device.bf16`)."""
    return "bf16-mixed" if get_device(get_gpu(gpu).device).bf16 else "fp16-mixed"


def divisors(n: int) -> tuple:
    """Every divisor of n, ascending (pairs d, n // d up to √n: a billion-sequence batch is not a billion tries)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


@contextlib.contextmanager
def let_go(measured: tuple):
    """A memory run's (row, cluster, engine) (`costs.measure_stage`) while the block reads it; then its cluster lets
    go of every live buffer (cluster/_cluster.py `Cluster.let_go`), an exception too. A ledger and the buffers it
    holds point at each other: left so, each run's ledgers, with their timelines (~4,000 events a run of the
    README's plan), outlived the run until the cyclic collector found them, and every young collection before that
    looked at them again; let go, a run is freed with its last reference."""
    try:
        yield measured
    finally:
        measured[1].let_go()


@fewer_collections()  # the memory runs' ~4 M short-lived objects
def plan(config, ranks: int, gpus_per_node: int, gpu, seq_len: int, global_batch: int, precision: str | None = None,
         optimizer: str = "adam", comm: str = "deepspeed", stages=(0, 1, 2, 3), strategies=None, micro_batches=None,
         reserve: float = ALLOCATOR_RESERVE, progress=None, time_model=None, links: tuple = (None, "ib_ndr"),
         kernels: str = "fused", loss: str | None = None, hardware=None, tps=(1,), sp: bool = False,
         spelling=None, offloads: tuple = (), host=None, layout: str | None = None, specs=None, jobs=1,
         overlap_comm: bool | None = None) -> Plan:
    """Try every stage × strategy × micro-batch for `config` (a DecoderConfig) on `ranks` GPUs (see the module
    docstring); `progress(done_label)` is called after each configuration measured (with several `jobs`, as each
    piece comes back). `jobs`: the worker processes the configurations are measured on, each strategy of a stage
    beside each combination of degrees a piece of its own, once each stage's model states were read here (a
    pipeline's stage's: from its first strategy's step) (_jobs.py: the same plan, byte for byte, in less wall time;
    "auto": every core; 1, the default: this process). `time_model`: what a compute costs (a timeline TimeModel;
    None: the datasheet roofline); `links`: (within a node, None: the GPU's NVLink (timeline Device.link); between
    nodes); `kernels` and `loss`: what the activations and the loss keep (models.meta KERNELS, LOSSES);
    `precision`: a preset name (None: `default_precision(gpu)`, bf16-mixed where the GPU has bf16 units);
    `comm`: a schedule's name (parallel.data get_comm_schedule), with `overlap_comm` (None: the schedule's own default,
    DeepSpeed's on at stage 3 only); `hardware(hw)`: a function that adjusts the
    Hardware (the CLI's link flags). `tps`: the tensor-parallel degrees to try beside every stage (each dividing
    `ranks`: the data-parallel degree is ranks / tp, each TP group training on its data-parallel rank's
    micro-batches), with sequence parallelism when `sp`; with TP the ranks sit on nodes of `gpus_per_node`, TP's
    rings within a node and the data-parallel ones across nodes, a rank keeping what `layout` says (parallel/tensor
    LAYOUTS; None: the library's default). Strategies TP's units cannot run are not tried beside it (`left_out`,
    with the reason). Or `specs`: the combinations of parallel degrees to try, as data — ((ParallelSpec, None) or
    ({degree: value}, why it is refused), ...), the product of each degree's list (the CLI's `specs_of`): each tried
    beside every stage, a refused one left out with its reason, and each strategy a combination cannot run (TP's
    checkpointing rules, CP's flash attention: ParallelSpec.model_check) left out beside it. `spelling`: how the
    caller names `ranks` and `gpus_per_node` in errors (a multinode.Spelling; default these arguments' names).

    `offloads`: ((name, at), ...) offload configurations tried beside none, each at the stages it runs at: `at(stage)`
    returns (label, parallelisms): what runs there (parallel/offload's Offload and its placement's name), or raises
    ValueError where nothing does; a label tried at a stage already is not tried again.
    Their rows fit when the device does and the ranks of a node fit its `host` (a costs.Host; default the host whose
    GPUs are `gpu`, costs `host_of`, as the commands take it), and are timed with their copies and CPU step on the
    timeline; they are tried at tp = 1 only (offload beside tensor parallelism is not modelled)."""
    from zerosim.analysis.costs import get_host, host_of
    from zerosim.models.gpt import ALL_STRATEGIES
    from zerosim.models.meta import LOSS_OF
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.precision import get_precision

    g = get_gpu(gpu)
    precision = precision or default_precision(g)
    specs = _tp_specs(tps, sp, layout) if specs is None else tuple(specs)
    tried = _check(config, ranks, gpus_per_node, seq_len, global_batch, specs, spelling, optimizer)
    jobs = check_jobs(jobs)
    strategies = tuple(strategies or ALL_STRATEGIES)
    left_out, runs = _left_out(strategies, tried, seq_len, kernels)
    tps = tuple(dict.fromkeys(spec.tp for spec, _ in runs))
    nodes = ranks > gpus_per_node  # two tiers: the rings that leave a node cross it over the inter link
    links = (links[0] or get_device(g.device).link, links[1])  # within a node, by default the GPU's own NVLink
    hw = Hardware(g.device, links[0], get_precision(precision).compute, inter_link=links[1] if nodes else None)
    host = host_of(g) if host is None else get_host(host)  # the host whose GPUs are `gpu`, as the commands read it
    hw = hw.on_host(host, min(ranks, gpus_per_node), g) if hardware is None else hardware(hw)  # offload's links
    schedule = get_comm_schedule(comm)
    schedule = schedule if overlap_comm is None else schedule.with_(overlap_comm=overlap_comm)
    trial = _Trial(config, ranks, gpus_per_node, nodes, g, seq_len, precision, optimizer, schedule, reserve,
                   time_model, hw, kernels, loss, host)
    work, done = [], set()  # each stage tried: (stage, strategies, batches, spec, per_rank, label, more)
    for spec, mine in runs:
        alone = spec.tp == 1 and spec.cp == 1 and spec.pp == 1
        per_rank = global_batch // spec.dims(ranks).dp  # sequences a data-parallel rank (a TP/CP group) takes a step
        batches = tuple(b for b in (micro_batches or divisors(per_rank)) if per_rank % b == 0)
        if not batches:
            raise ValueError(f"no micro-batch divides the {per_rank} sequences each rank takes per step")
        for _, at in (("none", None), *(offloads if alone else ())):  # offload beside TP or CP: not modelled
            for stage in stages:
                try:
                    label, more = ("none", ()) if at is None else at(stage)
                except ValueError:  # this offload does not run at this stage
                    continue
                if (spec, stage, label) in done:  # (DeepSpeed runs several offload keys alike at stages 1/2)
                    continue
                done.add((spec, stage, label))
                work.append((stage, mine, batches, spec, per_rank, label, more))
    # a stage's model states alone are read first, before any step (`_Trial.too_big`): a stage they do not fit is
    # pruned at once; the others' strategies are a piece each, measured on `jobs` processes (_jobs.py), their rows
    # taken in order. A pipeline's stage is read from its steps (the rank that peaks is known only once a step ran):
    # in this process one piece, which stops at the strategy whose step finds the states too big; on workers a piece a
    # strategy, the ones after that strategy measured for nothing and dropped here, as if never run
    pieces, tried_stages = [], []  # `_Trial.rows` arguments; (stage, spec, label, pieces, states or None, a label)
    for stage, mine, batches, spec, per_rank, label, more in work:
        states = None if spec.pp > 1 else trial.too_big(stage, mine[0], batches[0], spec, per_rank, more)
        whole = spec.pp > 1 and jobs == 1
        cut = () if states is not None else (mine,) if whole else tuple((s,) for s in mine)
        tried_stages.append((stage, spec, label, len(cut), states, _label(stage, mine[0], batches[0], spec, label)))
        pieces += [(stage, strategies, batches, spec, per_rank, label, more) for strategies in cut]
    me = os.getpid()

    def piece(i):  # each configuration told as it is measured in this process; a worker's come back with its rows
        try:
            return trial.rows(*pieces[i], tell=progress if os.getpid() == me else None)
        except Exception as e:  # raised in its turn below, unless an earlier strategy's step pruned its stage: one
            return e  # process, which stops at that step, never ran it

    rows, pruned, pruned_offload, refused = [], [], [], []
    with contextlib.closing(in_order(piece, len(pieces), jobs)) as results:
        for stage, spec, label, count, states, first in tried_stages:
            if states is not None and progress is not None:
                progress(first)  # pruned on its model states alone
            for result in itertools.islice(results, count):
                if states is not None:  # a step found the states too big: the stage's later strategies dropped
                    continue
                if isinstance(result, Exception):
                    raise result
                stage_rows, found, refusals, untold = result
                for done_label in untold if progress is not None else ():
                    progress(done_label)
                rows += stage_rows
                refused += [r for r in refusals if r not in refused]  # a pipeline's micro-batches refused, once each
                states = found
            if states is None:
                continue
            if label != "none":  # the device's model states alone: this placement cannot fit this stage
                pruned_offload.append((stage, states, label))
            else:
                alone = spec.tp == 1 and spec.cp == 1 and spec.pp == 1
                pruned.append((stage, states) if alone else (stage, states, spec.degrees))
    fitting = tuple(sorted((r for r in rows if r.fits), key=lambda r: (r.step_s, r.stage, r.micro_batch, r.tp,
                                                                        r.cp, r.pp)))
    left_out += tuple(refused)  # a pipeline's micro-batches its schedule or the frameworks refuse, by reason
    cps = tuple(dict.fromkeys(spec.cp for spec, _ in runs))
    pps = tuple(dict.fromkeys(spec.pp for spec, _ in runs))
    pipeline = {} if pps == (1,) else {
        "pps": pps, "pp_schedules": tuple(dict.fromkeys(s.pp_schedule for s, _ in runs if s.pp > 1)),
        "pp_split": next(s.pp_split for s, _ in runs if s.pp > 1)}
    context = {} if cps == (1,) else {"cps": cps, "cp_style": next(s.cp_style for s, _ in runs if s.cp > 1),
                                      "cp_split": next(s.cp_split for s, _ in runs if s.cp > 1)}
    settings = {
        "model": config.name, "params": config.num_params, "ranks": ranks, "gpus_per_node": gpus_per_node,
        "gpu": g.key, "gpu_name": g.name, "capacity": g.capacity, "device": g.device, "seq_len": seq_len,
        "global_batch": global_batch,
        "per_rank": global_batch // ranks,  # sequences a GPU's data-parallel rank takes per step without TP
        **({"tps": tps, "sp": any(s.sp for s, _ in runs), "tp_layout": next(s.tp_layout for s, _ in runs
                                                                               if s.tp > 1)} if tps != (1,) else {}),
        **context, **pipeline,
        "precision": precision, "optimizer": optimizer, "comm": comm, "overlap_comm": overlap_comm, "reserve": reserve,
        "strategies": strategies,
        "micro_batches": batches if len(runs) == 1 else micro_batches, "stages": tuple(stages),
        "time_model": (time_model or TimeModel()).describe(), "time_flags": (time_model or TimeModel()).flags(),
        "links": tuple(links), "hardware": trial.hardware, "kernels": kernels, "loss": loss or LOSS_OF[kernels],
        "buckets": None if trial.buckets is None else asdict(trial.buckets),  # DeepSpeed's, in each row's estimates
        **({"offloads": tuple(name for name, _ in offloads), "host": host.key,  # and what the rows were judged on
            "host_node": {"name": host.name, "memory": host.memory, "nvme": host.nvme}} if offloads else {}),
    }
    return Plan(tuple(rows), fitting, tuple(pruned), settings, links[1] if nodes else links[0], tuple(pruned_offload),
                left_out)


def _tp_specs(tps, sp: bool, layout: str | None) -> tuple:
    """The ((ParallelSpec, None), ...) of `tps` (each a TP degree: the older argument) with SP and the layout where
    the degree is above 1."""
    from zerosim.parallel import ParallelSpec

    out = []
    for tp in tuple(tps):
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"a tensor-parallel degree must divide the GPUs, got {tp!r}")
        out.append((ParallelSpec(tp=tp, sp=sp and tp > 1, tp_layout=layout if tp > 1 else None), None))
    return tuple(out)


def _left_out(strategies: tuple, specs: tuple, seq_len: int, kernels: str) -> tuple:
    """((({degree: value}, strategy or None, why), ...), ((spec, its strategies), ...)): what each combination of
    degrees cannot run — the whole combination where it or the model refuses it (a strategy of None), else the
    strategies its parallelisms' units cannot run (ParallelSpec.model_check: TP's checkpointing, CP's flash
    attention) — and what is left to try. Nothing left to try at all is an error."""
    from zerosim.models.gpt import strategy_options
    from zerosim.parallel import DEGREES

    out, runs = [], []
    for spec, why in specs:
        degrees = spec if why is not None else {d: getattr(spec, d) for d in DEGREES}
        if why is None:
            try:  # the combination itself: CP's sequence length, its twin beside TP, its kernels
                spec.model_check(seq_len, "flash", None, kernels=kernels) if spec.cp > 1 else None
            except ValueError as e:
                why = str(e)
        if why is not None:
            out.append((degrees, None, why))
            continue
        mine = []
        for name in strategies:
            options = strategy_options(name)
            try:
                spec.model_check(None, options.get("attention", "standard"), options.get("checkpoint"))
            except ValueError as e:
                out.append((degrees, name, str(e)))
                continue
            mine.append(name)
        if mine:
            runs.append((spec, tuple(mine)))
    if not runs:
        reasons = "; ".join(sorted({why for _, _, why in out}))
        raise ValueError(f"none of the strategies {', '.join(strategies)} runs beside the parallel degrees asked "
                         f"for: {reasons}")
    return tuple(out), tuple(runs)


def _degrees_of(spec) -> dict:
    """A combination of degrees as a left-out line names it: {degree: value} of its degrees above 1, and a
    pipeline's schedule."""
    return {**spec.degrees, **({"pp_schedule": spec.pp_schedule} if spec.pp > 1 else {})}


def _check(config, ranks, gpus_per_node, seq_len, global_batch, specs, spelling, optimizer="adam") -> tuple:
    """The combinations of parallel degrees to try (a combination whose data-parallel degree does not split the
    global batch is refused with its reason), every argument checked first (the optimizer beside TP included, before
    anything is measured)."""
    from zerosim.optim import get_optimizer
    from zerosim.parallel.data.multinode import Spelling, check_matrix_optimizer, check_nodes

    for name, v in (("ranks", ranks), ("gpus_per_node", gpus_per_node), ("seq_len", seq_len),
                    ("global_batch", global_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    # the one rule `zerosim memory` and `timeline` follow, so the commands the plan prints run (DataMesh)
    check_nodes(ranks, gpus_per_node, spelling or Spelling(ranks="ranks"))
    out = []
    for spec, why in specs:
        if why is None:
            spec.check(ranks)
            dp = spec.dims(ranks).dp
            if global_batch % dp:
                beside = " × ".join(f"{d} {v}" for d, v in spec.degrees.items())
                over = f"{ranks} ranks" if not beside else f"{dp} data-parallel ranks ({ranks} GPUs / {beside})"
                message = (f"a global batch of {global_batch} sequences does not split over {over} "
                           f"(each rank takes micro-batch × accumulation sequences per step)")
                if len(specs) == 1:
                    raise ValueError(message)
                spec, why = _degrees_of(spec), message  # left out as the other refused combinations are: by its degrees
        out.append((spec, why))
    if seq_len > config.max_positions:
        raise ValueError(f"--seq-len {seq_len} is longer than {config.name}'s {config.max_positions} positions")
    for spec, why in out:  # the engine's own rule (Muon orthogonalises whole matrices), asked before any step
        if why is None:
            check_matrix_optimizer(spec.dims(ranks), get_optimizer(optimizer))
    return tuple(out)


@dataclass(frozen=True)
class _Trial:
    """What every configuration the planner tries shares: the model's config, the job, the GPU, the settings."""

    config: object
    ranks: int
    gpus_per_node: int
    nodes: bool  # more than one node: two link tiers
    gpu: object
    seq_len: int
    precision: str
    optimizer: str
    schedule: object
    reserve: float
    time_model: object
    hardware: object
    kernels: str
    loss: str | None
    host: object  # a costs.Host: a node's DRAM and NVMe, which offloaded rows must fit
    # strategy -> the model's data-less twin: built once, measured at every degree, offload and stage
    twins: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def buckets(self):
        """DeepSpeed's gradient bucket buffers under the planner's schedule (costs.deepspeed_buckets), or None."""
        return deepspeed_buckets(self.schedule, self.precision)

    def rows(self, stage: int, strategies: tuple, batches: tuple, spec, per_rank: int, label: str = "none",
             more: tuple = (), tell=None) -> tuple:
        """(every PlanRow tried at `stage` beside the parallelisms of `spec` (a ParallelSpec) for `strategies`, in
        order, the model states' bytes where a step found they alone exceed the GPU (the stage pruned there; else
        None), the (({degree: value}, None, why), ...) a pipeline's schedule or the frameworks refuse of it, each
        configuration measured by name unless `tell(name)` was told it as it was measured). Each strategy's
        micro-batches are tried smallest first, up to the first that does not fit; `per_rank`: the sequences a
        data-parallel rank takes per step; `label`, `more`: the offload placement and its parallelisms ("none", ()).
        A stage that is not a pipeline's had its model states read before any step (`too_big`)."""
        mesh, refused, untold = self.mesh(stage, spec), [], []
        tell = untold.append if tell is None else tell
        if spec.pp > 1:  # the micro-batches whose K = per_rank / B the schedule and the frameworks run
            batches, refused = self.pipeline_batches(spec, stage, batches, per_rank)
        rows = []
        for strategy in strategies:
            model = self.twin(strategy)
            for B in batches:
                row, states = self.measure(mesh, spec, model, strategy, B, per_rank, label, more)
                tell(_label(stage, strategy, B, spec, label))
                if states is not None:
                    return rows, states, refused, untold
                rows.append(row)
                if not row.fits:
                    break  # a larger micro-batch only holds more activations
        return rows, None, refused, untold

    def too_big(self, stage: int, strategy: str, B: int, spec, per_rank: int, more: tuple = ()) -> int | None:
        """The model states' bytes at `stage` beside `spec` where they alone exceed the GPU, else None: read from the
        engine before any step (a step leaves a rank's as the engine made them, tests/test_plan.py), so a stage they
        do not fit is pruned without one. Not for a pipeline's stage: its rank that peaks is known once its step ran."""
        from zerosim.analysis.costs import measure_stage

        run = self.run_of(self.mesh(stage, spec), spec, B, per_rank, more)
        with let_go(measure_stage(self.twin(strategy), None, None, self.optimizer, self.precision, step=False,
                                  **run)) as made:
            resting = sum(made[0]["resting"].values())
        return resting if fit(resting, self.gpu).total > self.gpu.capacity else None

    def mesh(self, stage: int, spec):
        """The stage on the job's ranks and nodes (beside TP, CP or PP the ranks sit on nodes even within one)."""
        from zerosim.parallel.data.multinode import DataMesh

        beside = spec.tp > 1 or spec.cp > 1 or spec.pp > 1
        return DataMesh.of(stage, self.ranks, self.gpus_per_node if self.nodes or beside else None, tp=spec.tp,
                           cp=spec.cp, pp=spec.pp)

    def twin(self, strategy: str):
        """The model's data-less twin under `strategy`: built once, measured at every degree, offload and stage."""
        from zerosim.models.gpt import MetaGPT, strategy_options
        from zerosim.models.llama import MetaLlama

        if strategy not in self.twins:
            twin = MetaLlama if self.config.layout == "llama" else MetaGPT
            self.twins[strategy] = twin.from_config(self.config, self.seq_len, kernels=self.kernels, loss=self.loss,
                                                    **strategy_options(strategy))
        return self.twins[strategy]

    def run_of(self, mesh, spec, B: int, per_rank: int, more: tuple) -> dict:
        """`measure_stage`'s arguments for one micro-batch B (a pipeline's: its step of K = per_rank / B at the
        line's first point, or K itself: costs `memory_point`), reading memory alone."""
        pipeline, K = spec.pp > 1, per_rank // B
        return {"micro_batch": (B, self.seq_len), "comm": self.schedule, "mesh": mesh, "parallelisms": more,
                "spec": spec, "micro_batches": memory_point(spec, K) if pipeline else None,
                "totals": False,  # a row reads memory; the bytes sent are not printed
                "timeline": False}  # nor which buffer was live when (its bars: the ledger's `at_peak`)

    def pipeline_batches(self, spec, stage: int, batches: tuple, per_rank: int) -> tuple:
        """The micro-batches B whose K = per_rank / B micro-batches a step `spec`'s pipeline runs at `stage`
        (ParallelSpec.pipeline_check: 1F1B refuses K < P, the interleaved schedules' rounds, a recipe or buckets a
        pipeline refuses), and the others left out: (({degree: value}, None, why),), one line for the combination
        with the first reason, or ()."""
        degrees = _degrees_of(spec)
        try:  # the stage beside the pipeline (K = P always runs: every schedule's table takes it)
            spec.pipeline_check(spec.pp, stage, self.precision, None, self.schedule, PLAN_WORDS)
        except ValueError as e:
            return (), [(degrees, None, f"ZeRO-{stage}: {e}")]
        ok, refused = [], []
        for B in batches:
            try:
                spec.pipeline_check(per_rank // B, names=PLAN_WORDS)
                ok.append(B)
            except ValueError as e:
                refused.append((B, str(e)))
        if refused:
            why = (f"micro-batch {', '.join(str(B) for B, _ in refused)} ({per_rank} sequences a data-parallel rank: "
                   f"K = {per_rank} / B): {refused[0][1]}")
            return tuple(ok), [(degrees, None, why)]
        return tuple(ok), []

    def measure(self, mesh, spec, model, strategy: str, B: int, per_rank: int, label: str = "none",
                more: tuple = ()):
        """(the PlanRow of one micro-step at micro-batch B, timed when it fits; the model states' bytes when they
        alone exceed the GPU, else None). With an offload `label`, the row holds the host's and NVMe's peaks and
        whether a node's ranks fit its host. A pipeline's row reads the rank that peaks."""
        from zerosim.analysis.costs import host_fit, measure_stage

        tp = spec.tp
        pipeline = spec.pp > 1  # a pipeline's memory and time: its whole step's, or its line's first point's
        run = self.run_of(mesh, spec, B, per_rank, more)
        M = run["micro_batches"]  # a pipeline's run: the line's first point, or K itself (GPipe holds all K)
        with let_go(measure_stage(model, None, None, self.optimizer, self.precision, **run)) as made:
            (m, cluster, engine), stage = made, mesh.plan.stage
            resting = sum(m["resting"].values())
            extra = sum(o.bytes for o in runtime_overheads(m["peak"], self.ranks, stage, self.buckets, self.reserve))
            row = PlanRow(stage, strategy, B, per_rank // B, m["peak"], m["at_peak"], resting, extra,
                          self.gpu.capacity, tp=tp, cp=spec.cp, pp=spec.pp,
                          pp_schedule=spec.pp_schedule if pipeline else None,
                          virtual_stages=spec.virtual_stages if pipeline else None)
            if label != "none":  # the host's and NVMe's peaks, against a node's
                tiers = {t: m[t]["peak"] for t in ("host", "nvme")}
                node = host_fit(tiers, self.ranks, self.host, self.gpus_per_node)
                row = replace(row, offload=label, host_peak=tiers["host"], nvme_peak=tiers["nvme"],
                              host_fits=node["host"]["fits"] and node["nvme"]["fits"])
            if fit(resting, self.gpu).total > self.gpu.capacity:
                return row, resting
            if not row.fits:
                return row, None
            hw, time_model = self.hardware, self.time_model
            if pipeline:  # the memory run is a whole step: K's, or the first point of K's line (sweep.step_time)
                costs = run_costs(engine, time_model, hw, spec.micro(B, self.seq_len))
                one = step_time_of(
                    simulate(cluster.trace, hw, overlap=engine.engines[0].comm.overlap_comm, costs=costs), M)
                t = step_time(model, self.ranks, stage, hw, self.schedule, self.precision, self.optimizer,
                              (B, self.seq_len), row.accumulation, first=one, time_model=time_model, mesh=mesh,
                              spec=spec, records_from=engine)  # the line's second point writes these records again
                return replace(row, step_s=t.step, compute_s=t.compute, exposed_s=t.exposed), None
            costs = run_costs(engine, time_model, hw, spec.micro(B, self.seq_len))
            one = step_time_of(simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm, costs=costs))
            # K = 2 written from K = 1 where the micro-step repeats (_sweep.py `written_second`: not run again)
            two = written_second(engine, hw, costs) if row.accumulation > 1 else None
            t = step_time(model, self.ranks, stage, hw, self.schedule, self.precision, self.optimizer,
                          (B, self.seq_len), row.accumulation, first=one, time_model=time_model, mesh=mesh,
                          parallelisms=more, spec=spec, second=two)
            return replace(row, step_s=t.step, compute_s=t.compute, exposed_s=t.exposed), None

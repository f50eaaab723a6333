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

import math
from dataclasses import dataclass, field, replace

from zerosim.analysis.costs._gpus import get_gpu
from zerosim.analysis.costs._overheads import ALLOCATOR_RESERVE, fit, runtime_overheads
from zerosim.analysis.planner._sweep import step_time, step_time_of
from zerosim.analysis.timeline._devices import Hardware
from zerosim.analysis.timeline._kernel_time import TimeModel
from zerosim.analysis.timeline._simulate import simulate


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
    tp: int = 1  # tensor parallelism's degree beside the stage (the data-parallel degree is ranks / tp)

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
    left_out: tuple = ()  # ((tp, strategy, why), ...): strategies a TP degree cannot run, not tried at it

    def commands(self, row: PlanRow, model_flag: str) -> tuple:
        """The `zerosim memory` and `zerosim timeline` command lines that reproduce `row` (model_flag: "--model X"
        or "--config PATH")."""
        s = self.settings
        common = (
            f"{model_flag} --ranks {s['ranks']} --seq-len {s['seq_len']} --batch {row.micro_batch} "
            f"--checkpoint {row.strategy} --gpu {s['gpu']} --precision {s['precision']} --optimizer {s['optimizer']} "
            f"--comm {s['comm']} --kernels {s['kernels']} --loss {s['loss']}"
        )
        if row.tp > 1:
            common += (f" --tp {row.tp}" + (" --sp" if s.get("sp") else "")
                       + (f" --tp-layout {s['tp_layout']}" if s.get("tp_layout") else "")
                       + f" --gpus-per-node {s['gpus_per_node']}")
        return (
            f"zerosim memory {common}",
            f"zerosim timeline {common} --stage {row.stage} --accumulation-steps {row.accumulation} "
            + ("" if row.tp > 1 else f"--gpus-per-node {s['gpus_per_node']} ") + s["time_flags"],
        )


def divisors(n: int) -> tuple:
    """Every divisor of n, ascending (pairs d, n // d up to √n: a billion-sequence batch is not a billion tries)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def plan(config, ranks: int, gpus_per_node: int, gpu, seq_len: int, global_batch: int, precision: str = "bf16-mixed",
         optimizer: str = "adam", comm: str = "deepspeed", stages=(0, 1, 2, 3), strategies=None, micro_batches=None,
         reserve: float = ALLOCATOR_RESERVE, progress=None, time_model=None, links: tuple = ("nvlink4", "ib_ndr"),
         kernels: str = "fused", loss: str | None = None, hardware=None, tps=(1,), sp: bool = False,
         spelling=None, offloads: tuple = (), host=None, layout: str | None = None) -> Plan:
    """Try every stage × strategy × micro-batch for `config` (a DecoderConfig) on `ranks` GPUs (see the module
    docstring); `progress(done_label)` is called after each configuration measured. `time_model`: what a compute
    costs (a timeline TimeModel; None: the datasheet roofline); `links`: (within a node, between nodes);
    `kernels` and `loss`: what the activations and the loss keep (models.meta KERNELS, LOSSES);
    `hardware(hw)`: a function that adjusts the Hardware (the CLI's link flags). `tps`: the tensor-parallel degrees
    to try beside every stage (each dividing `ranks`: the data-parallel degree is ranks / tp, each TP group training
    on its data-parallel rank's micro-batches), with sequence parallelism when `sp`; with TP the ranks sit on nodes
    of `gpus_per_node`, TP's rings within a node and the data-parallel ones across nodes, a rank keeping what `layout`
    says (parallel/tensor LAYOUTS; None: the library's default). Strategies TP's units cannot run are not tried
    beside it (`left_out`, with the reason). `spelling`: how the caller
    names `ranks` and `gpus_per_node` in errors (a multinode.Spelling; default these arguments' names).

    `offloads`: ((name, at), ...) offload configurations tried beside none, each at the stages it runs at: `at(stage)`
    returns (label, parallelisms): what runs there (parallel/offload's Offload and its placement's name), or raises
    ValueError where nothing does; a label tried at a stage already is not tried again.
    Their rows fit when the device does and the ranks of a node fit its `host` (a costs.Host; default the DGX H100's
    DRAM and NVMe per node), and are timed with their copies and CPU step on the timeline; they are tried at tp = 1
    only (offload beside tensor parallelism is not modelled)."""
    from zerosim.analysis.costs._hosts import HOSTS, get_host
    from zerosim.models.gpt import ALL_STRATEGIES
    from zerosim.models.meta import LOSS_OF
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.precision import get_precision

    g = get_gpu(gpu)
    tps = _check(config, ranks, gpus_per_node, seq_len, global_batch, tps, spelling, optimizer)
    strategies = tuple(strategies or ALL_STRATEGIES)
    left_out = _left_out(strategies, tps)
    nodes = ranks > gpus_per_node  # two tiers: the rings that leave a node cross it over the inter link
    hw = Hardware(g.device, links[0], get_precision(precision).compute, inter_link=links[1] if nodes else None)
    host = HOSTS["dgx-h100"] if host is None else get_host(host)
    trial = _Trial(config, ranks, gpus_per_node, nodes, g, seq_len, precision, optimizer, get_comm_schedule(comm),
                   reserve, progress, time_model, hw if hardware is None else hardware(hw), kernels, loss, sp, host,
                   layout)
    rows, pruned, pruned_offload, tried = [], [], [], set()
    for tp in tps:
        per_rank = global_batch // (ranks // tp)  # sequences a data-parallel rank (a TP group) takes per step
        batches = tuple(b for b in (micro_batches or divisors(per_rank)) if per_rank % b == 0)
        if not batches:
            raise ValueError(f"no micro-batch divides the {per_rank} sequences each rank takes per step")
        for _, at in (("none", None), *(offloads if tp == 1 else ())):  # offload beside TP: not modelled
            for stage in stages:
                try:
                    label, more = ("none", ()) if at is None else at(stage)
                except ValueError:  # this offload does not run at this stage
                    continue
                if (tp, stage, label) in tried:  # (DeepSpeed runs several offload keys alike at stages 1/2)
                    continue
                tried.add((tp, stage, label))
                mine = tuple(x for x in strategies if (tp, x) not in {(t, y) for t, y, _ in left_out})
                stage_rows, states = trial.stage(stage, mine, batches, tp, per_rank, label, more)
                rows += stage_rows
                if states is None:
                    continue
                if label != "none":  # the device's model states alone: this placement cannot fit this stage
                    pruned_offload.append((stage, states, label))
                else:
                    pruned.append((stage, states) if tp == 1 else (stage, states, tp))
    fitting = tuple(sorted((r for r in rows if r.fits), key=lambda r: (r.step_s, r.stage, r.micro_batch, r.tp)))
    settings = {
        "model": config.name, "params": config.num_params, "ranks": ranks, "gpus_per_node": gpus_per_node,
        "gpu": g.key, "gpu_name": g.name, "capacity": g.capacity, "device": g.device, "seq_len": seq_len,
        "global_batch": global_batch,
        "per_rank": global_batch // ranks,  # sequences a GPU's data-parallel rank takes per step without TP
        **({"tps": tps, "sp": sp, "tp_layout": trial.layout} if tps != (1,) else {}),
        "precision": precision, "optimizer": optimizer, "comm": comm, "reserve": reserve, "strategies": strategies,
        "micro_batches": batches if len(tps) == 1 else micro_batches, "stages": tuple(stages),
        "time_model": (time_model or TimeModel()).describe(), "time_flags": (time_model or TimeModel()).flags(),
        "links": tuple(links), "hardware": trial.hardware, "kernels": kernels, "loss": loss or LOSS_OF[kernels],
        **({"offloads": tuple(name for name, _ in offloads), "host": host.key} if offloads else {}),
    }
    return Plan(tuple(rows), fitting, tuple(pruned), settings, links[1] if nodes else links[0], tuple(pruned_offload),
                left_out)


def _left_out(strategies: tuple, tps: tuple) -> tuple:
    """((tp, strategy, why), ...): the strategies tensor parallelism's units cannot run (parallel/tensor
    `check_checkpoint`, the one rule the engine follows), at every degree above 1. Every one left out at every degree
    is an error: nothing would be tried."""
    from zerosim.models.gpt import strategy_options
    from zerosim.parallel.tensor import check_checkpoint

    out = []
    for tp in tps:
        if tp == 1:
            continue
        for name in strategies:
            try:
                check_checkpoint(strategy_options(name).get("checkpoint"))
            except ValueError as why:
                out.append((tp, name, str(why)))
    if tps and all(tp > 1 for tp in tps) and {s for _, s, _ in out} >= set(strategies):
        reasons = "; ".join(sorted({why for _, _, why in out}))
        raise ValueError(f"none of the strategies {', '.join(strategies)} runs beside tensor parallelism: {reasons}")
    return tuple(out)


def _check(config, ranks, gpus_per_node, seq_len, global_batch, tps, spelling, optimizer="adam") -> tuple:
    """The tensor-parallel degrees to try, every argument checked first (the optimizer beside TP included, before
    anything is measured)."""
    from zerosim.optim import get_optimizer
    from zerosim.parallel import ParallelDims
    from zerosim.parallel.data.multinode import Spelling, check_matrix_optimizer, check_nodes

    for name, v in (("ranks", ranks), ("gpus_per_node", gpus_per_node), ("seq_len", seq_len),
                    ("global_batch", global_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    # the one rule `zerosim memory` and `timeline` follow, so the commands the plan prints run (DataMesh)
    check_nodes(ranks, gpus_per_node, spelling or Spelling(ranks="ranks"))
    tps = tuple(tps)
    for tp in tps:
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or ranks % tp:
            raise ValueError(f"a tensor-parallel degree must divide the {ranks} GPUs, got {tp!r}")
        if global_batch % (ranks // tp):
            over = f"{ranks} ranks" if tp == 1 else f"{ranks // tp} data-parallel ranks ({ranks} GPUs / tp {tp})"
            raise ValueError(
                f"a global batch of {global_batch} sequences does not split over {over} "
                f"(each rank takes micro-batch × accumulation sequences per step)"
            )
    if seq_len > config.max_positions:
        raise ValueError(f"--seq-len {seq_len} is longer than {config.name}'s {config.max_positions} positions")
    for tp in tps:  # the engine's own rule (Muon orthogonalises whole matrices), asked before any step is measured
        check_matrix_optimizer(ParallelDims(ranks, tp=tp), get_optimizer(optimizer))
    return tps


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
    progress: object
    time_model: object
    hardware: object
    kernels: str
    loss: str | None
    sp: bool  # with tp > 1: sequence parallelism
    host: object  # a costs.Host: a node's DRAM and NVMe, which offloaded rows must fit
    layout: str | None = None  # beside TP: what a rank keeps (parallel/tensor LAYOUTS; None: the library's default)
    # strategy -> the model's data-less twin: built once, measured at every degree, offload and stage
    twins: dict = field(default_factory=dict, compare=False, repr=False)

    def stage(self, stage: int, strategies: tuple, batches: tuple, tp: int, per_rank: int, label: str = "none",
              more: tuple = ()) -> tuple:
        """(every PlanRow tried at `stage` beside TP of degree `tp`, its model states' bytes when they alone exceed
        the GPU, else None). Each strategy's micro-batches are tried smallest first, up to the first that does not
        fit; `per_rank`: the sequences a data-parallel rank takes per step; `label`, `more`: the offload placement
        and its parallelisms ("none", ())."""
        from zerosim.models.gpt import MetaGPT, strategy_options
        from zerosim.models.llama import MetaLlama
        from zerosim.parallel.data.multinode import DataMesh

        # the stage on the job's ranks and nodes (beside TP the ranks sit on nodes even within one)
        mesh = DataMesh.of(stage, self.ranks, self.gpus_per_node if self.nodes or tp > 1 else None, tp=tp)
        twin = MetaLlama if self.config.layout == "llama" else MetaGPT
        rows = []
        for strategy in strategies:
            if strategy not in self.twins:
                self.twins[strategy] = twin.from_config(self.config, self.seq_len, kernels=self.kernels,
                                                        loss=self.loss, **strategy_options(strategy))
            model = self.twins[strategy]
            for B in batches:
                row, states = self.measure(mesh, model, strategy, B, per_rank, label, more)
                if states is not None:
                    return rows, states
                rows.append(row)
                if not row.fits:
                    break  # a larger micro-batch only holds more activations
        return rows, None

    def measure(self, mesh, model, strategy: str, B: int, per_rank: int, label: str = "none", more: tuple = ()):
        """(the PlanRow of one micro-step at micro-batch B, timed when it fits; the model states' bytes when they
        alone exceed the GPU, else None). With an offload `label`, the row holds the host's and NVMe's peaks and
        whether a node's ranks fit its host."""
        from zerosim.analysis.costs._hosts import host_fit
        from zerosim.analysis.costs._measured import measure_stage

        tp = mesh.dims.tp
        sp = self.sp and tp > 1  # sequence parallelism cuts over a TP group: none at tp = 1
        layout = self.layout if tp > 1 else None
        m, cluster, engine = measure_stage(model, None, None, self.optimizer, self.precision,
                                           micro_batch=(B, self.seq_len), comm=self.schedule, sp=sp, mesh=mesh,
                                           parallelisms=more, layout=layout)
        resting, stage = sum(m["resting"].values()), mesh.plan.stage
        extra = sum(o.bytes for o in runtime_overheads(m["peak"], self.ranks, stage, None, self.reserve))
        row = PlanRow(stage, strategy, B, per_rank // B, m["peak"], m["at_peak"], resting, extra, self.gpu.capacity,
                      tp=tp)
        if label != "none":  # the host's and NVMe's peaks, against a node's
            tiers = {t: m[t]["peak"] for t in ("host", "nvme")}
            node = host_fit(tiers, self.ranks, self.host, self.gpus_per_node)
            row = replace(row, offload=label, host_peak=tiers["host"], nvme_peak=tiers["nvme"],
                          host_fits=node["host"]["fits"] and node["nvme"]["fits"])
        if self.progress is not None:
            self.progress(f"ZeRO-{stage} {strategy} B={B}" + (f" tp {tp}" if tp > 1 else "")
                          + ("" if label == "none" else f" {label}"))
        if fit(resting, self.gpu).total > self.gpu.capacity:
            return row, resting
        if not row.fits:
            return row, None
        hw, time_model = self.hardware, self.time_model
        costs = time_model.costs(engine.model, (B, self.seq_len), hw) if time_model is not None else None
        one = step_time_of(simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm, costs=costs))
        t = step_time(model, self.ranks, stage, hw, self.schedule, self.precision, self.optimizer,
                      (B, self.seq_len), row.accumulation, first=one, time_model=time_model, mesh=mesh, sp=sp,
                      parallelisms=more, layout=layout)
        return replace(row, step_s=t.step, compute_s=t.compute, exposed_s=t.exposed), None

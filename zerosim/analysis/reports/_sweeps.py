"""Sweeps over N at real scale, as reports: what `zerosim timeline --sweep` prints (its `--json` is `to_dict()`).

    stages_sweep(work, (64, 1024, 4096), "h100")      the stages 1-3 on NVLink 4 and InfiniBand NDR: exposed
                                                      communication against N, and where hiding fails (seed 003)
    strategy_sweep_report(work, (64, 4096), ("full_shard", "hsdp"), 8, "h100", gpu)
                                                      FULL_SHARD against HSDP, MiCS and hpZ on nodes of G

Every cell is one meta step (analysis/planner: `sweep`, `strategy_sweep`), rank 0's view, judged against a GPU's memory
(`judge`): a configuration that would not fit is marked, not plotted as if it ran.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.costs import TOKENS
from zerosim.analysis.reports._fit import judge
from zerosim.analysis.reports._step import Report, describe_comm, kept
from zerosim.analysis.timeline import Hardware, TimeModel

LINKS, STAGES = ("nvlink4", "ib_ndr"), (1, 2, 3)  # what the stages' sweep compares


def gpu_of(work, device: str):
    """The GPU a sweep judges memory against: the workload's, or the GPU whose compute preset `device` is."""
    from zerosim.analysis.costs import GPUS

    if work.gpu is not None:
        return work.gpu
    return next(g for g in GPUS.values() if g.device == device)


@dataclass(frozen=True)
class SweepReport(Report):
    """Stages 1-3 × two links × N: each step's exposed share, its peak against the GPU, the crossovers."""

    model: str
    params: int
    largest_unit: int
    device: str
    device_name: str
    gpu: str
    capacity: int
    precision: str
    tokens_per_rank: int
    comm: str
    time_model: str
    gemm_rate: float  # FLOP/s a large GEMM runs at (the time model's)
    rows: list  # [{"ranks", "stage", "link", "step_s", "compute_s", "comm_s", "exposed_comm_s", "peak", "needs",
    #               "fits"}]
    exposed_over_half: dict  # {"<link> stage <s>": the first N with more than half the step exposed, or None}
    hiding_fails_at: dict  # {link: N past which ZeRO-3's gathers stop hiding (latency_bound_ranks), or None}
    bandwidth_tokens: dict  # {link: tokens per rank bandwidth alone needs to hide a gather (R/β)}
    sweep_rows: list = kept()  # the planner's SweepRows (the figure draws them)
    fits: list = kept()  # whether each of them fits


def stages_sweep(work, ranks, device: str, tokens: int = TOKENS, time_model=None, progress=None) -> SweepReport:
    """The stages' sweep of `work` over `ranks` on `device` (see the module docstring); `progress(done, total)` after
    each step."""
    from zerosim.analysis.planner import crossover, latency_bound_ranks, sweep
    from zerosim.precision import get_precision

    model, gpu = work.model, gpu_of(work, device)
    time_model = time_model if time_model is not None else TimeModel()
    rows = sweep(model, ranks, STAGES, LINKS, device, work.comm, work.precision, tokens, progress=progress,
                 time_model=time_model)
    compute = get_precision(work.precision).compute
    rate = time_model.gemm_rate(Hardware(device, "nvlink4", compute))  # what a large GEMM runs at
    fits = [judge(r.peak, r.stage, r.ranks, gpu, work.reserve, work.buckets) for r in rows]
    return SweepReport(
        model=model.name, params=model.num_params, largest_unit=model.largest_layer, device=device,
        device_name=Hardware(device).device.name, gpu=gpu.name, capacity=gpu.capacity, precision=work.precision_name,
        tokens_per_rank=tokens, comm=describe_comm(work.comm), time_model=time_model.describe(), gemm_rate=rate,
        rows=[{"ranks": r.ranks, "stage": r.stage, "link": r.link, "step_s": r.step, "compute_s": r.compute,
               "comm_s": r.comm, "exposed_comm_s": r.exposed, "peak": r.peak, "needs": f["total"], "fits": f["fits"]}
              for r, f in zip(rows, fits)],
        exposed_over_half={f"{link} stage {st}": crossover(rows, st, link) for link in LINKS for st in STAGES},
        hiding_fails_at={link: latency_bound_ranks(model.largest_layer, tokens, Hardware(device, link, compute), rate)
                         for link in LINKS},
        bandwidth_tokens={link: rate / Hardware(device, link, compute).link.bandwidth for link in LINKS},
        sweep_rows=rows, fits=[f["fits"] for f in fits],
    )


@dataclass(frozen=True)
class StrategySweepReport(Report):
    """Strategies × N on nodes of G: each step's time and inter-node bytes, whether it fits, the crossovers."""

    model: str
    params: int
    gpus_per_node: int
    shard_group: int  # S: HSDP's and MiCS's shard group
    hpz_group: int  # S': hpZ's (and FSDP2's reshard_to_group's) secondary group
    device: str
    gpu: str
    capacity: int
    precision: str
    tokens_per_rank: int
    time_model: str
    rows: list  # [{"strategy", "ranks", "group", "step_s", "compute_s", "exposed_comm_s", "peak", "intra_bytes",
    #               "inter_bytes", "fits"}]
    exposed_over_compute: dict  # {strategy: the first N where exposed communication exceeds compute, or None}


def strategy_sweep_report(work, ranks, names, gpus_per_node: int, device: str, shard_group: int | None = None,
                          hpz_group: int | None = None, tokens: int = TOKENS, time_model=None,
                          progress=None) -> StrategySweepReport:
    """The strategies `names` over `ranks` on nodes of `gpus_per_node` (see the module docstring). S defaults to the
    smallest G·2^k whose model states take at most half the GPU (`fitting_shard_group`), S' to a node."""
    from zerosim.analysis.planner import fitting_shard_group, strategy_sweep
    from zerosim.analysis.planner import strategy_crossover as crossover

    gpu = gpu_of(work, device)
    time_model = time_model if time_model is not None else TimeModel()
    shard = shard_group or fitting_shard_group(work.model.num_params, gpus_per_node, gpu.capacity)
    hpz = hpz_group or gpus_per_node
    rows = strategy_sweep(work.model, ranks, names, gpus_per_node, shard, hpz, device, work.comm, work.precision,
                          tokens, progress=progress, time_model=time_model)
    return StrategySweepReport(
        model=work.model.name, params=work.model.num_params, gpus_per_node=gpus_per_node, shard_group=shard,
        hpz_group=hpz, device=device, gpu=gpu.name, capacity=gpu.capacity, precision=work.precision_name,
        tokens_per_rank=tokens, time_model=time_model.describe(),
        rows=[{"strategy": r.strategy, "ranks": r.ranks, "group": r.group, "step_s": r.step, "compute_s": r.compute,
               "exposed_comm_s": r.exposed, "peak": r.peak, "intra_bytes": r.intra, "inter_bytes": r.inter,
               "fits": judge(r.peak, 3, r.ranks, gpu, work.reserve, work.buckets)["fits"]} for r in rows],
        exposed_over_compute={name: crossover(rows, name) for name in names},
    )

"""Communication per training step and rank for ZeRO stages 0-3, and its time on a link (α-β model).

Letters: Ψ parameters, N ranks. A ring collective over N ranks runs N−1 steps per phase and each rank
sends (N−1)/N of the buffer per phase (reduce-scatter and all-gather: 1 phase; all-reduce: 2).
What travels, per step (the ZeRO paper, section 7; seed 001, section 10):

    stage 0     all-reduce of the 16-bit gradients                         2Ψ(N−1)/N
    stage 1, 2  reduce-scatter of 16-bit gradients + all-gather of 16-bit  2Ψ(N−1)/N
                parameters (each rank's updated fp32 master shard, cast)
    stage 3     all-gather of 16-bit params in forward and again in        3Ψ(N−1)/N
                backward + reduce-scatter of 16-bit gradients

times the bytes of the wire dtype: 2 for fp16/bf16 (DeepSpeed's communication_data_type default is
fp16); 4 if gradients are reduced in fp32. fp32 master weights and optimizer state never travel.
The table is not typed in: `stage_collectives` reads it from each stage's `Plan` (parallel/data/_plan.py), the
plan the engine runs, so a plan of stage 3 that keeps each unit gathered until its backward (FSDP2's
reshard_after_forward=False: "no_reshard") gathers once, 2Ψ(N−1)/N.

A step of K micro-steps (gradient accumulation; a pipeline's M micro-batches) runs again, each micro-step, what the
plan does during forward and backward, and once what it does at the step's end (`Collective.each_micro_step`):

    each micro-step   the gathers (but a plan that keeps its units gathered for the whole step: FSDP2 beside a
                      pipeline, "no_reshard_no_sync"), the gradients reduce-scattered unit by unit (stages 2, 3)
    once a step       the gradients' collective after backward (stage 0's all-reduce, stage 1's reduce-scatter: the
                      gradients accumulate until the last micro-step), the refresh after the update

so stage 2 sends (K + 1)Ψ(N−1)/N and stage 3 3KΨ(N−1)/N, stages 0 and 1 2Ψ(N−1)/N whatever K.
NOTE: seed 001's stage-1 prose all-reduces the gradients before the all-gather (that would be 3Ψ);
its own volume section, the paper and the engines here reduce-scatter them (2Ψ).
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.costs._links import base_latency, step_latency
from zerosim.analysis.costs._rates import check_count, check_latency, check_rate
from zerosim.collectives import ShardLayout
from zerosim.parallel.data import Plan, check_stage, get_plan


@dataclass(frozen=True)
class Collective:
    op: str  # "all_reduce", "reduce_scatter" or "all_gather"
    buffer: str  # what travels: "grads" or "params"
    wire_bytes: int  # bytes per element on the wire
    phases: int  # ring phases: 2 for all-reduce, 1 otherwise
    each_micro_step: bool = False  # run again each micro-step of a step of K (the module docstring); else once


PHASES = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}  # ring phases of each collective


def stage_collectives(stage, grad_wire_bytes: int = 2, param_wire_bytes: int = 2) -> tuple:
    """The collectives one step of `stage` (0-3, or a `Plan`: the one the engine runs, parallel/data/_plan.py) runs
    over the whole flat buffer, in order, read from its plan: the params gathered for forward and again for backward
    where it shards them (once, when a unit stays gathered until its backward), the gradients' collective, the
    refresh after the update."""
    plan = stage if isinstance(stage, Plan) else _plan_of(stage)
    if plan.uses_groups:  # its collectives run over groups of S (and replicas), not over all N: not one ring
        raise ValueError(f"{plan.label} runs its collectives over groups: its volume is the engine's trace's "
                         "(zerosim memory --strategy), not one ring over every rank")
    gather = Collective("all_gather", "params", param_wire_bytes, PHASES["all_gather"],
                        each_micro_step=not plan.reshard.keeps_for_step)
    reduction = plan.end_of_backward or "reduce_scatter"  # stages 2/3: reduce-scattered unit by unit
    gathers = (gather,) * (0 if not plan.gathers_params else 1 if plan.reshard.keeps_whole else 2)
    grads = Collective(reduction, "grads", grad_wire_bytes, PHASES[reduction],
                       each_micro_step=plan.end_of_backward is None)
    refresh = Collective("all_gather", "params", param_wire_bytes, PHASES["all_gather"])  # once, after the update
    return gathers + (grads,) + ((refresh,) if plan.refresh_after_update else ())


def _plan_of(stage) -> Plan:
    """The plan of ZeRO `stage` 0-3 (a strategy's name is a plan too, but its groups change the volume: refused)."""
    return get_plan(check_stage(stage))


def sent_bytes(c: Collective, params: int, ranks: int, padded: bool = False):
    """Bytes one rank sends in collective `c`: phases·(N−1)/N·Ψ·wire_bytes.

    padded=True counts what a ring really moves over a buffer zero-padded to N·ceil(Ψ/N):
    phases·(N−1)·ceil(Ψ/N)·wire_bytes (an int; equal to the formula when N divides Ψ).
    """
    if padded:
        return c.phases * (ranks - 1) * ShardLayout(int(params), ranks).shard_size * c.wire_bytes
    return c.phases * (ranks - 1) * int(params) * c.wire_bytes / ranks  # one rounding: exact ints, then / N


def comm_volume(params, ranks: int, stage: int, grad_wire_bytes: int = 2, param_wire_bytes: int = 2,
                padded: bool = False, micro_steps: int = 1):
    """Bytes one rank sends per step: 2Ψ(N−1)/N·bytes at stages 0-2, 3Ψ(N−1)/N·bytes at stage 3; in a step of
    `micro_steps` K, what each micro-step runs K times (the module docstring: stage 2 (K + 1)Ψ, stage 3 3KΨ)."""
    params, ranks = check_count(params, "params", 0), check_count(ranks, "ranks")
    K = check_count(micro_steps, "micro_steps")
    cs = stage_collectives(stage, grad_wire_bytes, param_wire_bytes)
    times = [K if c.each_micro_step else 1 for c in cs]
    if padded:
        return sum(t * sent_bytes(c, params, ranks, padded=True) for c, t in zip(cs, times))
    whole = sum(t * c.phases * c.wire_bytes for c, t in zip(cs, times)) * (ranks - 1) * int(params)  # exact int
    return whole / ranks  # one rounding


@dataclass(frozen=True)
class Link:
    """An interconnect under the alpha-beta model: per-direction bandwidth B, per-step latency alpha, and the
    latency NCCL charges once per call (`base`; zerosim.analysis.costs._links)."""

    name: str
    bandwidth: float  # B: bytes/s one rank sends while it receives (per direction)
    alpha: float  # α: seconds per ring step (latency)
    note: str
    base: float = 0.0  # seconds per call, whatever its size (NCCL's baseLatencies; 0 for a link built by hand)

    def __post_init__(self):  # where a link's rates are born: a NaN or a zero would divide every time (_rates.py)
        # inf: an ideal link (bytes cost no time; the pipeline's bubble alone, tests/test_pipeline_timeline.py)
        check_rate(self.bandwidth, f"the bandwidth (bytes/s) of link {self.name!r}", ideal=True)
        check_latency(self.alpha, f"the alpha (s) of link {self.name!r}")
        check_latency(self.base, f"the base (s) of link {self.name!r}")


_SIMPLE = base_latency("Simple")  # 8.4 µs per call: NCCL's Ring + Simple base latency (links.py)

LINKS = {
    # 18 links × 50 GB/s = 900 GB/s bidirectional per H100 = 450 GB/s each way. A ring rank sends to one
    # neighbour while receiving from another, so the time is bytes sent / per-direction bandwidth.
    # NOTE: seed 001's "2 × 14 / 900 ≈ 31 ms" divides by the bidirectional figure; we get twice that.
    # α and the per-call base: NCCL's Ring + Simple figures for NVLink (links.py, tuning.cc).
    "nvlink4": Link("NVLink 4", 450e9, step_latency("nvlink"),
                    "900 GB/s bidirectional (seed 001) = 450 GB/s per direction; α 3.4 µs + 8.4 µs a call (NCCL)",
                    _SIMPLE),
    # A100: 12 NVLink 3 links × 25 GB/s per direction = 300 GB/s (600 GB/s bidirectional, the A100 datasheet)
    "nvlink3": Link("NVLink 3", 300e9, step_latency("nvlink"),
                    "600 GB/s bidirectional (A100 datasheet) = 300 GB/s per direction; α 3.4 µs + 8.4 µs a call "
                    "(NCCL)", _SIMPLE),
    # V100 SXM2: 6 NVLink 2 links × 25 GB/s per direction = 150 GB/s (300 GB/s, the V100 datasheet's "NVLink 300
    # GB/s", bidirectional), through NVSwitch on a DGX-2 (16 V100s)
    "nvlink2": Link("NVLink 2", 150e9, step_latency("nvlink"),
                    "300 GB/s bidirectional (V100 datasheet) = 150 GB/s per direction; α 3.4 µs + 8.4 µs a call "
                    "(NCCL)", _SIMPLE),
    # PCIe x16, per direction: 8 / 16 / 32 GT/s × 16 lanes × 128/130 ÷ 8 = 15.75 / 31.5 / 63 GB/s (seed 001 labels
    # PCIe 5's 64 GB/s "bidirectional"; it is the per-direction rate, so we use it per direction). One fact each, two
    # uses: a ring over PCIe (no NVSwitch: a box of RTX 3090s) pays NCCL's PCI step, 5.7 µs, and 8.4 µs a call; an
    # offload's copy (cudaMemcpy over the host link: the V100's PCIe 3, the A100's 4, the H100's 5) pays the same
    # α once a copy (assumed) and no per-call base, which is NCCL's alone (timeline/_simulate.py)
    "pcie3": Link("PCIe 3.0 x16", 15.75e9, step_latency("pci"),
                  "15.75 GB/s per direction (8 GT/s x 16, 128b/130b); α 5.7 µs + 8.4 µs a call (NCCL's PCI)", _SIMPLE),
    "pcie4": Link("PCIe 4.0 x16", 31.5e9, step_latency("pci"),
                  "31.5 GB/s per direction (16 GT/s x 16); α 5.7 µs + 8.4 µs a call (NCCL's PCI)", _SIMPLE),
    "pcie5": Link("PCIe 5.0 x16", 64e9, step_latency("pci"),
                  "64 GB/s per direction (seed 001 says bidirectional); α 5.7 µs + 8.4 µs a call (NCCL's PCI)",
                  _SIMPLE),
    # one rank's share of a node's NVMe: ZeRO-Infinity's DGX-2 runs read and write at about 25 GB/s over the node's
    # drives (the paper's aggregate), so about 3 GB/s for each of 8 GPUs; α: a submission's latency, assumed
    "nvme": Link("NVMe (a rank's share)", 3.0e9, 20e-6, "≈ 25 GB/s per 8-GPU node, shared; α ≈ 20 µs assumed"),
    # NDR is 400 Gb/s per port per direction = 50 GB/s; one NIC per GPU (DGX H100, Grand Teton).
    "ib_ndr": Link("InfiniBand NDR", 50e9, step_latency("net"),
                   "400 Gb/s = 50 GB/s per direction and GPU; α 14 µs + 8.4 µs a call (NCCL's network, Simple)",
                   _SIMPLE),
    # HDR (or 200 Gb/s RoCE) is 200 Gb/s per port = 25 GB/s; one NIC per GPU (DGX A100: 8 × 200 Gb/s).
    "ib_hdr": Link("InfiniBand HDR", 25e9, step_latency("net"),
                   "200 Gb/s = 25 GB/s per direction and GPU (also 200 Gb/s RoCE); α 14 µs + 8.4 µs a call (NCCL)",
                   _SIMPLE),
    # 100 Gb/s = 12.5 GB/s line rate per direction; seed 001 rounds to ≈ 12.
    "100gbe": Link("Ethernet 100 GbE", 12.5e9, step_latency("net"),
                   "100 Gb/s = 12.5 GB/s (seed 001: ≈ 12); α 14 µs + 8.4 µs a call (NCCL's network figures: TCP "
                   "sockets are slower)", _SIMPLE),
}


@dataclass(frozen=True)
class CommTime:
    """Time of one step's collectives for one rank: latency (steps x alpha) plus transfer (bytes / B)."""

    stage: int
    latency: float  # seconds: steps · α summed over collectives
    transfer: float  # seconds: bytes / B summed over collectives

    @property
    def total(self) -> float:
        return self.latency + self.transfer


def comm_time(params, ranks: int, stage: int, link: Link, buckets: int = 1, grad_wire_bytes: int = 2,
              param_wire_bytes: int = 2) -> CommTime:
    """α-β time of one step: Σ over collectives of base + steps·α + bytes/B, with steps = phases·(N−1) per call
    and `base` the link's per-call latency (NCCL's; 0 for a link built by hand).

    `buckets`: calls each collective is split into (the bytes stay the same, the latency repeats);
    ZeRO-3 gathers layer by layer, so pass the number of layers there. Collectives run one after
    another with no overlap with compute or with each other.
    """
    params, ranks = check_count(params, "params", 0), check_count(ranks, "ranks")
    buckets = check_count(buckets, "buckets")
    if isinstance(link, str) and link not in LINKS:
        raise ValueError(f"unknown link {link!r}; choose one of {sorted(LINKS)} or pass a Link")
    link_of = LINKS[link] if isinstance(link, str) else link
    if not isinstance(link_of, Link):
        raise TypeError(f"link must be a Link or a link's name ({', '.join(sorted(LINKS))}), got {link!r}")
    cs = stage_collectives(stage, grad_wire_bytes, param_wire_bytes)
    latency = sum(buckets * (c.phases * (ranks - 1) * link_of.alpha + link_of.base) for c in cs)
    transfer = sum(sent_bytes(c, params, ranks) for c in cs) / link_of.bandwidth
    return CommTime(stage, latency, transfer)

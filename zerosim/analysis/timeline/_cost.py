"""How long one recorded event takes: a ring collective (α-β), a layer's compute (roofline), an optimizer step.

Letters: N ranks on the ring, α seconds per ring step, β bytes/s one rank sends per direction
(`zerosim.analysis.costs.Link.alpha`, `.bandwidth`), Ψ bytes of the whole buffer.

Ring collective. Each phase (a reduce-scatter, an all-gather, either half of an all-reduce) runs
N−1 steps; in every step each rank sends one chunk to its right neighbour while receiving one from
its left (full duplex, so the per-direction β applies). A step costs α + chunk/β, and a call costs NCCL's
base latency once (zerosim.analysis.costs._links), so a phase of equal chunks Ψ/N costs

    base + (N−1)·α + (N−1)·(Ψ/N)/β   and an all-reduce, two phases, base + 2(N−1)·α + 2(N−1)/N·Ψ/β.

A ring that spans m nodes (two link tiers) crosses between nodes m − 1 times per phase: those steps cost the
network's α, the others NVLink's, as NCCL's tuning model charges them; its bytes move at the node's NICs'
combined β (one NIC per rank of the ring in the node, capped by NVLink's): NCCL spreads a ring's channels over
the NICs (phase_time).

`call_time` takes the busiest rank's bytes for the whole phase (what it sent over the N−1 steps, from
the trace) in place of (N−1)·Ψ/N. For equal chunks that is exact: every rank sends N−1 chunks of the
same size. For uneven chunks (zerosim's per-layer windows cut by the shard boundaries) it is the
time of a ring that streams data in small slices, as NCCL's kernels do, bounded by its busiest
sender; a ring moving whole chunks in lock-step would take Σ_steps max_ranks chunk/β, which can be
more. Real systems never see uneven chunks: NCCL's ncclAllGather / ncclReduceScatter take one
count for every rank (src/nccl.h.in), so DeepSpeed and FSDP pad each partition to equal size.

Compute. A roofline: max(FLOPs / peak rate of the compute format, bytes read and written / HBM
bandwidth). Launch overheads, kernel efficiency and caches are left out: this is the ceiling. The calibrated
model (_kernel_time.py, costs/_efficiency.py) charges each kernel class at its achieved rate.
"""

from __future__ import annotations

import math

from zerosim.analysis.costs import ring_latency
from zerosim.analysis.timeline._devices import get_link

RING_PHASES = {"reduce_scatter": 1, "all_gather": 1, "all_reduce": 2, "broadcast": 1}


def ring_steps(world_size: int) -> int:
    """Ring steps of one phase over N ranks: N−1 (a broadcast's chain too: NCCL pipelines it over N−1 hops)."""
    return max(int(world_size) - 1, 0)


def phase_time(world_size: int, busiest_bytes: float, link, *, inter=None, nodes: int = 1, nics: int = 1,
               base: bool = True, steps: int | None = None) -> float:
    """One ring phase: [the call's base latency] + (N−1)·α + busiest rank's bytes over the phase / β (seconds).

    With `inter` (the link between nodes) and the `nodes` the ring spans, the steps are charged as NCCL charges
    them (zerosim.analysis.costs._links): nodes − 1 of the N − 1 steps cross between nodes at `inter.alpha`, the rest at
    `link.alpha`. The bytes move at min(β_link, nics · β_inter): NCCL runs a ring collective as several channels,
    each entering and leaving a node through one NIC (src/graph/search.cc, `ncclTopoSelectNets`), so a ring whose
    node holds `nics` of its ranks, one NIC each, crosses between nodes over all of them (tuning.cc: busBw =
    nChannels · bwInter). `base`: charge the link's per-call latency (False for the second phase of an all-reduce,
    one call to NCCL). `steps`: the phase's steps when it is not a ring's N−1 (a send/receive: one)."""
    steps = ring_steps(world_size) if steps is None else min(int(steps), ring_steps(world_size))
    if steps == 0:
        return 0.0  # one rank: nothing crosses a link
    crossings = 0 if inter is None else min(max(int(nodes) - 1, 0), steps)
    alpha_inter = link.alpha if inter is None else inter.alpha
    beta = link.bandwidth if inter is None else min(link.bandwidth, max(int(nics), 1) * inter.bandwidth)
    latency = ring_latency(steps, crossings, link.alpha, alpha_inter, (link if inter is None else inter).base
                           if base else 0.0)
    return latency + busiest_bytes / beta


def ring_collective_time(collective: str, buffer_bytes: float, world_size: int, link) -> float:
    """A whole collective over a Ψ-byte buffer cut into N equal chunks: base + phases·[(N−1)·α + (N−1)·(Ψ/N)/β].

    (Ψ: the buffer each rank holds before a reduce-scatter or all-reduce, and after an all-gather; `base`: the
    link's per-call latency, once per call as NCCL charges it.)
    `link`: a `zerosim.analysis.costs.Link` or its name in `zerosim.analysis.costs.LINKS` ("nvlink4", "ib_ndr", ...).
    """
    link = get_link(link)
    if collective not in RING_PHASES:
        raise ValueError(f"unknown collective {collective!r}; choose one of {sorted(RING_PHASES)}")
    n = int(world_size)
    if n < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size!r}")
    sent = buffer_bytes if collective == "broadcast" else ring_steps(n) * buffer_bytes / n
    return sum(phase_time(n, sent, link, base=phase == 0) for phase in range(RING_PHASES[collective]))


def equal_chunk_bytes(call) -> int:
    """Bytes each rank sends in one phase of `call` (a `zerosim.cluster.Call`) if its buffer were cut into
    N equal chunks: (N−1)·ceil(elements/N)·itemsize (a broadcast sends the whole buffer once).
    Used when the trace holds no per-rank bytes for the call (a log built by hand)."""
    from zerosim.collectives import wire_itemsize

    itemsize = wire_itemsize(call.dtype)
    if call.collective == "broadcast":
        return call.elements * itemsize
    n = call.world_size
    return ring_steps(n) * math.ceil(call.elements / n) * itemsize


def compute_time(flops: float, bytes_moved: float, rate: float, hbm: float) -> float:
    """Roofline: max(FLOPs / rate, bytes / HBM bandwidth), seconds."""
    if not (0 < rate < math.inf and 0 < hbm < math.inf):  # NaN fails too: a clear error, not a ZeroDivisionError
        raise ValueError(f"compute_time needs a rate and an HBM bandwidth that are finite and > 0, got rate={rate!r}, "
                         f"hbm={hbm!r}")
    return max(flops / rate, bytes_moved / hbm)


def optimizer_bytes_per_element(states: int, grad_bytes: int, param_bytes: int) -> int:
    """HBM bytes read + written per element by one optimizer step over an fp32 master shard.

    Three passes over the shard, as zerosim's engine runs the step (parallel/data/recipes/_averaging.py `finish`, then
    the optimizer, then the rounding into the 16-bit params) and as DeepSpeed's ZeRO-1/2 does
    (deepspeed/runtime/zero/stage_1_and_2.py, `DeepSpeedZeroOptimizer.step`: `.to(fp32)`, FusedAdam,
    `bit16_partitions[...].copy_(fp32_partition)`):

        cast the reduced gradient to fp32, averaged and unscaled   read grad_bytes        write 4
        the fused update: reads master w, fp32 g, each state;      read 4 + 4 + 4·states  write 4 + 4·states
            writes w and each state
        round the master into the 16-bit params                    read 4                 write param_bytes

    Adam (states m, v) with fp16 gradients and params: read 2 + 16 + 4 = 22, write 4 + 12 + 2 = 18,
    40 bytes per element. DeepSpeed's separate unscale pass (`unscale_and_clip_grads`, grad.mul_) and
    overflow check are left out; one kernel doing all three passes would move 30.
    """
    read = grad_bytes + (4 + 4 + 4 * states) + 4
    write = 4 + (4 + 4 * states) + param_bytes
    return read + write


def optimizer_time(elements: int, states: int, grad_bytes: int, param_bytes: int, hbm: float) -> float:
    """An elementwise optimizer step is memory-bound: elements · bytes per element / HBM bandwidth."""
    return elements * optimizer_bytes_per_element(states, grad_bytes, param_bytes) / hbm


def host_optimizer_time(elements: int, states: int, host_bandwidth: float) -> float:
    """DeepSpeedCPUAdam's step over an fp32 region on the host, memory-bound: it reads w, g and each state and writes w
    and each state (csrc/adam/cpu_adam_impl.cpp, fp32: 4 + 4 + 4·states in, 4 + 4·states out), then stage_1_and_2.py
    casts w into the pinned 16-bit buffer (4 in, 2 out): Adam 34 bytes an element."""
    return elements * ((8 + 4 * states) + (4 + 4 * states) + 6) / host_bandwidth

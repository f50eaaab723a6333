"""What the memory explorer draws, as data: one meta-backend step of `Settings`, its ledger and its timeline.

    from zerosim.explore import Settings, explore
    n = explore(Settings(model="llama-2-7b", ranks=8, stage=3))
    n["at_peak"], n["peak"], n["capacity"], n["compute_s"], n["exposed_s"]

One run of the real engine on data-less arrays (analysis/costs/_measured.py `measure_stage`, the run `zerosim memory`
makes), placed in time by the same simulator `zerosim timeline` uses (analysis/timeline/_simulate.py), on the GPU's
datasheet peaks and zerosim's own (fused) kernels — `zerosim timeline --efficiency peak --kernels fused`, not the
command's calibrated defaults — and the ring's link: NVLink within a node of 8, InfiniBand NDR once the ring spans
nodes (`zerosim timeline --gpus-per-node 8`). With an offload placement (`Settings.offload`) the host column holds what
leaves the device, on the machine whose GPUs these are (`zerosim memory --offload-optimizer ... --gpu ...`). Nothing
here is a formula: tests/test_explore.py checks every number against those two commands' --json.

Results are kept per `Settings` (a frozen value): a slider moved back to where it was redraws at once.
"""

from __future__ import annotations

from functools import lru_cache

from zerosim.explore._settings import Settings, check, model_for

GPUS_PER_NODE = 8  # a ring over more ranks than this crosses nodes, over ib_ndr


@lru_cache(maxsize=512)
def explore(s: Settings) -> dict:
    """Every number the explorer shows for `s` (see the module docstring); bytes and seconds.

    Returns {"model", "params", "ranks", "stage", "at_peak": {kind: bytes live at rank 0's peak moment},
    "peak", "resting": {kind: bytes of model states after the step}, "capacity" (the GPU's driver total),
    "estimates" (what no ledger sees, as `zerosim memory --gpu` counts it), "total" (peak + estimates), "fits" (the
    total against the capacity), "step_s", "compute_s", "comm_s", "exposed_s" (the collectives'), "host_wait_s"
    (the step less compute and exposed collectives: what the device waited for the host's copies and CPU step; 0
    without offload), "link",
    "device", "host": the host column}: "host" holds
    the offload placement and, for "host" and "nvme", rank 0's {"resting": {kind: bytes}, "peak", "per_node" (the
    peak times the ranks of a node of 8), "capacity" (the node's, the host whose GPUs `s.gpu` are), "fits"} — all
    empty and 0 without offload (`zerosim memory --offload-... --json`'s "host" and "nvme", and its node's verdict)."""
    from zerosim.analysis.costs import ALLOCATOR_RESERVE, get_gpu, host_of, measure_stage
    from zerosim.analysis.reports import judge
    from zerosim.parallel.offload import PLACEMENTS, Offload

    check(s)
    model = model_for(s)
    gpu, host = get_gpu(s.gpu), host_of(s.gpu)
    nodes = s.ranks > GPUS_PER_NODE  # two link tiers, as `zerosim timeline --gpus-per-node 8` places the ranks
    offload = () if s.offload == "none" else (Offload(placement=PLACEMENTS[s.offload]),)
    row, cluster, engine = measure_stage(model, s.ranks, s.stage, s.optimizer, s.precision,
                                         micro_batch=(s.micro_batch, s.seq_len),
                                         gpus_per_node=GPUS_PER_NODE if nodes else None, parallelisms=offload,
                                         totals=False)  # the bytes the trace sent: not shown
    t, hw, time_model, (compute, comm, exposed) = _step_time(s, model, cluster, engine, gpu, host, nodes, offload)
    verdict = judge(row["peak"], s.stage, s.ranks, gpu, ALLOCATOR_RESERVE)
    return {
        "model": model.name,
        "params": model.num_params,
        "ranks": s.ranks,
        "stage": s.stage,
        "precision": s.precision,  # fp16 and bf16 take the same bytes and time: the title says which one it is
        "at_peak": row["at_peak"],
        "peak": row["peak"],
        "resting": row["resting"],
        "capacity": gpu.capacity,
        "gpu": gpu.name,
        # the verdict `zerosim memory --gpu` gives: the ledger's peak plus what no ledger sees (CUDA context, NCCL's
        # buffers, the allocator's reserve), against the capacity (analysis/reports/_fit.py `judge`)
        "estimates": verdict["overheads_total"],
        "total": verdict["total"],
        "fits": verdict["fits"],
        "step_s": t.step_time,
        "compute_s": compute,
        "comm_s": comm,
        "exposed_s": exposed,
        "host_wait_s": t.step_time - compute - exposed if offload else 0.0,  # the device idle, waiting for the host
        "link": (hw.inter_link or hw.link).name,  # the slowest link the ring crosses
        "device": hw.device.name,
        "time_model": time_model.describe(),  # what the times assume
        "host": _host_column(s, cluster, host),
    }


def _step_time(s: Settings, model, cluster, engine, gpu, host, nodes: bool, offload: tuple):
    """The step simulated from the trace on `s`'s hardware: (timeline, Hardware, TimeModel, (compute, comm, exposed
    collectives) in seconds)."""
    from zerosim.analysis.timeline import Hardware, TimeModel, simulate, step_window
    from zerosim.precision import get_precision

    hw = Hardware(gpu.device, None, get_precision(s.precision).compute,  # the GPU's own NVLink, as the commands
                  inter_link="ib_ndr" if nodes else None).on_host(host, min(s.ranks, GPUS_PER_NODE), gpu)
    # the datasheet roofline and zerosim's own (fused) kernels, which the notebooks teach with; `zerosim timeline
    # --efficiency peak --kernels fused` prints the same (its defaults, eager kernels at achieved rates, are slower)
    time_model = TimeModel(None)
    t = simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm,
                 costs=time_model.costs(model, (s.micro_batch, s.seq_len), hw))
    compute, comm, exposed = float(t.compute_busy[0]), float(t.comm_busy[0]), float(t.exposed_comm[0])
    if offload:  # the collectives alone, as `zerosim timeline --offload-...` reads them; the copies and the CPU step
        w = step_window(t)  # are the host's (their busy time, and what the device waited for beside the collectives)
        compute, comm, exposed = w.busy["compute"], w.busy["comm"], w.uncovered["comm"]
    return t, hw, time_model, (compute, comm, exposed)


def _host_column(s: Settings, cluster, host) -> dict:
    """The host column: the offload placement and rank 0's host and NVMe tiers against its node's."""
    from zerosim.analysis.costs import host_fit

    ledgers = {tier: cluster.ranks[0].ledger_of(tier) for tier in ("host", "nvme")}
    node = host_fit({tier: ledger.peak() for tier, ledger in ledgers.items()}, s.ranks, host, GPUS_PER_NODE)
    return {"offload": s.offload, "machine": host.name, "ranks_per_node": node["ranks_per_node"],
            **{tier: {"resting": {k: v for k, v in ledger.by_kind().items() if v}, "peak": ledger.peak(),
                      "per_node": node[tier]["per_node"], "capacity": node[tier]["capacity"],
                      "fits": node[tier]["fits"]} for tier, ledger in ledgers.items()}}

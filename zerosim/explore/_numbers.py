"""What the memory explorer draws, as data: one meta-backend step of `Settings`, its ledger and its timeline.

    from zerosim.explore import Settings, explore
    n = explore(Settings(model="llama-2-7b", ranks=8, stage=3))
    n["at_peak"], n["peak"], n["capacity"], n["compute_s"], n["exposed_s"]

One run of the real engine on data-less arrays (analysis/costs/_measured.py `measure_stage`, the run `zerosim memory`
makes), placed in time by the same simulator `zerosim timeline` uses (analysis/timeline/_simulate.py), on the GPU's
datasheet peaks and zerosim's own (fused) kernels — `zerosim timeline --efficiency peak --kernels fused`, not the
command's calibrated defaults — and the ring's link: NVLink within a node of 8, InfiniBand NDR once the ring spans
nodes (`zerosim timeline --gpus-per-node 8`). Nothing here is a formula: tests/test_explore.py checks every number
against those two commands' --json.

Results are kept per `Settings` (a frozen value): a slider moved back to where it was redraws at once.
"""

from __future__ import annotations

from functools import lru_cache

from zerosim.explore._settings import Settings, check, model_for

GPUS_PER_NODE = 8  # a ring over more ranks than this crosses nodes, over ib_ndr


def link_for(ranks: int) -> str:
    """The slowest link a ring of N ranks crosses, nodes of 8 GPUs (as `zerosim timeline --gpus-per-node 8`)."""
    return "ib_ndr" if ranks > GPUS_PER_NODE else "nvlink4"


@lru_cache(maxsize=512)
def explore(s: Settings) -> dict:
    """Every number the explorer shows for `s` (see the module docstring); bytes and seconds.

    Returns {"model", "params", "ranks", "stage", "at_peak": {kind: bytes live at rank 0's peak moment},
    "peak", "resting": {kind: bytes of model states after the step}, "capacity" (the GPU's driver total),
    "fits", "step_s", "compute_s", "comm_s", "exposed_s", "link", "device"}."""
    from zerosim.analysis.costs import get_gpu, measure_stage
    from zerosim.analysis.timeline import Hardware, TimeModel, simulate
    from zerosim.precision import get_precision

    check(s)
    model = model_for(s)
    gpu = get_gpu(s.gpu)
    nodes = s.ranks > GPUS_PER_NODE  # two link tiers, as `zerosim timeline --gpus-per-node 8` places the ranks
    row, cluster, engine = measure_stage(model, s.ranks, s.stage, s.optimizer, s.precision,
                                         micro_batch=(s.micro_batch, s.seq_len),
                                         gpus_per_node=GPUS_PER_NODE if nodes else None)
    hw = Hardware(gpu.device, "nvlink4", get_precision(s.precision).compute, inter_link="ib_ndr" if nodes else None)
    # the datasheet roofline and zerosim's own (fused) kernels, which the notebooks teach with; `zerosim timeline
    # --efficiency peak --kernels fused` prints the same (its defaults, eager kernels at achieved rates, are slower)
    time_model = TimeModel(None)
    t = simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm,
                 costs=time_model.costs(model, (s.micro_batch, s.seq_len), hw))
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
        "fits": row["peak"] <= gpu.capacity,  # the ledger's bytes alone; `zerosim memory --gpu` adds the overheads
        "step_s": t.step_time,
        "compute_s": float(t.compute_busy[0]),
        "comm_s": float(t.comm_busy[0]),
        "exposed_s": float(t.exposed_comm[0]),
        "link": (hw.inter_link or hw.link).name,  # the slowest link the ring crosses
        "device": hw.device.name,
        "time_model": time_model.describe(),  # what the times assume
    }

"""torchtitan's Llama 3.1 70B run, FSDP 32 x TP 8 on 256 H100s, beside zerosim's prediction of it, with the error.

Source: pytorch/torchtitan at d4c86e375 (2025-01-30), docs/performance.md, Table 4 ("2D parallelism (FSDP + TP) +
torch.compile + Float8. Llama 3.1 70B model. 256 GPUs (FSDP 32, TP 8). Local batch size 16, global batch size 512.
Full activation checkpointing."): row "2D", 829 tokens/s/GPU and 71.9 GiB; row "2D + AsyncTP", 876 and 67.6 (the
same table is benchmarks/llama3_h100_202412_torchtitan.md at b5bcd76). Its conditions, read there and in the code
it ran (torchtitan 9dec370 of 2024-12-26): Grand Teton H100s (96 GB HBM2e, 500 W), 8 a node, NVLink inside and
400 Gb/s RDMA per GPU between; train_configs/llama3_70b.toml: seq_len 8192, AdamW, activation_checkpoint 'full';
torchtitan/parallelisms/parallelize_llama.py, apply_tp: SequenceParallel on every norm, ColwiseParallel /
RowwiseParallel on the projections, loss_parallel (the vocabulary-parallel loss); apply_fsdp over dp_shard with
bf16 parameters and fp32 gradient reduction (mixed_precision_reduce's default); train.py logs "memory" as
`max_reserved_gib` and tokens/s/GPU as tokens / (time · non_data_parallel_size), zerosim's one definition too
(analysis/costs/_throughput.py).

What zerosim runs for it: MetaLlama of the shipped llama-3-70b.json (Llama 3.1 70B's shape; its 131,072 positions and
rope scaling do not change a step of 8,192 tokens), flash attention (SDPA's kernel), block checkpointing, ZeRO-3 with
FSDP2's recipe and an fp32 reduce over dp = 32 beside TP 8 with sequence parallelism, FSDP's schedule, AdamW, one
micro-step of 16 sequences; memory = the ledger's peak + the labelled estimates (CUDA context, NCCL, a 5 % allocator
reserve); time = the timeline on H100 SXM's dense bf16 peak over NVLink 4 and InfiniBand NDR (a ceiling).

Not modelled, so part of the error: Float8 (its matmuls and casts: faster GEMMs, extra buffers), torch.compile's
fusions, achieved rather than peak FLOP/s and link bandwidth (issue 36's efficiency model: branch `calibrated`),
the logits and their fp32 copy in flight (torchtitan's `pred.float()`), the allocator's real fragmentation, the
HBM2e parts' lower clocks at 500 W.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

GIB = 2**30
SOURCE = "pytorch/torchtitan@d4c86e375 docs/performance.md, Table 4"


@dataclass(frozen=True)
class PublishedRun:
    """One published tensor-parallel run and the conditions zerosim predicts it under."""

    key: str
    source: str  # file at commit, table and row
    model: str  # the shipped config zerosim reads its shape from
    gpus: int
    gpus_per_node: int
    tp: int
    sequence_parallel: bool
    local_batch: int  # sequences per data-parallel rank per step (torchtitan's batch_size)
    seq_len: int
    async_tp: bool
    tokens_per_s_per_gpu: float  # measured
    memory_gib: float  # measured: peak reserved
    note: str = ""


TORCHTITAN_70B = (
    PublishedRun("tt-h100-256-70b-2d", f"{SOURCE}, row '2D'", "llama-3-70b", 256, 8, 8, True, 16, 8192, False,
                 829, 71.9, "torch.compile + Float8 (not modelled)"),
    PublishedRun("tt-h100-256-70b-2d-async", f"{SOURCE}, row '2D + AsyncTP'", "llama-3-70b", 256, 8, 8, True, 16, 8192,
                 True, 876, 67.6, "torch.compile + Float8 (not modelled); async TP: zerosim's bound (no compute "
                 "waits for TP's collectives)"),
)


def predict(run: PublishedRun, reserve: float = 0.05) -> dict:
    """zerosim's memory (GiB, peak reserved as estimated) and tokens/s/GPU for `run`, and their errors against the
    published numbers: (predicted − measured) / measured."""
    from zerosim.analysis.costs import get_gpu, measure_stage, runtime_overheads, tokens_per_s_per_gpu
    from zerosim.analysis.planner._sweep import meta_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models import MetaLlama, read_hf_config, shipped_config
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.precision import get_precision

    # the loss as torchtitan 9dec370's train.py runs it: cross_entropy(pred.float(), ...) under loss_parallel
    # (utils.py `get_train_context`), eager (its torch.compile of the loss is commented out): "eager" on V/t columns
    model = MetaLlama.from_config(read_hf_config(shipped_config(run.model)), seq_len=run.seq_len, checkpoint="block",
                                  attention="flash", loss="eager")
    precision = get_precision("bf16-mixed").with_(reduce="fp32", reduction="fsdp2")  # FSDP2: bf16 params, fp32 reduce
    comm, micro = get_comm_schedule("fsdp"), (run.local_batch, run.seq_len)
    # torch DTensor's TP as torchtitan runs it: the all-gathered inputs kept (parallel/tensor LAYOUTS)
    beside = {"gpus_per_node": run.gpus_per_node, "tp": run.tp, "sp": run.sequence_parallel, "layout": "torchtitan"}
    row, _, _ = measure_stage(model, run.gpus, 3, "adamw", precision, micro_batch=micro, comm=comm, **beside)
    estimates = runtime_overheads(row["peak"], run.gpus, 3, None, reserve)
    memory = (row["peak"] + sum(o.bytes for o in estimates)) / GIB
    hw = Hardware(get_gpu("h100-80gb").device, "nvlink4", precision.compute, inter_link="ib_ndr")
    result, engine = meta_step(model, run.gpus, 3, hw, comm, precision, optimizer="adamw", micro_batch=micro,
                               async_tp=run.async_tp, **beside)
    tokens = tokens_per_s_per_gpu(engine.ctx.mesh.dims, run.local_batch * run.seq_len, result.step_time)
    return {
        "key": run.key, "source": run.source,
        "memory_gib": memory, "memory_measured_gib": run.memory_gib,
        "memory_error": (memory - run.memory_gib) / run.memory_gib,
        "ledger_peak_gib": row["peak"] / GIB, "estimates_gib": {o.name: o.bytes / GIB for o in estimates},
        "at_peak_gib": {k: v / GIB for k, v in row["at_peak"].items()},
        "tokens_per_s_per_gpu": tokens, "tokens_measured": run.tokens_per_s_per_gpu,
        "throughput_error": (tokens - run.tokens_per_s_per_gpu) / run.tokens_per_s_per_gpu,
        "step_s": result.step_time, "compute_s": float(result.compute_busy[0]),
        "exposed_comm_s": float(result.exposed_comm[0]), "note": run.note,
    }

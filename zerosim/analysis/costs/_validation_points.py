"""Published training runs zerosim's predictions are checked against: each run's conditions, source and numbers.

Every point names the file, table and row it comes from at a named commit, the measured tokens per second per GPU
and, where published, the memory (PyTorch's peak *reserved* memory: torchtitan's train.py logs
`max_reserved_gib` as "memory"). `role` is "calibration" (the only points the framework factors are fitted on,
analysis/costs/_calibration.py) or "held-out" (never fitted to; docs/validation.md records that the model's form and the
calibration were fixed before their errors were computed).

Conditions a point cannot state are assumptions, said in `note`: the A100 clusters' and llm-foundry's H100
clusters' network (one 200 or 400 Gb/s NIC per GPU), FSDP1's schedule taken as FSDP's (zerosim's "fsdp"),
MPT's blocks as GPT-2's (with biases and learned positions: llm-foundry's own NumParams column counts the same).

Sources (fetched read-only; nothing is fetched at run time):

    TT_H100   pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a, benchmarks/llama3_h100_202412_torchtitan.md
              (torch 1963fc8, torchtitan 9dec370 of 2024-12; Grand Teton H100 96GB HBM2e, 500 W, 400 Gb/s per GPU)
    TT_A100   pytorch/torchtitan @ 1ea476e9f24be439eda358aa864f45c1c37a8a88, docs/performance.md ("Llama 3 performance
              numbers": 64 A100 80GB, FSDP2; train_configs/llama3_8b.toml there: seq_len 8192, compile false)
    TT_H200   pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a, benchmarks/llama3-8b_h200_202506_trainy-
              whitefiber.md (torchtitan e7c0cae: llama3_8b.toml there: seq_len 8192, selective op AC)
    TT_70B    pytorch/torchtitan @ d4c86e375, docs/performance.md, Table 4 (Llama 3.1 70B, FSDP 32 x TP 8, 256 H100s)
    FOUNDRY   mosaicml/llm-foundry @ 8c8dd48f72168c5d51e2f7b151595892a8fba43d, scripts/train/benchmarking/README.md
              (last changed by 495218376; model shapes from scripts/train/yamls/pretrain/mpt-*.yaml at 5e85bd62d;
              attn_impl triton, low_precision_layernorm, torch 2.1, Composer FSDP FULL_SHARD)
    TT_405B   pytorch/torchtitan @ b5bcd76, benchmarks/llama3_h100_202412_torchtitan.md, Table 5 (Llama 3.1 405B, 512
              H100s, FSDP 8 × TP 8 × PP 8; torchtitan 9dec370: train_configs/llama3_405b.toml, seq_len 8192, full AC,
              Float8 with its FSDP all-gather, async TP; pipeline_parallel_microbatches unset, so the pp degree, 8:
              torchtitan/parallelisms/pipeline_llama.py `pipeline_llama_manual_split`)
    TT_4D     pytorch/torchtitan @ b5bcd76, benchmarks/llama3_h100_202412_torchtitan.md, Table 6 (Llama 3.1 405B, 512
              H100s, FSDP × TP 8 × PP 8 × CP, 1F1B, local batch 8, full AC, torch.compile + Float8 + async TP; the
              same torch 1963fc8 / torchtitan 9dec370 as Table 5)
    LLAMA3    The Llama 3 Herd of Models (arXiv 2407.21783), §3.3.2 and Table 4, "Scaling configurations and MFU for
              each stage of Llama 3 405B pre-training", row '16,384 | 8 | 16 | 16 | 4 | 131,072 | 16 | 16M | 380 |
              38%' (GPUs, TP, CP, PP, DP, sequence, batch size / DP, tokens / batch, TFLOPs / GPU, BF16 MFU)
    NEMO      NVIDIA NeMo Framework user guide, "Performance Summary for Large Language Models", pre-training at FP8,
              container NeMo 25.02, system DGX-H100 (docs.nvidia.com/nemo-framework/user-guide/latest/performance/
              performance_summary.html), row GPT3-175B; the run: NVIDIA/NeMo scripts/performance/llm/
              pretrain_gpt3_175b.py (fp8: bf16_with_fp8_mixed, grad_reduce_in_fp32 False) over nemo/collections/llm/
              recipes/gpt3_175b.py (sequence parallel, Megatron's distributed optimizer, no recompute, TP comm overlap)
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

TT_H100 = "pytorch/torchtitan@b5bcd76 benchmarks/llama3_h100_202412_torchtitan.md"
TT_A100 = "pytorch/torchtitan@1ea476e9 docs/performance.md"
TT_H200 = "pytorch/torchtitan@b5bcd76 benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"
TT_70B = "pytorch/torchtitan@d4c86e375 docs/performance.md, Table 4"
FOUNDRY = "mosaicml/llm-foundry@8c8dd48 scripts/train/benchmarking/README.md"
TT_405B = "pytorch/torchtitan@b5bcd76 benchmarks/llama3_h100_202412_torchtitan.md, Table 5"
TT_4D = "pytorch/torchtitan@b5bcd76 benchmarks/llama3_h100_202412_torchtitan.md, Table 6"
LLAMA3 = "The Llama 3 Herd of Models (arXiv 2407.21783), Table 4"
NEMO = ("https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html as read "
        "(container NeMo 25.02), 'Pretraining' at FP8, 'System: DGX-H100'")

# Hugging Face style config dicts (zerosim.models.hf._config reads them as it reads a config.json)
LLAMA_3_1_8B = {  # meta-llama/Llama-3.1-8B's shape: Llama 3 8B's, with 131,072 positions (rope scaling not modelled)
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
}
LLAMA_3_70B = {  # meta-llama/Meta-Llama-3-70B (the shipped llama-3-70b.json)
    "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
    "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
}
LLAMA_3_1_405B = {  # torchtitan 9dec370's llama3 "405B" (torchtitan/models/llama/__init__.py): dim 16384, 126 layers,
    # 128 heads, 8 KV heads, FFN 53,248 (ffn_dim_multiplier 1.2, multiple_of 4096); meta-llama/Llama-3.1-405B's shape
    "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248, "num_attention_heads": 128,
    "num_hidden_layers": 126, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
}
MPT = {  # scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_heads, n_layers; expansion_ratio 4, vocab 50,368
    "mpt-1b": (2048, 16, 24), "mpt-7b": (4096, 32, 32), "mpt-13b": (5120, 40, 40), "mpt-30b": (7168, 56, 48),
    "mpt-70b": (8192, 64, 80),
}


def mpt_config(name: str, seq_len: int) -> dict:
    """An MPT model as GPT-2's layout: tied embedding, learned positions of max_seq_len, GELU FFN of 4d."""
    d, h, n = MPT[name]
    return {"model_type": "gpt2", "n_embd": d, "n_head": h, "n_layer": n, "n_positions": seq_len, "n_ctx": seq_len,
            "vocab_size": 50368, "activation_function": "gelu", "tie_word_embeddings": True}


@dataclass(frozen=True)
class Point:
    """One published run and everything zerosim needs to predict it."""

    key: str  # a short name, unique
    role: str  # "calibration" or "held-out"
    source: str  # file at commit, table and row
    model: str  # "llama-3.1-8b", "llama-3-8b", "llama-3-70b" or an MPT name
    gpu: str  # zerosim.analysis.costs.GPUS key
    gpus: int  # N
    gpus_per_node: int
    links: tuple  # (within a node, between nodes): zerosim.analysis.costs.LINKS keys
    micro_batch: int  # B sequences per GPU per micro-step
    seq_len: int  # L
    accumulation: int  # K micro-steps per step
    strategy: str  # checkpointing (zerosim.models.gpt.ALL_STRATEGIES)
    preset: str  # efficiency preset: "eager" or "compiled"
    tokens_per_s: float | None  # measured tokens per second per GPU (None: the source gives `model_tflops` instead)
    memory_gib: float | None = None  # measured peak reserved memory, GiB (None: not published)
    fp8: bool = False  # torchao Float8Linear in the blocks
    fp8_all_gather: bool = False  # torchao's enable_fsdp_float8_all_gather
    reduce_fp32: bool = True  # gradients reduced in fp32 (torchtitan's mixed_precision_reduce; Composer DEFAULT)
    note: str = ""
    tp: int = 1  # tensor parallelism's degree (torchtitan's tp): tokens per GPU are B·L·K / tp
    sp: bool = False  # sequence parallelism beside TP
    async_tp: bool = False  # torchtitan's async TP (zerosim's bound: no compute waits for TP's collectives)
    # what a TP rank keeps (parallel/tensor LAYOUTS): the framework's; every TP point here
    tp_layout: str = "torchtitan"
    #                                is torchtitan's (DTensor's all-gathered inputs, torch's loss_parallel)
    # the loss (models/meta/_loss_peak.py): eager unless the run compiled it. torchtitan at 9dec370 compiles the blocks
    # only (parallelize_llama.py, apply_compile; train.py's `loss_fn = torch.compile(loss_fn)` commented out), its
    # loss is cross_entropy(pred.float(), ...); llm-foundry's MPT computes F.cross_entropy under bf16 autocast,
    # which runs it in fp32
    loss: str = "eager"
    stage: int = 3  # the ZeRO stage: FSDP's (3) for torchtitan and llm-foundry, Megatron's distributed optimizer (1)
    comm: str = "fsdp"  # the communication schedule (zerosim.parallel.data get_comm_schedule)
    pp: int = 1  # pipeline parallelism's degree: `accumulation` is then its micro-batches a step (num_microbatches)
    pp_schedule: str = "1f1b"  # with pp > 1: the schedule (parallel/pipeline SCHEDULES)
    virtual_stages: int | None = None  # with pp > 1: stages a rank (None: the schedule's default)
    pp_split: str = "torchtitan"  # with pp > 1: where the layers are cut (parallel/pipeline RULES)
    cp: int = 1  # context parallelism's degree: each GPU L / cp tokens of every sequence (parallel/context)
    cp_style: str = "ring"  # with cp > 1: "ring" (TE's p2p), "allgather" (the Llama 3 paper's) or "torch" (torch's)
    cp_split: str = "zigzag"  # with cp > 1: the load-balanced 2·cp chunks (torch's, TE's, the Llama 3 paper's)
    # the model TFLOP/s per GPU the source publishes where it gives no tokens per second (the Llama 3 paper): the
    # measured tokens/s are then these over the one FLOPs count (costs/_throughput.py model_flops_per_token)
    model_tflops: float | None = None

    @property
    def kernels(self) -> str:
        """What the activations keep: eager runs keep eager's tensors, compiled ones the fused ones."""
        return "eager" if self.preset == "eager" else "fused"


def _tt(key, role, row, gpus, strategy, preset, tps, mem, fp8=False, L=8192, B=2, source=TT_H100, **kw):
    nodes = gpus > 8
    return Point(key, role, f"{source}, {row}", "llama-3.1-8b", "h100-hbm2e", gpus, 8,
                 ("nvlink4", "ib_ndr" if nodes else None), B, L, 1, strategy, preset, tps, mem, fp8, **kw)


def _mpt(key, name, gpu, gpus, L, B, K, ac, tps, pure=False, table=""):
    h100 = gpu == "h100-80gb"
    links = ("nvlink4" if h100 else "nvlink3", ("ib_ndr" if h100 else "ib_hdr") if gpus > 8 else None)
    net = "" if gpus <= 8 else ("; network assumed 400 Gb/s per GPU (not stated)" if h100 else
                                "; 1600 Gbps per node (RoCE) = 200 Gb/s per GPU")
    return Point(key, "held-out", f"{FOUNDRY}, {table} row '{name[4:]} | {L} | {gpus}' (MicroBatchSize {B}, GradAccum "
                 f"{K})", name, gpu, gpus, 8, links, B, L, K, "block-flash" if ac else "flash", "eager", tps,
                 reduce_fp32=not pure, note=("bf16 PURE (reduce in bf16)" if pure else "amp_bf16 DEFAULT (fp32 reduce)")
                 + net)


POINTS = (
    # -- the calibration set: torchtitan's 8-GPU H100 table (all three rows) and its A100 Llama 3 8B op-SAC row ----
    _tt("tt-h100-8-eager", "calibration", "Table 1 'FSDP'", 8, "op-sac", "eager", 5762, 82.4),
    _tt("tt-h100-8-compile", "calibration", "Table 1 'FSDP + torch.compile'", 8, "op-sac", "compiled", 6667, 77.0),
    _tt("tt-h100-8-compile-fp8", "calibration", "Table 1 'FSDP + torch.compile + Float8'", 8, "op-sac", "compiled",
        8532, 76.8, fp8=True),
    Point("tt-a100-64-8b-op", "calibration", f"{TT_A100}, Llama 3 table, row '8B | 1 | selective op | 2973'",
          "llama-3-8b", "a100-80gb", 64, 8, ("nvlink3", "ib_hdr"), 1, 8192, 1, "op-sac", "eager", 2973,
          note="norm_type fused_rmsnorm (a Triton kernel; eager's RMSNorm bytes charged); network assumed 200 Gb/s "
               "per GPU (not stated)"),
    # -- held out: torchtitan --------------------------------------------------------------------------------------
    _tt("tt-h100-128-eager", "held-out", "Table 3 'FSDP'", 128, "op-sac", "eager", 5605, 67.0),
    _tt("tt-h100-128-compile", "held-out", "Table 3 'FSDP + torch.compile'", 128, "op-sac", "compiled", 6514, 62.0),
    _tt("tt-h100-128-compile-fp8", "held-out", "Table 3 'FSDP + torch.compile + Float8'", 128, "op-sac", "compiled",
        8380, 61.8, fp8=True),
    _tt("tt-h100-8-32k", "held-out", "Table 2 'FSDP 8, CP 1 | 32768'", 8, "block-flash", "compiled", 3890, 83.9,
        fp8=True, L=32768, B=1),
    Point("tt-a100-64-70b-full", "held-out", f"{TT_A100}, Llama 3 table, row '70B | 1 | full | 331'", "llama-3-70b",
          "a100-80gb", 64, 8, ("nvlink3", "ib_hdr"), 1, 8192, 1, "block-flash", "eager", 331,
          note="network assumed 200 Gb/s per GPU (not stated)"),
    # FSDP 32 x TP 8 (torchtitan d4c86e375 docs/performance.md Table 4; zerosim.analysis.planner TORCHTITAN_70B holds
    # the conditions read from the code it ran): Llama 3.1 70B's shape is the shipped llama-3-70b.json's; torch.compile
    # + Float8 linears, full activation checkpointing, sequence parallelism and the vocabulary-parallel loss. Added
    # with tensor parallelism (issue 38), after the framework factors were fitted: held out
    Point("tt-h100-256-70b-2d", "held-out", f"{TT_70B}, row '2D'", "llama-3-70b", "h100-hbm2e", 256, 8,
          ("nvlink4", "ib_ndr"), 16, 8192, 1, "block-flash", "compiled", 829, 71.9, fp8=True, tp=8, sp=True,
          note="Float8 all-gather not stated (taken as off)"),
    Point("tt-h100-256-70b-2d-async", "held-out", f"{TT_70B}, row '2D + AsyncTP'", "llama-3-70b", "h100-hbm2e", 256,
          8, ("nvlink4", "ib_ndr"), 16, 8192, 1, "block-flash", "compiled", 876, 67.6, fp8=True, tp=8, sp=True,
          async_tp=True, note="Float8 all-gather not stated (taken as off); async TP as zerosim's bound"),
    # torchtitan e7c0cae compiles the loss with the model (torchtitan/components/loss.py, build_cross_entropy_loss:
    # "Compiling the loss function with torch.compile"): a fused kernel's one V-wide tensor, "probabilities". Set
    # after the first held-out run, which had taken the 9dec370 runs' eager loss (docs/validation.md says both)
    Point("tt-h200-32", "held-out", f"{TT_H200}, row 'NUM_NODES 4'", "llama-3.1-8b", "h200", 32, 8,
          ("nvlink4", "ib_ndr"), 2, 8192, 1, "op-sac", "compiled", 10938, 47.96, fp8=True, fp8_all_gather=True,
          loss="probabilities"),
    Point("tt-h200-64", "held-out", f"{TT_H200}, row 'NUM_NODES 8'", "llama-3.1-8b", "h200", 64, 8,
          ("nvlink4", "ib_ndr"), 2, 8192, 1, "op-sac", "compiled", 10753, 46.97, fp8=True, fp8_all_gather=True,
          loss="probabilities"),
    # -- held out: llm-foundry's MPT tables ------------------------------------------------------------------------
    _mpt("foundry-h100-1b-8", "mpt-1b", "h100-80gb", 8, 2048, 14, 1, False, 45455, table="'H100 80GB BF16'"),
    _mpt("foundry-h100-7b-8", "mpt-7b", "h100-80gb", 8, 2048, 6, 1, False, 10643, table="'H100 80GB BF16'"),
    _mpt("foundry-h100-7b-128", "mpt-7b", "h100-80gb", 128, 2048, 6, 1, False, 10475,
         table="'H100 80GB BF16 (Large Scale, >= 128 GPUs)'"),
    _mpt("foundry-h100-7b-8k", "mpt-7b", "h100-80gb", 8, 8192, 8, 2, True, 6935, table="'H100 80GB BF16'"),
    _mpt("foundry-h100-13b-8", "mpt-13b", "h100-80gb", 8, 2048, 2, 1, False, 4792, table="'H100 80GB BF16'"),
    _mpt("foundry-h100-30b-8", "mpt-30b", "h100-80gb", 8, 2048, 3, 21, True, 2002, table="'H100 80GB BF16'"),
    _mpt("foundry-h100-70b-64", "mpt-70b", "h100-80gb", 64, 2048, 8, 4, True, 1039, table="'H100 80GB BF16'"),
    _mpt("foundry-a100-7b-8", "mpt-7b", "a100-80gb", 8, 2048, 6, 2, False, 4641,
         table="'A100 80GB with 1600 Gbps node-node interconnect (RoCE)'"),
    _mpt("foundry-a100-13b-4k", "mpt-13b", "a100-80gb", 8, 4096, 10, 3, True, 2060,
         table="'A100 80GB with 1600 Gbps node-node interconnect (RoCE)'"),
    _mpt("foundry-a100-30b-8", "mpt-30b", "a100-80gb", 8, 2048, 3, 21, True, 916,
         table="'A100 80GB with 1600 Gbps node-node interconnect (RoCE)'"),
    _mpt("foundry-a100-70b-64", "mpt-70b", "a100-80gb", 64, 2048, 8, 4, True, 410, pure=True,
         table="'A100 80GB with 1600 Gbps node-node interconnect (RoCE)'"),
    _mpt("foundry-a100-40-7b-64", "mpt-7b", "a100-40gb", 64, 2048, 18, 1, True, 3665, pure=True,
         table="'A100 40GB with 1600 Gbps node-node interconnect (RoCE)'"),
    _mpt("foundry-a100-40-13b-8", "mpt-13b", "a100-40gb", 8, 2048, 4, 16, True, 1668, pure=True,
         table="'A100 40GB with 1600 Gbps node-node interconnect (RoCE)'"),
    # -- held out: pipeline parallelism (issue 59), added after the framework factors were frozen -------------------
    # torchtitan's 3-D run: local batch 32 = 8 micro-batches of 4 sequences (M = the pp degree, torchtitan 9dec370's
    # default), its layers cut as torchtitan cuts them (126 + 2 over 8 or 16 stages: 9dec370's generate_split_points
    # and b5bcd76's rule give the same counts here), torch.compile + Float8 + async TP, sequence parallelism beside TP
    # (torchtitan's apply_tp: SequenceParallel on the norms); FSDP2 beside PP as torchtitan runs it (comm "fsdp" at
    # stage 3: gathered once a step, parallel/pipeline/_beside.py); Float8's FSDP all-gather beside TP not modelled
    Point("tt-h100-512-405b-3d-1f1b", "held-out", f"{TT_405B}, row '1F1B'", "llama-3.1-405b", "h100-hbm2e", 512, 8,
          ("nvlink4", "ib_ndr"), 4, 8192, 8, "block-flash", "compiled", 100, 82.5, fp8=True, tp=8, sp=True,
          async_tp=True, pp=8, pp_schedule="1f1b",
          note="async TP as zerosim's bound; Float8's FSDP all-gather (enable_fsdp_float8_all_gather) not modelled "
               "beside TP and PP (taken as off); FSDP2 beside PP keeps the stage gathered over the step "
               "(reshard_after_forward=False) and reduce-scatters once (no_reshard_no_sync)"),
    Point("tt-h100-512-405b-3d-interleaved", "held-out", f"{TT_405B}, row 'Interleaved 1F1B'", "llama-3.1-405b",
          "h100-hbm2e", 512, 8, ("nvlink4", "ib_ndr"), 4, 8192, 8, "block-flash", "compiled", 128, 72.7, fp8=True,
          tp=8, sp=True, async_tp=True, pp=8, pp_schedule="interleaved-1f1b", virtual_stages=2,
          note="as the 1F1B row; 2 stages a rank (torchtitan's default for a looped schedule)"),
    # NeMo's GPT-3 175B: GBS 2048, MBS 2, TP 4, PP 8, VP 6, GA 64 (the micro-batches a step on each of the 16
    # data-parallel ranks); Megatron's layout and split (96 layers, 2 a virtual stage), ZeRO-1 (the distributed
    # optimizer) reducing in bf16, sequence parallelism, Transformer Engine's fused kernels and FP8 GEMMs, no
    # recompute, TP comm overlap, overlap_grad_reduce (NVIDIA/NeMo 0175f4c nemo/collections/llm/recipes/gpt3_175b.py,
    # `trainer`: DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True, ...))
    Point("nemo-h100-512-gpt3-175b", "held-out", f"{NEMO}, row 'GPT3-175B | 512 | 2048 | 2 | 2048 | 4 | 8 | 1 | "
          "6 | 1 | 64 | 866'", "gpt3-175b", "h100-80gb", 512, 8, ("nvlink4", "ib_ndr"), 2, 2048, 64, "flash",
          "compiled", 866, fp8=True, reduce_fp32=False, tp=4, sp=True, async_tp=True, tp_layout="megatron",
          stage=1, comm="megatron", pp=8, pp_schedule="interleaved-1f1b", virtual_stages=6, pp_split="megatron",
          note="TP comm overlap (userbuffers) as zerosim's async-TP bound; Megatron's overlapped gradient "
               "reduce-scatter (overlap_grad_reduce: 40M-parameter buckets in each chunk's last backward); its "
               "overlapped parameter all-gather not modelled (after the update); the tied embedding's gradient "
               "all-reduce between the first and last stage not modelled"),
)
# -- held out: context parallelism beside pipeline parallelism (issue 60), added after the factors were frozen, each
# typed in before its prediction was first computed; not in POINTS (issue 36's table and its targets), run by name
# (`zerosim validate --only KEY`). torchtitan's Table 6: each data-parallel rank's local batch 8 = 8 micro-batches of
# one sequence (pipeline_parallel_microbatches unset: the pp degree, as in Table 5), CP on the FSDP mesh, sequence
# parallelism beside TP as in Table 5 (sp=True since 2026-11-29, once zerosim ran it beside CP); torch's own
# context_parallel as torchtitan 9dec370 runs it (cp_style="torch" since 2026-11-29, once zerosim ran it: K/V at
# every query head all-gathered, merged in fp32, dK/dV sums sent round in fp32; Transformer Engine's ring before)
_4D_NOTE = ("as Table 5's rows (async TP as zerosim's bound; SequenceParallel beside TP, here beside CP too, added "
            "after the rows' errors were seen: docs/validation.md item 10; Float8's FSDP all-gather not modelled "
            "beside TP and PP, taken as off; FSDP2 beside PP keeps the stage gathered over the step); torch's "
            "context_parallel as torchtitan runs it (all-gather, head-tail split), added after the rows' errors "
            "were seen: docs/validation.md item 11")
LONG_CONTEXT = tuple(
    Point(f"tt-h100-512-405b-4d-cp{cp}", "held-out", f"{TT_4D}, row 'FSDP {8 // cp}, CP {cp} | {32768 * cp}'",
          "llama-3.1-405b", "h100-hbm2e", 512, 8, ("nvlink4", "ib_ndr"), 1, 32768 * cp, 8, "block-flash", "compiled",
          tps, mem, fp8=True, tp=8, sp=True, async_tp=True, pp=8, pp_schedule="1f1b", cp=cp, cp_style="torch",
          note=_4D_NOTE)
    for cp, tps, mem in ((1, 76, 75.3), (2, 47, 75.9), (4, 31, 77.1), (8, 16, 84.9))
) + (
    # the Llama 3 paper's 128k stage. Its row says DP 4, but its 16,384 GPUs and 16M tokens a batch both need DP 8
    # (8 · 16 · 16 · 8 = 16,384; 8 · 16 · 131,072 = 16.8M): typed in on its 16,384 GPUs, 16 sequences a data-parallel
    # rank as 16 micro-batches of one. Stated in §3.3: H100 80GB HBM3 at 700 W, 400 Gb/s RoCE a GPU (taken as
    # InfiniBand NDR's rates), [TP, CP, PP, DP] inner to outer (zerosim's mesh order: ParallelDims), FSDP reducing in
    # fp32, CP all-gathering K and V over 2·CP load-balanced chunks, an interleaved schedule whose first and last
    # chunks hold the embedding and the output alone: torchtitan's split at V = 8 (126 layers + 2 over 128 stages,
    # one a stage), the one V > 1 that cuts 126 layers so; BF16 (no Float8). Not stated, taken: full activation
    # checkpointing (the paper runs its 8K stage without it; at 128k zerosim's ledger without it is 186 GiB, more than
    # the GPU holds), the compiled preset, FLOPs counted as torchtitan counts them (attention's whole L×L)
    Point("llama3-h100-16k-405b-cp16", "held-out", f"{LLAMA3}, row '16,384 | 8 | 16 | 16 | 4 | 131,072 | 16 | 16M "
          "| 380 | 38%'", "llama-3.1-405b", "h100-80gb", 16384, 8, ("nvlink4", "ib_ndr"), 1, 131072, 16, "block-flash",
          "compiled", None, None, tp=8, pp=16, pp_schedule="interleaved-1f1b", virtual_stages=8, cp=16,
          cp_style="allgather", model_tflops=380,
          note="DP 8 (the row's 16,384 GPUs and 16M tokens; it prints DP 4); full activation checkpointing assumed; "
               "RoCE taken as InfiniBand NDR; the paper's FLOPs count taken as torchtitan's"),
)
ROLES = ("calibration", "held-out")
TREND = ("tt-h100-8-eager", "tt-h100-128-eager")  # the 8 -> 128 GPU trend the issue names (same run, 16x the GPUs)


def config_of(point: Point) -> dict:
    """The model's config dict (zerosim.models.hf._config reads it)."""
    if point.model == "llama-3.1-8b":
        return LLAMA_3_1_8B
    if point.model == "llama-3-70b":
        return LLAMA_3_70B
    if point.model == "llama-3-8b":
        return {**LLAMA_3_1_8B, "max_position_embeddings": 8192}
    if point.model == "llama-3.1-405b":
        return LLAMA_3_1_405B
    if point.model == "gpt3-175b":  # the shipped config (zerosim/models/hf/configs: GPT-3's Table 2.1 shape)
        from zerosim.models.hf import read_json_object, shipped_config

        return read_json_object(shipped_config("gpt3-175b"), "gpt3-175b", "a config")[0]
    return mpt_config(point.model, point.seq_len)

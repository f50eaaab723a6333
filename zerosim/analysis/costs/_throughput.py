"""Throughput and MFU, the one definition every command, report, JSON and page reads.

    tokens per step          = dp · B·L·K          every batch rank's micro-batches (dims.dp = dp_replicate · dp_shard)
    tokens/s per GPU         = tokens per step / step time / world size
    model FLOPs per token    = 6 · (Ψ − the token embedding) + 12 · n_layers · H · d_h · L
    MFU                      = model FLOPs per token · tokens/s per GPU / the GPU's dense 16-bit peak

Tokens per second are the job's, spread over every GPU it holds: the GPUs of a tensor-, pipeline- or
context-parallel group share one batch rank's micro-batch (torchtitan's data loader is built on the "batch" mesh,
dp_replicate × dp_shard: torchtitan/distributed/parallel_dims.py at b5bcd76; Megatron broadcasts one batch over a
TP group: tensor_parallel/data.py `broadcast_data`), so a TP 8 group computes B·L·K tokens on 8 GPUs. torchtitan's
train.py (9dec370) logs the same number, `tps = ntokens_since_last_log / (time_delta * parallel_dims.
non_data_parallel_size)`, its tokens being one batch rank's. Degrees come from the job's `ParallelDims`
(zerosim/parallel/_dims.py), so pipeline and context parallelism need no branch here.

Model FLOPs as torchtitan and PaLM count them: 6 per parameter and token (2 forward, 4 backward), the embedding's
gather left out; 12·n_layers·H·d_h·L for the attention's two L-long products per token (2 forward, 4 backward,
times 2 FLOPs a multiply-add), over the whole L×L ("we follow the convention and do not account for sparsity in
causal attention"), recomputation not counted. torchtitan at 9dec370: torchtitan/utils.py,
`get_num_flop_per_token(get_num_params(model, exclude_embedding=True), ...)`; train.py: mfu = 100 ·
num_flop_per_token · tps / gpu_peak_flops, the peak the bf16 dense one even when Float8 GEMMs run
(utils.py `get_peak_flops`). PaLM (Chowdhury et al. 2022), appendix B.
"""

from __future__ import annotations

TOKENS = 2048  # tokens a rank computes a micro-step where the model has no micro-batch (a parameter count: 6Ψ FLOPs
#                a token); the library's default and `zerosim timeline --tokens`'s


def tokens_per_step(dims, tokens_per_batch_rank: int) -> int:
    """The job's tokens per step: each of the `dims.dp` batch ranks' B·L·K (`dims`: a ParallelDims; the GPUs of a
    TP / PP / CP group share their batch rank's tokens)."""
    return dims.dp * tokens_per_batch_rank


def tokens_per_s_per_gpu(dims, tokens_per_batch_rank: int, step_s: float) -> float | None:
    """Tokens per second per GPU: the job's tokens per step / the step's seconds / every GPU (module docstring);
    None for a step of no time."""
    if not step_s:
        return None
    return tokens_per_step(dims, tokens_per_batch_rank) / dims.world_size / step_s  # per GPU, then per second


def model_flops_per_token(config, seq_len: int) -> float:
    """6·(Ψ − V·d) + 12·n_layers·H·d_h·L for a `DecoderConfig` (zerosim.models.hf._config); a tied head keeps V·d
    (the table is the head's product too, as llm-foundry's 6·n_params counts it); GPT-2's position table counts."""
    head_dim = config.head_dim or config.d_model // config.n_heads
    embedding = 0 if config.tied else config.vocab * config.d_model
    return 6.0 * (config.num_params - embedding) + 12.0 * config.n_layers * config.n_heads * head_dim * seq_len


def mfu(tokens_per_s: float | None, config, seq_len: int, peak_flops: float) -> float | None:
    """Model FLOPs utilisation: model FLOPs per token × tokens per second per GPU / the GPU's dense peak (None
    without a throughput or a model shape)."""
    if tokens_per_s is None or config is None:
        return None
    return model_flops_per_token(config, seq_len) * tokens_per_s / peak_flops

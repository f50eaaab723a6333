"""Model FLOPs per token, as torchtitan and PaLM count them: what an MFU is measured against.

    flops per token = 6 · (Ψ − the token embedding) + 12 · n_layers · H · d_h · L

6 per parameter and token (2 forward, 4 backward), the embedding's gather left out; 12·n_layers·H·d_h·L for the
attention's two L-long products per token (2 forward, 4 backward, times 2 FLOPs a multiply-add), over the whole
L×L ("we follow the convention and do not account for sparsity in causal attention"), recomputation not counted.
torchtitan at 9dec370: torchtitan/utils.py, `get_num_flop_per_token(get_num_params(model, exclude_embedding=True),
...)`; train.py: mfu = num_flop_per_token · tps / gpu_peak_flops. PaLM (Chowdhury et al. 2022), appendix B.
"""

from __future__ import annotations


def model_flops_per_token(config, seq_len: int) -> float:
    """6·(Ψ − V·d) + 12·n_layers·H·d_h·L for a `DecoderConfig` (zerosim.models.hf._config); a tied head keeps V·d
    (the table is the head's product too, as llm-foundry's 6·n_params counts it); GPT-2's position table counts."""
    head_dim = config.head_dim or config.d_model // config.n_heads
    embedding = 0 if config.tied else config.vocab * config.d_model
    return 6.0 * (config.num_params - embedding) + 12.0 * config.n_layers * config.n_heads * head_dim * seq_len


def mfu(tokens_per_s: float, config, seq_len: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: model FLOPs per token × tokens per second per GPU / the GPU's dense peak."""
    return model_flops_per_token(config, seq_len) * tokens_per_s / peak_flops

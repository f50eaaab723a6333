"""What a transformer layer keeps for backward, for how long, and what dropping a tensor costs (seed 001 §4-5).

Letters: B micro-batch, L sequence length, d width, H heads, d_h = d/H, d_ff the FFN width.

`recompute_table` is seed 001's selective-recomputation table measured: for each activation it names, the bytes one
layer stores (read from a ledger: measure_activations) beside the FLOPs that rebuild it from what is kept (the
layers' own FLOP counts, models/layers), and their ratio ρ = bytes saved per FLOP spent. Seed 001 gives P's cost as
"4 × 32 × 2048² × 128 ≈ 70 GFLOP per layer": that is B·H·L²·d_h multiply-adds; zerosim counts a multiply-add as two
FLOPs (as the timeline's roofline does), plus the softmax, so its number is a little over twice that.

`lifetimes` is seed 001's retention contract read off a ledger: each saved tensor's allocation and free as a
fraction of the step's ledger events — the first layer's input is made first and freed last.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class Retained:
    activation: str  # seed 001's name for it
    stored: int  # bytes one layer keeps (the ledger's)
    flops: int  # FLOPs to rebuild it from what is kept
    seed_verdict: str  # seed 001's column "Verdict"

    @property
    def rho(self) -> float:
        """Bytes saved per FLOP spent recomputing: seed 001's ρ (high: recompute it)."""
        return self.stored / self.flops


def recompute_table(batch: int = 4, seq_len: int = 2048, d_model: int = 4096, n_heads: int = 32,
                    precision: str = "fp16-mixed") -> list:
    """Seed 001's table for one GPT block at (B, L, d, H), d_ff = 4d: [Retained, ...] in its order."""
    from zerosim.analysis.costs._measured import measure_activations
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT
    from zerosim.models.layers import GELU, attention_flops, layernorm_flops, linear_flops

    saved = measure_activations(MetaGPT(GPT(11, d_model, n_heads, 1, seq_len)), batch, seq_len, precision).per_block
    rows, d, dh, d_ff = batch * seq_len, d_model, d_model // n_heads, 4 * d_model
    # rebuilding P from the kept Q and K is what "selective" adds to attention's backward: S = QKᵀ and the softmax
    p_flops = (attention_flops(batch, n_heads, seq_len, dh, "backward", "selective")
               - attention_flops(batch, n_heads, seq_len, dh, "backward", "standard"))
    return [
        Retained("LayerNorm μ, σ² (kept as mean, 1/σ)", saved["LN1 mean"] + saved["LN1 rstd"],
                 layernorm_flops(rows, d, "forward"), "always recompute; negligible cost"),
        Retained("FFN post-activation x2", saved["x2"], GELU.GELU_FLOPS["forward"] * rows * d_ff,
                 "recompute trivially once x1 is available"),
        Retained("FFN pre-activation x1", saved["x1"], linear_flops(rows, d, d_ff, "forward"),
                 "worth recomputing if memory-constrained"),
        Retained("attention Q, K, V", saved["Q"] + saved["K"] + saved["V"], linear_flops(rows, d, 3 * d, "forward"),
                 "moderate; typically kept"),
        Retained("attention probabilities P", saved["P"], p_flops, "highest priority to recompute at long L"),
    ]


def seed001_p_multiply_adds(batch: int = 4, seq_len: int = 2048, n_heads: int = 32, head_dim: int = 128) -> int:
    """Seed 001's "4 × 32 × 2048² × 128 ≈ 70 GFLOP": B·H·L²·d_h, the multiply-adds of QKᵀ."""
    return batch * n_heads * seq_len * seq_len * head_dim


def lifetimes(model, batch: int, seq_len: int, precision: str = "fp16-mixed") -> dict:
    """{name: (born, freed)} for every activation one micro-batch through `model` (a MetaGPT) saves, each as a
    fraction of the pass's ledger events (0: its first, 1: its last), in the order they are born."""
    from zerosim.analysis.costs._measured import _activation_ledger

    ledger = _activation_ledger(model, batch, seq_len, precision, model.checkpointing)
    events = ledger.timeline
    n = max(len(events) - 1, 1)
    born, out = {}, {}
    for i, e in enumerate(events):
        if e.kind != "activations":
            continue
        if e.action == "alloc":
            born[e.name] = i
        elif e.name in born:
            out[e.name] = (born.pop(e.name) / n, i / n)
    return dict(sorted(out.items(), key=lambda kv: kv[1][0]))

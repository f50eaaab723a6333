"""What the reports say beside context parallelism (`--cp C`): one CP rank's activations by name, each L / C tokens
long, beside the same model's unsplit layer; the K/V's bytes by hand.

    cp_activations(...)              one CP rank's layer by name, measured, beside the unsplit layer's same names
    cp_sent(model, micro, spec, w)   context parallelism's bytes a rank sends in one micro-step, by hand

Every tensor a layer keeps for backward is a per-token one (flash attention keeps no L×L buffer: the LSE is one fp32
row a head), so a CP rank's layer is the unsplit layer's divided by C name by name, plus what CP adds: the Llama's
rotary positions (L_r int64, for the QKV end's backward), and the K and V its output end keeps are the last pair the
ring held (Transformer Engine saves `p2p_comm_buffers[-1]`), the same size as its own (torch's: SDPA's inputs, its own
K and V at every query head). cli/context_format.py prints them.

The K/V's bytes, per layer and pass, as parallel/context/_communication.py sends them (w bytes an element, piece =
B·G/T·L_r·d_h: one rank's K or V, of its G/T key-value heads beside tensor parallelism of degree T):

    ring        forward (and the recompute, with checkpointing) C − 1 messages of K and V; backward C − 1 of K and V
                and C − 1 of dK and dV: 2·piece·(C − 1)·(forward passes + 2)·w
    allgather   K and V all-gathered in each forward pass and again in backward, dK and dV reduce-scattered: each
                rank sends C − 1 pieces of each, the same 2·piece·(C − 1)·(forward passes + 2)·w
    torch       its K and V at every query head (piece_H = B·H/T·L_r·d_h: repeat_kv runs before SDPA) all-gathered
                once in each forward pass and again in backward, C − 1 messages of 2·piece_H each; backward C sends
                of the fp32 dK, dV sums (a = 4 bytes an element; 8 under fp64):
                2·piece_H·(C − 1)·(forward passes + 1)·w + 2·piece_H·C·a
"""

from __future__ import annotations


def cp_sent(model, micro: tuple, spec, width: int, layers: int | None = None) -> float:
    """Context parallelism's bytes one rank sends in one micro-step, by hand (module docstring); `model` the whole
    model's twin, `micro` (B, L) the whole sequences; `layers`: a pipeline rank's blocks (None: the model's)."""
    B, L = micro
    H = model.n_heads
    G, dh = getattr(model, "n_kv_heads", H), getattr(model, "head_dim", None) or model.d_model // H
    passes = 2 if getattr(model, "checkpointing", False) else 1  # a checkpointed block's forward runs again
    layers, C = model.n_layers if layers is None else layers, spec.cp
    if spec.cp_style == "torch":
        piece = B * (H // spec.tp) * (L // C) * dh  # every query head's copy of K (or V)
        return layers * 2 * piece * ((C - 1) * (passes + 1) * width + C * (8 if width == 8 else 4))
    piece = B * (G // spec.tp) * (L // C) * dh  # a TP rank's heads
    return layers * 2 * piece * (C - 1) * (passes + 2) * width


def cp_activations(model, micro: tuple, checkpoint: str, precision, spec) -> dict:
    """One CP rank's activations beside the unsplit model's (JSON-ready): each measured by name on the meta backend
    (analysis/costs measure_rank_activations), the CP rank's L / C tokens of B sequences against the whole L."""
    from zerosim.analysis.costs import measure_rank_activations
    from zerosim.parallel import ParallelSpec
    from zerosim.precision import get_precision

    B, L = micro
    fmt = get_precision(precision)
    mine = measure_rank_activations(model, B, L, fmt, spec)
    whole = measure_rank_activations(model, B, L, fmt, ParallelSpec())
    by_tensor = {}  # a tensor's own name (after its unit's: "attn.qkv.block input" -> "block input") -> bytes
    for name, nbytes in whole.per_block.items():
        by_tensor.setdefault(name.rsplit(".", 1)[-1], nbytes)
    unsplit = {name: by_tensor.get(name.rsplit(".", 1)[-1]) for name in mine.per_block}  # None: CP's own
    return {"cp": spec.cp, "style": spec.cp_style, "split": spec.cp_split, "seq_len": L, "batch": B,
            "tokens_per_rank": L // spec.cp, "checkpoint": checkpoint, "attention": model.attention,
            "per_block": mine.per_block, "unsplit": unsplit, "per_block_total": mine.per_block_total,
            "unsplit_per_block_total": whole.per_block_total, "outside_blocks": mine.outside,
            "unsplit_outside_blocks": whole.outside, "peak": mine.peak, "peak_at": mine.peak_at,
            "unsplit_peak": whole.peak}

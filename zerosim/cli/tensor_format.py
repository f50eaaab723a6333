"""`zerosim memory --tp T [--sp]`'s activation section: one TP rank's layer, by name, beside Megatron's formula.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", Table 2) count a layer's
activations as sbh(10 + 24/t + 5as/(ht)) with tensor parallelism and sbh(34/t + 5as/(ht)) with sequence parallelism
too; zerosim holds their terms less the dropout's (no dropout is modelled), plus each norm's fp32 statistics
(zerosim.parallel.tensor's MEGATRON_TERMS says which term is which buffer). For the Llama the formula is its named
tensors (llama_layer_bytes).
"""

from __future__ import annotations

MB = 1e6


def tp_activation_report(model, micro: tuple, checkpoint: str, precision, tp: int, sp: bool) -> dict:
    """The measured layer, the peak, and the formulas beside them (JSON-ready)."""
    from zerosim.analysis.costs import measure_tp_activations
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.tensor import MEGATRON_TERMS, llama_layer_bytes, megatron_formula, term_bytes
    from zerosim.precision import get_precision

    B, L = micro
    a = measure_tp_activations(model, B, L, get_precision(precision), tp, sp)
    llama, selective = isinstance(model, MetaLlama), model.attention != "standard"
    out = {"tp": tp, "sp": sp, "seq_len": L, "batch": B, "checkpoint": checkpoint, "attention": model.attention,
           "per_block": a.per_block, "per_block_total": a.per_block_total, "outside_blocks": a.outside,
           "peak": a.peak, "peak_at": a.peak_at, "layout": "llama" if llama else "gpt2"}
    if llama:
        out["formula_per_layer"] = llama_layer_bytes(L, B, model.d_model, model.n_heads, model.n_kv_heads,
                                                     model.head_dim, model.d_ff, tp, sp, selective)
        out["formula_name"] = "the named tensors: (4d/c + 2H·d_h/t + 2G·d_h/t + 3F/t)·B·L·2 + B·H/t·L²·2 + 8·B·L/c"
    else:
        s, b, h, heads = L, B, model.d_model, model.n_heads
        megatron = megatron_formula(s, b, h, heads, tp, sp, selective)
        dropout = sum(term_bytes(x, s, b, h, heads, tp, sp) for x in MEGATRON_TERMS
                      if x.zerosim is None and not (selective and x.quadratic))
        stats = 4 * 4 * s * b / (tp if sp else 1)
        out |= {"megatron": megatron, "dropout_not_modelled": dropout, "norm_statistics": stats,
                "formula_per_layer": megatron - dropout + stats,
                "formula_name": ("sbh(34/t + 5as/(ht))" if sp else "sbh(10 + 24/t + 5as/(ht))")
                + (" without the a·s² terms (selective)" if selective else "")}
    return out


def tp_activation_lines(a: dict) -> list:
    """The rows below the memory table for one TP rank's activations."""
    sp = " with sequence parallelism" if a["sp"] else ""
    when = "when the loss runs" if a["peak_at"].startswith("loss.") else f"saving {a['peak_at']!r}"
    lines = [
        f"activ.: the most activation bytes one TP rank held at once, {when}: B = {a['batch']} sequences of",
        f"L = {a['seq_len']} tokens per data-parallel rank (each TP group trains on one micro-batch), checkpoint "
        f"{a['checkpoint']!r}, attention {a['attention']!r}.",
        "",
        f"What one layer saves on one of tp = {a['tp']} ranks{sp}, by name (MB = 1e6 bytes):",
    ]
    lines += [f"    {name:<40s} {nbytes / MB:12.3f}" for name, nbytes in a["per_block"].items()]
    lines.append(f"    {'one layer':<40s} {a['per_block_total'] / MB:12.3f}   "
                 f"(formula: {a['formula_per_layer'] / MB:.3f})")
    if a["layout"] == "gpt2":
        lines += [
            f"Megatron's {a['formula_name']} (Korthikanti et al. 2022, Table 2) = {a['megatron'] / MB:.3f} MB;",
            f"less its dropout masks and output, which zerosim does not model ({a['dropout_not_modelled'] / MB:.3f}),",
            f"plus the LayerNorms' fp32 statistics, which it does not count ({a['norm_statistics'] / MB:.3f}).",
        ]
    else:
        lines.append(f"  {a['formula_name']} (c = t with SP, else 1)")
    lines += [
        "The norms' inputs and the two column-parallel GEMMs' inputs are "
        + ("cut along the sequence (/t);" if a["sp"] else "whole on every rank;"),
        "the heads' and FFN columns' tensors are cut by t. Full recomputation keeps a layer's input, "
        + ("2sbh/t." if a["sp"] else "2sbh."),
    ]
    return lines

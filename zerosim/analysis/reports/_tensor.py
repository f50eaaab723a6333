"""What the reports say beside tensor parallelism (`--tp T [--sp]`): one TP rank's slice and its activations, beside
Megatron's formulas.

    local_params(model, tp, sp)      one TP rank's parameters (rows and columns cut, norms whole)
    padded_vocab(model, tp)          the vocabulary TP splits: the model's, or Megatron's padding of it
    tp_sent(model, micro, tp, sp, w) TP's bytes a rank sends in one micro-step, by hand
    tp_activations(...)              one TP rank's layer by name, measured, beside Megatron's formula

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", Table 2) count a layer's
activations as sbh(10 + 24/t + 5as/(ht)) with tensor parallelism and sbh(34/t + 5as/(ht)) with sequence parallelism
too; zerosim holds their terms less the dropout's (no dropout is modelled), plus each norm's fp32 statistics
(zerosim.parallel.tensor's MEGATRON_TERMS says which term is which buffer). For the Llama the formula is its named
tensors (llama_layer_bytes). cli/tensor_format.py prints them.
"""

from __future__ import annotations


def local_params(model, tp: int, sp: bool) -> int:
    """One TP rank's parameters of `model` (its slice: rows and columns cut, norms whole)."""
    from zerosim.analysis.costs import tensor_parallel

    return tensor_parallel(model, tp, sp)[0].num_params


def padded_vocab(model, tp: int) -> int:
    """The vocabulary TP splits: the model's, or Megatron's padding of it (zerosim.parallel.tensor.padded_model)."""
    from zerosim.parallel.tensor import padded_model

    return padded_model(model, tp).vocab


def tp_sent(model, micro: tuple, tp: int, sp: bool, width: int, layers: int | None = None, embedding: bool = True,
            head: bool = True) -> float:
    """TP's bytes a rank sends in one micro-step by hand (zerosim.parallel.tensor's tp_bytes_per_micro_step): of the
    whole model, or of a pipeline rank's `layers` blocks, with the `embedding` and the `head` where it holds them."""
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.tensor import tp_bytes_per_micro_step

    B, L = micro
    return tp_bytes_per_micro_step(model.n_layers if layers is None else layers, B, L, model.d_model, tp, sp,
                                   model.checkpointing, gpt=not isinstance(model, MetaLlama), width=width,
                                   embedding=embedding, head=head)


def tp_activations(
    model, micro: tuple, checkpoint: str, precision, tp: int, sp: bool, layout: str | None = None
) -> dict:
    """One TP rank's activations: the measured layer, the peak, and the formulas beside them (JSON-ready).
    `layout`: what a TP rank keeps (parallel/tensor LAYOUTS; None: the library's default)."""
    from zerosim.analysis.costs import measure_tp_activations
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.tensor import (
        DEFAULT_LAYOUT,
        LAYOUTS,
        MEGATRON_TERMS,
        llama_layer_bytes,
        megatron_formula,
        term_bytes,
        torchtitan_eager_layer_bytes,
    )
    from zerosim.precision import get_precision

    B, L = micro
    layout = DEFAULT_LAYOUT if layout is None else layout
    a = measure_tp_activations(model, B, L, get_precision(precision), tp, sp, layout)
    llama, selective = isinstance(model, MetaLlama), model.attention != "standard"
    eager = getattr(model, "kernels", "fused") == "eager" and layout == "torchtitan" and llama
    out = {"tp": tp, "sp": sp, "seq_len": L, "batch": B, "checkpoint": checkpoint, "attention": model.attention,
           "per_block": a.per_block, "per_block_total": a.per_block_total, "outside_blocks": a.outside,
           "peak": a.peak, "peak_at": a.peak_at, "layout": "llama" if llama else "gpt2", "tp_layout": layout,
           "tp_layout_why": LAYOUTS[layout].why + (" (torch eager's tensors: --kernels eager)" if eager else "")}
    gathered = not LAYOUTS[layout].keeps_shard
    shape = (L, B, model.d_model) + ((model.n_heads, model.n_kv_heads, model.head_dim, model.d_ff) if llama else ())
    if eager and model.attention == "flash":
        out["formula_per_layer"] = torchtitan_eager_layer_bytes(*shape, tp, sp)
        out["formula_name"] = ("torch eager's tensors: (8d + 4)·2·B·L/c + (2d + 2H·d_h/t + 2G·d_h/t + 4F/t)·B·L·2 + "
                               "4·B·H/t·L")
    elif llama:
        out["formula_per_layer"] = llama_layer_bytes(*shape, tp, sp, selective, gathered=gathered)
        out["formula_name"] = ("the named tensors: (" + ("2d/c + 2d" if gathered else "4d/c")
                               + " + 2H·d_h/t + 2G·d_h/t + 3F/t)·B·L·2 + B·H/t·L²·2 + 8·B·L/c")
    else:
        s, b, h, heads = L, B, model.d_model, model.n_heads
        megatron = megatron_formula(s, b, h, heads, tp, sp, selective)
        dropout = sum(term_bytes(x, s, b, h, heads, tp, sp) for x in MEGATRON_TERMS
                      if x.zerosim is None and not (selective and x.quadratic))
        stats = 4 * 4 * s * b / (tp if sp else 1)
        kept_whole = 4 * s * b * h * (1 - 1 / tp) if gathered and sp else 0  # QKV's and the MLP's inputs, gathered
        out |= {"megatron": megatron, "dropout_not_modelled": dropout, "norm_statistics": stats,
                "gathered_inputs": kept_whole, "formula_per_layer": megatron - dropout + stats + kept_whole,
                "formula_name": ("sbh(34/t + 5as/(ht))" if sp else "sbh(10 + 24/t + 5as/(ht))")
                + (" without the a·s² terms (selective)" if selective else "")}
    return out

"""`zerosim memory --tp T [--sp]`'s activation section as text: one TP rank's layer, by name, beside Megatron's
formula (the numbers: zerosim.analysis.reports, tp_activations)."""

from __future__ import annotations

import textwrap

from zerosim.prose import wrap

MB = 1e6


def tp_activation_lines(a: dict) -> list:
    """The rows below the memory table for one TP rank's activations."""
    sp = " with sequence parallelism" if a["sp"] else ""
    when = "when the loss runs" if a["peak_at"].startswith("loss.") else f"saving {a['peak_at']!r}"
    lines = [
        *wrap(f"activ.: the most activation bytes one TP rank held at once, {when}: B = {a['batch']} sequences of "
              f"L = {a['seq_len']} tokens per data-parallel rank (each TP group trains on one micro-batch), checkpoint "
              f"{a['checkpoint']!r}, attention {a['attention']!r}."),
        "",
        f"What one layer saves on one of tp = {a['tp']} ranks{sp}, by name (MB = 1e6 bytes), in {a['tp_layout']}'s "
        "layout (--tp-layout):",
        *textwrap.wrap(a["tp_layout_why"], 110, initial_indent="  ", subsequent_indent="  "),
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
    gathered = a["tp_layout"] == "torchtitan"
    lines += [
        "The norms' inputs " + ("are " if gathered else "and the two column-parallel GEMMs' inputs are ")
        + ("cut along the sequence (/t);" if a["sp"] else "whole on every rank;")
        + (" the column GEMMs' inputs are kept all-gathered (whole);" if gathered and a["sp"] else ""),
        "the heads' and FFN columns' tensors are cut by t. Full recomputation keeps a layer's input, "
        + ("2sbh/t." if a["sp"] else "2sbh."),
    ]
    return lines

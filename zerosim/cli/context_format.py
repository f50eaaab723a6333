"""`zerosim memory --cp C`'s header and activation section as text: one CP rank's layer by name, each tensor L / C
tokens long, beside the unsplit layer's (the numbers: zerosim.analysis.reports, cp_activations)."""

from __future__ import annotations

from zerosim.cli.cells import when_measured

MB = 1e6


def cp_header(r: dict, cp: dict) -> list:
    """The lines above the table beside context parallelism."""
    return [
        f"zerosim memory: Ψ = {r['params']:,} parameters ({r['model']}), N = {r['ranks']} GPUs = cp {cp['cp']} x "
        f"dp {cp['dp']}, {r['optimizer']}, {r['precision']}",
        f"Context parallelism ({cp['style']}, {cp['split']} split): each GPU runs the whole model on 1/{cp['cp']} of "
        "every sequence, and ZeRO shards its",
        f"states over all {r['ranks']} GPUs (dp × cp, torchtitan's \"fsdp\" mesh). Per-rank model states in GB (1e9 "
        "bytes), as the",
        f"ledgers recorded them {when_measured(r)}; 'formula' is zerosim.analysis.costs, padded as the engines hold "
        "them.",
        "",
    ]


def cp_activation_lines(a: dict) -> list:
    """The rows below the memory table for one CP rank's activations."""
    when = "when the loss runs" if a["peak_at"].startswith("loss.") else f"saving {a['peak_at']!r}"
    lines = [
        f"activ.: the most activation bytes one CP rank held at once, {when}: its L / C = "
        f"{a['tokens_per_rank']:,} tokens",
        f"of each of B = {a['batch']} sequences of L = {a['seq_len']:,} (cp {a['cp']}, {a['split']} split), checkpoint "
        f"{a['checkpoint']!r}, attention {a['attention']!r};",
        f"the same model unsplit on one GPU holds {a['unsplit_peak'] / MB:,.1f} MB at its peak.",
        "",
        f"What one layer saves on one of cp = {a['cp']} ranks, by name, beside the unsplit layer's (MB = 1e6 bytes):",
        f"    {'':<32s} {'CP rank':>12s} {'unsplit':>12s} {'ratio':>7s}",
    ]
    for name, nbytes in a["per_block"].items():
        whole = a["unsplit"].get(name)
        ratio = f"{whole / nbytes:7.2f}" if whole else "   (CP)"
        lines.append(f"    {name:<32s} {nbytes / MB:12.3f} {(whole or 0) / MB:12.3f} {ratio}")
    total, whole = a["per_block_total"], a["unsplit_per_block_total"]
    lines += [
        f"    {'one layer':<32s} {total / MB:12.3f} {whole / MB:12.3f} {whole / total:7.2f}",
        "Every tensor a layer keeps is per token (flash attention keeps one fp32 LSE row a head, no L×L buffer), so",
        "each is 1/C of the unsplit one's; (CP) marks what context parallelism adds: the rotary positions of a rank's",
        "tokens (int64).",
        "K and V in attn.out are the last pair the ring held (Transformer Engine saves p2p_comm_buffers[-1]), its "
        "own size.",
    ]
    return lines

"""`zerosim memory --cp C`'s header and activation section as text: one CP rank's layer by name, each tensor L / C
tokens long, beside the unsplit layer's (the numbers: zerosim.analysis.reports, cp_activations)."""

from __future__ import annotations

from zerosim.cli.cells import when_measured
from zerosim.prose import wrap

MB = 1e6
KEPT_KV = {  # --cp-style -> what the K and V the output end keeps are (parallel/context/_ends.py)
    "ring": "K and V in attn.out are the last pair the ring held (Transformer Engine saves p2p_comm_buffers[-1]), "
            "its own size.",
    "allgather": "K and V in attn.out are the rank's own pair, which backward all-gathers again.",
    "torch": "K and V in attn.out are SDPA's inputs, the rank's own pair at every query head (torchtitan calls "
             "repeat_kv before SDPA), which backward all-gathers again.",
}


def cp_header(r: dict, cp: dict, tp: dict | None = None) -> list:
    """The lines above the table beside context parallelism (and tensor parallelism: `tp`, its report)."""
    beside = "" if tp is None else f"tp {tp['tp']} x "
    sequence = "" if tp is None or not tp["sp"] else " with sequence parallelism"
    slice_ = "" if tp is None else " (one TP rank's slice of it)"
    return [
        *wrap(f"zerosim memory: Ψ = {r['params']:,} parameters ({r['model']}), N = {r['ranks']} GPUs = {beside}cp "
              f"{cp['cp']} x dp {cp['dp']}{sequence}, {r['optimizer']}, {r['precision']}", "  "),
        *wrap(f"Context parallelism ({cp['style']}, {cp['split']} split): each GPU runs the whole model{slice_} on "
              f"1/{cp['cp']} of every sequence, and ZeRO shards its states over "
              + (f"all {r['ranks']} GPUs" if tp is None else f"the dp × cp = {cp['dp'] * cp['cp']} GPUs holding "
                 "that slice") + " (dp × cp, torchtitan's \"fsdp\" mesh). Per-rank model states in GB (1e9 bytes), "
              f"as the ledgers recorded them {when_measured(r)}; 'formula' is zerosim.analysis.costs, padded as the "
              "engines hold them."),
        "",
    ]


def _added_by(name: str) -> str:
    """Who keeps a tensor the unsplit layer does not: CP (the rotary positions of a rank's tokens) or TP (a column
    GEMM's input, which crossed a collective; SP: its sequence shard)."""
    return "(CP)" if name.endswith("positions") else "(SP)" if name.endswith("(sequence shard)") else "(TP)"


def cp_activation_lines(a: dict, tp: dict | None = None) -> list:
    """The rows below the memory table for one CP rank's activations (beside tensor parallelism: `tp`, its
    report)."""
    when = "when the loss runs" if a["peak_at"].startswith("loss.") else f"saving {a['peak_at']!r}"
    where = f"cp = {a['cp']} ranks" if tp is None else (f"cp = {a['cp']} ranks, a TP rank of tp = {tp['tp']}"
                                                          + (" with sequence parallelism" if tp["sp"] else ""))
    width = max([32, *(len(name) for name in a["per_block"])])
    lines = [
        f"activ.: the most activation bytes one CP rank held at once, {when}: its L / C = "
        f"{a['tokens_per_rank']:,} tokens",
        f"of each of B = {a['batch']} sequences of L = {a['seq_len']:,} (cp {a['cp']}, {a['split']} split), checkpoint "
        f"{a['checkpoint']!r}, attention {a['attention']!r};",
        f"the same model unsplit on one GPU holds {a['unsplit_peak'] / MB:,.1f} MB at its peak.",
        "",
        *wrap(f"What one layer saves on one of {where}, by name, beside the unsplit layer's (MB = 1e6 bytes):"),
        f"    {'':<{width}s} {'CP rank':>12s} {'unsplit':>12s} {'ratio':>7s}",
    ]
    for name, nbytes in a["per_block"].items():
        whole = a["unsplit"].get(name)
        ratio = f"{whole / nbytes:7.2f}" if whole else f"{_added_by(name):>7s}"
        lines.append(f"    {name:<{width}s} {nbytes / MB:12.3f} {(whole or 0) / MB:12.3f} {ratio}")
    total, whole = a["per_block_total"], a["unsplit_per_block_total"]
    cut = "" if tp is None else (f"; beside TP the heads' and the FFN's columns' tensors are cut by T = {tp['tp']} as "
                                 "well" + (", and with sequence parallelism the norms' inputs too" if tp["sp"] else ""))
    lines += [
        f"    {'one layer':<{width}s} {total / MB:12.3f} {whole / MB:12.3f} {whole / total:7.2f}",
        *wrap("Every tensor a layer keeps is per token (flash attention keeps one fp32 LSE row a head, no L×L "
              f"buffer), so each is 1/C of the unsplit one's{cut}. (CP) marks what context parallelism adds: the "
              "rotary positions of a rank's tokens (int64)"
              + ("" if tp is None else "; (TP) a column GEMM's input, which crossed TP's collective")
              + ("" if tp is None or not tp["sp"] else ", and (SP) its sequence shard, all-gathered again in "
                 "backward (Megatron's layout)") + "."),
        *wrap(KEPT_KV[a["style"]]),
    ]
    return lines

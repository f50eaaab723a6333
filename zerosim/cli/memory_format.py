"""`zerosim memory`'s report as text, from the library's reports' `to_dict()` (zerosim.analysis.reports): the table by
stage and kind, the activations by name, what the configs' keys did, the verdict against a GPU, and the seeds'
conventions (`format_report`); the strategies for many nodes side by side (`format_strategies`)."""

from __future__ import annotations

import textwrap

from zerosim.analysis.costs import GB
from zerosim.analysis.reports import fit_lines
from zerosim.cli.cells import gb_or_dash, stage3_cause, when_measured
from zerosim.cli.context_format import cp_activation_lines, cp_header
from zerosim.cli.offload_args import offload_lines
from zerosim.cli.pipeline_format import pp_header, pp_rank_lines
from zerosim.cli.tensor_format import tp_activation_lines
from zerosim.prose import wrap


CP_SENT = {  # --cp-style -> what a CP rank sends, by hand (analysis/reports/_context.py)
    "ring": "(2·B·G·L/C·d_h each way per message)",
    "allgather": "(2·B·G·L/C·d_h, K and V, gathered and their gradients reduce-scattered)",
    "torch": "(torch's own: 2·B·H·L/C·d_h, K and V at every query head, all-gathered each pass; backward C sends "
             "of their fp32 gradients' sums)",
}


def format_report(r: dict) -> str:
    """The whole report as a newcomer reads it (what `zerosim memory` prints): the header, the table by stage and
    kind, what the table's columns mean, ZeRO++'s wire, the activations, the configs' keys, the verdict against a GPU
    and the seeds' conventions."""
    act, tp, cp, pp = r["activations"], r.get("tensor_parallel"), r.get("context_parallel"), r.get("pipeline_parallel")
    lines = (pp_header(r, pp, tp, cp) if pp is not None else cp_header(r, cp, tp) if cp is not None
             else _header(r) if tp is None else _tp_header(r, tp))
    lines += _table(r) + pp_rank_lines(r)
    lines += [
        "",
        "peak: the most one rank held at once during the step. sent: the most bytes one rank put on the wire in the",
        "step (trace), beside the most the formula gives a pipeline rank (the table below).",
        "The words: docs/glossary.md (params, grads, grad32, master, optim:*, activations).",
    ] if pp is not None else [
        "",
        "peak: the most one rank held at once during the step (adds the fp32 gradient 'grad32': the shard, the",
        "whole buffer at stage 0; at stages 2-3 one unit's gathered params and gradients). sent: bytes one rank put on",
        "the wire in the step (trace), beside the formula 2Ψ or 3Ψ times (N−1)/N times the wire format's bytes.",
        "The words: docs/glossary.md (params, grads, grad32, master, optim:*, activations).",
    ] if tp is None and cp is None else [
        "",
        *wrap("peak: the most one rank held at once during the step. sent: bytes one rank put on the wire in the "
              "step (trace), beside the formula: ZeRO's 2Ψ or 3Ψ times (N−1)/N, plus the K/V's round the CP group "
              + CP_SENT[cp["style"]] + " (zerosim.analysis.reports, cp_sent)."),
        "The words: docs/glossary.md (params, grads, grad32, master, optim:*, activations).",
    ] if tp is None else [
        "",
        "peak: the most one rank held at once during the step. sent: bytes one rank put on the wire in the step",
        "(trace), beside the formula: ZeRO's 2Ψ_tp or 3Ψ_tp times (dp−1)/dp over the data-parallel ranks, plus TP's",
        "activations over the TP group (zerosim.parallel.tensor, tp_bytes_per_micro_step; not the norms' tiny SP sum).",
        "The words: docs/glossary.md (params, grads, grad32, master, optim:*, activations).",
    ]
    lines += [] if r["step"] else [
        "No step was run (--no-step): peak is the most held during initialisation, sent reads '—', and the formula",
        "beside it is what one step would send.",
    ]
    lines += _stage3_lines(r, plain=tp is None and cp is None) if pp is None and not r.get("wire") else []
    lines += offload_lines(r)  # the host and NVMe tiers, with offload (cli/offload_args.py)
    lines += _wire_lines(r) if r.get("wire") else []
    lines += (cp_activation_lines(act, tp) if cp is not None else _activation_lines(act) if tp is None else
              tp_activation_lines(act)) if act else [
        "Activations are not counted: add --seq-len (and --batch, --checkpoint) with a --model or --config, or",
        "--d-model/--heads/--layers, to measure them on the ledgers too.",
    ]
    lines += _config_lines(r)
    if r["gpu"] is not None:
        from zerosim.analysis.costs import get_gpu

        lines += fit_lines(r["gpu"]["by_stage"], get_gpu(r["gpu"]["key"]), _hint(r))
    if tp is None:  # the seeds' conventions count a whole model over N data-parallel ranks
        lines += _conventions_lines(r)
    return "\n".join(lines)


# what the header calls a preset's units: at --unit block each transformer block is one, and so are the layers outside
# the blocks (the embeddings, the final norm and head), which is why gpt2-small's 12 blocks are 15 units
UNITS = {"block": "units: its blocks and the layers outside them", "module": "modules"}


def _header(r: dict) -> list:
    return [
        *wrap(f"zerosim memory: Ψ = {r['params']:,} parameters ("
              + (r["model"] if r["unit"] == "layer"
                 else f"{r['model']}, {r['layers']} {UNITS.get(r['unit'], r['unit'] + 's')}")
              + f"), N = {r['ranks']} ranks, {r['optimizer']}, {r['precision']}", "  "),
        "Per-rank model states in GB (1e9 bytes), as the meta backend's ledgers recorded them"
        + f" {when_measured(r)}"
        + ";",
        "'formula' is zerosim.analysis.costs with every flat buffer padded to N·ceil(Ψ/N), as the engines hold them.",
        "",
    ]


def _tp_header(r: dict, tp: dict) -> list:
    return [
        *wrap(f"zerosim memory: Ψ = {r['params']:,} parameters ({r['model']}), N = {r['ranks']} GPUs = tp {tp['tp']} "
              f"x dp {tp['dp']}" + (" with sequence parallelism" if tp["sp"] else "")
              + f", {r['optimizer']}, {r['precision']}", "  "),
        *wrap(f"Each GPU holds one TP rank's slice, Ψ_tp = {tp['local_params']:,} parameters (heads, columns and "
              f"vocabulary cut by {tp['tp']}, norms whole),"
              + (f" the vocabulary padded to {tp['vocab']:,} tokens as Megatron pads it (make_vocab_size_divisible_by "
                 "128 × tp)," if tp["vocab_padded"] else "")
              + f" and ZeRO shards that slice over the dp = {tp['dp']} ranks holding it. Per-rank model states in GB "
              f"(1e9 bytes), as the ledgers recorded them {when_measured(r)}; 'formula' is zerosim.analysis.costs "
              "with Ψ = Ψ_tp and N = dp, padded as the engines hold them."),
        "",
    ]


def _table(r: dict) -> list:
    """The table: a row per stage, the ledger's kinds at rest, beside the formula; activations, peak and sent."""
    kinds, act = [], r["activations"]
    for row in r["stages"]:
        kinds += [k for k in row["resting"] if k not in kinds]
    extra = ("activ.", "total") if act else ()  # seed 001 §6: model states + activations
    lines = [f"{'stage':5s} " + " ".join(f"{k:>10s}" for k in kinds) + " | "
             + " ".join(f"{h:>9s}" for h in ("ledger", "formula")) + " | " + "".join(f"{h:>9s} " for h in extra)
             + ("| " if extra else "") + " ".join(f"{h:>9s}" for h in ("peak", "sent", "2Ψ or 3Ψ"))]
    for row in r["stages"]:
        cells = " ".join(f"{row['resting'].get(k, 0) / GB:10.3f}" for k in kinds)
        same = "" if row["ledger_total"] == row["formula_total"] and row["ranks_agree"] else "  (differs: see note)"
        added = f"{row['activations'] / GB:9.3f} {row['total'] / GB:9.3f} | " if act else ""
        sent = f"{gb_or_dash(row['sent'], 9, 3)} {row['sent_formula'] / GB:9.3f}"
        lines.append(
            f"{row['stage']:<5d} {cells} | {row['ledger_total'] / GB:9.3f} {row['formula_total'] / GB:9.3f} | {added}"
            f"{row['peak'] / GB:9.3f} {sent}{same}"
        )
    return lines


def _wire_lines(r: dict) -> list:
    """What ZeRO++'s quantized stage 3 sent and held."""
    three = next((row for row in r["stages"] if row["stage"] == 3), None)
    landed = three["peak_by_kind"].get("comm", 0) if three else 0
    return [
        f"Stage 3 reduces its {r['wire']}, recipe deepspeed-zero3.",
        "Its 'sent' counts the int4 payload and its scales, '2Ψ or 3Ψ' the 16-bit wire's; the int4 buffers",
        "in flight are not ledger rows (LoCo's error buffers are, on a backend that holds values).",
    ] if r["wire"].startswith("gradients") else [
        f"Stage 3 gathers its weights as {r['wire']}.",
        "Its 'sent' counts the payload and its scales, '2Ψ or 3Ψ' the 16-bit wire's; what lands before it is",
        f"dequantized (kind 'comm') peaks at {landed / GB:.3f} GB a rank.",
    ]


def _conventions_lines(r: dict) -> list:
    """The byte conventions side by side, and seed 001's erratum."""
    from zerosim.analysis.costs import conventions_table, format_table

    e = r["seed001_erratum"]
    return [
        "", "The conventions, side by side (GB per rank; zerosim's row pads shards only):", "",
        format_table(conventions_table(r["params"], r["ranks"], r["largest_layer"], r["optimizer"], r["precision"])),
        "",
        f"NOTE: seed 001's printed table for 7B on 8 GPUs says {e['printed_gb'][1]:g} GB (ZeRO-1) and "
        f"{e['printed_gb'][2]:g} GB (ZeRO-2).",
        f"Its own formulas, 4P + 12P/N and 2P + 14P/N, give {e['formulas_gb'][1]:g} and {e['formulas_gb'][2]:g} GB, "
        "and so do the ledgers",
        "(zerosim memory --params 7e9 --ranks 8). The printed figures disagree with its formulas: an erratum, "
        "not a target.",
    ]


def _activation_lines(a: dict) -> list:
    """The activation rows below the table: one block's saved tensors by name, beside the count by hand."""
    MB = 1e6
    when = "when the loss runs" if a["peak_at"].startswith("loss.") else f"saving {a['peak_at']!r}"
    outside = list(a["outside_blocks"].items())
    llama = a["layout"] == "llama"
    shape = (
        f"d = {a['d_model']}, H = {a['heads']}, G = {a['kv_heads']} key/value heads of {a['head_dim']}, F = {a['d_ff']}"
        if llama
        else f"d = {a['d_model']}, H = {a['heads']}"
    )
    lines = [
        f"activ.: the most activation bytes one rank held at once, {when}: B = {a['batch']} sequences of",
        f"L = {a['seq_len']} tokens per rank, checkpoint {a['checkpoint']!r}. ZeRO shards none of them: each rank "
        "keeps its",
        "own micro-batch's. total: the model states plus these activations, as seed 001 §6 adds them up.",
        "",
        *wrap(f"What one decoder layer saves for backward, by name (MB = 1e6 bytes; {shape}):" if llama
              else f"What one transformer block saves for backward, by seed 001 §5e's names (MB = 1e6 bytes; {shape}):",
              "  "),
    ]
    lines += [f"    {name:<24s} {nbytes / MB:12.3f}" for name, nbytes in a["per_block"].items()]
    if llama:
        P = "+ B·H·L²" if any(n.endswith("P") and n.split(".")[-1] == "P" for n in a["per_block"]) else "(P not kept)"
        count = f"(2d + 2H·d_h + 2G·d_h + 3F)·B·L {P}, + 2 fp32 statistics: {a['formula_per_layer'] / MB:.3f}"
    else:
        seed = "14·B·L·d + B·H·L²" if "P" in a["per_block"] or "attn.P" in a["per_block"] else "14·B·L·d, P not kept"
        count = f"seed 001's {seed}: {a['seed001_per_layer'] / MB:.3f}"
    lines += [
        f"    {'one block':<24s} {a['per_block_total'] / MB:12.3f}   ({count})",
    ]
    named = _wrapped(f"    {'outside the blocks':<24s} {sum(b for _, b in outside) / MB:12.3f}   (",
                     [f"{k} {v / MB:.3f}" for k, v in outside])
    lines += named[:-1] + [named[-1] + ")"] if named else []
    if llama:
        lines += [
            "K and V are kept at the G key/value heads (repeat_kv's copies are rebuilt); the RMSNorm outputs are",
            "rebuilt in backward; rotary embeddings keep nothing (cos and sin are rebuilt from positions). Outside the",
            "blocks: the token ids, the final RMSNorm's input and the loss's fp32 probabilities over the vocabulary.",
        ]
    else:
        lines += [
            "The seed's 14·B·L·d is exact here (the LayerNorm outputs are rebuilt in backward: 'shared' in its table); "
            "it",
            "leaves out the fp32 LayerNorm statistics (B·L each) and all that lives outside the blocks: the token ids, "
            "the",
            "final LayerNorm's input and the loss's fp32 probabilities over the vocabulary.",
        ]
    return lines


def _stage3_lines(r: dict, plain: bool = True) -> list:
    """Why stage 3's 'sent' differs from its formula, where it does (16-bit wire): by how much, in gathers of Ψ (of a
    TP rank's slice beside TP and CP, where the formula adds their own terms to ZeRO's 3Ψ: `plain` False), and why
    (cells.py `stage3_cause`)."""
    three = next((row for row in r["stages"] if row["stage"] == 3), None)
    if three is None or three["sent"] is None or three["sent"] == three["sent_formula"]:
        return []
    diff = three["sent"] - three["sent_formula"]  # the busiest rank's: a ZeRO-3 unit is gathered from the ranks whose
    # shards of the flat vector it spans, so gathering some units again sends more from some ranks
    gathers = abs(diff) / (three["sent_formula_zero"] / 3)  # one gather of Ψ: Ψ·(N−1)/N·B, a third of ZeRO's 3Ψ
    than = (f"than 3Ψ ({gathers:.2f} of one gather of Ψ)" if plain else
            f"than its formula (ZeRO's 3Ψ of the rank's parameters with the other terms; {gathers:.2f} of one gather "
            "of the rank's Ψ)")
    return textwrap.wrap(f"At stage 3 the busiest rank sent {abs(diff) / GB:.3f} GB {'more' if diff > 0 else 'less'} "
                         f"{than}: {stage3_cause(diff > 0)}.", 110)


def _config_lines(r: dict) -> list:
    """What the model's config.json and the DeepSpeed config did, key by key (the "not modelled" ones in full)."""
    lines = []
    for title, keys in (
        ("The model's config.json", r["config"]),
        ("The DeepSpeed config", (r["ds_config"] or {}).get("keys")),
    ):
        if keys is None:
            continue
        modelled, no_effect = keys.get("modelled", []), keys.get("no effect", [])
        lines += [
            "",
            *wrap(f"{title}: {len(modelled)} keys modelled, {len(no_effect)} with no effect on memory or time, "
                  f"{len(keys.get('not modelled', []))} not modelled (--json lists every key with a note).", "  "),
        ]
        lines += _wrapped("  modelled: ", [k["key"] for k in modelled])
        lines += _wrapped("  no effect: ", [k["key"] for k in no_effect])
        lines += _wrapped("  defaults (not in the file): ", [_default(k) for k in keys.get("default", [])])
        auto = [k for k in modelled if str(k["value"]) == "auto" or "which zerosim runs as" in k["note"]]
        auto += [k for k in no_effect if k["note"].startswith("auto -> ")]  # optimizer.params: filled, and said
        for k in auto:
            lines += textwrap.wrap(f"{k['key']}: {k['note']}", 116, initial_indent="  ", subsequent_indent="    ")
        for k in keys.get("not modelled", []):
            lines += textwrap.wrap(
                f"not modelled: {k['key']} = {k['value']!r}: {k['note']}",
                116,
                initial_indent="  ",
                subsequent_indent="    ",
            )
    ds = r["ds_config"]
    if ds is not None:
        clip = "off" if ds["clip_grad"] is None else f"{ds['clip_grad']:g}"
        so = (
            f"so: ZeRO-{ds['stage']}, {ds['precision']} (loss scale {ds['loss_scale']}, gradients on the wire in "
            f"{ds['wire']}), {ds['optimizer']}, micro-batch {ds['micro_batch']} × {ds['accumulation_steps']} "
            f"accumulation steps × {r['ranks']} ranks = {ds['train_batch_size']}, clipping {clip}"
        )
        knobs = "schedule: " + ", ".join(
            f"{k}={v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}={v}"
            for k, v in ds["comm"].items()
            if v not in (None, 0, False)
        )
        for text in (so, knobs):
            lines += textwrap.wrap(text, 116, initial_indent="  ", subsequent_indent="    ")
    return lines


def _default(k: dict) -> str:
    """A key the config.json left out, as transformers' class default fills it ("num_key_value_heads=None: ...")."""
    from zerosim.models.hf import WHAT_NONE_MEANS

    means = WHAT_NONE_MEANS.get(k["key"]) if k["value"] is None else None
    return f"{k['key']}={k['value']}" + (f" (= {means.split(':')[0]})" if means else "")


def _wrapped(label: str, words: list, width: int = 116) -> list:
    """`label` and the words, comma-separated, wrapped under the label at `width` columns."""
    if not words:
        return []
    lines, line = [], label
    for i, w in enumerate(words):
        piece = w + ("," if i < len(words) - 1 else "")
        if len(line) + len(piece) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = " " * len(label)
        line += piece + " "
    return lines + [line.rstrip()]


def _hint(r: dict) -> str:
    """What to try when no stage fits: the activations' share says whether checkpointing can help."""
    act, last = r["activations"], r["stages"][-1]
    if act is not None and last.get("activations", 0) > last["ledger_total"]:
        return (
            f"Activations are most of it ({last['activations'] / GB:.1f} GB of {last['peak'] / GB:.1f}): try "
            "--checkpoint flash, block or every-k, a smaller --batch, or more --ranks; `zerosim plan` tries them all."
        )
    return "Model states are most of it: more --ranks, ZeRO-3, or a GPU with more memory; `zerosim plan` tries them."


def format_strategies(r: dict) -> str:
    """The strategies' table as `zerosim memory` prints it."""
    from zerosim.parallel.data import get_plan

    tp = r.get("tensor_parallel")
    lines = [
        f"zerosim memory: Ψ = {r['params']:,} parameters ({r['model']}), N = {r['ranks']:,} ranks"
        + ("" if r["gpus_per_node"] is None else f" on nodes of {r['gpus_per_node']}")
        + ("" if tp is None else f" = tp {tp['tp']} x dp {tp['dp']}" + (" (sequence parallel)" if tp["sp"] else ""))
        + f", {r['optimizer']}, {r['precision']}",
        *([] if tp is None else ["Beside TP each GPU holds one TP rank's slice: Ψ below is the slice's, the shards "
                                 "and groups count data-parallel ranks."]),
        "Per-rank memory in GB (1e9 bytes) as the meta backend's ledgers recorded one step; 'formula' is (2 + g + 4",
        "+ K)·Ψ/shards, shards = S (HSDP, MiCS) or N; bytes sent per rank in the step, by the link tier they crossed.",
        *[f"{row['strategy']} keeps its gradients whole: its formula counts g·Ψ of them." for row in r["strategies"]
          if not get_plan(row["strategy"]).shards("grads")],
        "",
        f"{'strategy':18s} {'S':>5s} {'R':>5s}  {'states':>8s} {'formula':>8s}  {'2nd':>7s} {'2Ψ/S':>7s}  "
        f"{'peak':>8s}  {'NVLink':>8s} {'IB':>8s}",
    ]
    for row in r["strategies"]:
        group = "-" if row["group"] is None else f"{row['group']:,}"
        lines.append(
            f"{row['strategy']:18s} {group:>5s} {row['replicas']:5,d}  {row['resting_total'] / GB:8.2f} "
            f"{row['formula_total'] / GB:8.2f}  {row['secondary_peak'] / GB:7.2f} {row['secondary_formula'] / GB:7.2f}"
            f"  {row['peak'] / GB:8.2f}  {row['tiers']['intra-node'] / GB:8.1f} {row['tiers']['inter-node'] / GB:8.1f}"
        )
    lines += [
        "",
        "states: params, grads, master and optimizer state at rest (every rank holds the same); 2nd: the secondary",
        "piece's peak (hpZ keeps it until the step, FSDP2's reshard_after_forward=S until each unit's backward);",
        "peak: the most one rank held at once. NVLink / IB: GB one rank sent (the ranks' average) within nodes and",
        "across them. Each strategy follows its framework's recipe and partitions; docs/recipes.md cites the code.",
    ]
    return "\n".join(lines)

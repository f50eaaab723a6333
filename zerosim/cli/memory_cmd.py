"""Per-rank memory of ZeRO stages 0-3 at real scale, measured by the meta backend's ledgers.

    zerosim memory --params 7.5e9 --ranks 64        # the ZeRO paper's Figure 1
    zerosim memory --model gpt3-175b --ranks 1024   # a preset, by its layer sizes
    zerosim memory --params 7e9 --ranks 8 --json    # for machines
    zerosim memory --model gpt3-6.7b --ranks 8 --seq-len 2048 --batch 4 --checkpoint block   # + activations
    zerosim memory --d-model 4096 --heads 32 --layers 32 --seq-len 8192 --batch 4 --ranks 1  # seed 001's L = 8192 row

The same engines that train the small models run one step of a model given by its layer sizes on
data-less arrays (the meta backend), so every number in the table is what the ledgers recorded;
the formula from `zerosim.costs` stands beside it. Below the table: the byte-per-parameter
conventions the seeds, the ZeRO paper and DeepSpeed use, side by side, and seed 001's erratum.

With --seq-len the model is zerosim's GPT at the model's shape (a GPT-2-layout --model, or
--d-model/--heads/--layers), its units' data-less twins (models/meta_gpt.py): every rank's ledger
then holds its activations too, by seed 001's names, and the total adds them to the model states
as seed 001 §6 does. Without it activations are not counted (--params gives no shape).
"""

from __future__ import annotations

import json
import math
import sys

from zerosim.costs import GB
from zerosim.optim import OPTIMIZERS

ELEMENTWISE = tuple(name for name, cls in OPTIMIZERS.items() if cls.elementwise)  # what every stage can shard

MAX_PARAMS = 1e15  # a quadrillion: 1,000x GPT-3's 175B

HELP = "per-rank memory by stage and kind at real scale (meta backend), beside the formulas"
PRECISIONS = ("fp16-mixed", "bf16-mixed", "fp32")  # fp32: seed 002's "pure fp32", no master copy


def add_model_arguments(p, default_ranks: int = 64) -> None:
    """--params/--model, --layers, --ranks, --optimizer, --precision, --unit (shared with `zerosim figures`)."""
    from zerosim.costs import PRESETS

    which = p.add_mutually_exclusive_group()
    which.add_argument("--params", type=float, default=None, help="Ψ, parameters, e.g. 7.5e9 (default: 7.5e9, the ZeRO paper's)")
    which.add_argument("--model", choices=sorted(PRESETS), default=None, help="a preset model, by its layer sizes")
    p.add_argument("--layers", type=int, default=None,
                   help="with --params: equal layers to split Ψ into (default 64); with --d-model: transformer blocks")
    p.add_argument("--ranks", type=int, default=default_ranks, help=f"data-parallel ranks N (default {default_ranks})")
    p.add_argument("--optimizer", choices=ELEMENTWISE, default="adam", help="optimizer (default adam, K = 8 + 4 master)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp16-mixed", help="mixed-precision preset (default fp16-mixed)")
    p.add_argument("--unit", choices=("module", "block"), default=None,
                   help="with --model: gather/reduce unit, one module or one transformer block (default block, as FSDP wraps)")


def add_arguments(p) -> None:
    from zerosim.models.gpt import STRATEGIES

    add_model_arguments(p)
    p.add_argument("--no-step", action="store_true", help="resting state after initialisation only (skip the step and its peaks)")
    p.add_argument("--json", action="store_true", help="print the same numbers as JSON")
    act = p.add_argument_group("activations (seed 001 §5-6)", "measured on zerosim's GPT at the model's shape: "
                               "a GPT-2-layout --model, or --d-model with --heads and --layers")
    act.add_argument("--seq-len", type=int, default=None, metavar="L", help="tokens per sequence: count activations too")
    act.add_argument("--batch", type=int, default=None, metavar="B", help="with --seq-len: sequences per micro-batch on each rank (default 1)")
    act.add_argument("--checkpoint", choices=tuple(STRATEGIES), default=None,
                     help="with --seq-len: seed 001's checkpointing strategy (default none)")
    act.add_argument("--d-model", type=int, default=None, metavar="D", help="with --seq-len: a GPT of this width (untied head)")
    act.add_argument("--heads", type=int, default=None, metavar="H", help="with --d-model: attention heads")
    act.add_argument("--vocab", type=int, default=None, metavar="V", help="with --d-model: vocabulary (default 50257, GPT-2's)")


def micro_batch_from_args(args) -> tuple | None:
    """(B, L) each rank's micro-batch when --seq-len asks for activations, else None (and no activation flag)."""
    L = getattr(args, "seq_len", None)
    if L is None:
        stray = [flag for flag, name in (("--batch", "batch"), ("--checkpoint", "checkpoint"), ("--d-model", "d_model"),
                                         ("--heads", "heads"), ("--vocab", "vocab")) if getattr(args, name, None) is not None]
        if stray:
            raise ValueError(f"{', '.join(stray)} describe activations: add --seq-len L (tokens per sequence)")
        return None
    B = 1 if args.batch is None else args.batch
    if L < 1 or B < 1:
        raise ValueError(f"--seq-len and --batch must be at least 1, got {L} and {B}")
    if args.no_step:
        raise ValueError("activations live during the step: --no-step skips it (drop --no-step or --seq-len)")
    return B, L


def gpt_from_args(args, seq_len: int):
    """The MetaGPT that --model (GPT-2 layout) or --d-model/--heads/--layers/--vocab and --checkpoint describe."""
    from zerosim.costs import get_preset
    from zerosim.models import GPT
    from zerosim.models.gpt import strategy_options
    from zerosim.models.meta_gpt import MetaGPT

    options = strategy_options(args.checkpoint or "none")
    if args.unit == "module":
        raise ValueError("activations are measured per transformer block: drop --unit module")
    if args.unit == "block" and options.get("unit") == "sublayer":
        raise ValueError("--checkpoint subblock keeps the attention and FFN inputs apart, so its units are the two "
                         "sub-blocks: drop --unit block")
    if args.d_model is not None:
        if args.params is not None or args.model is not None:
            raise ValueError("--d-model describes the model itself: drop --params / --model")
        if args.heads is None or args.layers is None:
            raise ValueError("--d-model needs --heads (attention heads) and --layers (transformer blocks)")
        gpt = GPT(50257 if args.vocab is None else args.vocab, args.d_model, args.heads, args.layers, seq_len, **options)
        return MetaGPT(gpt, name=f"GPT d={args.d_model} H={args.heads} layers={args.layers} V={gpt.vocab}")
    if args.heads is not None or args.vocab is not None:
        raise ValueError("--heads and --vocab go with --d-model (a --model preset has its own)")
    if args.model is None:
        raise ValueError("--seq-len needs a transformer shape: a GPT-2-layout --model (gpt2-small ... gpt3-175b) or "
                         "--d-model/--heads/--layers; --params gives a parameter count only")
    preset = get_preset(args.model)
    model = MetaGPT.from_preset(preset, **options)  # refuses a preset without a GPT-2-layout shape
    if seq_len > preset.shape.n_ctx:
        raise ValueError(f"--seq-len {seq_len} is longer than {preset.name}'s context of {preset.shape.n_ctx} tokens "
                         "(its position table); a --d-model/--heads/--layers GPT takes any length")
    return model


def model_from_args(args):
    """The MetaModel that --params/--layers or --model/--unit describe; a MetaGPT when --seq-len asks for activations."""
    from zerosim.costs import get_preset
    from zerosim.models.meta import MetaModel

    if args.ranks < 1 or (args.layers is not None and args.layers < 1):
        raise ValueError("--ranks and --layers must be at least 1")
    micro = micro_batch_from_args(args)
    if micro is not None:
        return gpt_from_args(args, micro[1])
    if args.model is not None:
        return MetaModel.from_preset(get_preset(args.model), unit=args.unit or "block")
    if args.unit is not None:
        raise ValueError("--unit chooses how a --model preset is cut into units; with --params the model is --layers equal layers")
    params = 7.5e9 if args.params is None else args.params
    if not math.isfinite(params) or params != int(params) or params < 1:
        raise ValueError(f"--params must be a whole number of parameters >= 1, got {params!r}")
    if params > MAX_PARAMS:
        raise ValueError(f"--params {params:g} is more than {MAX_PARAMS:g} parameters, beyond any model trained so far")
    return MetaModel.from_params(int(params), layers=64 if args.layers is None else args.layers)


def report(args) -> dict:
    """Everything the command prints, as data (what --json emits)."""
    from zerosim.costs import (MemoryConfig, comm_volume, conventions_table, model_state_memory, seed001_formulas,
                               seed001_printed_table)

    from zerosim.costs.measured import measure_by_stage

    model, micro = model_from_args(args), micro_batch_from_args(args)
    P, N = model.num_params, args.ranks
    measured = measure_by_stage(model, N, args.optimizer, args.precision, step=not args.no_step,
                                show_progress=not args.json and sys.stderr.isatty(), micro_batch=micro)
    config = MemoryConfig.for_precision(args.precision, optimizer=args.optimizer, padding="all")  # the engines pad every flat buffer
    for row in measured:
        formula = model_state_memory(P, N, row["stage"], config)
        row["formula"] = {k: v for k, v in formula.by_kind.items() if v}
        row["formula_total"] = formula.total
        row["formula_unpadded_total"] = model_state_memory(P, N, row["stage"], MemoryConfig.for_precision(args.precision, optimizer=args.optimizer, padding="none")).total
        row["ledger_total"] = sum(row["resting"].values())
        wire = config.param_bytes  # the compute format travels: 2 bytes, or 4 in pure fp32
        row["sent_formula"] = comm_volume(P, N, row["stage"], grad_wire_bytes=wire, param_wire_bytes=wire)
        if micro is not None:  # seed 001 §6: model states + activations (every rank holds its own micro-batch's)
            row["activations"] = row["peak_by_kind"].get("activations", 0)
            row["total"] = row["ledger_total"] + row["activations"]
    printed, own = seed001_printed_table(), seed001_formulas(7e9, 8)
    return {
        "model": model.name, "params": P, "layers": len(model.layers), "largest_layer": model.largest_layer, "ranks": N,
        "optimizer": args.optimizer, "precision": args.precision,
        "unit": getattr(model, "unit", None) or ((args.unit or "block") if args.model else "layer"),
        "step": not args.no_step, "activations": None if micro is None else _activations(model, micro, args),
        "stages": measured,
        "conventions": [{"name": r.name, "bytes": list(r.bytes), "note": r.note, "erratum": list(r.erratum)}
                        for r in conventions_table(P, N, model.largest_layer, args.optimizer, args.precision)],
        "seed001_erratum": {
            "printed_gb": list(printed.gb()), "formulas_gb": list(own.gb()), "stages": list(printed.erratum),
            "note": "seed 001's printed table (7B on 8 GPUs) disagrees with its own formulas 4P + 12P/N and 2P + 14P/N",
        },
    }


def _activations(model, micro: tuple, args) -> dict:
    """The measured activations of one rank's micro-batch, beside seed 001's per-layer count."""
    from zerosim.costs.measured import measure_activations
    from zerosim.precision import get_precision

    B, L = micro
    a = measure_activations(model, B, L, args.precision)
    width = get_precision(args.precision).compute_format.dtype.itemsize  # bytes per activation element
    return {"seq_len": L, "batch": B, "checkpoint": args.checkpoint or "none", "d_model": model.d_model,
            "heads": model.n_heads, "blocks": model.n_layers, "vocab": model.vocab, "bytes_per_element": width,
            "per_block": a.per_block, "per_block_total": a.per_block_total, "outside_blocks": a.outside,
            # seed 001 §5e: "14·B·L·d + B·H·L²" per layer, without the B·H·L² when P is not kept (selective, flash)
            "seed001_per_layer": (14 * B * L * model.d_model + (B * model.n_heads * L * L if model.attention == "standard" else 0)) * width,
            "peak": a.peak, "peak_at": a.peak_at}


def format_report(r: dict) -> str:
    from zerosim.costs import conventions_table, format_table

    kinds, act = [], r["activations"]
    for row in r["stages"]:
        kinds += [k for k in row["resting"] if k not in kinds]
    extra = ("activ.", "total") if act else ()  # seed 001 §6: model states + activations
    lines = [
        f"zerosim memory: Ψ = {r['params']:,} parameters ("
        + (r["model"] if r["unit"] == "layer" else f"{r['model']}, {r['layers']} {r['unit']}s") + f"), N = {r['ranks']} ranks, "
        f"{r['optimizer']}, {r['precision']}",
        "Per-rank model states in GB (1e9 bytes), as the meta backend's ledgers recorded them"
        + (" after one step" if r["step"] else " after initialisation") + ";",
        "'formula' is zerosim.costs with every flat buffer padded to N·ceil(Ψ/N), as the engines hold them.",
        "",
        f"{'stage':5s} " + " ".join(f"{k:>10s}" for k in kinds)
        + " | " + " ".join(f"{h:>9s}" for h in ("ledger", "formula")) + " | "
        + "".join(f"{h:>9s} " for h in extra) + ("| " if extra else "") + " ".join(f"{h:>9s}" for h in ("peak", "sent", "2Ψ or 3Ψ")),
    ]
    for row in r["stages"]:
        cells = " ".join(f"{row['resting'].get(k, 0) / GB:10.3f}" for k in kinds)
        same = "" if row["ledger_total"] == row["formula_total"] and row["ranks_agree"] else "  (differs: see note)"
        added = f"{row['activations'] / GB:9.3f} {row['total'] / GB:9.3f} | " if act else ""
        lines.append(f"{row['stage']:<5d} {cells} | {row['ledger_total'] / GB:9.3f} {row['formula_total'] / GB:9.3f} | {added}"
                     f"{row['peak'] / GB:9.3f} {row['sent'] / GB:9.3f} {row['sent_formula'] / GB:9.3f}{same}")
    lines += [
        "",
        "peak: the most one rank held at once during the step (adds the fp32 gradient shard 'grad32' and,",
        "at stages 2-3, one unit's gathered params and gradients). sent: bytes one rank put on the wire in",
        "the step (trace), beside the formula 2Ψ or 3Ψ times (N−1)/N times the wire format's bytes.",
    ]
    lines += _activation_lines(act) if act else [
        "Activations are not counted: add --seq-len (and --batch, --checkpoint) with a GPT-2-layout --model, or",
        "--d-model/--heads/--layers, to measure them on the ledgers too.",
    ]
    lines += ["", "The conventions, side by side (GB per rank; zerosim's row pads shards only):", ""]
    lines.append(format_table(conventions_table(r["params"], r["ranks"], r["largest_layer"], r["optimizer"], r["precision"])))
    e = r["seed001_erratum"]
    lines += [
        "",
        f"NOTE: seed 001's printed table for 7B on 8 GPUs says {e['printed_gb'][1]:g} GB (ZeRO-1) and {e['printed_gb'][2]:g} GB (ZeRO-2).",
        f"Its own formulas, 4P + 12P/N and 2P + 14P/N, give {e['formulas_gb'][1]:g} and {e['formulas_gb'][2]:g} GB, and so do the ledgers",
        "(zerosim memory --params 7e9 --ranks 8). The printed figures disagree with its formulas: an erratum, not a target.",
    ]
    return "\n".join(lines)


def _activation_lines(a: dict) -> list:
    """The activation rows below the table: one block's saved tensors by name, beside seed 001's count."""
    MB = 1e6
    when = "when the loss runs" if a["peak_at"].startswith("loss.") else f"saving {a['peak_at']!r}"
    outside = list(a["outside_blocks"].items())
    lines = [
        f"activ.: the most activation bytes one rank held at once, {when}: B = {a['batch']} sequences of",
        f"L = {a['seq_len']} tokens per rank, checkpoint {a['checkpoint']!r}. ZeRO shards none of them: each rank keeps its",
        "own micro-batch's. total: the model states plus these activations, as seed 001 §6 adds them up.",
        "",
        f"What one transformer block saves for backward, by seed 001 §5e's names (MB = 1e6 bytes; d = {a['d_model']}, H = {a['heads']}):",
    ]
    lines += [f"    {name:<24s} {nbytes / MB:12.3f}" for name, nbytes in a["per_block"].items()]
    seed = "14·B·L·d + B·H·L²" if "P" in a["per_block"] or "attn.P" in a["per_block"] else "14·B·L·d, P not kept"
    lines += [f"    {'one block':<24s} {a['per_block_total'] / MB:12.3f}   (seed 001's {seed}: {a['seed001_per_layer'] / MB:.3f})",
              f"    {'outside the blocks':<24s} {sum(b for _, b in outside) / MB:12.3f}   ("
              + ", ".join(f"{k} {v / MB:.3f}" for k, v in outside[:3]) + ","]
    lines += ["    " + " " * 41 + ", ".join(f"{k} {v / MB:.3f}" for k, v in outside[3:]) + ")"] if outside[3:] else []
    lines += [
        "The seed's 14·B·L·d is exact here (the LayerNorm outputs are rebuilt in backward: 'shared' in its table); it",
        "leaves out the fp32 LayerNorm statistics (B·L each) and all that lives outside the blocks: the token ids, the",
        "final LayerNorm's input and the loss's fp32 probabilities over the vocabulary.",
    ]
    if a["checkpoint"] in ("block", "subblock", "every-k"):
        lines += ["At stage 3 'sent' exceeds 3Ψ: each recomputed unit is gathered once more for its recompute (seed 004's",
                  "schedule gathers a unit for every use; a block's recompute and backward are two uses)."]
    return lines


def run(args) -> int:
    r = report(args)
    print(json.dumps(r, indent=1) if args.json else format_report(r))
    return 0

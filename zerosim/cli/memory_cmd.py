"""Per-rank memory of ZeRO stages 0-3 at real scale, measured by the meta backend's ledgers.

    zerosim memory --params 7.5e9 --ranks 64        # the ZeRO paper's Figure 1
    zerosim memory --model gpt3-175b --ranks 1024   # a preset, by its layer sizes
    zerosim memory --params 7e9 --ranks 8 --json    # for machines

The same engines that train the small models run one step of a model given by its layer sizes on
data-less arrays (the meta backend), so every number in the table is what the ledgers recorded;
the formula from `zerosim.costs` stands beside it. Below the table: the byte-per-parameter
conventions the seeds, the ZeRO paper and DeepSpeed use, side by side, and seed 001's erratum.
Activations are left out (the meta model has parameter counts, not shapes).
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
    p.add_argument("--layers", type=int, default=64, help="with --params: equal layers to split Ψ into (default 64)")
    p.add_argument("--ranks", type=int, default=default_ranks, help=f"data-parallel ranks N (default {default_ranks})")
    p.add_argument("--optimizer", choices=ELEMENTWISE, default="adam", help="optimizer (default adam, K = 8 + 4 master)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp16-mixed", help="mixed-precision preset (default fp16-mixed)")
    p.add_argument("--unit", choices=("module", "block"), default=None,
                   help="with --model: gather/reduce unit, one module or one transformer block (default block, as FSDP wraps)")


def add_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--no-step", action="store_true", help="resting state after initialisation only (skip the step and its peaks)")
    p.add_argument("--json", action="store_true", help="print the same numbers as JSON")


def model_from_args(args):
    """The MetaModel that --params/--layers or --model/--unit describe."""
    from zerosim.costs import get_preset
    from zerosim.models.meta import MetaModel

    if args.ranks < 1 or args.layers < 1:
        raise ValueError("--ranks and --layers must be at least 1")
    if args.model is not None:
        return MetaModel.from_preset(get_preset(args.model), unit=args.unit or "block")
    if args.unit is not None:
        raise ValueError("--unit chooses how a --model preset is cut into units; with --params the model is --layers equal layers")
    params = 7.5e9 if args.params is None else args.params
    if not math.isfinite(params) or params != int(params) or params < 1:
        raise ValueError(f"--params must be a whole number of parameters >= 1, got {params!r}")
    if params > MAX_PARAMS:
        raise ValueError(f"--params {params:g} is more than {MAX_PARAMS:g} parameters, beyond any model trained so far")
    return MetaModel.from_params(int(params), layers=args.layers)


def report(args) -> dict:
    """Everything the command prints, as data (what --json emits)."""
    from zerosim.costs import (MemoryConfig, comm_volume, conventions_table, model_state_memory, seed001_formulas,
                               seed001_printed_table)

    model = model_from_args(args)
    P, N = model.num_params, args.ranks
    from zerosim.costs.measured import measure_by_stage

    measured = measure_by_stage(model, N, args.optimizer, args.precision, step=not args.no_step,
                                show_progress=not args.json and sys.stderr.isatty())
    config = MemoryConfig.for_precision(args.precision, optimizer=args.optimizer, padding="all")  # the engines pad every flat buffer
    for row in measured:
        formula = model_state_memory(P, N, row["stage"], config)
        row["formula"] = {k: v for k, v in formula.by_kind.items() if v}
        row["formula_total"] = formula.total
        row["formula_unpadded_total"] = model_state_memory(P, N, row["stage"], MemoryConfig.for_precision(args.precision, optimizer=args.optimizer, padding="none")).total
        row["ledger_total"] = sum(row["resting"].values())
        wire = config.param_bytes  # the compute format travels: 2 bytes, or 4 in pure fp32
        row["sent_formula"] = comm_volume(P, N, row["stage"], grad_wire_bytes=wire, param_wire_bytes=wire)
    printed, own = seed001_printed_table(), seed001_formulas(7e9, 8)
    return {
        "model": model.name, "params": P, "layers": len(model.layers), "largest_layer": model.largest_layer, "ranks": N,
        "optimizer": args.optimizer, "precision": args.precision, "unit": (args.unit or "block") if args.model else "layer",
        "step": not args.no_step, "activations": "left out (parameter counts only; see zerosim.costs.activation_memory)",
        "stages": measured,
        "conventions": [{"name": r.name, "bytes": list(r.bytes), "note": r.note, "erratum": list(r.erratum)}
                        for r in conventions_table(P, N, model.largest_layer, args.optimizer, args.precision)],
        "seed001_erratum": {
            "printed_gb": list(printed.gb()), "formulas_gb": list(own.gb()), "stages": list(printed.erratum),
            "note": "seed 001's printed table (7B on 8 GPUs) disagrees with its own formulas 4P + 12P/N and 2P + 14P/N",
        },
    }


def format_report(r: dict) -> str:
    from zerosim.costs import conventions_table, format_table

    kinds = []
    for row in r["stages"]:
        kinds += [k for k in row["resting"] if k not in kinds]
    lines = [
        f"zerosim memory: Ψ = {r['params']:,} parameters ("
        + (r["model"] if r["unit"] == "layer" else f"{r['model']}, {r['layers']} {r['unit']}s") + f"), N = {r['ranks']} ranks, "
        f"{r['optimizer']}, {r['precision']}",
        "Per-rank model states in GB (1e9 bytes), as the meta backend's ledgers recorded them"
        + (" after one step" if r["step"] else " after initialisation") + ";",
        "'formula' is zerosim.costs with every flat buffer padded to N·ceil(Ψ/N), as the engines hold them.",
        "",
        f"{'stage':5s} " + " ".join(f"{k:>10s}" for k in kinds)
        + " | " + " ".join(f"{h:>9s}" for h in ("ledger", "formula")) + " | " + " ".join(f"{h:>9s}" for h in ("peak", "sent", "2Ψ or 3Ψ")),
    ]
    for row in r["stages"]:
        cells = " ".join(f"{row['resting'].get(k, 0) / GB:10.3f}" for k in kinds)
        same = "" if row["ledger_total"] == row["formula_total"] and row["ranks_agree"] else "  (differs: see note)"
        lines.append(f"{row['stage']:<5d} {cells} | {row['ledger_total'] / GB:9.3f} {row['formula_total'] / GB:9.3f} | "
                     f"{row['peak'] / GB:9.3f} {row['sent'] / GB:9.3f} {row['sent_formula'] / GB:9.3f}{same}")
    lines += [
        "",
        "peak: the most one rank held at once during the step (adds the fp32 gradient shard 'grad32' and,",
        "at stages 2-3, one unit's gathered params and gradients). sent: bytes one rank put on the wire in",
        "the step (trace), beside the formula 2Ψ or 3Ψ times (N−1)/N times the wire format's bytes. Activations are left",
        "out: the meta model has parameter counts, not shapes (see zerosim.costs.activation_memory).",
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


def run(args) -> int:
    r = report(args)
    print(json.dumps(r, indent=1) if args.json else format_report(r))
    return 0

r"""Per-rank memory of ZeRO stages 0-3 at real scale, measured by the meta backend's ledgers.

    zerosim memory --params 7.5e9 --ranks 64        # the ZeRO paper's Figure 1
    zerosim memory --model gpt3-175b --ranks 1024   # a preset, by its layer sizes
    zerosim memory --params 7e9 --ranks 8 --json    # for machines
    zerosim memory --model gpt3-6.7b --ranks 8 --seq-len 2048 --batch 4 --checkpoint block   # + activations
    zerosim memory --d-model 4096 --heads 32 --layers 32 --seq-len 8192 --batch 4 --ranks 1  # seed 001's L = 8192 row
    zerosim memory --model llama-3-8b --ranks 8 --seq-len 8192 --gpu h100-80gb               # will it fit?
    zerosim memory --config config.json --ds-config ds_config.json --ranks 8 --seq-len 4096 --gpu a100-80gb
    zerosim memory --model gpt3-175b --ranks 1024 --fp8-all-gather                  # stage 3's gathers in e4m3
    zerosim memory --model llama-7b --ranks 16 --gpus-per-node 8 --seq-len 2048 --batch 1 \
        --zero-quantized-gradients    # DeepSpeed ZeRO++ qgZ at stage 3
    zerosim memory --model gpt3-175b --ranks 4096 --gpus-per-node 8 --strategy all --shard-group 64  # many nodes
    zerosim memory --model llama-3-70b --ranks 256 --gpus-per-node 8 --tp 8 --sp --seq-len 8192 --batch 16 \
        --checkpoint block --precision bf16-mixed --gpu h100-80gb      # torchtitan's FSDP 32 x TP 8

The same engines that train the small models run one step of a model given by its layer sizes on
data-less arrays (the meta backend), so every number in the table is what the ledgers recorded;
the formula from `zerosim.analysis.costs` stands beside it. Below the table: the byte-per-parameter
conventions the seeds, the ZeRO paper and DeepSpeed use, side by side, and seed 001's erratum.

With --seq-len the model is zerosim's GPT or Llama at the model's shape (a --model preset, a model's
config.json, or --d-model/--heads/--layers), its units' data-less twins: every rank's ledger then holds its
activations too, by name, and the total adds them to the model states as seed 001 §6 does. With --gpu each
stage's measured peak, plus labelled estimates of what no ledger sees (CUDA context, NCCL, the allocator's
reserve, DeepSpeed's buckets), is judged against the GPU: fits, or does not, and by how much. A DeepSpeed
config (--ds-config) sets the stage, schedule, precision, batch and clipping; every key of it, and of a
--config, is listed as modelled, not modelled or no effect. With --strategy (and --gpus-per-node, --shard-group)
the strategies for many nodes are measured instead of the stages: cli/strategy_memory.py. With --tp T (and --sp)
every stage runs beside Megatron's tensor parallelism: --ranks stays the GPU count, ZeRO shards each TP rank's slice
over the ranks / T data-parallel ranks that hold it, and the activations are one TP rank's, beside Megatron's
formulas (cli/tensor_format.py).
"""

from __future__ import annotations

import json
import sys

from zerosim.cli.fit_lines import judge
from zerosim.cli.model_args import (
    add_activation_arguments,
    add_gpu_arguments,
    add_model_arguments,
    add_schedule_arguments,
    setup,
)
from zerosim.cli.offload_args import add_offload_arguments, host_from_args, offload_memory_rows, offload_request
from zerosim.cli.strategy_args import add_mesh_arguments, check_nodes, strategies_of
from zerosim.cli.tensor_args import add_tensor_arguments, tensor_of
from zerosim.cli.wire_args import add_wire_arguments, check_qgz_model, qgz_precision, wire_from_args

HELP = "per-rank memory by stage and kind at real scale (meta backend), beside the formulas; will it fit a GPU"


def add_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument(
        "--no-step", action="store_true", help="resting state after initialisation only (skip the step and its peaks)"
    )
    p.add_argument("--json", action="store_true", help="print the same numbers as JSON")
    add_activation_arguments(p)
    add_gpu_arguments(p)
    add_schedule_arguments(p)
    add_wire_arguments(p)
    add_mesh_arguments(p, several=True)
    add_offload_arguments(p, dpu=True)
    add_tensor_arguments(p)


def strategies_report(args, s, names, tp: int = 1, sp: bool = False) -> dict:
    """`zerosim memory --strategy ...` as data: the strategies' rows (cli/strategy_memory.py)."""
    from zerosim.cli.strategy_memory import strategy_rows

    if s.ds is not None:
        raise ValueError("--ds-config sets a ZeRO stage; --strategy names a strategy for many nodes: give one")
    if wire_from_args(args) is not None:  # the strategies' table runs them unquantized: the flags would be ignored
        raise ValueError("--zero-quantized-weights, --fp8-all-gather and --zero-quantized-gradients quantize the flat "
                         "stage 3's collectives; `memory --strategy` measures the strategies unquantized: give one "
                         "or the other")
    return {
        "model": s.model.name, "params": s.model.num_params, "ranks": args.ranks, "optimizer": s.optimizer,
        "precision": s.precision_name, "gpus_per_node": check_nodes(args.ranks, args.gpus_per_node),
        **({} if tp == 1 else {"tensor_parallel": {"tp": tp, "sp": sp, "dp": args.ranks // tp}}),
        "strategies": strategy_rows(args, s, names, tp, sp),
    }


def report(args) -> dict:
    """Everything the command prints, as data (what --json emits)."""
    from zerosim.analysis.costs import (
        MemoryConfig,
        comm_volume,
        conventions_table,
        measure_by_stage,
        measure_stage,
        model_state_memory,
        seed001_formulas,
        seed001_printed_table,
    )

    s = setup(args)
    names = strategies_of(args, several=True)
    offload = offload_request(args, s.ds)  # the optimizer (and params) on the host or NVMe (cli/offload_args.py)
    tp, sp = tensor_of(args, args.ranks)
    if offload is not None and (names or wire_from_args(args) is not None or tp > 1 or sp):
        raise ValueError("offload is measured on the ZeRO stages' table: drop --strategy, --tp/--sp and the "
                         "quantized gathers (offload beside them is not modelled)")
    if tp > 1 and s.micro is None:
        raise ValueError("--tp splits a transformer's heads, columns and vocabulary: give its shape and work, "
                         "--seq-len (and --batch) with a --model, --config or --d-model")
    if names:
        return strategies_report(args, s, names, tp, sp)
    check_nodes(args.ranks, args.gpus_per_node)
    if args.gpus_per_node is not None and not args.zero_quantized_gradients and tp == 1 and offload is None:
        # (the table has no tiers; offload: a node's ranks share its host memory, so there it counts)
        raise ValueError("--gpus-per-node places the ranks on nodes for --strategy, --tp or --zero-quantized-gradients"
                         " (and offload: a node's ranks share its host); "
                         "the stages' memory does not depend on it (zerosim timeline --gpus-per-node times the "
                         "links): drop it, or add --strategy")
    model, micro = s.model, s.micro
    P, N = model.num_params, args.ranks
    local, dp = (model.num_params, N) if tp == 1 else (tp_local_params(model, tp, sp), N // tp)  # one TP rank's
    vocab = None if tp == 1 else tp_vocab(model, tp)
    stages = (s.ds.stage,) if s.ds is not None else (0, 1, 2, 3)
    stages = stages if offload is None else offload.stages(offload.configs[0], stages)  # where it runs
    quantized = wire_from_args(args)  # stage 3's weight gathers in fewer bits, or None
    check_qgz_model(args, model)
    if quantized is not None and 3 not in stages:
        raise ValueError(f"--zero-quantized-weights and --fp8-all-gather quantize ZeRO-3's weight gathers; the "
                         f"DeepSpeed config runs stage {stages[0]}")
    if quantized is not None and quantized.zero_quantized_gradients:  # DeepSpeed's stage 3 only, on its nodes
        stages = (3,)
        measured = [measure_stage(model, N, 3, s.optimizer, qgz_precision(args, s.precision), step=not args.no_step,
                                  micro_batch=micro, comm=s.comm, clip_grad=s.clip_grad, wire=quantized,
                                  gpus_per_node=args.gpus_per_node)[0]]
    else:
        measured = measure_by_stage(model, N, s.optimizer, s.precision, step=not args.no_step, stages=stages,
                                    show_progress=not args.json and sys.stderr.isatty(), micro_batch=micro,
                                    comm=s.comm, clip_grad=s.clip_grad, wire=quantized, tp=tp, sp=sp,
                                    gpus_per_node=args.gpus_per_node if tp > 1 else None,
                                    parallelisms=offload and (lambda st: (offload.offload(offload.configs[0], st)[0],)))
    name = s.precision_name
    config = MemoryConfig.for_precision(name, optimizer=s.optimizer, padding="all")  # the engines pad every flat buffer
    for row in measured:  # beside TP the formulas read one TP rank's slice (local) over its dp data-parallel ranks
        formula = model_state_memory(local, dp, row["stage"], config)
        row["formula"] = {k: v for k, v in formula.by_kind.items() if v}
        row["formula_total"] = formula.total
        row["formula_unpadded_total"] = model_state_memory(
            local, dp, row["stage"], MemoryConfig.for_precision(name, optimizer=s.optimizer, padding="none")
        ).total
        row["ledger_total"] = sum(row["resting"].values())
        wire = config.param_bytes  # the compute format travels: 2 bytes, or 4 in pure fp32
        row["sent_formula"] = comm_volume(local, dp, row["stage"], grad_wire_bytes=wire, param_wire_bytes=wire)
        if tp > 1:  # and TP's activations' collectives, on the TP group (tensor/_costs.py)
            row["sent_formula"] += tp_sent(model, micro, tp, sp, wire)
        if micro is not None:  # seed 001 §6: model states + activations (every rank holds its own micro-batch's)
            row["activations"] = row["peak_by_kind"].get("activations", 0)
            row["total"] = row["ledger_total"] + row["activations"]
    hosted = None if offload is None else offload_memory_rows(measured, offload, P, N, name, s.optimizer,
                                                              host_from_args(args, s.gpu), args.gpus_per_node)
    printed, own = seed001_printed_table(), seed001_formulas(7e9, 8)
    fits = (
        [judge(row["peak"], row["stage"], N, s.gpu, s.reserve, s.ds.buckets if s.ds else None) for row in measured]
        if s.gpu is not None
        else None
    )
    return {
        "model": model.name,
        "params": P,
        "layers": len(model.layers),
        "largest_layer": model.largest_layer,
        "ranks": N,
        "optimizer": s.optimizer,
        "precision": name,
        "unit": getattr(model, "unit", None) or ((args.unit or "block") if s.config or args.model else "layer"),
        "step": not args.no_step,
        "wire": None if quantized is None else quantized.describe(),  # stage 3's weight gathers
        **({} if hosted is None else {"offload": hosted}),  # the host and NVMe tiers (cli/offload_args.py)
        "activations": None if micro is None else (
            _activations(model, micro, args, s.precision) if tp == 1 else
            tp_activations(model, micro, args, s.precision, tp, sp)),
        **({} if tp == 1 else {"tensor_parallel": {"tp": tp, "sp": sp, "dp": dp, "local_params": local,
                                                   "vocab": vocab, "vocab_padded": vocab != model.vocab}}),
        "stages": measured,
        "gpu": None
        if s.gpu is None
        else {
            "key": s.gpu.key,
            "name": s.gpu.name,
            "capacity": s.gpu.capacity,
            "datasheet": s.gpu.datasheet,
            "by_stage": fits,
        },
        "config": None if s.config is None else _keys(s.config.keys + s.config.defaults),
        "ds_config": None
        if s.ds is None
        else {
            "stage": s.ds.stage,
            "micro_batch": s.ds.micro_batch,
            "accumulation_steps": s.ds.accumulation_steps,
            "train_batch_size": s.ds.train_batch_size,
            "clip_grad": s.ds.clip_grad,
            "precision": name,
            "loss_scale": s.ds.precision.loss_scale,
            "wire": s.ds.precision.reduce_format.name,
            "optimizer": s.ds.optimizer,
            "comm": _comm(s.comm),
            "keys": _keys(s.ds.keys),
        },
        "conventions": [
            {"name": r.name, "bytes": list(r.bytes), "note": r.note, "erratum": list(r.erratum)}
            for r in conventions_table(P, N, model.largest_layer, s.optimizer, name)
        ],
        "seed001_erratum": {
            "printed_gb": list(printed.gb()),
            "formulas_gb": list(own.gb()),
            "stages": list(printed.erratum),
            "note": "seed 001's printed table (7B on 8 GPUs) disagrees with its own formulas 4P + 12P/N and 2P + 14P/N",
        },
    }


def tp_local_params(model, tp: int, sp: bool) -> int:
    """One TP rank's parameters of `model` (its slice: rows and columns cut, norms whole)."""
    from zerosim.analysis.costs import tensor_parallel

    return tensor_parallel(model, tp, sp)[0].num_params


def tp_vocab(model, tp: int) -> int:
    """The vocabulary TP splits: the model's, or Megatron's padding of it (zerosim.parallel.tensor.padded_model)."""
    from zerosim.parallel.tensor import padded_model

    return padded_model(model, tp).vocab


def tp_sent(model, micro: tuple, tp: int, sp: bool, width: int) -> float:
    """TP's bytes a rank sends in one micro-step by hand (zerosim.parallel.tensor's tp_bytes_per_micro_step)."""
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.tensor import tp_bytes_per_micro_step

    B, L = micro
    return tp_bytes_per_micro_step(model.n_layers, B, L, model.d_model, tp, sp, model.checkpointing,
                                   gpt=not isinstance(model, MetaLlama), width=width)


def tp_activations(model, micro: tuple, args, precision, tp: int, sp: bool) -> dict:
    """One TP rank's activations, measured, beside Megatron's formulas (cli/tensor_format.py prints them)."""
    from zerosim.cli.tensor_format import tp_activation_report

    return tp_activation_report(model, micro, args.checkpoint or "none", precision, tp, sp)


def _keys(keys) -> dict:
    """{status: [{"key", "value", "note"}]} of a config's key report."""
    out = {}
    for k in keys:
        out.setdefault(k.status, []).append({"key": k.key, "value": k.value, "note": k.note})
    return out


def _comm(comm) -> dict:
    return {f: getattr(comm, f) for f in comm.__dataclass_fields__}


def _activations(model, micro: tuple, args, precision) -> dict:
    """The measured activations of one rank's micro-batch, beside the per-layer count written out by hand."""
    from zerosim.analysis.costs import measure_activations
    from zerosim.models.llama import MetaLlama
    from zerosim.precision import get_precision

    B, L = micro
    a = measure_activations(model, B, L, precision)
    width = get_precision(precision).compute_format.dtype.itemsize  # bytes per activation element
    P = (
        B * model.n_heads * L * L if model.attention == "standard" else 0
    )  # the softmax output, kept with "standard" only
    out = {
        "seq_len": L,
        "batch": B,
        "checkpoint": args.checkpoint or "none",
        "d_model": model.d_model,
        "heads": model.n_heads,
        "blocks": model.n_layers,
        "vocab": model.vocab,
        "bytes_per_element": width,
        "per_block": a.per_block,
        "per_block_total": a.per_block_total,
        "outside_blocks": a.outside,
        "peak": a.peak,
        "peak_at": a.peak_at,
        "layout": "llama" if isinstance(model, MetaLlama) else "gpt2",
    }
    if out["layout"] == "llama":
        # llama_block.py: (2d + 2·H·d_h + 2·G·d_h + 3F)·B·L elements (x, Q, K, V, O, h, gate, up, SwiGLU's h) + P,
        # in the compute format, + two fp32 RMSNorm statistics per token
        q, kv = model.n_heads * model.head_dim, model.n_kv_heads * model.head_dim
        out |= {
            "kv_heads": model.n_kv_heads,
            "head_dim": model.head_dim,
            "d_ff": model.d_ff,
            "formula_per_layer": ((2 * model.d_model + 2 * q + 2 * kv + 3 * model.d_ff) * B * L + P) * width
            + 8 * B * L,
        }
    else:  # seed 001 §5e: "14·B·L·d + B·H·L²" per layer, without the B·H·L² when P is not kept (selective, flash)
        out["seed001_per_layer"] = (14 * B * L * model.d_model + P) * width
    return out


def run(args) -> int:
    from zerosim.cli.memory_format import format_report
    from zerosim.cli.strategy_memory import format_strategies

    r = report(args)
    text = format_strategies(r) if "strategies" in r else format_report(r)
    print(json.dumps(r, indent=1) if args.json else text)
    return 0

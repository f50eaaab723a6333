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
    zerosim memory --model llama-3-8b --ranks 8 --cp 8 --seq-len 8192 --batch 1 --checkpoint block-flash \
        --gpu h100-80gb                                                # 8k tokens, each GPU 1k of them
    zerosim memory --model llama-3-8b --ranks 64 --gpus-per-node 8 --tp 2 --pp 4 --seq-len 4096 --batch 1 \
        --checkpoint block --precision bf16-mixed --accumulation-steps 8   # each pipeline rank's peak, 1F1B

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
the strategies for many nodes are measured instead of the stages. With --tp T (and --sp) every stage runs beside
Megatron's tensor parallelism: --ranks stays the GPU count, ZeRO shards each TP rank's slice over the ranks / T
data-parallel ranks that hold it, and the activations are one TP rank's, beside Megatron's formulas. With --cp C
(--cp-style, --cp-split) each rank holds L / C tokens of every sequence: its activations by name beside the unsplit
layer's, ZeRO sharding over dp × cp as torchtitan's FSDP does. With --pp P (--pp-schedule, --virtual-stages,
--accumulation-steps M: the micro-batches a step on each data-parallel rank, default P) each stage runs the pipeline's
engine for a whole step, one representative GPU a pipeline stage: every pipeline rank's layers, parameters, peak and
micro-batches in flight, the first holding the most; the table is the rank that peaks. The report is the library's
(zerosim.analysis.reports: MemoryReport, StrategyMemoryReport): --json prints its `to_dict()`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from zerosim.cli.choices import STAGES
from zerosim.cli.model_args import (
    add_activation_arguments,
    add_gpu_arguments,
    add_model_arguments,
    setup,
)
from zerosim.cli.offload_args import add_offload_arguments, host_from_args, offload_memory_rows, offload_request
from zerosim.cli.schedule_args import add_schedule_arguments
from zerosim.cli.strategy_args import (
    add_mesh_arguments,
    check_nodes,
    each_strategy,
    mesh_of,
    skipped_lines,
    strategies_of,
)
from zerosim.cli.parallel_args import (
    beside_pipeline,
    add_parallel_arguments,
    check_pipeline,
    layout_of,
    refuse_beside,
    spec_of,
)
from zerosim.cli.wire_args import add_wire_arguments, check_qgz_model, qgz_recipe, wire_from_args

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
    add_parallel_arguments(p)
    p.add_argument("--accumulation-steps", type=int, default=None, metavar="M",
                   help="with --pp: micro-batches per step per data-parallel rank (Megatron's num_microbatches; "
                        "default P): how many a pipeline's schedule holds in flight")


def strategies_report(args, s, names, tp: int = 1, sp: bool = False):
    """`zerosim memory --strategy ...`: the library's StrategyMemoryReport, each strategy on its checked DataMesh."""
    from zerosim.analysis.reports import strategy_memory_report

    if s.ds is not None:
        raise ValueError("--ds-config sets a ZeRO stage; --strategy names a strategy for many nodes: give one")
    if wire_from_args(args) is not None:  # the strategies' table runs them unquantized: the flags would be ignored
        raise ValueError("--zero-quantized-weights, --fp8-all-gather and --zero-quantized-gradients quantize the flat "
                         "stage 3's collectives; `memory --strategy` measures the strategies unquantized: give one "
                         "or the other")
    check_nodes(args.ranks, args.gpus_per_node)
    parts, skipped = each_strategy(args, names, lambda name: strategy_memory_report(
        s, [mesh_of(args, name, tp=tp)], step=not args.no_step, sp=sp,
        layout=layout_of(args) if tp > 1 else None))  # one row each: all, less what does not apply
    report = replace(parts[0], strategies=[row for p in parts for row in p.strategies])
    return report if not skipped else _Skipping(report, skipped)


def report(args):
    """Everything the command prints: the library's MemoryReport (or StrategyMemoryReport with --strategy)."""
    from zerosim.analysis.reports import memory_report

    s = setup(args)
    names = strategies_of(args, several=True)
    offload = offload_request(args, s.ds)  # the optimizer (and params) on the host or NVMe (cli/offload_args.py)
    spec = spec_of(args, args.ranks)
    tp, sp = spec.tp, spec.sp
    if offload is not None and (names or wire_from_args(args) is not None or tp > 1 or sp or spec.cp > 1 or
                                spec.pp > 1):
        raise ValueError("offload is measured on the ZeRO stages' table: drop --strategy, --tp/--sp/--cp/--pp and the "
                         "quantized gathers (offload beside them is not modelled)")
    if args.accumulation_steps is not None and spec.pp == 1:
        raise ValueError("--accumulation-steps counts a pipeline's micro-batches (with --pp); the data-parallel "
                         "step's peak does not depend on it (every micro-step holds the same): drop it, or add --pp")
    refuse_beside(spec, args.ranks, names, wire_from_args(args), s.clip_grad)
    if (tp > 1 or spec.cp > 1) and s.micro is None:
        raise ValueError(f"{'--tp' if tp > 1 else '--cp'} splits a transformer's "
                         + ("heads, columns and vocabulary" if tp > 1 else "sequences") + ": give its shape and work, "
                         "--seq-len (and --batch) with a --model, --config or --d-model")
    if spec.cp > 1:
        spec.model_check(s.micro[1], s.model.attention, s.model.checkpoint, names=_names(),
                         kernels=getattr(s.model, "kernels", None))
    if names:
        if spec.cp > 1:  # the one rule (DataMesh), in the flags' words
            for name in names:
                mesh_of(args, name, tp=tp, cp=spec.cp)
        return strategies_report(args, s, names, tp, sp)
    check_nodes(args.ranks, args.gpus_per_node)
    if args.gpus_per_node is not None and not args.zero_quantized_gradients and tp == 1 and spec.cp == 1 and \
            spec.pp == 1 and offload is None:
        # (the table has no tiers; offload: a node's ranks share its host memory, so there it counts)
        raise ValueError("--gpus-per-node places the ranks on nodes for --strategy, --tp or --zero-quantized-gradients"
                         " (and --cp, --pp, and offload: a node's ranks share its host); "
                         "the stages' memory does not depend on it (zerosim timeline --gpus-per-node times the "
                         "links): drop it, or add --strategy")
    stages = (s.ds.stage,) if s.ds is not None else STAGES
    stages = stages if offload is None else offload.stages(offload.configs[0], stages)  # where it runs
    quantized = wire_from_args(args)  # stage 3's weight gathers in fewer bits, or None
    check_qgz_model(args, s.model)
    stages, left_out = beside_pipeline(spec, s, stages, qgz_recipe(args))  # DeepSpeed's: ZeRO-0/1 beside a pipeline
    check_pipeline(spec, s, stages, qgz_recipe(args))  # --pp: its schedule's table, what is refused beside it
    if quantized is not None and 3 not in stages:
        raise ValueError(f"--zero-quantized-weights and --fp8-all-gather quantize ZeRO-3's weight gathers; the "
                         f"DeepSpeed config runs stage {stages[0]}")
    qgz = quantized is not None and quantized.zero_quantized_gradients  # DeepSpeed's stage 3 only, on its nodes
    unit = getattr(s.model, "unit", None) or ((args.unit or "block") if s.config or args.model else "layer")
    r = memory_report(s, args.ranks, (3,) if qgz else stages, quantized, step=not args.no_step, unit=unit,
                      mesh=mesh_of(args, 3) if qgz else None, recipe=qgz_recipe(args),
                      show_progress=not args.json and sys.stderr.isatty(), spec=spec,
                      gpus_per_node=args.gpus_per_node, micro_batches=s.accumulation if spec.pp > 1 else None,
                      parallelisms=offload and (lambda st: (offload.offload(offload.configs[0], st)[0],)))
    if left_out:
        r = replace(r, pipeline_parallel={**r.pipeline_parallel, "left_out": left_out})
    if offload is None:
        return r
    hosted = offload_memory_rows(r.stages, offload, r.params, r.ranks, r.precision, r.optimizer,
                                 host_from_args(args, s.gpu), args.gpus_per_node)  # the host and NVMe tiers
    return replace(r, offload=hosted)


class _Skipping:
    """A strategies' report with the strategies --strategy all skipped (its dict gains "skipped")."""

    def __init__(self, report, skipped):
        self.report, self.skipped = report, skipped

    def to_dict(self) -> dict:
        return {**self.report.to_dict(), "skipped": self.skipped}


def _names() -> dict:
    from zerosim.parallel import FLAGS

    return FLAGS


def run(args) -> int:
    from zerosim.cli.memory_format import format_report, format_strategies

    r = report(args).to_dict()
    text = format_strategies(r) if "strategies" in r else format_report(r)
    text = "\n".join([text, "", *skipped_lines(r.get("skipped", []))]) if r.get("skipped") else text
    print(json.dumps(r, indent=1) if args.json else text)
    return 0

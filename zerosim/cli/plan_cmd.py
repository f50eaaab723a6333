"""Which ZeRO stage, checkpointing strategy and micro-batch fit your GPUs, and how fast each trains: the planner.

    zerosim plan --model llama-3-70b --gpus 64 --gpus-per-node 8 --gpu h100-80gb --seq-len 4096 --global-batch 1024
    zerosim plan --config config.json --gpus 8 --gpu a100-80gb --seq-len 2048 --global-batch 64 --json
    zerosim plan --model llama-3-8b --gpus 8 --gpu rtx3090 --seq-len 2048 --global-batch 32 --figure plan.png
    zerosim plan --model llama-3-70b --gpus 256 --gpu h100-80gb --seq-len 8192 --global-batch 512 --tp 1,2,4,8 --sp \
        --stages 3 --strategies block,flash
    zerosim plan --model llama-3-8b --gpus 8 --gpu h100-80gb --seq-len 8192 --global-batch 8 --cp 1,2,4 --stages 3
    zerosim plan --model llama-3-8b --gpus 16 --gpu h100-80gb --seq-len 4096 --global-batch 32 --pp 1,2,4 \
        --pp-schedule 1f1b,interleaved-1f1b --stages 1,3 --strategies block --jobs auto

For each stage × strategy × micro-batch that splits the global batch, one micro-step of the model's data-less
twin runs on the meta backend (its memory, from rank 0's ledger: model states, activations by name, gathered
units, the fp32 gradient shard) and, where it fits with the labelled estimates added, a whole step runs on the
timeline (time: the GPU's compute rates, NVLink inside a node, InfiniBand NDR across nodes). The ones that fit
are ranked by step time; the top row is reproduced by the two commands printed below it. With --tp the
tensor-parallel degrees are tried beside every stage (--gpus stays the GPU count; the data-parallel degree is
gpus / tp): TP's collectives on NVLink within a node, the data-parallel ones across nodes. With --cp the
context-parallel degrees likewise (each GPU 1/C of every sequence; the data-parallel degree gpus / (tp · cp)): the
combinations of the two lists are tried as data, those refused (a sequence that does not split over cp, or with
--sp over cp · tp) left out with the reason, and each one's strategies CP cannot run (not flash). With
--pp the pipeline degrees, each with every --pp-schedule (and --virtual-stages) given: the data-parallel degree
gpus / (tp · cp · pp), K the micro-batches a step on each data-parallel rank, the pipeline's step of K micro-batches
run and timed with its bubble (past twice its warm-up, on the line through two shorter steps its repeating schedule
draws), and the micro-batches its schedule refuses (1F1B with K < PP, the interleaved schedules' rounds) or a stage it
refuses beside it left out with the reason. --jobs N measures the strategies on N worker processes (auto: every
core), byte for byte the plan one process makes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from zerosim.cli import choices
from zerosim.cli.jobs_args import add_jobs_argument
from zerosim.cli.parallel_args import add_parallel_arguments, specs_of

HELP = "which stage, checkpointing and micro-batch fit your GPUs, ranked by simulated step time"


def add_arguments(p) -> None:
    _add_job_arguments(p)
    _add_search_arguments(p)
    p.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_jobs_argument(p, "each measuring a strategy of a stage beside a combination of degrees at a time")
    p.add_argument(
        "--figure", default=None, metavar="OUT.png", help="draw memory by kind and step time per configuration"
    )


def _add_job_arguments(p) -> None:
    """The model, the GPUs and their links, the work per step, the formats and the schedule."""
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--model",
        choices=choices.CONFIG_PRESETS,
        help="a shipped config (zerosim/models/hf/configs)",
    )
    which.add_argument("--config", metavar="CONFIG.json", help="a model's Hugging Face config.json, read locally")
    p.add_argument("--gpus", type=int, required=True, help="GPUs: data-parallel ranks N")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=8,
        help="GPUs per node (default 8): more ranks than this put the rings across nodes, over --inter-link",
    )
    p.add_argument("--link", choices=("nvlink4", "nvlink3", "nvlink2", "pcie5", "pcie4"), default=None,
                   help="the link within a node (default the GPU's own: nvlink2 on a V100, nvlink3 on an A100, "
                        "pcie4 on an RTX 3090, nvlink4 otherwise)")
    p.add_argument("--inter-link", choices=("ib_ndr", "ib_hdr", "100gbe"), default="ib_ndr",
                   help="the link between nodes, one NIC per GPU (default ib_ndr: 400 Gb/s)")
    p.add_argument("--gpu", choices=choices.GPUS, required=True, help="the GPU: its capacity and compute rates")
    p.add_argument("--seq-len", type=int, required=True, metavar="L", help="tokens per sequence")
    p.add_argument(
        "--global-batch",
        type=int,
        required=True,
        metavar="SEQUENCES",
        help="sequences per optimizer step over all GPUs (= GPUs × micro-batch × accumulation steps)",
    )
    p.add_argument(
        "--precision",
        choices=("bf16-mixed", "fp16-mixed", "fp32"),
        default=None,
        help="mixed-precision preset (default bf16-mixed; fp16-mixed on a V100, which has no bf16 units)",
    )
    p.add_argument(
        "--optimizer",
        choices=("adam", "adamw", "sgd", "sgd_momentum", "lion", "adan", "muon", "muon_adamw"),
        default="adam",
        help="optimizer (default adam)",
    )
    p.add_argument(
        "--comm",
        choices=("deepspeed", "fsdp", "seed"),
        default="deepspeed",
        help="the schedule: DeepSpeed's defaults (buckets, prefetch; the default), FSDP's, or seed 004's",
    )
    from zerosim.cli.schedule_args import add_overlap_argument

    add_overlap_argument(p)


def _add_search_arguments(p) -> None:
    """What the plan tries: stages, checkpointing strategies, kernels, micro-batches, tensor-parallel degrees."""
    from zerosim.cli.efficiency_args import add_efficiency_arguments, add_kernel_arguments

    p.add_argument("--stages", default="0,1,2,3", help="stages to try, comma-separated (default 0,1,2,3)")
    p.add_argument(
        "--strategies", default=None,
        help=f"checkpointing strategies to try (default all: {', '.join(choices.CHECKPOINTING)})"
    )
    add_kernel_arguments(p)
    add_efficiency_arguments(p)
    p.add_argument(
        "--micro-batches",
        default=None,
        help="micro-batches to try (default every divisor of the sequences each GPU takes per step)",
    )
    p.add_argument(
        "--reserve",
        type=float,
        default=choices.ALLOCATOR_RESERVE,
        metavar="FRACTION",
        help=f"allocator reserve, a fraction of the measured peak (default {choices.ALLOCATOR_RESERVE})",
    )
    from zerosim.cli.offload_args import add_offload_arguments

    add_offload_arguments(p, times=True, several=True)  # offload configurations ranked beside no offload (tp = 1)
    add_parallel_arguments(p, several=True)  # --tp 1,2,4, --cp 1,2,4, --pp 1,2,4: every combination tried


def _ints(text: str, flag: str, allowed=None) -> tuple:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or (allowed is not None and not set(values) <= set(allowed)) or min(values) < 0:
        raise ValueError(
            f"{flag} must list {'values among ' + str(allowed) if allowed else 'positive integers'}, got {text!r}"
        )
    return values


def _strategies(text):
    from zerosim.models.gpt import ALL_STRATEGIES

    if text is None:
        return None
    names = tuple(x.strip() for x in text.split(","))
    bad = [n for n in names if n not in ALL_STRATEGIES]
    if bad:
        raise ValueError(f"--strategies: unknown {bad[0]!r}; choose among {', '.join(ALL_STRATEGIES)}")
    return names


def report(args):
    """The plan: the library's PlanReport (zerosim.analysis.reports), its `to_dict()` what --json prints."""
    from zerosim.analysis.planner import plan
    from zerosim.analysis.reports import plan_report
    from zerosim.cli.strategy_args import flags
    from zerosim.progress import progress

    config, micro, jobs = _check_flags(args)
    from zerosim.analysis.costs import get_gpu
    from zerosim.cli.efficiency_args import kernels_of, link_flags, links_from_args, loss_of, time_model_from_args
    from zerosim.cli.offload_args import host_from_args, offload_flags, offload_hardware, plan_offloads
    from zerosim.cli.schedule_args import overlap_of

    time_model = time_model_from_args(args)
    offloads, host = plan_offloads(args), host_from_args(args, get_gpu(args.gpu))
    on_node = min(args.gpus, args.gpus_per_node)
    # a bar only where someone watches: piped or --json, no tqdm is imported for it (~0.03 s of the command's CPU)
    bar = progress(total=None, desc="planning", enabled=True, unit="config") if not args.json and sys.stderr.isatty() \
        else None
    p = plan(
        config,
        args.gpus,
        args.gpus_per_node,
        args.gpu,
        args.seq_len,
        args.global_batch,
        args.precision,
        args.optimizer,
        args.comm,
        _ints(args.stages, "--stages", choices.STAGES),
        _strategies(args.strategies),
        micro,
        args.reserve,
        progress=None if bar is None else lambda label: bar.update(1),
        time_model=time_model,
        links=(args.link, args.inter_link),  # None within a node: the GPU's own link, the planner's to pick
        kernels=kernels_of(args),
        loss=loss_of(args),
        hardware=lambda hw: offload_hardware(args, links_from_args(args, hw), host, on_node, args.gpu),
        offloads=offloads,
        host=host,
        specs=specs_of(args, args.gpus),  # the parallel degrees as data: every combination of --tp, --cp, --pp
        spelling=flags("--gpus"),  # the nodes checked by the one rule `memory` and `timeline` follow, in flags
        jobs=jobs,
        overlap_comm=overlap_of(args),
    )
    if bar is not None:
        bar.close()
    flag = f"--config {args.config}" if args.config else f"--model {args.model}"
    links = f"--link {p.settings['links'][0]}" + (f" --inter-link {args.inter_link}" if args.gpus > args.gpus_per_node
                                                   else "")
    r = plan_report(p, config, flag, " ".join(x for x in (links, link_flags(args)) if x), args.top)
    off = offload_flags(p.fitting[0].offload, args) if p.fitting else ""  # "" without offload
    return replace(r, reproduce=[c + off for c in r.reproduce]) if off else r


def _check_flags(args) -> tuple:
    """(the model's DecoderConfig, the micro-batches to try or None, the worker processes): every flag checked before
    any twin is built."""
    from zerosim.analysis.costs import get_preset
    from zerosim.cli.jobs_args import jobs_from_args
    from zerosim.cli.work_budget import check_units
    from zerosim.cluster import check_world_size
    from zerosim.models.hf import read_hf_config
    from zerosim.outputs import check_file

    for flag, value in (("--gpus", args.gpus), ("--gpus-per-node", args.gpus_per_node), ("--seq-len", args.seq_len),
                        ("--global-batch", args.global_batch)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    check_world_size(args.gpus, "meta", "--gpus")  # the ranks each configuration's twin hosts in this process
    config = read_hf_config(args.config) if args.config else get_preset(args.model).config
    check_units(config.n_layers + 3, f"{config.name} ({config.n_layers:,} layers)")  # before any twin is built
    if not 0 <= args.reserve < 1:  # (NaN fails this too)
        raise ValueError(f"--reserve is the allocator's reserve, a fraction of the measured peak in [0, 1), got "
                         f"{args.reserve}")
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, got {args.top}")
    if args.figure is not None:  # before the planning, which takes seconds to minutes (zerosim/outputs.py)
        check_file(args.figure, "--figure", (".png",))
    micro = _ints(args.micro_batches, "--micro-batches") if args.micro_batches is not None else None  # "" refused
    if micro is not None and min(micro) < 1:
        raise ValueError(f"--micro-batches must be at least 1, got {args.micro_batches!r}")
    return config, micro, jobs_from_args(args)


def run(args) -> int:
    from zerosim.cli.plan_format import format_plan

    report_ = report(args)
    r = report_.to_dict()
    print(json.dumps(r, indent=1, default=str) if args.json else format_plan(r))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        from zerosim.cli.timeline_cmd import save_figure
        from zerosim.viz import plan_figure

        save_figure(plan_figure(report_.plan, top=args.top), args.figure)
        if not args.json:
            print(f"\nfigure: {args.figure}")
    return 0

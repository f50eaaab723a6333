r"""Time of one ZeRO step at real scale: each rank's compute and communication streams, overlap, prefetch.

    zerosim timeline --model gpt3-175b --ranks 1024 --stage 3 --link ib_ndr
    zerosim timeline --model llama-7b --ranks 64 --comm fsdp --forward-prefetch --figure step.png --trace step.json
    zerosim timeline --model gpt3-175b --sweep --tokens 20480 --figure sweep.png   # seed 003's claim
    zerosim timeline --model llama-3-70b --ranks 64 --gpus-per-node 8 --gpu h100-80gb \
        --seq-len 4096 --batch 2 --checkpoint block --accumulation-steps 8    # a planned step, activations and all
    zerosim timeline --model gpt3-175b --ranks 4096 --gpus-per-node 8 --strategy hsdp --shard-group 64
    zerosim timeline --model gpt3-175b --sweep --gpus-per-node 8 --strategy full_shard,hsdp,mics,hpz --shard-group 64
    zerosim timeline --model llama-7b --ranks 64 --gpus-per-node 8 --seq-len 2048 --batch 1 \
        --zero-quantized-gradients    # DeepSpeed ZeRO++ qgZ: int4 gradients through two all-to-alls
    zerosim timeline --model llama-3-8b --ranks 8 --gpus-per-node 8 --seq-len 8192 --batch 1 --cp 4 \
        --checkpoint block-flash --comm fsdp    # context parallelism: the K/V ring beside each hop's attention
    zerosim timeline --model llama-3-8b --ranks 64 --gpus-per-node 8 --tp 2 --pp 4 --pp-schedule interleaved-1f1b \
        --seq-len 4096 --batch 1 --checkpoint block --accumulation-steps 8 --comm fsdp   # a pipeline and its bubble

The engine runs one step on the meta backend (data-less arrays, one representative rank for all N), with
the bucketing and prefetch knobs DeepSpeed and FSDP expose; every recorded event is then placed in time:
computes by the roofline of the device, collectives by the ring's α-β cost (zerosim.analysis.timeline). Numbers
are rank 0's, which stands for every rank (they all do the same work). Open --trace in ui.perfetto.dev.

With --gpus-per-node G the ranks fill nodes of G: a collective whose rings stay inside nodes runs over --link
(NVLink 4), one whose rings leave a node over --inter-link (InfiniBand NDR), each tier its own stream; with
--strategy a strategy for many nodes (HSDP, MiCS, hpZ, ...: parallel/data/_plan.py) runs over its groups.

Without --seq-len the model is its layers' parameter counts and --tokens sets the work (6Ψ FLOPs per token);
with --seq-len it is zerosim's GPT or Llama at the model's shape: its attention, its checkpointing's recompute
and its activations are in the step. --gpu judges rank 0's peak (a pipeline's highest) against the GPU (and picks
its compute rates); the sweep marks every configuration that would not fit instead of plotting it as if it ran.

With --cp C (--cp-style, --cp-split) each rank runs L / C tokens of every sequence: the K/V's sends on the CP group's
own stream beside each hop's block of attention (or their all-gathers), each hop charged for its rank's block; rank 0
then computes the CP position with the most attention (the last, under a contiguous causal split), which every send
waits for.

With --pp P (--pp-schedule, --virtual-stages) the pipeline's engine runs the whole step of --accumulation-steps M
micro-batches on each data-parallel rank (default P), one representative GPU a pipeline stage, each stage's calls
among its own ranks and the activations' sends on the link between its nodes: the bubble appears on the timeline by
itself. Rank 0 is the first stage's; each pipeline rank's compute and idle share stand beside the bubble's closed form.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from zerosim.cli.efficiency_args import add_efficiency_arguments, links_from_args, time_model_from_args
from zerosim.cli.given import given
from zerosim.cli.offload_args import (
    add_offload_arguments,
    host_from_args,
    offload_hardware,
    offload_request,
    offload_steps,
    offload_timeline,
)
from zerosim.cli.model_args import (
    add_activation_arguments,
    add_gpu_arguments,
    add_model_arguments,
    setup,
)
from zerosim.cli.schedule_args import add_schedule_arguments
from zerosim.cli.strategy_args import (
    add_mesh_arguments,
    check_nodes,
    each_strategy,
    mesh_of,
    skipped_lines,
    strategies_of,
    strategy_recipe,
)
from zerosim.cli.parallel_args import add_parallel_arguments, check_pipeline, refuse_beside, spec_of
from zerosim.cli.wire_args import add_wire_arguments, check_qgz_model, qgz_recipe, wire_from_args
from zerosim.cli.work_budget import check_passes, check_refresh, check_sweep
from zerosim.outputs import check_file, write_atomic

HELP = "time of a step at real scale: compute vs communication, overlap, bucketing, prefetch (meta backend)"
SWEEP_RANKS = (64, 128, 256, 512, 1024, 2048, 4096)


def add_arguments(p) -> None:
    from zerosim.cli.choices import DEVICES, LINKS, STAGES

    add_model_arguments(p, default_ranks=64)
    p.add_argument("--stage", type=int, choices=STAGES, default=None, help="ZeRO stage (default 3)")
    add_wire_arguments(p)
    p.add_argument(
        "--device", choices=DEVICES, default=None, help="every rank's accelerator (default: --gpu's, or h100)"
    )
    p.add_argument(
        "--link",
        choices=LINKS,
        default=None,
        help="the ring's link, within a node with --gpus-per-node (default the GPU's own: nvlink2 on a V100, nvlink3 "
             "on an A100, pcie4 on an RTX 3090, nvlink4 otherwise)",
    )
    p.add_argument(
        "--inter-link",
        choices=LINKS,
        default=None,
        help="with --gpus-per-node: the link between nodes (default ib_ndr)",
    )
    add_mesh_arguments(p, several=True)
    add_parallel_arguments(p, async_tp=True)
    p.add_argument("--tokens", type=int, default=None, help="tokens per rank per step without --seq-len (default 2048)")
    p.add_argument("--accumulation-steps", type=int, default=None, metavar="K",
                   help="micro-steps per step (default 1); with --pp the micro-batches per step per data-parallel rank "
                        "(Megatron's num_microbatches; default P)")
    add_activation_arguments(p)
    add_gpu_arguments(p)
    add_schedule_arguments(p)
    add_efficiency_arguments(p)
    add_offload_arguments(p, dpu=True, times=True)
    p.add_argument(
        "--sweep",
        action="store_true",
        help=f"step time and exposed communication vs N ({', '.join(map(str, SWEEP_RANKS))}) "
        "for stages 1-3 on nvlink4 and ib_ndr",
    )
    p.add_argument("--sweep-ranks", default=None, help="with --sweep: comma-separated N (default the list above)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.add_argument("--trace", default=None, metavar="OUT.json", help="write a Chrome / Perfetto trace (ranks 0-3)")
    p.add_argument("--figure", default=None, metavar="OUT.png", help="write the Gantt chart (or the sweep's figure)")


def hardware_for(args, device: str, compute: str, ranks: int):
    """The Hardware of one run: --link (default the device's NVLink, Device.link) and, when --gpus-per-node places
    the ranks on more than one node, --inter-link (default ib_ndr) between them, each call costed on the tier its
    rings use."""
    from zerosim.analysis.timeline import Hardware

    g = check_nodes(ranks, args.gpus_per_node)
    if args.inter_link is not None and (g is None or g == ranks):
        raise ValueError("--inter-link is the link between nodes: add --gpus-per-node G with more ranks than G")
    inter = (args.inter_link or "ib_ndr") if g is not None and g < ranks else None
    return Hardware(device, args.link, compute, inter_link=inter)  # no --link: the device's own NVLink


def device_for(args, gpu) -> str:
    """--device, or the --gpu's compute preset, or h100."""
    if args.device is not None:
        if gpu is not None and gpu.device != args.device:
            raise ValueError(f"--device {args.device} and --gpu {gpu.key} name different accelerators: drop one")
        return args.device
    return gpu.device if gpu is not None else "h100"


def _check(args) -> None:
    from zerosim.models.hf import MAX_DIM  # here, not at import: a command's --help loads no NumPy

    if args.tokens is not None and (type(args.tokens) is not int or args.tokens < 1):
        raise ValueError(f"--tokens must be a positive integer, got {args.tokens!r}")
    if args.tokens is not None and args.tokens > MAX_DIM:  # a step's tokens are its GEMMs' rows: a 32-bit dimension
        raise ValueError(f"--tokens {args.tokens:,} is more than {MAX_DIM:,}, the rows a GEMM takes (cuBLAS's 32-bit "
                         "dimensions): give the tokens one rank computes in a step")
    if args.sweep_ranks is not None and not args.sweep:  # the single step runs on --ranks: nothing would read it
        raise ValueError("--sweep-ranks lists the rank counts of --sweep: add --sweep, or give one count as --ranks")
    if args.tokens is not None and args.seq_len is not None:
        raise ValueError(
            "--tokens sets the work of a model without shapes; with --seq-len the work is "
            "--batch × --seq-len × --accumulation-steps tokens per rank: drop --tokens"
        )
    if args.tokens is None:  # the library's default (with --seq-len the micro-batch's tokens are the work instead)
        from zerosim.analysis.costs import TOKENS

        args.tokens = TOKENS
    if args.accumulation_steps is not None and args.accumulation_steps < 1:
        raise ValueError(f"--accumulation-steps must be at least 1, got {args.accumulation_steps}")
    for path, flag, ext in ((args.trace, "--trace", ".json"), (args.figure, "--figure", ".png")):
        if path is not None:  # before the run, which takes seconds to minutes (zerosim/outputs.py)
            check_file(path, flag, (ext,))
    if args.sweep and args.trace:
        raise ValueError("--trace writes one step's trace; run without --sweep for it")
    if args.sweep and args.seq_len is not None:
        raise ValueError("--sweep times the parameter-count model over many N; drop --seq-len (or run single steps)")
    names = strategies_of(args, several=True)
    if names and args.stage is not None:
        raise ValueError("--stage and --strategy both say what is sharded: name one")
    if names and args.ds_config is not None:
        raise ValueError("--ds-config sets a ZeRO stage; --strategy names a strategy for many nodes: give one")
    if names and args.sweep and args.figure:
        raise ValueError("--sweep --strategy prints its table; --figure draws a single step (one --strategy) or the "
                         "stages' sweep")
    if len(names) > 1 and not args.sweep:
        raise ValueError("several strategies are compared by --sweep; a single step takes one --strategy")
    spec = spec_of(args, args.ranks)
    if spec.tp > 1 and (args.seq_len is None or args.sweep):
        raise ValueError("--tp splits a transformer's heads, columns and vocabulary: time one step of its shape with "
                         "--seq-len (and --batch), without --sweep")
    if spec.cp > 1 and (args.seq_len is None or args.sweep):
        raise ValueError("--cp cuts a transformer's sequences: time one step of its shape with --seq-len (and "
                         "--batch), without --sweep")
    if spec.pp > 1 and args.sweep:
        raise ValueError("--pp times one step of a pipeline; --sweep times the data-parallel stages over many N: "
                         "drop one")
    if args.sweep:
        _refuse_unread_by_sweep(args, names)
    refuse_beside(spec, args.ranks, names, wire_from_args(args))


# what a sweep's cells do not read: each is one meta step per N on its own links (the stages' sweep compares NVLink 4
# with InfiniBand NDR, analysis/reports/_sweeps.py LINKS; the strategies' runs the GPU's NVLink within a node and
# InfiniBand NDR across), Adam's states, the recipe's own wires, one micro-batch, on device
SWEEP_FIXES = (
    (("link", "inter_link", "link_bandwidth", "link_alpha", "inter_link_bandwidth", "inter_link_alpha",
      "call_latency"), "its links are its own (NVLink within a node, InfiniBand NDR across)"),
    (("optimizer",), "it keeps Adam's states"),
    (("zero_quantized_weights", "weight_groups", "zero_quantized_gradients", "fp8_all_gather"),
     "its collectives carry the recipe's own formats"),
    (("accumulation_steps",), "each cell is one micro-batch"),
    (("offload_optimizer", "offload_params", "offload_policy", "dpu"), "nothing is offloaded"),
)


def _refuse_unread_by_sweep(args, strategies) -> None:
    """Refuse the flags `--sweep` would run without reading (they changed nothing: found by a walk that adds each flag
    to a sweep and compares the output), naming each and why."""
    why = [(f"--{a.replace('_', '-')}", reason) for attrs, reason in SWEEP_FIXES for a in attrs
           if given(getattr(args, a, None))]
    if not strategies:  # the stages' sweep runs every stage on one tier of link
        why += [(flag, reason) for flag, v, reason in (
            ("--stage", args.stage, "it runs stages 1, 2 and 3 itself"),
            ("--gpus-per-node", args.gpus_per_node, "every N runs on one link; nodes are --strategy's sweep"))
            if v is not None]
    if why:
        said = "; ".join(f"{flag}: {reason}" for flag, reason in why)
        raise ValueError(f"--sweep does not read {', '.join(f for f, _ in why)} ({said}): drop "
                         f"{'it' if len(why) == 1 else 'them'}, or time one step without --sweep")


def save_figure(fig, path: str, flag: str = "--figure") -> None:
    """The figure as a PNG at `path`, whole or not at all (zerosim/outputs.py)."""
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight"), flag)


def sweep_ranks(args) -> tuple:
    if args.sweep_ranks is None:
        return SWEEP_RANKS
    try:
        ranks = tuple(int(x) for x in args.sweep_ranks.split(","))
    except ValueError:
        raise ValueError(f"--sweep-ranks must be comma-separated integers, got {args.sweep_ranks!r}") from None
    if not ranks or min(ranks) < 1:
        raise ValueError(f"--sweep-ranks must list rank counts >= 1, got {args.sweep_ranks!r}")
    return ranks


def run(args) -> int:
    _check(args)
    s = setup(args)
    _check_work(args, s)
    return (_run_sweep if args.sweep else _run_one)(args, s)


def _check_work(args, s) -> None:
    """Refuse, before any step, work that would run for many minutes (cli/work_budget.py)."""
    units = len(s.model.layers)
    if args.sweep:
        ranks, names = sweep_ranks(args), strategies_of(args, several=True)
        runs = len(names) if names else 3  # a meta step per strategy, or per stage 1-3 (the links share it)
        check_sweep(ranks, runs, "--sweep")
        check_passes(units, 1, runs * len(ranks), "--sweep", "give fewer --sweep-ranks")
        check_refresh(s.model.num_params, s.comm.allgather_bucket_size, "--sweep with --allgather-bucket-size",
                      runs * len(ranks))
    else:
        check_passes(units, s.accumulation, 1, f"a step of K = {s.accumulation:,} micro-steps",
                     "past K = 2 a step's time is linear in K (zerosim plan times K = 1 and 2 and extends the line, "
                     "which a full simulation stays on to 1e-12): give a smaller --accumulation-steps")

# -- one step ------------------------------------------------------------------------------------------
def one_report(args, s):
    """One simulated step: the library's StepReport (zerosim.analysis.reports), its `to_dict()` what --json prints."""
    from zerosim.analysis.reports import timeline_step
    from zerosim.precision import get_precision

    names = strategies_of(args, several=False)
    stage = names[0] if names else args.stage if args.stage is not None else (s.ds.stage if s.ds is not None else 3)
    hw = links_from_args(args, hardware_for(args, device_for(args, s.gpu), get_precision(s.precision).compute,
                                             args.ranks))
    spec = spec_of(args, args.ranks)
    mesh = mesh_of(args, stage, tp=spec.tp, cp=spec.cp, pp=spec.pp)  # the stage or strategy on --ranks,
    check_qgz_model(args, s.model)  # --gpus-per-node, its group, --tp, --cp and --pp: checked
    if spec.cp > 1:
        from zerosim.parallel import FLAGS

        spec.model_check(s.micro[1], s.model.attention, s.model.checkpoint, names=FLAGS,
                         kernels=getattr(s.model, "kernels", None))
    recipe = strategy_recipe(names[0]) if names else qgz_recipe(args)
    check_pipeline(spec, s, (stage,), recipe)  # --pp: its schedule's table for K = M, what is refused beside it
    refuse_beside(spec, args.ranks, (), None, s.clip_grad)  # a DeepSpeed config's clipping beside --tp or --cp
    req = offload_request(args, s.ds)  # the optimizer (and params) on the host or NVMe (cli/offload_args.py)
    if req and (spec.tp > 1 or spec.sp):
        raise ValueError("offload beside tensor parallelism is not modelled: drop --tp/--sp or the offload flags")
    if req and spec.cp > 1:
        raise ValueError("offload beside context parallelism is not modelled: drop --cp or the offload flags")
    if req and spec.pp > 1:
        raise ValueError("offload beside pipeline parallelism is not modelled: drop --pp or the offload flags")
    offload, notes = req.offload(req.configs[0], stage) if req else (None, ())
    if req:
        host = host_from_args(args, s.gpu)
        hw = offload_hardware(args, hw, host, min(args.ranks, mesh.gpus_per_node or host.gpus), s.gpu)
    report = timeline_step(s, mesh, hw, args.tokens, wire_from_args(args), time_model_from_args(args),
                           recipe, parallelisms=() if offload is None else (offload,), spec=spec,
                           steps=offload_steps(req))
    if offload is None:
        return report
    r = report.to_dict()  # read for the last step only, and given the offload block (the host's streams)
    offload_timeline(r, report.timeline, report.engine, offload, notes, host)
    return replace(report, **{k: r[k] for k in ("compute_s", "comm_s", "exposed_comm_s", "overlapped_s",
                                                "busy_fraction", "by_purpose", "offload")})


def _run_one(args, s) -> int:
    from zerosim.cli.timeline_format import format_one

    report = one_report(args, s)
    r, result = report.to_dict(), report.timeline
    # beside a pipeline, each stage's representative GPU (its bubble shows stage by stage); else rank 0 (the trace: 0-3)
    stages = [x["gpu"] for x in r["pipeline_parallel"]["ranks"]] if r.get("pipeline_parallel") else None
    written = []
    if args.trace:
        from zerosim.analysis.timeline import write_chrome_trace

        os.makedirs(os.path.dirname(os.path.abspath(args.trace)), exist_ok=True)  # checked writable before the run
        write_chrome_trace(result, args.trace, ranks=stages or range(min(4, result.world_size)))  # atomic
        written.append(f"trace: {args.trace} (open https://ui.perfetto.dev and drag the file in, or chrome://tracing)")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")  # this command writes files; the figure functions themselves never pick a backend
        from zerosim.viz import offload_step_figure, timeline_figure

        name = (f"{r['model']}, N = {r['ranks']:,}, " + (f"ZeRO-{r['stage']}" if r["strategy"] is None else
                                                          r["strategy"]) + f", {r['link']}")
        if "offload" in r:  # one step on device / PCIe / CPU / NVMe rows
            fig = offload_step_figure({f"{r['offload']['placement']}" + (" with DPU" if r["offload"]["dpu"] else ""):
                                       result}, title=name)
        else:
            fig = timeline_figure(result, ranks=stages or [0], title=name).figure
        save_figure(fig, args.figure)
        written.append(f"figure: {args.figure}")
    print(
        json.dumps(r, indent=1)
        if args.json
        else "\n".join([format_one(r), ""] + written if written else [format_one(r)])
    )
    return 0


# -- the sweeps ----------------------------------------------------------------------------------------
def _run_strategy_sweep(args, s, names) -> int:
    from zerosim.analysis.reports import strategy_sweep_report
    from zerosim.cli.timeline_format import format_strategy_sweep
    from zerosim.progress import progress

    device, g, ranks = device_for(args, s.gpu), args.gpus_per_node, sweep_ranks(args)
    if g is None:
        raise ValueError("--sweep --strategy places the ranks on nodes: give --gpus-per-node G (e.g. 8)")
    for n in ranks:  # every N of the sweep fills nodes of G, by the one rule
        check_nodes(n, g, "--sweep-ranks")
    bar = progress(total=len(names) * len(ranks), desc="strategy sweep", enabled=None if not args.json else False)
    parts, skipped = each_strategy(args, names, lambda name: strategy_sweep_report(  # all: less what does not apply
        s, ranks, (name,), g, device, args.shard_group, args.hpz_group, args.tokens, time_model_from_args(args),
        lambda done, total: bar.update(1)))
    bar.close()
    report = replace(parts[0], rows=[row for p in parts for row in p.rows],
                     exposed_over_compute={k: v for p in parts for k, v in p.exposed_over_compute.items()})
    r = {**report.to_dict(), **({"skipped": skipped} if skipped else {})}
    print(json.dumps(r, indent=1) if args.json else "\n".join([format_strategy_sweep(r), *(
        ["", *skipped_lines(skipped)] if skipped else [])]))
    return 0


def _run_sweep(args, s) -> int:
    from zerosim.analysis.reports import SWEEP_LINKS, SWEEP_STAGES, stages_sweep
    from zerosim.cli.timeline_format import format_sweep
    from zerosim.progress import progress

    names = strategies_of(args, several=True)
    if names:
        return _run_strategy_sweep(args, s, names)
    ranks = sweep_ranks(args)
    bar = progress(total=len(ranks) * len(SWEEP_LINKS) * len(SWEEP_STAGES), desc="timeline sweep",
                   enabled=None if not args.json else False)
    report = stages_sweep(s, ranks, device_for(args, s.gpu), args.tokens, time_model_from_args(args),
                          lambda done, total: bar.update(1))
    bar.close()
    r = report.to_dict()
    print(json.dumps(r, indent=1) if args.json else format_sweep(r))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        from zerosim.viz import sweep_figure

        fig = sweep_figure(
            report.sweep_rows,
            title=f"{r['model']}, {r['tokens_per_rank']:,} tokens per rank, {r['device_name']}; {r['comm']}",
            fits=report.fits,
            gpu=r["gpu"],
        )
        save_figure(fig, args.figure)
        if not args.json:
            print(f"\nfigure: {args.figure}")
    return 0

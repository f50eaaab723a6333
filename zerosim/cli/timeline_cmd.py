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

The engine runs one step on the meta backend (data-less arrays, one representative rank for all N), with
the bucketing and prefetch knobs DeepSpeed and FSDP expose; every recorded event is then placed in time:
computes by the roofline of the device, collectives by the ring's α-β cost (zerosim.analysis.timeline). Numbers
are rank 0's, which stands for every rank (they all do the same work). Open --trace in ui.perfetto.dev.

With --gpus-per-node G the ranks fill nodes of G: a collective whose rings stay inside nodes runs over --link
(NVLink 4), one whose rings leave a node over --inter-link (InfiniBand NDR), each tier its own stream; with
--strategy a strategy for many nodes (HSDP, MiCS, hpZ, ...: parallel/data/_plan.py) runs over its groups.

Without --seq-len the model is its layers' parameter counts and --tokens sets the work (6Ψ FLOPs per token);
with --seq-len it is zerosim's GPT or Llama at the model's shape: its attention, its checkpointing's recompute
and its activations are in the step. --gpu judges rank 0's peak against the GPU (and picks its compute rates);
the sweep marks every configuration that would not fit instead of plotting it as if it ran.
"""

from __future__ import annotations

import json
import os

from zerosim.analysis.costs import GB
from zerosim.cli.efficiency_args import add_efficiency_arguments, links_from_args, time_model_from_args
from zerosim.cli.fit_lines import judge, verdict_word
from zerosim.cli.offload_args import (
    add_offload_arguments,
    host_from_args,
    offload_hardware,
    offload_request,
    offload_steps,
    offload_timeline,
    offload_timeline_lines,
)
from zerosim.cli.model_args import (
    add_activation_arguments,
    add_gpu_arguments,
    add_model_arguments,
    add_schedule_arguments,
    setup,
)
from zerosim.cli.strategy_args import (
    add_mesh_arguments,
    check_nodes,
    group_size,
    strategies_of,
    strategy_precision,
)
from zerosim.cli.tensor_args import add_async_argument, add_tensor_arguments, tensor_of
from zerosim.cli.wire_args import add_wire_arguments, check_qgz_model, qgz_precision, wire_from_args
from zerosim.cli.work_budget import check_passes, check_sweep
from zerosim.outputs import check_file, write_atomic

HELP = "time of a step at real scale: compute vs communication, overlap, bucketing, prefetch (meta backend)"
SWEEP_RANKS = (64, 128, 256, 512, 1024, 2048, 4096)


def add_arguments(p) -> None:
    from zerosim.analysis.costs import LINKS
    from zerosim.analysis.timeline import DEVICES

    add_model_arguments(p, default_ranks=64)
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=None, help="ZeRO stage (default 3)")
    add_wire_arguments(p)
    p.add_argument(
        "--device", choices=sorted(DEVICES), default=None, help="every rank's accelerator (default: --gpu's, or h100)"
    )
    p.add_argument(
        "--link",
        choices=sorted(LINKS),
        default=None,
        help="the ring's link, within a node with --gpus-per-node (default nvlink4)",
    )
    p.add_argument(
        "--inter-link",
        choices=sorted(LINKS),
        default=None,
        help="with --gpus-per-node: the link between nodes (default ib_ndr)",
    )
    add_mesh_arguments(p, several=True)
    add_tensor_arguments(p)
    add_async_argument(p)
    p.add_argument("--tokens", type=int, default=None, help="tokens per rank per step without --seq-len (default 2048)")
    p.add_argument("--accumulation-steps", type=int, default=None, metavar="K", help="micro-steps per step (default 1)")
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


def describe_comm(comm) -> str:
    from zerosim.parallel.data import CommSchedule

    if comm == CommSchedule():
        return "seed 004's: one collective per unit, gather right before a use, no prefetch"
    parts = [
        f"{f}={getattr(comm, f):,}"
        if isinstance(getattr(comm, f), int) and not isinstance(getattr(comm, f), bool)
        else f"{f}={getattr(comm, f)}"
        for f in comm.__dataclass_fields__
        if getattr(comm, f) != getattr(CommSchedule(), f)
    ]
    return ", ".join(parts)


def hardware_for(args, device: str, compute: str, ranks: int):
    """The Hardware of one run: --link (default nvlink4) and, when --gpus-per-node places the ranks on more than one
    node, --inter-link (default ib_ndr) between them, each call costed on the tier its rings use."""
    from zerosim.analysis.timeline import Hardware

    g = check_nodes(ranks, args.gpus_per_node)
    if args.inter_link is not None and (g is None or g == ranks):
        raise ValueError("--inter-link is the link between nodes: add --gpus-per-node G with more ranks than G")
    inter = (args.inter_link or "ib_ndr") if g is not None and g < ranks else None
    return Hardware(device, args.link or "nvlink4", compute, inter_link=inter)


def device_for(args, gpu) -> str:
    """--device, or the --gpu's compute preset, or h100."""
    if args.device is not None:
        if gpu is not None and gpu.device != args.device:
            raise ValueError(f"--device {args.device} and --gpu {gpu.key} name different accelerators: drop one")
        return args.device
    return gpu.device if gpu is not None else "h100"


def _check(args) -> None:
    if args.tokens is not None and (type(args.tokens) is not int or args.tokens < 1):
        raise ValueError(f"--tokens must be a positive integer, got {args.tokens!r}")
    if args.tokens is not None and args.seq_len is not None:
        raise ValueError(
            "--tokens sets the work of a model without shapes; with --seq-len the work is "
            "--batch × --seq-len × --accumulation-steps tokens per rank: drop --tokens"
        )
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
    tp, _ = tensor_of(args, args.ranks)
    if tp > 1 and (args.seq_len is None or args.sweep):
        raise ValueError("--tp splits a transformer's heads, columns and vocabulary: time one step of its shape with "
                         "--seq-len (and --batch), without --sweep")


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
    else:
        check_passes(units, s.accumulation, 1, f"a step of K = {s.accumulation:,} micro-steps",
                     "past K = 2 a step's time is linear in K (zerosim plan times K = 1 and 2 and extends the line, "
                     "which a full simulation stays on to 1e-12): give a smaller --accumulation-steps")


# -- one step ------------------------------------------------------------------------------------------
def one_report(args, s) -> tuple:
    """One simulated step, as data (what --json prints), and the Timeline."""
    from zerosim.analysis.planner import meta_step
    from zerosim.precision import get_precision

    model, comm = s.model, s.comm
    names = strategies_of(args, several=False)
    stage = names[0] if names else args.stage if args.stage is not None else (s.ds.stage if s.ds is not None else 3)
    hw = links_from_args(args, hardware_for(args, device_for(args, s.gpu), get_precision(s.precision).compute,
                                             args.ranks))
    time_model = time_model_from_args(args)
    gpus = check_nodes(args.ranks, args.gpus_per_node)
    K = s.accumulation
    tp, sp = tensor_of(args, args.ranks)
    check_qgz_model(args, model)
    req = offload_request(args, s.ds)  # the optimizer (and params) on the host or NVMe (cli/offload_args.py)
    if req and (tp > 1 or sp):
        raise ValueError("offload beside tensor parallelism is not modelled: drop --tp/--sp or the offload flags")
    offload, notes = req.offload(req.configs[0], stage) if req else (None, ())
    if req:
        host = host_from_args(args, s.gpu)
        hw = offload_hardware(args, hw, host, min(args.ranks, gpus or host.gpus))
    per_micro = s.micro[0] * s.micro[1] if s.micro else (args.tokens or 2048)
    result, engine = meta_step(
        model,
        args.ranks,
        stage,
        hw,
        comm,
        strategy_precision(names[0], s.precision) if names else qgz_precision(args, s.precision),
        args.tokens or 2048,
        s.optimizer,
        micro_batch=s.micro,
        accumulation_steps=K,
        clip_grad=s.clip_grad,
        wire=wire_from_args(args),
        gpus_per_node=gpus,
        # beside TP a strategy's default group is a node's data-parallel ranks (_groups.py picks G / tp)
        shard_group=group_size(stage, args, gpus) if names and not (
            tp > 1 and args.shard_group is None and args.hpz_group is None) else None,
        time_model=time_model,
        tp=tp,
        sp=sp,
        async_tp=args.async_tp,
        **({} if offload is None else {"parallelisms": (offload,), "steps": offload_steps(req)}),
    )
    calls = {}
    for iv in result.track(0, "comm"):
        seconds, count = calls.get(iv.category, (0.0, 0))
        calls[iv.category] = (seconds + iv.end - iv.start, count + 1)
    step, compute, exposed = result.step_time, float(result.compute_busy[0]), float(result.exposed_comm[0])
    ledger = engine.cluster.ranks[0].ledger
    peak = ledger.peak()
    tiers = tier_summary(result, engine.cluster)
    r = {
        "strategy": names[0] if names else None,
        "shard_group": engine.groups.shard.size if names and engine.plan.sharded_over != "world" else
        (engine.groups.secondary.size if engine.groups.secondary is not None else None),
        "gpus_per_node": gpus,
        "inter_link": None if hw.inter_link is None else hw.inter_link.name,
        "tiers": tiers,
        "model": model.name,
        "params": model.num_params,
        "units": len(engine.model.layers),  # beside TP: one TP rank's units
        "ranks": args.ranks,
        **({} if tp == 1 else {"tensor_parallel": {"tp": tp, "sp": sp, "dp": args.ranks // tp,
                                                   "local_params": engine.model.num_params, "async": args.async_tp}}),
        "stage": stage,
        "precision": s.precision_name,
        "optimizer": s.optimizer,
        "device": hw.device.name,
        "link": hw.link.name,
        "link_note": hw.link.note,
        "micro_batch": None if s.micro is None else {"batch": s.micro[0], "seq_len": s.micro[1]},
        "checkpoint": args.checkpoint or "none" if s.micro else None,
        "accumulation_steps": K,
        "tokens_per_rank": per_micro * K,
        "comm": describe_comm(comm),
        "overlap": comm.overlap_comm,
        "time_model": time_model.describe(),
        "link_model": link_model(hw),
        "step_s": step,
        "tokens_per_s_per_gpu": per_micro * K / step if step else None,
        "compute_s": compute,
        "comm_s": float(result.comm_busy[0]),
        "exposed_comm_s": exposed,
        "overlapped_s": float(result.comm_busy[0]) - exposed,
        "busy_fraction": {
            "compute": compute / step if step else 0.0,
            "comm": float(result.comm_busy[0]) / step if step else 0.0,
        },
        "by_purpose": {k: {"seconds": v[0], "calls": v[1]} for k, v in sorted(calls.items())},
        "params_peak_gb": ledger.peak("params") / 1e9,
        "peak_gb": peak / 1e9,
        "peak": peak,
        "peak_by_kind": {k: v for k, v in ledger.peak_by_kind().items() if v},
        "fit": None
        if s.gpu is None
        else judge(peak, 3 if names else stage, args.ranks, s.gpu, s.reserve, s.ds.buckets if s.ds else None),
    }
    if offload is not None:  # the last step's numbers, and the host's streams
        offload_timeline(r, result, engine, offload, notes, host)
    return r, result


def link_model(hw) -> str:
    """One line: each link's bandwidth, α per ring step and latency per call (what the ring times assume)."""
    def one(link):
        return (f"{link.name} {link.bandwidth / 1e9:g} GB/s per direction, α {link.alpha * 1e6:g} µs a step, "
                f"{link.base * 1e6:g} µs a call")
    return one(hw.link) + ("" if hw.inter_link is None else "; between nodes " + one(hw.inter_link) +
                           " (NCCL's ring: nodes − 1 steps at its α)")


def tier_summary(result, cluster) -> dict:
    """{tier: {"link", "calls", "seconds" (its calls' time, summed), "bytes_per_rank" (sent, the ranks' average)}}."""
    from zerosim.cluster import TIERS

    hw, sent = result.hardware, cluster.trace.bytes_by_tier()
    out = {t: {"link": hw.link_of(t).name, "calls": 0, "seconds": 0.0, "bytes_per_rank": sent[t] / cluster.world_size}
           for t in TIERS}
    for iv in result.track(0, "comm"):
        row = out[iv.event.tier if hw.inter_link is not None else TIERS[0]]
        row["calls"] += 1
        row["seconds"] += iv.end - iv.start
    return out


def format_one(r: dict) -> str:
    pct = lambda x: f"{100 * x / r['step_s']:.0f} %" if r["step_s"] else "-"  # noqa: E731
    unit = lambda s: f"{s * 1e3:10.2f} ms" if s < 1 else f"{s:10.3f} s "  # noqa: E731
    mb = r["micro_batch"]
    work = (
        f"{r['tokens_per_rank']:,} tokens per rank"
        if mb is None
        else f"{mb['batch']} × {mb['seq_len']:,} tokens × {r['accumulation_steps']} micro-steps per rank, "
        f"checkpoint {r['checkpoint']!r}"
    )
    what = f"ZeRO-{r['stage']}" if r["strategy"] is None else f"{r['strategy']}" + (
        f" (group of {r['shard_group']})" if r["shard_group"] else "")
    nodes = "" if r["gpus_per_node"] is None else f" on nodes of {r['gpus_per_node']}"
    tp = r.get("tensor_parallel")
    if tp is not None:
        nodes += f" = tp {tp['tp']} x dp {tp['dp']}" + (" (sequence parallel)" if tp["sp"] else "") + (
            ", async TP (no compute waits for TP's collectives: a bound)" if tp["async"] else "")
    links = (f"  {r['device']} over {r['link']} ({r['link_note']})" if r["inter_link"] is None else
             f"  {r['device']}; within a node {r['link']}, across nodes {r['inter_link']}")
    lines = [
        f"zerosim timeline: {r['model']} (Ψ = {r['params']:,}, {r['units']} units), N = {r['ranks']:,} ranks{nodes}, "
        f"{what}, {r['precision']}",
        f"  {work}",
        links,
        f"  schedule: {r['comm']}" + ("" if r["overlap"] else "; no overlap: one stream per rank"),
        "",
        f"step time        {unit(r['step_s'])}",
        f"  compute        {unit(r['compute_s'])}  ({pct(r['compute_s'])} of the step: rank 0's compute stream)",
        f"  communication  {unit(r['comm_s'])}  (the communication stream, the same on every rank)",
        f"    hidden       {unit(r['overlapped_s'])}  (ran while compute ran)",
        f"    exposed      {unit(r['exposed_comm_s'])}  ({pct(r['exposed_comm_s'])} of the step: "
        "compute waited for it)",
        "",
        "communication by purpose:",
    ]
    for purpose, v in r["by_purpose"].items():
        lines.append(f"  {purpose:15s} {v['calls']:6,d} calls  {unit(v['seconds'])}")
    if r["inter_link"] is not None:
        lines += ["", "communication by link tier (each tier its own stream; bytes: one rank's, the ranks' average):"]
        for tier, v in r["tiers"].items():
            lines.append(f"  {tier:11s} {v['link']:15s} {v['calls']:6,d} calls  {unit(v['seconds'])}  "
                         f"{v['bytes_per_rank'] / GB:10.2f} GB sent")
    lines += offload_timeline_lines(r)
    lines += [
        "",
        f"memory: rank 0's peak {r['peak_gb']:.2f} GB, of which params {r['params_peak_gb']:.2f} GB "
        "(prefetch raises it: gathered units wait in memory)",
    ]
    if r["fit"] is not None:
        f = r["fit"]
        lines.append(
            f"  on one {f['gpu']} ({f['capacity'] / GB:.2f} GB): {f['measured'] / GB:.2f} GB measured + "
            f"{f['overheads_total'] / GB:.2f} GB estimated (CUDA, NCCL, allocator) = {f['total'] / GB:.2f} GB: "
            f"{verdict_word(f)}"
        )
    lines += [
        "",
        f"throughput: {r['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU" if r["tokens_per_s_per_gpu"] else "",
        f"time from: {r['time_model']}",
        f"links: {r['link_model']}",
        "(what is left out: contention between streams, NCCL's tree/NVLS algorithms, CPU issue delays:",
        "zerosim.analysis.timeline, simulate; how far such predictions were off on published runs: zerosim validate)",
    ]
    return "\n".join(line for line in lines if line is not None)


def _run_one(args, s) -> int:
    r, result = one_report(args, s)
    written = []
    if args.trace:
        from zerosim.analysis.timeline import write_chrome_trace

        os.makedirs(os.path.dirname(os.path.abspath(args.trace)), exist_ok=True)  # checked writable before the run
        write_chrome_trace(result, args.trace, ranks=range(min(4, result.world_size)))  # atomic, names args.trace
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
            fig = timeline_figure(result, ranks=[0], title=name).figure
        save_figure(fig, args.figure)
        written.append(f"figure: {args.figure}")
    print(
        json.dumps(r, indent=1)
        if args.json
        else "\n".join([format_one(r), ""] + written if written else [format_one(r)])
    )
    return 0


# -- the sweep -----------------------------------------------------------------------------------------
def sweep_gpu(s, device: str):
    """The GPU the sweep judges against: --gpu, or the GPU whose compute preset the --device is."""
    from zerosim.analysis.costs import GPUS

    if s.gpu is not None:
        return s.gpu
    return next(g for g in GPUS.values() if g.device == device)


def sweep_report(args, s) -> dict:
    from zerosim.analysis.planner import crossover, latency_bound_ranks, sweep
    from zerosim.analysis.timeline import Hardware
    from zerosim.precision import get_precision
    from zerosim.progress import progress

    model, comm, tokens = s.model, s.comm, args.tokens or 2048
    device = device_for(args, s.gpu)
    gpu = sweep_gpu(s, device)
    ranks, links, stages = sweep_ranks(args), ("nvlink4", "ib_ndr"), (1, 2, 3)
    bar = progress(
        total=len(ranks) * len(links) * len(stages), desc="timeline sweep", enabled=None if not args.json else False
    )
    time_model = time_model_from_args(args)
    rows = sweep(
        model, ranks, stages, links, device, comm, s.precision, tokens, progress=lambda done, total: bar.update(1),
        time_model=time_model,
    )
    bar.close()
    compute = get_precision(s.precision).compute
    rate = time_model.gemm_rate(Hardware(device, "nvlink4", compute))  # what a large GEMM runs at
    fits = [judge(r.peak, r.stage, r.ranks, gpu, s.reserve) for r in rows]
    return (
        {
            "model": model.name,
            "params": model.num_params,
            "largest_unit": model.largest_layer,
            "device": device,
            "device_name": Hardware(device).device.name,
            "gpu": gpu.name,
            "capacity": gpu.capacity,
            "precision": s.precision_name,
            "tokens_per_rank": tokens,
            "comm": describe_comm(comm),
            "time_model": time_model.describe(),
            "gemm_rate": rate,
            "rows": [
                {
                    "ranks": r.ranks,
                    "stage": r.stage,
                    "link": r.link,
                    "step_s": r.step,
                    "compute_s": r.compute,
                    "comm_s": r.comm,
                    "exposed_comm_s": r.exposed,
                    "peak": r.peak,
                    "needs": f["total"],
                    "fits": f["fits"],
                }
                for r, f in zip(rows, fits)
            ],
            "exposed_over_half": {f"{link} stage {st}": crossover(rows, st, link) for link in links for st in stages},
            "hiding_fails_at": {
                link: latency_bound_ranks(model.largest_layer, tokens, Hardware(device, link, compute), rate)
                for link in links
            },
            "bandwidth_tokens": {link: rate / Hardware(device, link, compute).link.bandwidth for link in links},
        },
        rows,
        [f["fits"] for f in fits],
    )


def format_sweep(r: dict) -> str:
    lines = [
        f"zerosim timeline --sweep: {r['model']} (Ψ = {r['params']:,}; largest unit {r['largest_unit']:,}), "
        f"{r['device']}, {r['precision']}, {r['tokens_per_rank']:,} tokens per rank",
        f"  schedule: {r['comm']}",
        "",
        f"{'link':8s} {'stage':>5s} "
        + " ".join(f"{n:>9,d}" for n in sorted({x["ranks"] for x in r["rows"]}))
        + "   <- N",
    ]
    for link in ("nvlink4", "ib_ndr"):
        for st in (1, 2, 3):
            row = sorted((x for x in r["rows"] if x["link"] == link and x["stage"] == st), key=lambda x: x["ranks"])
            lines.append(
                f"{link:8s} {st:5d} "
                + " ".join(
                    f"{x['exposed_comm_s'] / x['step_s'] * 100:8.0f}%"
                    if x["fits"]
                    else f"{'✗ ' + format(x['needs'] / 1e9, '.0f') + ' GB':>9s}"
                    for x in row
                )
            )
    lines += [
        "",
        "Each cell: the share of the step that is exposed communication (compute waiting), rank 0;",
        f"time from: {r['time_model']} (R = {r['gemm_rate'] / 1e12:.0f} TFLOP/s for the model's GEMMs);",
        f"✗ NNN GB: a rank would need that much (measured peak + estimates) on one {r['gpu']} of "
        f"{r['capacity'] / 1e9:.1f} GB: it does not fit, so no such step could run.",
        "",
    ]
    for link in ("nvlink4", "ib_ndr"):
        need, n = r["bandwidth_tokens"][link], r["hiding_fails_at"][link]
        if n is None:
            lines.append(
                f"{link}: no N hides ZeRO-3's gathers: bandwidth alone needs {need:,.0f} tokens per rank (R/β), "
                f"this run has {r['tokens_per_rank']:,}."
            )
        else:
            lines.append(
                f"{link}: ZeRO-3's gathers stop hiding past N ≈ {n:,.0f}: 1 + 2Φ(T/R − 1/β)/α with Φ the largest unit "
                "(zerosim.analysis.planner, sweep)."
            )
        over = [
            k.split()[-1] + ":" + (f"{v:,}" if v else "none")
            for k, v in r["exposed_over_half"].items()
            if k.startswith(link)
        ]
        lines.append(f"  first N with more than half the step exposed, by stage: {', '.join(over)}")
    return "\n".join(lines)


def _run_strategy_sweep(args, s, names) -> int:
    from zerosim.cli.strategy_timeline import format_strategy_sweep, strategy_sweep_report

    device = device_for(args, s.gpu)
    r = strategy_sweep_report(args, s, names, sweep_ranks(args), device, sweep_gpu(s, device))
    print(json.dumps(r, indent=1) if args.json else format_strategy_sweep(r))
    return 0


def _run_sweep(args, s) -> int:
    names = strategies_of(args, several=True)
    if names:
        return _run_strategy_sweep(args, s, names)
    r, rows, fits = sweep_report(args, s)
    print(json.dumps(r, indent=1) if args.json else format_sweep(r))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        from zerosim.viz import sweep_figure

        fig = sweep_figure(
            rows,
            title=f"{r['model']}, {r['tokens_per_rank']:,} tokens per rank, {r['device_name']}; {r['comm']}",
            fits=fits,
            gpu=r["gpu"],
        )
        save_figure(fig, args.figure)
        if not args.json:
            print(f"\nfigure: {args.figure}")
    return 0

"""Time of one ZeRO step at real scale: each rank's compute and communication streams, overlap, prefetch.

    zerosim timeline --model gpt3-175b --ranks 1024 --stage 3 --link ib_ndr
    zerosim timeline --model llama-7b --ranks 64 --comm fsdp --forward-prefetch --figure step.png --trace step.json
    zerosim timeline --model gpt3-175b --sweep --tokens 20480 --figure sweep.png   # seed 003's claim

The engine runs one step on the meta backend (data-less arrays, one representative rank for all N), with
the bucketing and prefetch knobs DeepSpeed and FSDP expose; every recorded event is then placed in time:
computes by the roofline of the device, collectives by the ring's α-β cost (zerosim.timeline). Numbers
are rank 0's, which stands for every rank (they all do the same work). Open --trace in ui.perfetto.dev.
"""

from __future__ import annotations

import json
import math
import os
import sys

from zerosim.cli.memory_cmd import add_model_arguments, model_from_args

HELP = "time of a step at real scale: compute vs communication, overlap, bucketing, prefetch (meta backend)"
SWEEP_RANKS = (64, 128, 256, 512, 1024, 2048, 4096)


def add_arguments(p) -> None:
    from zerosim.costs.comm import LINKS
    from zerosim.timeline import DEVICES

    add_model_arguments(p, default_ranks=64)
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=3, help="ZeRO stage (default 3)")
    p.add_argument("--device", choices=sorted(DEVICES), default="h100", help="every rank's accelerator (default h100)")
    p.add_argument("--link", choices=sorted(LINKS), default="nvlink4", help="the ring's link (default nvlink4)")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per rank per step (default 2048: one sequence)")
    k = p.add_argument_group("knobs (DeepSpeed's and FSDP's names; sizes in elements)")
    k.add_argument("--comm", choices=("seed", "deepspeed", "fsdp"), default="seed",
                   help="start from seed 004's schedule (no buckets, no prefetch), DeepSpeed's defaults or FSDP's (default seed)")
    k.add_argument("--reduce-bucket-size", type=float, default=None, help="DeepSpeed reduce_bucket_size, e.g. 5e8")
    k.add_argument("--allgather-bucket-size", type=float, default=None, help="DeepSpeed allgather_bucket_size (stages 1/2)")
    k.add_argument("--prefetch-bucket-size", type=float, default=None, help="DeepSpeed stage3_prefetch_bucket_size")
    k.add_argument("--max-live-parameters", type=float, default=None, help="DeepSpeed stage3_max_live_parameters")
    k.add_argument("--max-reuse-distance", type=float, default=None, help="DeepSpeed stage3_max_reuse_distance")
    k.add_argument("--forward-prefetch", action="store_true", help="FSDP forward_prefetch: gather the next unit during this one's forward")
    k.add_argument("--backward-prefetch", choices=("pre", "post", "none"), default=None, help="FSDP backward_prefetch")
    k.add_argument("--limit-all-gathers", choices=("on", "off"), default=None, help="FSDP limit_all_gathers (at most 2 gathered units)")
    k.add_argument("--no-overlap", action="store_true", help="DeepSpeed overlap_comm=False: one stream per rank")
    p.add_argument("--sweep", action="store_true", help=f"step time and exposed communication vs N ({', '.join(map(str, SWEEP_RANKS))}) "
                   "for stages 1-3 on nvlink4 and ib_ndr")
    p.add_argument("--sweep-ranks", default=None, help="with --sweep: comma-separated N (default the list above)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.add_argument("--trace", default=None, metavar="OUT.json", help="write a Chrome / Perfetto trace (ranks 0-3)")
    p.add_argument("--figure", default=None, metavar="OUT.png", help="write the Gantt chart (or the sweep's figure)")


# What 0 would mean for these knobs is not "off": DeepSpeed's reduce_bucket_size 0 sends each parameter on its own
# (stage_1_and_2.py: the bucket is sent before any parameter that would overflow it), and stage3_max_live_parameters
# 0 stops every prefetch (partitioned_param_coordinator.py) — not what leaving the knob unset does, which is what a 0
# here used to mean, silently. stage3_prefetch_bucket_size 0 does stop prefetching, in DeepSpeed and here.
ZERO_REFUSED = {
    "reduce_bucket_size": "a bucket of 0 elements: give 1 to send each parameter's gradient on its own, "
                          "or leave it out",
    "allgather_bucket_size": "a bucket of 0 elements: give 1 for the smallest pieces, or leave it out",
    "max_live_parameters": "no parameter could be live; to stop prefetching give --prefetch-bucket-size 0, "
                           "or leave it out",
}


def comm_from_args(args):
    """The CommSchedule the knob flags describe (raises ValueError naming a bad one)."""
    from zerosim.zero.comm_schedule import CommSchedule, get_comm_schedule

    comm = get_comm_schedule(args.comm)
    changes = {}
    for flag, field in (("reduce_bucket_size", "reduce_bucket_size"), ("allgather_bucket_size", "allgather_bucket_size"),
                        ("prefetch_bucket_size", "prefetch_bucket_size"), ("max_live_parameters", "max_live_parameters"),
                        ("max_reuse_distance", "max_reuse_distance")):
        v = getattr(args, flag)
        if v is not None:
            name = f"--{flag.replace('_', '-')}"
            if not math.isfinite(v) or v != int(v) or v < 0:
                raise ValueError(f"{name} must be a whole number of elements, got {v:g}")
            if v == 0 and flag in ZERO_REFUSED:
                raise ValueError(f"{name} 0: {ZERO_REFUSED[flag]}")
            changes[field] = int(v) or None  # 0 turns prefetching off (stage3_prefetch_bucket_size 0, as in DeepSpeed)
    if args.forward_prefetch:
        changes["prefetch_forward"] = 1
    if args.backward_prefetch is not None:
        changes["prefetch_backward"] = 0 if args.backward_prefetch == "none" else 1
        changes["prefetch_after_compute"] = args.backward_prefetch == "post"
    if args.limit_all_gathers is not None:
        changes["max_gathered_units"] = 2 if args.limit_all_gathers == "on" else None
    if args.no_overlap:
        changes["overlap_comm"] = False
    if changes.get("max_reuse_distance", 1) is None:
        changes["max_reuse_distance"] = 0  # DeepSpeed's 0: free after every use
    return comm.with_(**changes) if changes else comm


def describe_comm(comm) -> str:
    from zerosim.zero.comm_schedule import CommSchedule

    if comm == CommSchedule():
        return "seed 004's: one collective per unit, gather right before a use, no prefetch"
    parts = [f"{f}={getattr(comm, f):,}" if isinstance(getattr(comm, f), int) and not isinstance(getattr(comm, f), bool)
             else f"{f}={getattr(comm, f)}" for f in comm.__dataclass_fields__ if getattr(comm, f) != getattr(CommSchedule(), f)]
    return ", ".join(parts)


def _check(args) -> None:
    if type(args.tokens) is not int or args.tokens < 1:
        raise ValueError(f"--tokens must be a positive integer, got {args.tokens!r}")
    for path, ext in ((args.trace, ".json"), (args.figure, ".png")):
        if path is not None and not path.endswith(ext):
            raise ValueError(f"{path!r}: expected a {ext} file name")
        if path is not None:
            check_writable(path)
    if args.sweep and args.trace:
        raise ValueError("--trace writes one step's trace; run without --sweep for it")


def check_writable(path: str) -> None:
    """Refuse, before the run, an output file that could not be written (the run takes seconds to minutes; the
    error would come at its end): a folder in its place, or no writable folder to make it in. Missing folders
    on the way are made when the file is written (`prepare_output`)."""
    if os.path.isdir(path):
        raise ValueError(f"{path}: a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):  # the nearest folder that exists will hold the new ones
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"{path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ValueError(f"{path}: cannot write there (permission denied)")


def prepare_output(path: str) -> str:
    """Make the folders `path` needs; returns `path`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return path


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
    model, comm = model_from_args(args), comm_from_args(args)
    return (_run_sweep if args.sweep else _run_one)(args, model, comm)


# -- one step ------------------------------------------------------------------------------------------
def one_report(args, model, comm) -> tuple:
    from zerosim.precision import get_precision
    from zerosim.timeline import Hardware
    from zerosim.timeline.sweep import meta_step

    hw = Hardware(args.device, args.link, get_precision(args.precision).compute)
    result, engine = meta_step(model, args.ranks, args.stage, hw, comm, args.precision, args.tokens, args.optimizer)
    calls = {}
    for iv in result.track(0, "comm"):
        seconds, count = calls.get(iv.category, (0.0, 0))
        calls[iv.category] = (seconds + iv.end - iv.start, count + 1)
    step, compute, exposed = result.step_time, float(result.compute_busy[0]), float(result.exposed_comm[0])
    return {
        "model": model.name, "params": model.num_params, "units": len(model.layers), "ranks": args.ranks, "stage": args.stage,
        "precision": args.precision, "device": hw.device.name, "link": hw.link.name, "link_note": hw.link.note,
        "tokens_per_rank": args.tokens, "comm": describe_comm(comm), "overlap": comm.overlap_comm,
        "step_s": step, "compute_s": compute, "comm_s": float(result.comm_busy[0]), "exposed_comm_s": exposed,
        "overlapped_s": float(result.comm_busy[0]) - exposed,
        "busy_fraction": {"compute": compute / step if step else 0.0, "comm": float(result.comm_busy[0]) / step if step else 0.0},
        "by_purpose": {k: {"seconds": v[0], "calls": v[1]} for k, v in sorted(calls.items())},
        "params_peak_gb": engine.cluster.ranks[0].ledger.peak("params") / 1e9,
        "peak_gb": engine.cluster.ranks[0].ledger.peak() / 1e9,
    }, result


def format_one(r: dict) -> str:
    pct = lambda x: f"{100 * x / r['step_s']:.0f} %" if r["step_s"] else "-"  # noqa: E731
    unit = lambda s: f"{s * 1e3:10.2f} ms" if s < 1 else f"{s:10.3f} s "  # noqa: E731
    lines = [
        f"zerosim timeline: {r['model']} (Ψ = {r['params']:,}, {r['units']} units), N = {r['ranks']:,} ranks, ZeRO-{r['stage']}, "
        f"{r['precision']}, {r['tokens_per_rank']:,} tokens per rank",
        f"  {r['device']} over {r['link']} ({r['link_note']})",
        f"  schedule: {r['comm']}" + ("" if r["overlap"] else "; no overlap: one stream per rank"),
        "",
        f"step time        {unit(r['step_s'])}",
        f"  compute        {unit(r['compute_s'])}  ({pct(r['compute_s'])} of the step: rank 0's compute stream)",
        f"  communication  {unit(r['comm_s'])}  (the communication stream, the same on every rank)",
        f"    hidden       {unit(r['overlapped_s'])}  (ran while compute ran)",
        f"    exposed      {unit(r['exposed_comm_s'])}  ({pct(r['exposed_comm_s'])} of the step: compute waited for it)",
        "",
        "communication by purpose:",
    ]
    for purpose, v in r["by_purpose"].items():
        lines.append(f"  {purpose:15s} {v['calls']:6,d} calls  {unit(v['seconds'])}")
    lines += ["", f"memory: rank 0's peak {r['peak_gb']:.2f} GB, of which params {r['params_peak_gb']:.2f} GB "
              "(prefetch raises it: gathered units wait in memory)",
              "Time is the α-β ring and the device's dense peak (a ceiling; launch overheads, contention and NCCL's",
              "protocols left out: see zerosim.timeline.simulate)."]
    return "\n".join(lines)


def _run_one(args, model, comm) -> int:
    r, result = one_report(args, model, comm)
    written = []
    if args.trace:
        from zerosim.timeline import write_chrome_trace

        write_chrome_trace(result, prepare_output(args.trace), ranks=range(min(4, result.world_size)))
        written.append(f"trace: {args.trace} (open https://ui.perfetto.dev and drag the file in, or chrome://tracing)")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")  # this command writes files; the figure functions themselves never pick a backend
        from zerosim.viz import timeline_figure

        ax = timeline_figure(result, ranks=[0], title=f"{r['model']}, N = {r['ranks']:,}, ZeRO-{r['stage']}, {r['link']}")
        ax.figure.savefig(prepare_output(args.figure), dpi=120, bbox_inches="tight")
        written.append(f"figure: {args.figure}")
    print(json.dumps(r, indent=1) if args.json else "\n".join([format_one(r), ""] + written if written else [format_one(r)]))
    return 0


# -- the sweep -----------------------------------------------------------------------------------------
def sweep_report(args, model, comm) -> dict:
    from zerosim.precision import get_precision
    from zerosim.progress import progress
    from zerosim.timeline import Hardware
    from zerosim.timeline.sweep import crossover, latency_bound_ranks, sweep

    ranks, links, stages = sweep_ranks(args), ("nvlink4", "ib_ndr"), (1, 2, 3)
    bar = progress(total=len(ranks) * len(links) * len(stages), desc="timeline sweep", enabled=None if not args.json else False)
    rows = sweep(model, ranks, stages, links, args.device, comm, args.precision, args.tokens,
                 progress=lambda done, total: bar.update(1))
    bar.close()
    compute = get_precision(args.precision).compute
    return {
        "model": model.name, "params": model.num_params, "largest_unit": model.largest_layer, "device": args.device,
        "device_name": Hardware(args.device).device.name,
        "precision": args.precision, "tokens_per_rank": args.tokens, "comm": describe_comm(comm),
        "rows": [{"ranks": r.ranks, "stage": r.stage, "link": r.link, "step_s": r.step, "compute_s": r.compute,
                  "comm_s": r.comm, "exposed_comm_s": r.exposed} for r in rows],
        "exposed_over_half": {f"{link} stage {s}": crossover(rows, s, link) for link in links for s in stages},
        "hiding_fails_at": {link: latency_bound_ranks(model.largest_layer, args.tokens, Hardware(args.device, link, compute))
                            for link in links},
        "bandwidth_tokens": {link: Hardware(args.device, link, compute).device.rate(compute) / Hardware(args.device, link, compute).link.bandwidth
                             for link in links},
    }, rows


def format_sweep(r: dict) -> str:
    lines = [f"zerosim timeline --sweep: {r['model']} (Ψ = {r['params']:,}; largest unit {r['largest_unit']:,}), {r['device']}, "
             f"{r['precision']}, {r['tokens_per_rank']:,} tokens per rank", f"  schedule: {r['comm']}", "",
             f"{'link':8s} {'stage':>5s} " + " ".join(f"{n:>9,d}" for n in sorted({x['ranks'] for x in r['rows']})) + "   <- N",
             ]
    for link in ("nvlink4", "ib_ndr"):
        for s in (1, 2, 3):
            row = sorted((x for x in r["rows"] if x["link"] == link and x["stage"] == s), key=lambda x: x["ranks"])
            lines.append(f"{link:8s} {s:5d} " + " ".join(f"{x['exposed_comm_s'] / x['step_s'] * 100:8.0f}%" for x in row))
    lines += ["", "Each cell: the share of the step that is exposed communication (compute waiting), rank 0.", ""]
    for link in ("nvlink4", "ib_ndr"):
        need, n = r["bandwidth_tokens"][link], r["hiding_fails_at"][link]
        if n is None:
            lines.append(f"{link}: no N hides ZeRO-3's gathers: bandwidth alone needs {need:,.0f} tokens per rank (R/β), "
                         f"this run has {r['tokens_per_rank']:,}.")
        else:
            lines.append(f"{link}: ZeRO-3's gathers stop hiding past N ≈ {n:,.0f}: 1 + 2Φ(T/R − 1/β)/α with Φ the largest unit "
                         "(zerosim.timeline.sweep).")
        over = [k.split()[-1] + ":" + (f"{v:,}" if v else "none") for k, v in r["exposed_over_half"].items() if k.startswith(link)]
        lines.append(f"  first N with more than half the step exposed, by stage: {', '.join(over)}")
    return "\n".join(lines)


def _run_sweep(args, model, comm) -> int:
    r, rows = sweep_report(args, model, comm)
    print(json.dumps(r, indent=1) if args.json else format_sweep(r))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        from zerosim.viz.sweep_figure import sweep_figure

        fig = sweep_figure(rows, title=f"{r['model']}, {r['tokens_per_rank']:,} tokens per rank, {r['device_name']}; {r['comm']}")
        fig.savefig(prepare_output(args.figure), dpi=120, bbox_inches="tight")
        if not args.json:
            print(f"\nfigure: {args.figure}")
    return 0

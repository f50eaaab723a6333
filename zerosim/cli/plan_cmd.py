"""Which ZeRO stage, checkpointing strategy and micro-batch fit your GPUs, and how fast each trains: the planner.

    zerosim plan --model llama-3-70b --gpus 64 --gpus-per-node 8 --gpu h100-80gb --seq-len 4096 --global-batch 1024
    zerosim plan --config config.json --gpus 8 --gpu a100-80gb --seq-len 2048 --global-batch 64 --json
    zerosim plan --model llama-3-8b --gpus 8 --gpu rtx3090 --seq-len 2048 --global-batch 32 --figure plan.png
    zerosim plan --model llama-3-70b --gpus 256 --gpu h100-80gb --seq-len 8192 --global-batch 512 --tp 1,2,4,8 --sp \
        --stages 3 --strategies block,flash

For each stage × strategy × micro-batch that splits the global batch, one micro-step of the model's data-less
twin runs on the meta backend (its memory, from rank 0's ledger: model states, activations by name, gathered
units, the fp32 gradient shard) and, where it fits with the labelled estimates added, a whole step runs on the
timeline (time: the GPU's compute rates, NVLink inside a node, InfiniBand NDR across nodes). The ones that fit
are ranked by step time; the top row is reproduced by the two commands printed below it. With --tp the
tensor-parallel degrees are tried beside every stage (--gpus stays the GPU count; the data-parallel degree is
gpus / tp): TP's collectives on NVLink within a node, the data-parallel ones across nodes.
"""

from __future__ import annotations

import json
import sys

from zerosim.analysis.costs import GB, model_flops_per_token, reserved
from zerosim.cli.offload_args import offload_plan_lines

KERNEL_WORDS = {"eager": "plain PyTorch / HF Transformers", "fused": "fused kernels / torch.compile"}
HELP = "which stage, checkpointing and micro-batch fit your GPUs, ranked by simulated step time"
KINDS = (
    ("W", "params"),
    ("G", "grads"),
    ("OS", "master and optim:*"),
    ("grad32", "grad32"),
    ("activ.", "activations"),
    ("other", "comm, scratch"),
)


def kind_group(kind: str) -> str:
    """The column a ledger kind is counted in."""
    return {"params": "W", "grads": "G", "master": "OS", "grad32": "grad32", "activations": "activ."}.get(
        kind, "OS" if kind.startswith("optim:") else "other"
    )


def add_arguments(p) -> None:
    from zerosim.analysis.costs import ALLOCATOR_RESERVE, GPUS, PRESETS
    from zerosim.cli.efficiency_args import add_efficiency_arguments, add_kernel_arguments
    from zerosim.models.gpt import ALL_STRATEGIES

    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--model",
        choices=sorted(k for k, v in PRESETS.items() if v.config is not None),
        help="a shipped config (zerosim/models/hf_configs)",
    )
    which.add_argument("--config", metavar="CONFIG.json", help="a model's Hugging Face config.json, read locally")
    p.add_argument("--gpus", type=int, required=True, help="GPUs: data-parallel ranks N")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=8,
        help="GPUs per node (default 8): more ranks than this put the rings across nodes, over --inter-link",
    )
    p.add_argument("--link", choices=("nvlink4", "nvlink3", "pcie5"), default=None,
                   help="the link within a node (default nvlink3 on an A100, nvlink4 otherwise)")
    p.add_argument("--inter-link", choices=("ib_ndr", "ib_hdr", "100gbe"), default="ib_ndr",
                   help="the link between nodes, one NIC per GPU (default ib_ndr: 400 Gb/s)")
    p.add_argument("--gpu", choices=tuple(GPUS), required=True, help="the GPU: its capacity and compute rates")
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
        default="bf16-mixed",
        help="mixed-precision preset (default bf16-mixed)",
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
    p.add_argument("--stages", default="0,1,2,3", help="stages to try, comma-separated (default 0,1,2,3)")
    p.add_argument(
        "--strategies", default=None,
        help=f"checkpointing strategies to try (default all: {', '.join(ALL_STRATEGIES)})"
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
        default=ALLOCATOR_RESERVE,
        metavar="FRACTION",
        help=f"allocator reserve, a fraction of the measured peak (default {ALLOCATOR_RESERVE})",
    )
    from zerosim.cli.offload_args import add_offload_arguments

    add_offload_arguments(p, times=True, several=True)  # offload configurations ranked beside no offload (tp = 1)
    p.add_argument("--tp", default="1", metavar="T,...",
                   help="tensor-parallel degrees to try beside every stage, comma-separated (default 1); each divides "
                        "--gpus, the data-parallel degree is the quotient")
    p.add_argument("--sp", action="store_true", help="with --tp: Megatron's sequence parallelism")
    p.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument(
        "--figure", default=None, metavar="OUT.png", help="draw memory by kind and step time per configuration"
    )


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


def _tps(args) -> tuple:
    tps = _ints(args.tp, "--tp")
    if min(tps) < 1:
        raise ValueError(f"--tp degrees must be at least 1, got {args.tp!r}")
    if args.sp and max(tps) == 1:
        raise ValueError("--sp cuts the sequence over a TP group: give --tp degrees above 1 with it")
    return tps


def report(args) -> tuple:
    """The plan as data (what --json prints) and the Plan."""
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import plan
    from zerosim.cli.strategy_args import check_nodes
    from zerosim.cli.work_budget import check_units
    from zerosim.models.hf import read_hf_config
    from zerosim.outputs import check_file
    from zerosim.progress import progress

    for flag, value in (("--gpus", args.gpus), ("--gpus-per-node", args.gpus_per_node), ("--seq-len", args.seq_len),
                        ("--global-batch", args.global_batch)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    check_nodes(args.gpus, args.gpus_per_node, "--gpus")  # as the timeline command it prints checks it
    config = read_hf_config(args.config) if args.config else get_preset(args.model).config
    check_units(config.n_layers + 3, f"{config.name} ({config.n_layers:,} layers)")  # before any twin is built
    if not 0 <= args.reserve < 1:  # (NaN fails this too)
        raise ValueError(f"--reserve is the allocator's reserve, a fraction of the measured peak in [0, 1), got "
                         f"{args.reserve}")
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, got {args.top}")
    if args.figure is not None:  # before the planning, which takes seconds to minutes (zerosim/outputs.py)
        check_file(args.figure, "--figure", (".png",))
    micro = _ints(args.micro_batches, "--micro-batches") if args.micro_batches else None
    if micro is not None and min(micro) < 1:
        raise ValueError(f"--micro-batches must be at least 1, got {args.micro_batches!r}")
    from zerosim.analysis.costs import get_gpu
    from zerosim.cli.efficiency_args import kernels_of, links_from_args, loss_of, time_model_from_args

    from zerosim.cli.offload_args import host_from_args, offload_hardware, plan_offloads

    time_model = time_model_from_args(args)
    intra = args.link or ("nvlink3" if get_gpu(args.gpu).device.startswith("a100") else "nvlink4")
    offloads, host = plan_offloads(args), host_from_args(args, get_gpu(args.gpu))
    on_node = min(args.gpus, args.gpus_per_node)
    bar = progress(total=None, desc="planning", enabled=not args.json and sys.stderr.isatty(), unit="config")
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
        _ints(args.stages, "--stages", (0, 1, 2, 3)),
        _strategies(args.strategies),
        micro,
        args.reserve,
        progress=lambda label: bar.update(1),
        time_model=time_model,
        links=(intra, args.inter_link),
        kernels=kernels_of(args),
        loss=loss_of(args),
        hardware=lambda hw: offload_hardware(args, links_from_args(args, hw), host, on_node),
        offloads=offloads,
        host=host,
        tps=_tps(args),
        sp=args.sp,
    )
    bar.close()
    flag = f"--config {args.config}" if args.config else f"--model {args.model}"
    s = p.settings
    rate = _peak_rate(s["device"], args.precision)
    per_token = model_flops_per_token(config, args.seq_len)
    rows = [_row(r, s, rate, per_token) for r in p.fitting]
    from zerosim.cli.timeline_cmd import link_model

    return {
        "settings": {k: v for k, v in s.items() if k != "hardware"},
        "link_model": link_model(s["hardware"]),
        "model_flops_per_token": per_token,
        "link": p.link,
        "fitting": rows,
        "did_not_fit": [_row(r, s, rate, per_token) for r in p.rows if not r.fits],
        "pruned": [{"stage": x[0], "model_states": x[1], **({"tp": x[2]} if len(x) > 2 else {})} for x in p.pruned]
        + [{"stage": st, "model_states": b, "offload": o} for st, b, o in p.pruned_offload],
        "reproduce": _reproduce(p, flag, args, intra),
    }, p


def _reproduce(p, flag: str, args, intra: str) -> list:
    """The two commands that reproduce the top row, with the link and efficiency flags this plan ran with."""
    from zerosim.cli.efficiency_args import link_flags

    if not p.fitting:
        return []
    from zerosim.cli.offload_args import offload_flags

    memory, timeline = p.commands(p.fitting[0], flag)
    links = f" --link {intra}" + (f" --inter-link {args.inter_link}" if args.gpus > args.gpus_per_node else "")
    extra = link_flags(args)
    off = offload_flags(p.fitting[0].offload, args)  # "" without offload
    return [memory + off, timeline + links + (f" {extra}" if extra else "") + off]


def _peak_rate(device: str, precision: str) -> float:
    from zerosim.analysis.timeline import DEVICES
    from zerosim.precision import get_precision

    return DEVICES[device].rate(get_precision(precision).compute)


def _row(r, s, rate, per_token) -> dict:
    tokens = s["per_rank"] * s["seq_len"]  # per GPU per step
    by = {label: 0 for label, _ in KINDS}
    for kind, nbytes in r.at_peak.items():
        by[kind_group(kind)] += nbytes
    out = {
        **({"tp": r.tp} if tuple(s.get("tps", (1,))) != (1,) else {}),  # tensor parallelism's degree, when tried
        "stage": r.stage,
        "strategy": r.strategy,
        "micro_batch": r.micro_batch,
        "accumulation": r.accumulation,
        "peak": r.peak,
        "at_peak": r.at_peak,
        "by_group": by,
        "overheads": r.overheads,
        "total": r.total,
        "capacity": r.capacity,
        "margin": r.margin,
        "fits": r.fits,
        "step_s": r.step_s,
        "compute_s": r.compute_s,
        "exposed_s": r.exposed_s,
    }
    out["reserved"] = reserved(r.peak, s["reserve"])  # what the caching allocator would hold (costs/_reserve.py)
    if "offloads" in s:  # offload tried: where each row keeps what, on the host and NVMe too
        out |= {"offload": r.offload, "host_peak": r.host_peak, "nvme_peak": r.nvme_peak, "host_fits": r.host_fits}
    if r.step_s:
        out["tokens_per_s_per_gpu"] = tokens / r.step_s
        out["mfu"] = per_token * tokens / (r.step_s * rate)  # torchtitan's / PaLM's model FLOPs (costs/_mfu.py)
    return out


def format_plan(r: dict) -> str:
    s = r["settings"]
    across = s["ranks"]
    link = "the rings cross nodes" if across > s["gpus_per_node"] else "one node"
    lines = [
        f"zerosim plan: {s['model']} (Ψ = {s['params']:,}) on {across} × {s['gpu_name']} "
        f"({s['gpus_per_node']} per node; {link})",
        f"  {s['global_batch']:,} sequences of {s['seq_len']:,} tokens per step = {s['per_rank']} per GPU; "
        f"{s['precision']}, {s['optimizer']}, {s['comm']}'s schedule; capacity {s['capacity'] / GB:.2f} GB per GPU",
        f"  kernels: {s['kernels']} (activations as {KERNEL_WORDS[s['kernels']]} keeps them); loss: {s['loss']}",
        f"  time from: {s['time_model']}",
        f"  links: {r['link_model']}",
        "",
    ]
    if r["pruned"]:
        lines.append("Skipped, as the model states alone (no strategy or micro-batch makes them smaller) exceed a GPU:")
        lines += [f"  ZeRO-{p['stage']}" + (f" beside TP {p['tp']}" if p.get("tp", 1) > 1 else "")
                  + (f" with {p['offload']}" if "offload" in p else "")
                  + f": {p['model_states'] / GB:.1f} GB" for p in r["pruned"]]
        lines.append("")
    if not r["fitting"]:
        lines += ["Nothing tried fits. Closest:"] + [
            _line(x) for x in sorted(r["did_not_fit"], key=lambda x: x["total"])[:5]
        ]
        lines += [
            "",
            "More GPUs, a shorter --seq-len, or a GPU with more memory; --strategies flash or block keep the least.",
        ]
        return "\n".join(lines)
    tp = tuple(s.get("tps", (1,))) != (1,)  # a TP column when degrees above 1 were tried
    head = (
        f"{'#':>2s}  " + ("TP " if tp else "") + f"{'stage':5s} {'strategy':14s} {'B × K':>7s}  {'step time':>10s} "
        f"{'tok/s/GPU':>10s} {'MFU':>5s}  "
        f"{'peak GB':>8s} {'resv.':>6s} {'+est.':>6s} {'margin':>7s}   " + " ".join(f"{k:>6s}" for k, _ in KINDS)
        + ("   offload" if "offloads" in s else "")
    )
    lines += [
        "Fits, fastest first (per GPU; GB = 1e9 bytes; peak = allocated, the ledger's; resv. = reserved, with the",
        "allocator's reserve; +est. = CUDA context, NCCL and the allocator's reserve over the peak):",
        head,
    ]
    for i, x in enumerate(r["fitting"][: s.get("top", 10)], 1):
        lines.append(
            f"{i:>2d}  " + (f"{x.get('tp', 1):<2d} " if tp else "") + f"{x['stage']:<5d} {x['strategy']:14s} "
            f"{x['micro_batch']:>3d} × {x['accumulation']:<3d} "
            f"{x['step_s']:9.2f}s {x['tokens_per_s_per_gpu']:10,.0f} {100 * x['mfu']:4.0f}%  "
            f"{x['peak'] / GB:8.2f} {x['reserved'] / GB:6.2f} {x['overheads'] / GB:6.2f} {x['margin'] / GB:7.2f}   "
            + " ".join(f"{x['by_group'][k] / GB:6.2f}" for k, _ in KINDS)
            + (f"   {x['offload']}" if "offload" in x else "")
        )
    lines += offload_plan_lines(r, s.get("top", 10))  # with offload: the host and NVMe bytes of its rows
    more = len(r["fitting"]) - s.get("top", 10)
    if more > 0:
        lines.append(f"    ... {more} more that fit (--top, or --json for all)")
    if r["did_not_fit"]:
        lines += ["", "Tried and did not fit (each strategy stops at its first micro-batch that does not):"]
        lines += [_line(x) for x in r["did_not_fit"]]
    top = r["fitting"][0]
    lines += [
        "",
        "W, G, OS: params, grads, optimizer states with the fp32 master; grad32: the fp32 gradient shard of",
        "the step; activ.: saved for backward. B × K: micro-batch × accumulation steps per GPU"
        + (" (a TP group's GPUs share" if tp else "."),
        *(["theirs); TP: the tensor-parallel degree, the data-parallel degree is GPUs / TP."] if tp else []),
        f"MFU: model FLOPs per token ({r['model_flops_per_token']:.3g}: 6·(Ψ − embedding) + 12·layers·H·d_h·L, "
        "torchtitan's and PaLM's)",
        "× tokens/s per GPU / the GPU's dense peak; recompute not counted. How far such predictions were off on",
        "published runs: zerosim validate (docs/validation.md).",
        "",
        f"The top row, ZeRO-{top['stage']} with '{top['strategy']}' at {top['micro_batch']} × {top['accumulation']}"
        + (f" beside TP {top['tp']}" if top.get("tp", 1) > 1 else "") + ", is what these two commands measure:",
    ] + [f"  {c}" for c in r["reproduce"]]
    return "\n".join(lines)


def _line(x: dict) -> str:
    if not x.get("host_fits", True):  # offload: the device fits, a node's host DRAM or NVMe does not
        return (f"  ZeRO-{x['stage']} {x['strategy']:14s} B = {x['micro_batch']:<3d} with {x['offload']}: a node's "
                f"host or NVMe is too small (host {x['host_peak'] / GB:.1f} GB, NVMe {x['nvme_peak'] / GB:.1f} GB "
                "per rank)")
    return (
        f"  ZeRO-{x['stage']}" + (f" TP {x['tp']}" if x.get("tp", 1) > 1 else "") + f" {x['strategy']:14s} B = "
        f"{x['micro_batch']:<3d}" + (f" with {x['offload']}" if x.get("offload", "none") != "none" else "")
        + f" needs {x['total'] / GB:7.1f} GB "
        f"({x['peak'] / GB:.1f} measured, of which activations {x['by_group']['activ.'] / GB:.1f}): "
        f"{-x['margin'] / GB:.2f} GB short"
    )


def run(args) -> int:
    r, p = report(args)
    r["settings"]["top"] = args.top
    print(json.dumps(r, indent=1, default=str) if args.json else format_plan(r))
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        from zerosim.cli.timeline_cmd import save_figure
        from zerosim.viz import plan_figure

        save_figure(plan_figure(p, top=args.top), args.figure)
        if not args.json:
            print(f"\nfigure: {args.figure}")
    return 0

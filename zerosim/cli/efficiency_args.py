"""The flags that say what a predicted time assumes, shared by `zerosim timeline` and `zerosim plan`: the kernels
(eager or fused: what they keep and what they move), the achieved efficiency, fp8 GEMMs, the loss, and the links'
bandwidth and latency (zerosim.analysis.costs: _efficiency.py, _kernel_work.py, _links.py)."""

from __future__ import annotations

from dataclasses import replace

KERNEL_PRESET = {"eager": "eager", "fused": "compiled"}  # the efficiency preset each kernel choice implies


def add_kernel_arguments(p) -> None:
    """--kernels and --loss: what the activations and the loss keep (`zerosim memory`, `timeline`, `plan`)."""
    from zerosim.cli.choices import LOSSES

    p.add_argument(
        "--kernels",
        choices=("eager", "fused"),
        default=None,
        help="eager (the default: plain PyTorch and HF Transformers, every op its own kernel, autograd keeping each "
        "op's inputs) or fused (torch.compile / fused kernels: zerosim's own units; the default beside --cp, and "
        "beside --tp in Megatron's layout, whose own fused kernels are the only ones it runs)",
    )
    p.add_argument(
        "--loss",
        choices=LOSSES,
        default=None,
        help="the cross-entropy: eager (fp32 log-softmax and its gradient, the default with --kernels eager), "
        "probabilities (a fused kernel's fp32 softmax, the default with --kernels fused), chunked (torchtune), "
        "fused-linear (Liger)",
    )


def add_efficiency_arguments(p) -> None:
    """--efficiency, --fp8-gemms and the link flags (`zerosim timeline`, `plan`)."""
    g = p.add_argument_group("what a time assumes (zerosim/analysis/costs/_efficiency.py, _links.py)")
    g.add_argument(
        "--efficiency",
        default=None,
        metavar="PRESET|FRACTION",
        help="achieved rates: eager or compiled (kernel benchmarks per GPU with a calibrated framework factor; "
        "default: the --kernels choice's), peak (the datasheet roofline), a fraction of every peak such as 0.45 "
        "(your own measured efficiency), or a preset with overrides, e.g. eager:gemm=0.7,hbm=0.8,framework=0.9",
    )
    g.add_argument(
        "--fp8-gemms",
        action="store_true",
        help="the blocks' linears in float8 (torchao Float8Linear, tensorwise scaling; H100 and H200 only)",
    )
    g.add_argument("--link-bandwidth", type=float, default=None, metavar="GB/s",
                   help="the link's bandwidth per direction (default the link's datasheet figure)")
    g.add_argument("--link-alpha", type=float, default=None, metavar="µs",
                   help="the link's latency per ring step (default NCCL's Ring+Simple figure: NVLink 3.4, network 14)")
    g.add_argument("--inter-link-bandwidth", type=float, default=None, metavar="GB/s",
                   help="the inter-node link's bandwidth per direction and GPU")
    g.add_argument("--inter-link-alpha", type=float, default=None, metavar="µs",
                   help="the inter-node link's latency per ring step")
    g.add_argument("--call-latency", type=float, default=None, metavar="µs",
                   help="the latency charged once per collective call (default NCCL's 8.4 µs, Ring+Simple)")


def kernels_of(args) -> str:
    """--kernels; else the --efficiency preset's (compiled: fused); else fused beside --cp (context parallelism's
    twin runs zerosim's units, as Transformer Engine's fused attention and torchtitan's compiled CP runs do) and
    beside --tp in Megatron's layout (Megatron-LM's layers run its own fused kernels: what tensor/_meta.py keeps);
    else eager, what a user of plain PyTorch or HF Transformers runs (torch.compile is opt-in)."""
    if getattr(args, "kernels", None):
        return args.kernels
    preset = str(getattr(args, "efficiency", None) or "").partition(":")[0]
    fused = _beside(args, "cp") or (_beside(args, "tp") and _layout(args) == "megatron")
    return {v: k for k, v in KERNEL_PRESET.items()}.get(preset, "fused" if fused else "eager")


def _beside(args, degree: str) -> bool:
    """--cp (or --tp) above 1: a degree, or any of plan's list."""
    value = getattr(args, degree, None)
    if isinstance(value, str):
        return any(x.strip() not in ("", "1") for x in value.split(","))
    return isinstance(value, int) and value > 1


def _layout(args) -> str:
    from zerosim.cli.parallel_args import layout_of

    return layout_of(args)


def time_model_from_args(args):
    """The kernel_time.TimeModel the flags describe: --efficiency, or the --kernels choice's preset; the elementwise
    bytes are the kernels' (eager or fused) either way."""
    from zerosim.analysis.costs import EFFICIENCY_PRESETS as PRESETS
    from zerosim.analysis.costs import parse_efficiency
    from zerosim.analysis.timeline import TimeModel

    kernels = kernels_of(args)
    text = args.efficiency if args.efficiency is not None else KERNEL_PRESET[kernels]
    efficiency = parse_efficiency(text)
    if efficiency is not None and efficiency.flat is None:
        efficiency = replace(efficiency, kernels=PRESETS[KERNEL_PRESET[kernels]].kernels)
    if args.fp8_gemms and efficiency is None:
        raise ValueError("--fp8-gemms is charged by the efficiency model: drop --efficiency peak")
    return TimeModel(efficiency, args.fp8_gemms, loss_of(args))


def loss_of(args) -> str:
    """--loss, or what the kernels imply (eager: the eager cross-entropy; fused: the probabilities)."""
    from zerosim.models.meta import LOSS_OF

    return getattr(args, "loss", None) or LOSS_OF[kernels_of(args)]


def links_from_args(args, hardware):
    """`hardware` with the link flags applied (bandwidths in GB/s, latencies in µs, each checked positive)."""
    from zerosim.analysis.costs import LATENCY_US, LINK_GB_S, check_flag_range

    for flag, value in (("--link-bandwidth", args.link_bandwidth), ("--link-alpha", args.link_alpha),
                        ("--inter-link-bandwidth", args.inter_link_bandwidth),
                        ("--inter-link-alpha", args.inter_link_alpha), ("--call-latency", args.call_latency)):
        if value is not None:  # physical bounds, each end said (analysis/costs/_rates.py)
            check_flag_range(value, flag, LINK_GB_S if "bandwidth" in flag else LATENCY_US)
    if (args.inter_link_bandwidth is not None or args.inter_link_alpha is not None) and hardware.inter_link is None:
        raise ValueError("--inter-link-bandwidth and --inter-link-alpha set the link between nodes: the ranks fit in "
                         "one node (add --gpus-per-node G with more ranks than G)")
    link, inter = hardware.link, hardware.inter_link
    base = None if args.call_latency is None else args.call_latency * 1e-6
    link = _link(link, args.link_bandwidth, args.link_alpha, base)
    if inter is not None:
        inter = _link(inter, args.inter_link_bandwidth, args.inter_link_alpha, base)
    if link is hardware.link and inter is hardware.inter_link:
        return hardware
    changes = {"link": link, "inter_link": inter}
    return replace(hardware, **changes)


def _link(link, bandwidth, alpha, base):
    fields = {k: v for k, v in (("bandwidth", None if bandwidth is None else bandwidth * 1e9),
                                ("alpha", None if alpha is None else alpha * 1e-6), ("base", base)) if v is not None}
    if not fields:
        return link
    return replace(link, name=link.name + " (set)", **fields)


def link_flags(args) -> str:
    """The link flags as given, to repeat in a reproducing command ("" when none was)."""
    parts = []
    for flag in ("link_bandwidth", "link_alpha", "inter_link_bandwidth", "inter_link_alpha", "call_latency"):
        if getattr(args, flag) is not None:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag):g}")
    return " ".join(parts)

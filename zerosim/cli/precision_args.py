"""`zerosim train`'s loss scaling, clipping and gradient recipe flags (issue 11): parsed here, done by the library
(zerosim.precision): --loss-scale, --scale-window, --clip-grad, --reduction, --allreduce, --optim-state; and the words
a run prints about them (its header, each step's note, the summary, --json's fields)."""

from __future__ import annotations

import math


def add_precision_arguments(p) -> None:
    from zerosim.cli.choices import ALLREDUCES, OPTIM_STATES, REDUCTIONS

    p.add_argument("--loss-scale", default=None, metavar="S",
                   help="a static loss scale (a number), or a dynamic scaler: torch (= dynamic: PyTorch's GradScaler) "
                        "or "
                        "deepspeed (DeepSpeed's DynamicLossScaler); an overflow skips the step and lowers S (default: "
                        "the preset's, 1)")
    p.add_argument("--scale-window", type=int, default=None, metavar="N",
                   help="with a dynamic --loss-scale: clean steps before S grows (torch growth_interval 2000, "
                        "deepspeed scale_window 1000)")
    p.add_argument("--clip-grad", type=float, default=None, metavar="MAX_NORM",
                   help="clip the gradient to this global L2 norm before the optimizer (torch's clip_grad_norm_)")
    p.add_argument("--reduction", choices=REDUCTIONS, default=None,
                   help="the gradient recipe: seeds (default), ddp (stage 0), deepspeed-zero12 (stages 1/2: "
                        "DeepSpeed's default, each bucket all-reduced), deepspeed-zero12-reduce (the same with "
                        "use_multi_rank_bucket_allreduce off: reduced to each owner), deepspeed-bf16-optimizer "
                        "(stage 1, bf16 with --grad-accum fp32: DeepSpeed's BF16_Optimizer), deepspeed-zero3 and "
                        "fsdp2 (stage 3, per-parameter partitions)")
    p.add_argument("--allreduce", choices=ALLREDUCES, default=None,
                   help="an all-reduce's chunk map (stage 0; deepspeed-zero12's buckets): ring (default), nccl "
                        "(NCCL's on a GPU) or gloo (torch on a CPU)")
    p.add_argument("--optim-state", choices=OPTIM_STATES, default=None,
                   help="the format the optimizer's state (Adam's m and v) is stored in between steps: fp32 (default; "
                        "seeds 000-002 say it must be) or fp16 / bf16 (2 bytes an element, rounded after every step, "
                        "the arithmetic still fp32) to watch what the seeds warn of")


def precision_from_arguments(args, precision):
    """The preset with --loss-scale, --scale-window, --reduction, --allreduce and --optim-state applied (the policy
    checks them)."""
    changes = {}
    if args.loss_scale is not None:
        changes["loss_scale"] = loss_scale_of(args.loss_scale)
    if args.scale_window is not None:
        if args.scale_window < 1:
            raise ValueError(f"--scale-window must be at least 1, got {args.scale_window}")
        kind = changes.get("loss_scale", precision.loss_scale)
        if not isinstance(kind, str):
            raise ValueError("--scale-window needs a dynamic --loss-scale (torch, dynamic or deepspeed)")
        changes["loss_scale_options"] = {
            "scale_window" if kind == "deepspeed" else "growth_interval": args.scale_window
        }
    if args.reduction is not None:
        changes["reduction"] = args.reduction
    if args.allreduce is not None:
        changes["allreduce"] = args.allreduce
    if args.optim_state is not None:
        changes["optim_state"] = args.optim_state
    if args.clip_grad is not None and not (math.isfinite(args.clip_grad) and args.clip_grad > 0):
        raise ValueError(f"--clip-grad must be a finite number > 0, got {args.clip_grad}")
    return precision.with_(**changes) if changes else precision


def loss_scale_of(text: str):
    """--loss-scale's value, a scaler's name (the policy's LOSS_SCALERS) or a finite number > 0, refused by the flag's
    name otherwise (train's and replay's)."""
    from zerosim.precision import LOSS_SCALERS

    if text.lower() in LOSS_SCALERS:
        return text
    try:
        scale = float(text)
    except ValueError:
        scale = math.nan
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"--loss-scale takes a number > 0 or one of {', '.join(LOSS_SCALERS)}, got {text!r}")
    return scale


def describe_precision_options(args, precision) -> str:
    """The header's words for the options above, when they are not the defaults."""
    words = []
    if precision.dynamic:
        words.append(f"dynamic loss scale ({_scaler_name(precision)}, from {precision.make_scaler().scale:g})")
    elif precision.loss_scale != 1:
        words.append(f"loss scale {precision.loss_scale:g}")
    if precision.reduction != "seeds":
        words.append(f"reduction {precision.reduction}")
    if precision.allreduce != "ring":
        words.append(f"{precision.allreduce} all-reduce")
    if args.clip_grad is not None:
        words.append(f"clip grad norm {args.clip_grad:g}")
    if precision.optim_state is not None:
        words.append(f"optimizer state stored in {precision.optim_state}")
    return "".join(", " + w for w in words)


def _scaler_name(precision) -> str:
    kind = precision.make_scaler().kind
    return {"torch": "torch's GradScaler", "deepspeed": "DeepSpeed's DynamicLossScaler"}.get(kind, kind)


def step_note(precision, info) -> str:
    """What a step line adds: the scale it used (dynamic scaling), a skip, the gradient norm (clipping)."""
    note = f"  scale {info.scale:g}" if precision.dynamic else ""
    if info.skipped:
        note += "  skipped (inf/NaN gradient; the scale backs off)"
    elif info.norm is not None:
        note += f"  grad norm {info.norm!r}"
    return note


def precision_summary(precision, result) -> str:
    """After the run: the loss scale at the start and the end, and every skipped step."""
    if not precision.dynamic and not result.skipped:
        return ""
    scales = result.scales
    skipped = ", ".join(map(str, result.skipped)) or "none"
    return (f"loss scale ({_scaler_name(precision)}): {scales[0]:g} at step {result.first_step}, "
            f"{scales[-1]:g} at step {result.first_step + len(scales) - 1}; "
            f"skipped {len(result.skipped)} of {len(scales)} steps: {skipped}")


def precision_json(precision, result) -> dict:
    """--json's extra fields, present only when they say something."""
    out = {}
    if precision.dynamic:
        out.update(scales=result.scales, skipped=result.skipped)
    if any(n is not None for n in result.norms):
        out["grad_norms"] = result.norms
    return out

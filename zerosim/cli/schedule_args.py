"""The communication flags `zerosim memory` and `timeline` share: --ds-config, --comm and the knobs under DeepSpeed's
and FSDP's names (sizes in elements), read into a CommSchedule (`comm_from_args`); cli/model_args.py's `setup` refuses
a knob that a DeepSpeed config also sets; `ds_config_from_args` reads --ds-config (its values win over defaults; a flag
that contradicts it is an error, as the HF Trainer refuses a mismatch)."""

from __future__ import annotations

import math


def add_schedule_arguments(p, stage: bool = False) -> None:
    """--ds-config, --comm and the knobs under DeepSpeed's and FSDP's names (sizes in elements)."""
    p.add_argument(
        "--ds-config",
        default=None,
        metavar="DS_CONFIG.json",
        help="a DeepSpeed config: its stage, buckets, prefetch, precision, batch and clipping "
        "(every key listed as modelled or not)",
    )
    k = p.add_argument_group("knobs (DeepSpeed's and FSDP's names; sizes in elements)")
    k.add_argument(
        "--comm",
        choices=("seed", "deepspeed", "fsdp"),
        default=None,
        help="start from seed 004's schedule (no buckets, no prefetch), DeepSpeed's defaults or FSDP's (default seed)",
    )
    k.add_argument("--reduce-bucket-size", type=float, default=None, help="DeepSpeed reduce_bucket_size, e.g. 5e8")
    k.add_argument(
        "--allgather-bucket-size", type=float, default=None, help="DeepSpeed allgather_bucket_size (stages 1/2)"
    )
    k.add_argument("--prefetch-bucket-size", type=float, default=None, help="DeepSpeed stage3_prefetch_bucket_size")
    k.add_argument("--max-live-parameters", type=float, default=None, help="DeepSpeed stage3_max_live_parameters")
    k.add_argument("--max-reuse-distance", type=float, default=None, help="DeepSpeed stage3_max_reuse_distance")
    k.add_argument(
        "--forward-prefetch",
        action="store_true",
        help="FSDP forward_prefetch: gather the next unit during this one's forward",
    )
    k.add_argument("--backward-prefetch", choices=("pre", "post", "none"), default=None, help="FSDP backward_prefetch")
    k.add_argument(
        "--limit-all-gathers",
        choices=("on", "off"),
        default=None,
        help="FSDP limit_all_gathers (at most 2 gathered units)",
    )
    add_overlap_argument(k)
    k.add_argument("--no-overlap", dest="overlap_comm", action="store_const", const="off",
                   help="the same as --overlap-comm off")


def add_overlap_argument(p) -> None:
    """--overlap-comm: DeepSpeed's overlap_comm, which `memory`, `timeline` and `plan` take alike."""
    p.add_argument(
        "--overlap-comm",
        choices=("on", "off"),
        default=None,
        help="DeepSpeed overlap_comm: reduce and gather on a stream of their own (on) or on the compute stream, one "
        "thing at a time (off); default the schedule's own (DeepSpeed's: on at ZeRO-3 only; seed's and FSDP's: on)",
    )


def overlap_of(args) -> bool | None:
    """--overlap-comm as CommSchedule.overlap_comm takes it (None: the schedule's own default)."""
    return None if getattr(args, "overlap_comm", None) is None else args.overlap_comm == "on"


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
    from zerosim.parallel.data import get_comm_schedule

    comm = get_comm_schedule(args.comm)
    changes = {}
    for flag in (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "prefetch_bucket_size",
        "max_live_parameters",
        "max_reuse_distance",
    ):
        v = getattr(args, flag)
        if v is not None:
            name = f"--{flag.replace('_', '-')}"
            if not math.isfinite(v) or v != int(v) or v < 0:
                raise ValueError(f"{name} must be a whole number of elements, got {v:g}")
            if v == 0 and flag in ZERO_REFUSED:
                raise ValueError(f"{name} 0: {ZERO_REFUSED[flag]}")
            changes[flag] = int(v) or None  # 0 turns prefetching off (stage3_prefetch_bucket_size 0, as in DeepSpeed)
    if args.forward_prefetch:
        changes["prefetch_forward"] = 1
    if args.backward_prefetch is not None:
        changes["prefetch_backward"] = 0 if args.backward_prefetch == "none" else 1
        changes["prefetch_after_compute"] = args.backward_prefetch == "post"
    if args.limit_all_gathers is not None:
        changes["max_gathered_units"] = 2 if args.limit_all_gathers == "on" else None
    if overlap_of(args) is not None:
        changes["overlap_comm"] = overlap_of(args)
    if changes.get("max_reuse_distance", 1) is None:
        changes["max_reuse_distance"] = 0  # DeepSpeed's 0: free after every use
    return comm.with_(**changes) if changes else comm


def _knobs_given(args) -> list:
    flags = [
        f"--{f.replace('_', '-')}"
        for f in (
            "comm",
            "reduce_bucket_size",
            "allgather_bucket_size",
            "prefetch_bucket_size",
            "max_live_parameters",
            "max_reuse_distance",
            "backward_prefetch",
            "limit_all_gathers",
            "overlap_comm",
        )
        if getattr(args, f, None) is not None
    ]
    return flags + (["--forward-prefetch"] if args.forward_prefetch else [])


def ds_config_from_args(args, config):
    """The DeepSpeedRun --ds-config describes (None without one), checked against the flags; the flags it sets
    (--precision, --optimizer, and --batch with --seq-len) take its values. `config`: the model's DecoderConfig."""
    if getattr(args, "ds_config", None) is None:
        return None
    from zerosim.frameworks.deepspeed import TrainerArgs, read_ds_config

    knobs = _knobs_given(args)
    if knobs:
        raise ValueError(
            f"{', '.join(knobs)} and --ds-config both set the schedule: the DeepSpeed config's "
            "zero_optimization keys set it; drop the flags or edit the config"
        )
    trainer = TrainerArgs(
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=getattr(args, "accumulation_steps", None),
        fp16=None if args.precision is None else args.precision == "fp16-mixed",
        bf16=None if args.precision is None else args.precision == "bf16-mixed",
    )
    ds = read_ds_config(args.ds_config, args.ranks, config.d_model if config else args.d_model, trainer)
    agree_with_config(args, ds)
    args.precision, args.optimizer = ds.precision_name, ds.optimizer
    if getattr(args, "seq_len", None) is not None:
        args.batch = ds.micro_batch
    return ds


def agree_with_config(args, ds) -> None:
    """A flag that contradicts the DeepSpeed config is refused, as the HF Trainer refuses a mismatch (`zerosim memory`,
    `timeline` and `train` read --ds-config through here)."""
    clash = []
    if args.precision is not None and args.precision != ds.precision_name:
        clash.append(f"--precision {args.precision} vs the config's {ds.precision_name}")
    if args.optimizer is not None and args.optimizer != ds.optimizer:
        clash.append(f"--optimizer {args.optimizer} vs the config's {ds.optimizer}")
    if args.batch is not None and args.batch != ds.micro_batch:
        clash.append(f"--batch {args.batch} vs train_micro_batch_size_per_gpu {ds.micro_batch}")
    steps = getattr(args, "accumulation_steps", None)
    if steps is not None and steps != ds.accumulation_steps:
        clash.append(f"--accumulation-steps {steps} vs gradient_accumulation_steps {ds.accumulation_steps}")
    stage = getattr(args, "stage", None)
    if stage is not None and stage != ds.stage:
        clash.append(f"--stage {stage} vs zero_optimization.stage {ds.stage}")
    clip = getattr(args, "clip_grad", None)
    if clip is not None and clip != ds.clip_grad:
        clash.append(f"--clip-grad {clip:g} vs gradient_clipping {ds.clip_grad}")
    if clash:
        raise ValueError(
            "the flags disagree with the DeepSpeed config: "
            + "; ".join(clash)
            + ' (set the config\'s value to "auto" to take the flag, as with the HF Trainer)'
        )

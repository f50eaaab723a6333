"""Replay seed 004's worked example (four weights, two GPUs, Adam) on the live simulated cluster.

Every number printed comes from the run: the model's record, the trace of the ring, the optimizer's
intermediates and the ledgers. Try --precision fp16-pure with a tiny --lr to watch updates vanish.
"""

from __future__ import annotations

import json
import math
import sys

from zerosim.cli import choices

HELP = "replay seed 004's worked example step by step (the main job)"


def add_arguments(p) -> None:
    p.add_argument("--stage", type=int, choices=choices.STAGES, default=1, help="ZeRO stage (default 1, the article's "
                                                                              "first)")
    p.add_argument("--precision", choices=choices.PRECISION_PRESETS, default=None,
                   help="mixed-precision preset (default fp16-mixed; bf16-mixed with --cp)")
    p.add_argument("--lr", type=float, default=None,
                   help=f"Adam learning rate (default {choices.SEED_LR}, the article's)")
    p.add_argument("--steps", type=int, default=1,
                   help=f"training steps on the same two samples, 1..{choices.MAX_REPLAY_STEPS} (default 1; a bar on "
                        "a terminal from 50)")
    p.add_argument("--no-checkpoint", action="store_true", help="keep activations instead of recomputing them")
    p.add_argument("--loss-scale", default=None, metavar="S",
                   help="multiply the loss by S (a number) before backward, or scale dynamically (torch, dynamic, "
                        "deepspeed): "
                        "narrates the scaled and unscaled gradients, and a skipped step on overflow")
    p.add_argument("--exact", action="store_true",
                   help="print every fp32 value with its exact value beside it (2.1 (exactly 2.0999999046325684)) and "
                        "tell every step in full (by default a step like an earlier one is told in brief)")
    p.add_argument("--json", action="store_true", help="print the same values as JSON")
    p.add_argument("--mesh", choices=("2x2",), default=None,
                   help="replay one step on 2 nodes x 2 GPUs instead (the seed's samples on node 0, swapped on "
                        "node 1): which GPU adds what, over NVLink or InfiniBand; takes --strategy, --precision, --lr")
    p.add_argument("--strategy", choices=("hsdp", "mics"), default=None,
                   help="with --mesh: HSDP (default) or MiCS (DeepSpeed <= 0.19.6), a shard group per node and "
                        "replicas across")
    p.add_argument("--tp", type=int, default=None, metavar="2",
                   help="tell seed 004's first layer as a 2-way row-parallel linear: one tensor-parallel layer, "
                        "its partial sums and their all-reduce, number by number")
    p.add_argument("--pp", type=int, default=None, metavar="2",
                   help="tell seed 004's network cut into 2 pipeline stages, its two samples as 2 micro-batches "
                        "through 1F1B: each stage's forward and backward, the activations and gradients sent between "
                        "them; takes --precision, --lr and --json")
    p.add_argument("--cp", type=int, default=None, metavar="2",
                   help="tell one hop of ring attention over 2 GPUs: the keys and values sent, each hop's output and "
                        "log-sum-exp, and the online softmax's merge, number by number (context parallelism)")
    p.add_argument("--cp-style", choices=choices.REPLAY_CP_STYLES, default=None,
                   help="with --cp 2: ring (Transformer Engine's merge, the running output in the compute format; the "
                        "default) or torch (torch's own context_parallel: the running output in fp32, rounded once)")


# Every flag of the article's replay a narrow replay (--mesh, --tp, --pp, --cp) may find beside its own, and how to
# tell it was given (the defaults are the article's one step: stage 1, checkpointing, no loss scale)
_GIVEN = {"--tp": lambda a: a.tp is not None, "--cp": lambda a: a.cp is not None, "--pp": lambda a: a.pp is not None,
          "--mesh": lambda a: a.mesh is not None, "--strategy": lambda a: a.strategy is not None,
          "--lr": lambda a: a.lr is not None,
          "--stage": lambda a: a.stage != 1, "--steps": lambda a: a.steps != 1,
          "--no-checkpoint": lambda a: a.no_checkpoint, "--loss-scale": lambda a: a.loss_scale is not None,
          "--exact": lambda a: a.exact}


def _alone(args, what: str, takes: str, own: tuple) -> None:
    """Refuse, before anything runs, every flag of _GIVEN beside a narrow replay but its `own`; the message says
    `what` it replays, what it `takes`, and every flag it does not."""
    if any(given(args) for flag, given in _GIVEN.items() if flag not in own):
        others = [flag for flag in _GIVEN if flag not in own]
        raise ValueError(f"{what}; it takes {takes}, not {', '.join(others[:-1])} or {others[-1]}")


def _lr(args) -> float:
    """--lr, else seed 004's (zerosim.replay.SEED_LR)."""
    from zerosim.replay import SEED_LR

    return SEED_LR if args.lr is None else args.lr


def _run_mesh(args) -> int:
    from zerosim.replay import mesh_replay, narrate_mesh

    _alone(args, "--mesh replays one step of --strategy (hsdp or mics)", "--precision, --lr and --json",
           ("--mesh", "--strategy", "--lr"))
    result = mesh_replay(args.strategy or "hsdp", args.precision, _lr(args))
    print(json.dumps(result, indent=1) if args.json else narrate_mesh(result))
    return 0


def _run_tensor(args) -> int:
    from zerosim.replay import narrate_tensor, tensor_replay

    if args.tp != 2:
        raise ValueError(f"--tp replays seed 004's two-weight first layer over 2 GPUs: give --tp 2, got {args.tp}")
    _alone(args, "--tp 2 replays one forward and backward of one tensor-parallel layer", "--precision and --json",
           ("--tp",))
    result = tensor_replay(args.precision)
    print(json.dumps(result, indent=1) if args.json else narrate_tensor(result))
    return 0


def _run_pipeline(args) -> int:
    from zerosim.replay import narrate_pipeline, pipeline_replay

    if args.pp != 2:
        raise ValueError(f"--pp replays seed 004's two layers as 2 pipeline stages: give --pp 2, got {args.pp}")
    _alone(args, "--pp 2 replays one 1F1B step of 2 micro-batches", "--precision, --lr and --json", ("--pp", "--lr"))
    result = pipeline_replay(args.precision, _lr(args))
    print(json.dumps(result, indent=1) if args.json else narrate_pipeline(result))
    return 0


def _run_context(args) -> int:
    from zerosim.replay import cp_replay, narrate_cp

    if args.cp != 2:
        raise ValueError(f"--cp replays one hop of ring attention over 2 GPUs: give --cp 2, got {args.cp}")
    _alone(args, "--cp 2 replays one forward of ring attention", "--cp-style, --precision and --json", ("--cp",))
    result = cp_replay(args.precision or "bf16-mixed", args.cp_style or "ring")
    print(json.dumps(result, indent=1) if args.json else narrate_cp(result))
    return 0


def run(args) -> int:
    from zerosim.cli.precision_args import loss_scale_of
    from zerosim.replay import MAX_STEPS, narrate, replay

    if args.cp is not None:
        return _run_context(args)
    if args.cp_style is not None:  # before any other replay runs: it belongs to --cp's alone
        raise ValueError("--cp-style chooses whose merge --cp's one hop tells: add --cp 2")
    args.precision = args.precision or "fp16-mixed"
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr >= 0):
        raise ValueError(f"--lr must be a finite number >= 0, got {args.lr}")
    if args.exact and args.json:
        raise ValueError("--exact writes each fp32 value's exact value into the narration; --json prints the values "
                         "themselves (every fp32 is a float64 exactly): give one")
    if args.pp is not None:
        return _run_pipeline(args)
    if args.tp is not None:
        return _run_tensor(args)
    if args.mesh is not None:
        return _run_mesh(args)
    if args.strategy is not None:
        raise ValueError("--strategy chooses the strategy of --mesh's one step: add --mesh 2x2")
    if not 1 <= args.steps <= MAX_STEPS:  # before anything runs (a long replay printed nothing for minutes)
        raise ValueError(f"--steps must be 1..{MAX_STEPS}, got {args.steps}: the replay narrates every step (about 10 "
                         "lines each, 60 with --exact); `zerosim train --steps N` trains for long")
    scale = None if args.loss_scale is None else loss_scale_of(args.loss_scale)
    result = replay(
        stage=args.stage,
        precision=args.precision,
        lr=_lr(args),
        steps=args.steps,
        checkpoint=not args.no_checkpoint,
        show_progress=not args.json and sys.stderr.isatty() and args.steps >= 50,
        loss_scale=scale,
    )
    print(json.dumps(result, indent=1) if args.json else narrate(result, exact=args.exact))
    return 0

"""Replay seed 004's worked example (four weights, two GPUs, Adam) on the live simulated cluster.

Every number printed comes from the run: the model's record, the trace of the ring, the optimizer's
intermediates and the ledgers. Try --precision fp16-pure with a tiny --lr to watch updates vanish.
"""

from __future__ import annotations

import json
import sys

from zerosim.precision import PRESETS
from zerosim.reference.replay import replay
from zerosim.reference.replay_text import narrate

HELP = "replay seed 004's worked example step by step (the main job)"


def add_arguments(p) -> None:
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=1, help="ZeRO stage (default 1, the article's first)")
    p.add_argument("--precision", choices=sorted(PRESETS), default="fp16-mixed", help="mixed-precision preset (default fp16-mixed)")
    p.add_argument("--lr", type=float, default=0.1, help="Adam learning rate (default 0.1, the article's)")
    p.add_argument("--steps", type=int, default=1, help="training steps on the same two samples (default 1)")
    p.add_argument("--no-checkpoint", action="store_true", help="keep activations instead of recomputing them")
    p.add_argument("--json", action="store_true", help="print the same values as JSON")


def run(args) -> int:
    result = replay(stage=args.stage, precision=args.precision, lr=args.lr, steps=args.steps, checkpoint=not args.no_checkpoint,
                    show_progress=not args.json and sys.stderr.isatty() and args.steps >= 50)
    print(json.dumps(result, indent=1) if args.json else narrate(result))
    return 0

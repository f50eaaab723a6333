"""Train two configurations of one model on the same data from the same seed, and say where their bits first part,
which event in each run made them part, why, and how far each run is from a float64 run.

    zerosim diff --a '--ranks 2 --accumulation-steps 2' --b '--ranks 4'
    zerosim diff --a '--stage 1 --accumulation-steps 2' --b '--stage 3 --accumulation-steps 2'
    zerosim diff --a '--clip-grad 0.5' --b '' --steps 20 --json

Each of --a and --b is a string of `zerosim train` flags, read by train's own parser (a flag means what it means
there; a DeepSpeed config through --ds-config); what a string leaves out is train's default. --steps is diff's own
(10 by default) and applies to both runs; what a run writes and prints (--save, --resume, --trace-log, --print-every,
--json inside a string) is refused: both runs train in memory and diff prints one report.
"""

from __future__ import annotations

import argparse
import json
import shlex

HELP = "train two configurations on the same data and say where their bits first part, which event did it, and why"

STEPS = 10  # steps of each run unless --steps says


def add_arguments(p) -> None:
    p.add_argument("--a", required=True, metavar="'TRAIN FLAGS'", help="run A: zerosim train's flags, in one string")
    p.add_argument("--b", required=True, metavar="'TRAIN FLAGS'", help="run B: zerosim train's flags, in one string")
    p.add_argument("--steps", type=int, default=STEPS, help=f"steps of both runs (default {STEPS})")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def prepare_argv(argv: list) -> list:
    """The word after --a or --b is its string of flags even when it starts with a dash and holds no space (`--a
    --checkpoint`, which argparse would read as a flag of diff's own): joined as --a=WORDS."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--a", "--b") and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


class _Refusal(argparse.ArgumentParser):
    """train's parser, raising instead of exiting, so a bad string is named as run A's or run B's."""

    def error(self, message):
        raise ValueError(message)


def config_from_flags(text: str, which: str):
    """The TrainConfig a string of `zerosim train` flags describes (run `which`'s), parsed by train's own parser."""
    from zerosim.cli import train_cmd

    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"--{which.lower()}: {e} in {text!r}") from None
    if "--steps" in words or any(w.startswith("--steps=") for w in words):
        raise ValueError(f"--{which.lower()}: give --steps to diff itself (it sets both runs' steps), not inside the "
                         "string")
    parser = _Refusal(prog=f"zerosim diff --{which.lower()}", add_help=False)
    train_cmd.add_arguments(parser)
    try:
        args = parser.parse_args(words)
        given = [flag for dest, flag in train_cmd.output_flags().items()
                 if getattr(args, dest) != parser.get_default(dest)]
        if given:  # was: --print-every and --json taken and dropped; --save-every asked for a --save diff refuses
            raise ValueError(f"{', '.join(given)}: what a run writes and prints is not for diff, which trains both "
                             "runs in memory from the start and prints one report (--json: give it to diff itself)")
        return train_cmd.config_from_args(args)[0]
    except ValueError as e:
        raise ValueError(f"--{which.lower()} {text!r}: {e}") from None


def run(args) -> int:
    from zerosim.diff import diff

    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, got {args.steps}")
    a, b = config_from_flags(args.a, "A"), config_from_flags(args.b, "B")
    report = diff(a, b, steps=args.steps)
    print(json.dumps(report.as_json(), indent=1) if args.json else report.text())
    return 0

"""`zerosim` entry point: one subcommand per job, each in its own module.

    zerosim replay   seed 004's worked example, live, step by step (the main job)
    zerosim train    train an MLP on a synthetic task with any stage, ranks, precision, optimizer
    zerosim memory   per-rank memory by stage at real scale (meta backend), beside the formulas
    zerosim timeline time of a step at real scale: overlap, bucketing, prefetch (meta backend)
    zerosim plan     which stage, checkpointing and micro-batch fit your GPUs, ranked by step time
    zerosim validate predicted vs measured on published runs (torchtitan, llm-foundry), with the error of each
    zerosim figures  draw every seed figure from live runs into figures/
    zerosim checkpoint  inspect or consolidate a sharded checkpoint
    zerosim exercise    write one small function of ZeRO yourself; the package grades it
    zerosim verify-nccl compare the ring with NCCL's own collectives, byte for byte, on your GPUs
    zerosim explore     the memory explorer as a self-contained web page for a course site
    zerosim assignment  week-sized assignments with an autograder (Gradescope's results.json)
    zerosim parity      compare zerosim's DDP reduction with real torch on gloo, bit for bit (needs torch)
"""

from __future__ import annotations

import argparse
import os
import sys

from zerosim.backends.cupy import BackendUnavailable
from zerosim.backends.mpi import launched_by_mpiexec, launched_rank
from zerosim.cli import (
    assignment_cmd,
    checkpoint_cmd,
    exercise_cmd,
    explore_cmd,
    figures_cmd,
    memory_cmd,
    parity_cmd,
    plan_cmd,
    replay_cmd,
    timeline_cmd,
    train_cmd,
    validate_cmd,
    verify_nccl_cmd,
)
from zerosim.precision import LossScaleAtMinimum

COMMANDS = {
    "replay": replay_cmd,
    "train": train_cmd,
    "memory": memory_cmd,
    "figures": figures_cmd,
    "checkpoint": checkpoint_cmd,
    "exercise": exercise_cmd,
    "explore": explore_cmd,
    "assignment": assignment_cmd,
    "timeline": timeline_cmd,
    "plan": plan_cmd,
    "validate": validate_cmd,
    "verify-nccl": verify_nccl_cmd,
    "parity": parity_cmd,
}


def _in_mpi_job() -> bool:
    """True when this process is one rank of several under mpiexec (mpi4py already initialised MPI)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return bool(mpi and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zerosim", description="See how ZeRO trains a model across many GPUs, with "
                                                                 "no GPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        # the docstring as written: its example commands stay one per line
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.__doc__,
                                            formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if launched_by_mpiexec():  # one rank of several: a failure anywhere must end the whole job, not hang it
        from zerosim.backends.mpi import run_guarded


        return run_guarded(_run, args)
    return _run(args)


def _run(args) -> int:
    try:
        return COMMANDS[args.command].run(args) or 0
    except KeyboardInterrupt:  # Ctrl-C: one line (from one rank under mpiexec) and the shell's usual status
        if _in_mpi_job():  # the other ranks may wait on this one: end the whole job with 130 now (not at the watchdog)
            from zerosim.backends.mpi import interrupt_job

            interrupt_job(args.command)  # returns when every rank was interrupted (Ctrl-C), rank 0 having said so
            return 130
        if launched_rank() in (None, 0):
            print(f"zerosim {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `zerosim replay --json | head`: the reader left; nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (
        ValueError,
        TypeError,
        FloatingPointError,
        OverflowError,
        OSError,
        ImportError,
        MemoryError,
        BackendUnavailable,
        LossScaleAtMinimum,
    ) as e:
        if _in_mpi_job():  # the other ranks may be waiting on this one: end the whole job, naming this rank
            from zerosim.backends.mpi import abort_job

            abort_job(e, print_traceback=False)
        print(f"zerosim {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

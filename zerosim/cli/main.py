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
    zerosim explore     the explorer as a self-contained web page for a course site
    zerosim assignment  week-sized assignments with an autograder (Gradescope's results.json)
    zerosim notebooks   the learning path's notebooks, written into a folder of yours (outputs cleared)
    zerosim parity      compare zerosim's DDP reduction with real torch on gloo, bit for bit (needs torch)
    zerosim diff        two configurations on the same data: where their bits first part, which event did it, and why
    zerosim lint        a configuration's silent numerics traps, each with the framework code and thread behind it
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

# name: (its module, its one-line help). The help is written here as well as in the module (`HELP`; a test keeps
# the two equal) so that `zerosim --help` imports no command, and `zerosim memory ...` imports only memory's.
COMMANDS = {
    "replay": ("zerosim.cli.replay_cmd", "replay seed 004's worked example step by step (the main job)"),
    "train": ("zerosim.cli.train_cmd",
              "train an MLP, a GPT or a Llama on a synthetic task (stage, ranks, precision, optimizer, steps)"),
    "memory": ("zerosim.cli.memory_cmd",
               "per-rank memory by stage and kind at real scale (meta backend), beside the formulas; will it fit a "
               "GPU"),
    "figures": ("zerosim.cli.figures_cmd", "draw every seed figure (PNG) from live runs into figures/"),
    "checkpoint": ("zerosim.cli.checkpoint_cmd",
                   "inspect a sharded checkpoint, or consolidate it into one fp32 file (zero_to_fp32's job)"),
    "exercise": ("zerosim.cli.exercise_cmd",
                 "write one small function of ZeRO yourself; the package's own checks grade it"),
    "explore": ("zerosim.cli.explore_cmd",
                "the explorer as a self-contained web page for a course site (memory, time, overlap, offload, TP)"),
    "assignment": ("zerosim.cli.assignment_cmd",
                   "week-sized assignments (handout, starter, visible and hidden tests) and their autograder"),
    "notebooks": ("zerosim.cli.notebooks_cmd",
                  "write the learning path's notebooks into a folder of yours (outputs cleared: predict, then run)"),
    "timeline": ("zerosim.cli.timeline_cmd",
                 "time of a step at real scale: compute vs communication, overlap, bucketing, prefetch (meta "
                 "backend)"),
    "plan": ("zerosim.cli.plan_cmd",
             "which stage, checkpointing and micro-batch fit your GPUs, ranked by simulated step time"),
    "validate": ("zerosim.cli.validate_cmd",
                 "predicted vs measured on published runs (torchtitan, llm-foundry): the error of every point"),
    "verify-nccl": ("zerosim.cli.verify_nccl_cmd",
                    "compare zerosim's ring with NCCL's own collectives, byte for byte, on your GPUs"),
    "diff": ("zerosim.cli.diff_cmd",
             "train two configurations on the same data and say where their bits first part, which event did it, and "
             "why"),
    "lint": ("zerosim.cli.lint_cmd",
             "name the silent numerics traps in a training configuration, each with its framework source and a user "
             "thread"),
    "parity": ("zerosim.cli.parity_cmd",
               "compare zerosim with real torch (DDP, ZeroRedundancyOptimizer, FSDP2) on N gloo processes (needs "
               "torch)"),
}


def command(name: str):
    """The module of command `name`, imported now."""
    return importlib.import_module(COMMANDS[name][0])


def _in_mpi_job() -> bool:
    """True when this process is one rank of several under mpiexec (mpi4py already initialised MPI)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return bool(mpi and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1)


def build_parser(only=None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (a command's name), only that command's arguments are read from its
    module (the others are listed by name and help: what `zerosim --help` shows)."""
    parser = argparse.ArgumentParser(prog="zerosim", description="See how ZeRO trains a model across many GPUs, with "
                                                                 "no GPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_)
            continue
        module = command(name)
        # the docstring as written: its example commands stay one per line
        module.add_arguments(sub.add_parser(name, help=help_, description=module.__doc__,
                                            formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def _command_in(argv: list) -> str:
    """The command `argv` names (its first word that is one), or "" when it names none (`zerosim --help`)."""
    return next((word for word in argv if word in COMMANDS), "")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = _command_in(argv)
    if name and hasattr(command(name), "prepare_argv"):  # a command that reads its own values first (diff's flags)
        argv = command(name).prepare_argv(argv)
    parser = build_parser(only=name)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from zerosim.backends.mpi import launched_by_mpiexec

    if launched_by_mpiexec():  # one rank of several: a failure anywhere must end the whole job, not hang it
        from zerosim.backends.mpi import run_guarded

        return run_guarded(_run, args)
    return _run(args)


def _run(args) -> int:
    from zerosim.backends.cupy import BackendUnavailable
    from zerosim.backends.mpi import launched_rank
    from zerosim.precision import LossScaleAtMinimum

    try:
        return command(args.command).run(args) or 0
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
        NotImplementedError,  # what a backend or a combination does not model yet: one line, not a traceback
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


def entry() -> None:
    """The `zerosim` command: main(), then exit with its status. After Ctrl-C (status 130) a second SIGINT while
    Python shuts down is ignored: the shell sees 130 and the one "interrupted" line, not a death by signal. (Here, not
    in main(): a test calling main() in-process keeps its own SIGINT handler.)"""
    code = main()
    if code == 130:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    entry()

"""Exercises: write one small function of ZeRO yourself, and let the package's own checks grade it.

    zerosim exercise list                                 # the exercises, one line each
    zerosim exercise show ring_chunk > my_solution.py     # the task (as comments) and the function to fill in
    zerosim exercise check ring_chunk --file my_solution.py
    zerosim exercise check ring_chunk --reference         # the shipped solution (it passes)
    zerosim exercise check ring_chunk --planted "off by one"   # a planted bug (the grader catches it)

`check` exits 0 when every case passes, 1 with the first counterexample otherwise. Your file runs in a process
of its own, each case limited to 60 s (--time-limit S): a loop, sys.exit or a syntax error in it is a failing
grade with one line saying what happened.
"""

from __future__ import annotations

import argparse
import math

HELP = "write one small function of ZeRO yourself; the package's own checks grade it"


def add_arguments(p) -> None:
    from zerosim.cli.choices import EXERCISES

    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the exercises, one line each")
    examples = [line for line in __doc__.splitlines() if line.startswith("    zerosim exercise ")]
    show = actions.add_parser("show", help="an exercise's task and the function to fill in (a file to start from)",
                              description="\n".join(line for line in examples if " show " in line),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("name", choices=list(EXERCISES), metavar="NAME", help=", ".join(EXERCISES))
    show.add_argument("--solution", action="store_true",
                      help="show the reference solution instead (not for the exercises an assignment grades)")
    check = actions.add_parser("check", help="grade a solution; the first counterexample if it fails",
                               description="\n".join(line for line in examples if " check " in line),
                               formatter_class=argparse.RawDescriptionHelpFormatter)  # one example a line
    check.add_argument("name", choices=list(EXERCISES), metavar="NAME", help=", ".join(EXERCISES))
    which = check.add_mutually_exclusive_group(required=True)
    which.add_argument("--file", help="your solution: a .py file defining the exercise's function")
    which.add_argument("--reference", action="store_true",
                       help="grade the shipped reference solution (not for the exercises an assignment grades)")
    which.add_argument("--planted", metavar="BUG", help="grade one of the exercise's planted bugs (see `show`)")
    check.add_argument("--time-limit", type=float, default=None, metavar="S",
                       help="with --file: seconds each case may take before it fails as a loop (default 60)")


def run(args) -> int:
    from zerosim.teaching import exercises

    if args.action in (None, "list"):
        width = max(map(len, exercises.EXERCISES))
        for name, ex in exercises.EXERCISES.items():
            print(f"{name:<{width}}  {ex.title}")
        print("\nzerosim exercise show NAME > my_solution.py, fill it in, then zerosim exercise check NAME --file "
              "my_solution.py")
        return 0
    ex = exercises.get(args.name)
    if (args.action == "show" and args.solution or args.action == "check" and args.reference) and not ex.solution:
        raise ValueError(f"{ex.name}'s reference solution is not shipped: it is {ex.withheld}; "
                         f"`zerosim exercise check {ex.name} --planted BUG` shows the grader catch a bug")
    if args.action == "show":
        if args.solution:
            print(ex.solution, end="")
            return 0
        print("".join(f"# {line}\n" for line in ex.task.splitlines()) + "#\n# planted bugs the grader catches: "
              + ", ".join(ex.planted) + "\n\n" + ex.stub, end="")
        return 0
    limit = args.time_limit
    if limit is not None and (args.file is None or not (math.isfinite(limit) and limit > 0)):
        raise ValueError(f"--time-limit takes a number of seconds > 0 and goes with --file, got {args.time_limit:g}"
                         + ("" if args.file else " without --file"))
    if args.reference:
        solution = ex.solution
    elif args.planted is not None:
        if args.planted not in ex.planted:
            raise ValueError(f"{ex.name} has no planted bug {args.planted!r}; it has: "
                             f"{', '.join(map(repr, ex.planted))}")
        solution = ex.planted[args.planted] or _withheld_planted(ex, args.planted)
    else:
        solution = args.file
        if not solution.endswith(".py"):
            raise ValueError(f"--file must name a .py file, got {solution!r}")
    # a learner's file runs in a child process, each case under the time limit (teaching/exercises/_sandbox.py)
    result = exercises.check(ex.name, solution, **({"time_limit": args.time_limit} if args.time_limit else {}))
    print(result)
    return 0 if result.passed else 1


def _withheld_planted(ex, bug: str) -> str:
    """A withheld planted bug's source (assignment 2's exercises), from the instructor kit."""
    from zerosim.cli.assignment_cmd import instructor_kit

    try:
        kit = instructor_kit()
    except ValueError as e:
        raise ValueError(f"{ex.name}'s planted bugs are withheld with its reference ({ex.withheld}); {e}") from None
    return kit.exercise_planted(ex.name, bug)

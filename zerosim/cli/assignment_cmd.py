"""Week-sized assignments with an autograder: a handout, a starter file, visible tests, hidden tests.

    zerosim assignment list
    zerosim assignment show 1                           # the handout: predict -> run -> explain
    zerosim assignment starter 1 --out a1               # the starter kit: the handout, the file, its notebooks
    zerosim assignment starter 1 > a1_ring.py           # the file to fill in, alone
    zerosim assignment check 1 --file a1_ring.py        # the visible tests: what a student runs
    zerosim assignment grade 1 --file a1_ring.py --results results/results.json   # every test (instructors)
    zerosim assignment export-instructor DIR            # the instructor kit (its own package: solutions, rubrics)

`grade` writes Gradescope's results.json (score per test, visible or hidden until published). The reference solutions,
planted wrong ones, rubrics and Gradescope scripts are the instructor kit, a package of its own (`pip install
./course/instructor` from zerosim's repository): the student's install carries none of it. A student's file runs in
a process of its own, each case limited to 60 s (--time-limit S), with only what the handout offers: a loop,
sys.exit or a call of zerosim's own implementation of what a case grades scores 0 on that case with one line saying
what happened, and each case earns its share of its test's points.
"""

from __future__ import annotations

import math
import os

HELP = "week-sized assignments (handout, starter, visible and hidden tests) and their autograder"


def add_arguments(p) -> None:
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the assignments, one line each")
    actions.add_parser("show", help="the handout").add_argument("number", type=int, help="1, 2, 3 or 4")
    starter = actions.add_parser("starter", help="the starter kit into a new folder (--out DIR): the handout, the file "
                                 "to fill in and the notebooks it reads; without --out, the file alone on stdout")
    starter.add_argument("number", type=int, help="1, 2, 3 or 4")
    starter.add_argument("--out", default=None, metavar="DIR",
                         help="a new (or empty) folder for the kit; nothing in it is overwritten")
    check = actions.add_parser("check", help="run the visible tests on your file")
    grade = actions.add_parser("grade", help="run every test, visible and hidden; write Gradescope's results.json")
    for q in (check, grade):
        q.add_argument("number", type=int, help="1, 2, 3 or 4")
        q.add_argument("--file", required=True, help="the student's .py file")
        q.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                       help="seconds each case may take before it fails as a loop (default 60)")
    grade.add_argument("--results", default=None, metavar="RESULTS.json",
                       help="where to write results.json (Gradescope: /autograder/results/results.json)")
    kit = actions.add_parser("export-instructor", help="write the instructor kit (solutions, planted wrong ones, "
                             "rubrics, Gradescope scripts) into a new folder; needs the kit's package")
    kit.add_argument("folder", metavar="DIR", help="a new (or empty) folder")


def run(args) -> int:
    from zerosim.outputs import check_file
    from zerosim.teaching import assignments

    if args.action in (None, "list"):
        for n, a in assignments.ASSIGNMENTS.items():
            print(f"{n}  {a.title}  ({a.max_score:g} points; your file: {a.files})")
        print("\nzerosim assignment show N, then zerosim assignment starter N --out DIR, then zerosim assignment "
              "check N --file DIR/FILE")
        return 0
    if args.action == "export-instructor":
        kit = instructor_kit()
        written = kit.export(args.folder)
        print(f"wrote {len(written)} files of the instructor kit into {args.folder}: a1-a4 (solution.py, planted/, "
              "rubric.md), misbehaving/, exercises/, gradescope/, README.md")
        return 0
    a = assignments.get(args.number)
    if args.action == "show":
        print(a.handout, end="")
        return 0
    if args.action == "starter":
        if args.out is None:
            print(a.starter, end="")
            return 0
        from zerosim.teaching import write_starter

        written = write_starter(a, args.out, "--out")
        mine = os.path.join(args.out, a.files)
        print(f"wrote assignment {a.number}'s starter kit into {args.out}: "
              + ", ".join(os.path.relpath(p, args.out) for p in written)
              + f"\nnext: read {os.path.join(args.out, 'README.md')}, fill in {mine}, then zerosim assignment check "
                f"{a.number} --file {mine}")
        return 0
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise ValueError(f"--time-limit takes a number of seconds > 0, got {args.time_limit:g}")
    if not args.file.endswith(".py"):
        raise ValueError(f"--file must name a .py file, got {args.file!r}")
    if args.action == "grade" and args.results:  # before grading, which runs the student's file (zerosim/outputs.py)
        check_file(args.results, "--results")
    results = assignments.grade(a, args.file, args.time_limit, hidden=args.action == "grade")
    if args.action == "grade" and args.results:
        assignments.write_results(results, args.results, "--results")
    for t in results["tests"]:
        print(f"{'PASS' if t['status'] == 'passed' else 'FAIL'}  {t['score']:g}/{t['max_score']:g}  {t['name']}"
              + ("" if t["status"] == "passed" else f"\n      {t['output']}"))
    print(results["output"] + (f"; written to {args.results}" if args.action == "grade" and args.results else ""))
    return 0 if all(t["status"] == "passed" for t in results["tests"]) else 1


def instructor_kit():
    """The instructor kit's package (zerosim_instructor), or a one-line ValueError saying how to get it."""
    try:
        import zerosim_instructor
    except ImportError:
        raise ValueError("the instructor kit is a package of its own, so that a student's install carries no "
                         "solution: from zerosim's repository, pip install ./course/instructor") from None
    return zerosim_instructor

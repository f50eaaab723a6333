"""Run a learner's file where it can neither hang the grader nor escape it: a process of its own, confined to a
folder of its own, each step under a time limit, its output capped, nothing it started left running.

    from zerosim.teaching.sandbox import run
    outcome = run("package.module:entry", [args], source, path, limit=60)   # an Outcome: done, timed out, ...

    _run.py      the grader's side: start the keeper and the child, follow the reports and the output against the
                 step's deadline, end everything, say how it ended (Outcome)
    _keeper.py   the child's parent, in a session of its own: says the child's pid and exit status, and kills the
                 child and everything it started when the child ends or the grader goes
    _child.py    the child: reads the source, confines itself, then calls the entry with a Reporter
    _confine.py  what confines the child (Landlock; as root, `nobody` too), and the refusal where nothing can

What a grade means (the cases, the messages) is the caller's: zerosim/teaching/exercises/_sandbox.py.
"""

from zerosim.teaching.sandbox._child import Reporter
from zerosim.teaching.sandbox._confine import CannotConfine, Confinement, check_confinable, confinement
from zerosim.teaching.sandbox._run import OUTPUT_LIMIT, Outcome, run

__all__ = ["CannotConfine", "Confinement", "OUTPUT_LIMIT", "Outcome", "Reporter", "check_confinable", "confinement",
           "run"]

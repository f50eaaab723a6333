"""Run a learner's file where it can neither hang the grader nor escape it, nor call zerosim's own answer, nor claim
a grade: a process of its own, confined to a folder of its own, policed, each step under a time limit, its output
capped, nothing it started left running; it sends back what the learner's functions returned, and the grader judges.

    from zerosim.teaching.sandbox import Budget, Policy, Session
    with Session(source, path, Policy(grades={...}, offers=(...))) as s:
        s.load(Budget(60))
        reply = s.call("chunk_sent", (1, 0, 4), {}, Budget(60))     # a Reply, or Ended with an Outcome

    _run.py      the grader's side: start the keeper and the child, send calls and answer callbacks, follow the
                 replies and the output against the step's budget, end everything, say how it ended (Outcome);
                 why the judgement is the grader's
    _keeper.py   the child's parent, in a session of its own: says the child's pid and exit status, and kills the
                 child and everything it started when the child ends or the grader goes
    _child.py    the child: reads the source, confines and polices itself, loads the file, serves calls
    _policy.py   what a solution may import and call: the handout's offer, never zerosim's implementation of what is
                 graded; the harnesses a learner's function may be run through in the child; the ways round it that
                 are closed, and those that are not
    _values.py   what crosses the pipes: values and arrays as data, handles the grader lends
    _load.py     run a learner's source to define its functions; the one line when it cannot
    _confine.py  what confines the child (Landlock; as root, `nobody` too), and the refusal where nothing can

What a grade means (the cases, the messages) is the caller's: zerosim/teaching/exercises/_sandbox.py.
"""

from zerosim.teaching.sandbox._confine import CannotConfine, Confinement, check_confinable, confinement
from zerosim.teaching.sandbox._load import NotRunnable, learner_line, named, run_source
from zerosim.teaching.sandbox._policy import Policy, Refused, merge, own_processes, records
from zerosim.teaching.sandbox._run import OUTPUT_LIMIT, Budget, Ended, Outcome, Reply, Session
from zerosim.teaching.sandbox._values import Remote

__all__ = ["Budget", "CannotConfine", "Confinement", "Ended", "NotRunnable", "OUTPUT_LIMIT", "Outcome", "Policy",
           "Refused", "Remote", "Reply", "Session", "check_confinable", "confinement", "learner_line", "merge", "named",
           "own_processes", "records", "run_source"]

"""Grade a learner's file in the sandbox, each case under a time limit, out of reach of the grader.

    result = grade_file("ring_chunk", "my_solution.py", time_limit=60)

A learner's file may loop forever, print without end, call `sys.exit`, raise KeyboardInterrupt, crash the
interpreter, fail to compile, signal its parent or its group, start processes that outlive it, or write outside its
folder: none of that may take the grader down, leave it hanging, leave anything running, or change a file outside the
case folder, and the grade (`zerosim assignment grade`'s results.json) is always written. The sandbox
(zerosim/teaching/sandbox/) runs the file in a confined child process; here is what grading means there:

- in the child (`grade_in_child`): load the file, then run the exercise's cases, saying each before it runs (each
  case gets `time_limit` seconds of its own, as does the loading), then the result. KeyboardInterrupt and any other
  exception the learner's code raises that `Exercise.grade` leaves to its caller (in a notebook an interrupt is the
  user's) is that case failing, with one line: nothing in the child is the user's Ctrl-C, which stops the grader;
- in the grader (`grade_file`): the sandbox's Outcome as a `Result` with one line saying what happened: a case that
  ran past the limit, output past the cap, a process that ended with no result (its exit status), a keeper the
  learner's code killed.

The learner's prints reach the grader's stdout, up to the sandbox's cap (1 MiB).
"""

from __future__ import annotations

import importlib
import linecache
import os
import signal

from zerosim.teaching.exercises._grading import NotRunnable, Result, _learner_line, describe, load
from zerosim.teaching.sandbox import OUTPUT_LIMIT, run

TIME_LIMIT = 60.0  # seconds per case (and for loading the file): generous, since the grader's own cases take < 2 s
_ENTRY = "zerosim.teaching.exercises._sandbox:grade_in_child"


def grade_file(name: str, path: str, time_limit: float = TIME_LIMIT, where: str | None = None) -> Result:
    """Grade the file at `path` for exercise `name` in the sandbox; each case may take `time_limit` seconds.

    `where`: "module:attribute" of an `Exercise` outside this package's list (an assignment's tests,
    zerosim/teaching/assignments); the child imports it from there instead of looking `name` up."""
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a number of seconds > 0, got {time_limit!r}")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    with open(path, "rb") as f:  # the grader reads it: a confined child need not be able to
        source = f.read()
    outcome = run(_ENTRY, [where or name], source, path, float(time_limit))
    if outcome.how == "done" and "usage" in outcome.result:  # the file defines no such function: the learner's usage
        raise ValueError(outcome.result["usage"])
    return _result(name, outcome)


def _result(name: str, o) -> Result:
    """The sandbox's Outcome `o` as a grade, with one line saying what happened."""
    case = 0 if o.where is None else o.where["n"]
    at = "loading your file" if case == 0 else f"case {case} ({o.where['what']})"
    during = "while your file was loaded" if case == 0 else f"during case {case} ({o.where['what']})"
    if o.how == "done":
        r = o.result
        return Result(name, r["passed"], r["cases"], r["counterexample"])
    if o.how == "timed out":
        return Result(name, False, case, f"{at} did not finish within {o.facts['limit']:g} s: does your code loop "
                                         "forever? (zerosim exercise check --time-limit S allows more)")
    if o.how == "too much output":
        return Result(name, False, case, f"{at} printed more than {OUTPUT_LIMIT // (1 << 20)} MiB and was stopped: "
                                         "print less (a few lines say what a case did)")
    if o.how == "parent ended":
        s = o.keeper_status
        how = signal.Signals(-s).name if s is not None and s < 0 else f"exit status {s}"
        return Result(name, False, case, f"the process that started your code was ended ({how}) {during}: did your "
                                         "code signal its parent (os.getppid())? A solution may not signal other "
                                         "processes")
    if o.how == "broke the protocol":
        return Result(name, False, case, f"{during}, your code wrote on the grader's own report pipe: a solution may "
                                         "print, but not write to the grader's file descriptors")
    s = o.status  # "ended"
    how = ("an unknown status" if s is None else f"signal {signal.Signals(-s).name} (exit status {s})" if s < 0
           else f"exit status {s}")
    return Result(name, False, case, f"the grading process ended {during}, with {how} (os._exit, a crash or a "
                                     "signal) and no result")


def grade_in_child(report, source: bytes, path: str, name: str) -> None:
    """In the child (the sandbox's entry): load the learner's file, grade it case by case, report as it goes."""
    if ":" in name:  # "module:attribute": an assignment's exercise
        module, attribute = name.split(":")
        ex = getattr(importlib.import_module(module), attribute)
    else:
        from zerosim.teaching import exercises

        ex = exercises.get(name)
    report.ready()  # what grading needs is imported: the clock starts
    try:
        text = source.decode("utf-8")
        # the lines a message quotes, from the source the grader read: the child's working directory is its case
        # folder, where `path` (perhaps relative to the grader's) names nothing
        linecache.cache[path] = (len(text), None, text.splitlines(True), path)
        fn = load(text, ex.function, path)
    except NotRunnable as e:
        return report.done(passed=False, cases=0, counterexample=_refused(str(e)))
    except UnicodeDecodeError as e:
        return report.done(passed=False, cases=0, counterexample=f"{path}: not a text file ({e})")
    except ValueError as e:
        return report.done(usage=str(e))
    except BaseException as e:  # KeyboardInterrupt and kin while loading (SystemExit is load's own case)
        return report.done(passed=False, cases=0, counterexample=f"{path}{_learner_line(e, path)}: loading it "
                                                                 f"raised {_named(e)}")
    at = [0, None]

    def on_case(n, case):
        at[:] = n, case
        report.step(n=n, what=describe(case))

    try:
        result = ex.grade(fn, on_case=on_case)
    except BaseException as e:  # what Exercise.grade leaves to its caller: here, the learner's doing
        n, case = at
        what = describe(case) if case else ex.name
        result = Result(ex.name, False, n, f"{what}: your {ex.function} raised {_named(e)}{_learner_line(e, path)}")
    report.done(passed=result.passed, cases=result.cases, counterexample=_refused(result.counterexample))


def _refused(said: str | None) -> str | None:
    """`said`, and where the learner's code met a PermissionError, the sandbox's rules that likely raised it."""
    if said and "raised PermissionError" in said:
        said += (" (in the grader a solution may write only in its own folder, its working directory, and may not "
                 "signal other processes)")
    return said


def _named(e: BaseException) -> str:
    """The exception in words; KeyboardInterrupt with why a solution may not raise it."""
    words = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if isinstance(e, KeyboardInterrupt):
        words += " (a grader takes KeyboardInterrupt for Ctrl-C, so a solution may not raise it)"
    return words
